"""The bad-input corpus machinery: one `Case` per wrong kernel or call, checked the same way.

A case passes when its action raises exactly the expected TiledslError subclass (an internal KeyError, TypeError,
AssertionError ... escaping is a failure), the message holds the expected words and no "internal compiler error",
and a CompilationError points at the user's offending line (found with a needle string in the kernel's source);
a KernelFault with a needle names that line too.
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass, field

import numpy as np
import pytest

import tiledsl
from tiledsl.lang import language as L


@dataclass
class Case:
    id: str
    fn: object = None                    # the kernel: a plain function (or a JITFunction)
    needle: str | None = None            # text on the offending line (CompilationError)
    words: tuple = ()                    # the message must hold each of these
    err: type = tiledsl.CompilationError
    target: str = "sm_90"
    action: object = None                # a zero-argument callable that must raise (bad calls)
    args: tuple | None = None            # compile arguments; default: arrays made from the annotations
    compile_kw: dict = field(default_factory=dict)
    marks: tuple = ()

    def param(self):
        return pytest.param(self, id=self.id, marks=list(self.marks))


def raw(fn):
    return fn.fn if isinstance(fn, tiledsl.JITFunction) else fn


def default_args(fn) -> list:
    """Arrays and scalars that stand for the kernel's parameters (named sizes become 4)."""
    out = []
    for name, p in inspect.signature(raw(fn)).parameters.items():
        ann = p.annotation
        if isinstance(ann, L.TensorType):
            shape = tuple(4 if isinstance(s, str) else s for s in ann.shape)
            out.append(np.zeros(shape, ann.dtype.np))
        elif ann is L.constexpr:
            out.append(1)
        elif getattr(ann, "is_float", False):
            out.append(1.0)
        else:
            out.append(1)
    return out


def line_of(fn, needle) -> int:
    lines, start = inspect.getsourcelines(raw(fn))
    hits = [start + i for i, text in enumerate(lines) if text.strip() == needle] or \
        [start + i for i, text in enumerate(lines) if needle in text]
    assert len(hits) == 1, f"needle {needle!r} found {len(hits)} times in {raw(fn).__name__}"
    return hits[0]


def run(case: Case):
    if case.action is not None:
        action = case.action
    else:
        jf = case.fn if isinstance(case.fn, tiledsl.JITFunction) else tiledsl.jit(case.fn)
        args = case.args if case.args is not None else default_args(case.fn)
        action = lambda: jf.compile(*args, target=case.target, **case.compile_kw)  # noqa: E731
    try:
        action()
    except BaseException as e:                     # noqa: BLE001 - every escape is judged below
        err = e
    else:
        pytest.fail(f"{case.id}: no error raised (expected {case.err.__name__})")
    assert isinstance(err, tiledsl.TiledslError), \
        f"{case.id}: an internal {type(err).__name__} escaped instead of {case.err.__name__}: {err}"
    assert type(err) is case.err, f"{case.id}: {type(err).__name__} instead of {case.err.__name__}: {err}"
    msg = str(err)
    assert "internal compiler error" not in msg, msg
    for w in case.words:
        assert w in msg, f"{case.id}: {w!r} is not in the message:\n{msg}"
    if case.err is tiledsl.KernelFault and case.needle is not None:
        # a run-time fault names the user's line as file:line:col, and shows it
        want = line_of(case.fn, case.needle)
        assert f"{inspect.getsourcefile(raw(case.fn))}:{want}:" in msg, f"{case.id}: line {want} not named:\n{msg}"
        assert case.needle in msg, msg
    if case.err is tiledsl.CompilationError and case.needle is not None:
        assert err.loc is not None, f"{case.id}: no location in\n{msg}"
        want = line_of(case.fn, case.needle)
        assert err.loc.line == want, f"{case.id}: error at line {err.loc.line}, expected {want}:\n{msg}"
        assert err.loc.file == inspect.getsourcefile(raw(case.fn)), msg
        assert f":{want}:" in msg.splitlines()[0]
    return err
