"""Errors in kernels: one CompilationError at the user's line, with file:line:col, the line and a caret."""
import inspect
import os
import traceback

import numpy as np
import pytest

import tiledsl
import tiledsl.lang.language
from tiledsl import T


def line_of(fn, needle):
    lines, start = inspect.getsourcelines(fn)
    for i, text in enumerate(lines):
        if needle in text:
            return start + i, text
    raise AssertionError(needle)


def compile_error(jf, *args):
    with pytest.raises(tiledsl.CompilationError) as ei:
        jf.compile(*args, target="sm_90")
    return ei.value


def k_while(A: T.Tensor((4,), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    while True:
        A[0] = 1.0


def k_try(A: T.Tensor((4,), "float32")):
    try:
        A[0] = 1.0
    except Exception:
        pass


def k_unknown(A: T.Tensor((4,), "float32")):
    A[0] = undefined_name + 1  # noqa: F821


def k_lambda(A: T.Tensor((4,), "float32")):
    f = lambda x: x  # noqa: E731
    A[0] = f(1.0)


def k_bad_annotation(A: np.ndarray):
    A[0] = 1.0


def k_no_annotation(A):
    A[0] = 1.0


def k_with(A: T.Tensor((4,), "float32")):
    with open("x"):
        A[0] = 1.0


def k_index_oob(A: T.Tensor((4,), "float32")):
    A[4] = 1.0


def k_store_type(A: T.Tensor((4,), "float16")):
    A[0] = T.float32(1.0)


def k_nested_def(A: T.Tensor((4,), "float32")):
    def inner():
        return 1
    A[0] = 1.0


def k_varargs(*args):
    pass


def k_unknown_opcode(A: T.Tensor((4,), "float32")):
    r = T.alloc_local((4, 1), "float32")
    T.cuda.tile.apply(T.ptx["frobnicate.f32"], r, A)


CASES = [
    (k_while, "while True", "this while loop never ends"),
    (k_try, "try:", "try/except is not supported"),
    (k_unknown, "undefined_name", "name 'undefined_name' is not defined"),
    (k_lambda, "= lambda", "lambda is not supported"),
    (k_bad_annotation, "A: np.ndarray", "annotation must be T.Tensor"),
    (k_no_annotation, "def k_no_annotation", "needs an annotation"),
    (k_with, "with open", "'with' is not supported"),
    (k_index_oob, "A[4]", "index 4 is out of range"),
    (k_store_type, "A[0] = T.float32", "storing a float32 value into a float16 element"),
    (k_nested_def, "def inner", "nested function"),
    (k_varargs, "def k_varargs", "plain positional parameters"),
    (k_unknown_opcode, "frobnicate", "no explicit tile pattern for frobnicate.f32"),
]


@pytest.mark.parametrize("fn,needle,message", CASES, ids=[c[0].__name__ for c in CASES])
def test_error_points_at_the_users_line(fn, needle, message):
    jf = tiledsl.jit(fn)
    args = []
    for p in inspect.signature(fn).parameters.values():
        ann = p.annotation
        args.append(np.zeros(ann.shape, ann.dtype.np) if isinstance(ann, tiledsl.lang.language.TensorType)
                    else np.zeros(4, np.float32))
    e = compile_error(jf, *args)
    line, text = line_of(fn, needle)
    assert message in str(e)
    assert e.loc is not None and e.loc.line == line, str(e)
    assert f"{__file__}:{line}:" in str(e)
    rendered = str(e).splitlines()
    assert rendered[1].strip() == text.strip()
    assert "^" in rendered[2]
    # the caret sits under the culprit's column
    assert rendered[2].index("^") - 4 == e.loc.col


def test_message_holds_no_compiler_frames():
    e = compile_error(tiledsl.jit(k_unknown), np.zeros(4, np.float32))
    # the package's own files (its frames) are absent; the text "tiledsl/" alone is not a test: a clone into a
    # folder named tiledsl puts it in this test file's own path, which the message names
    package_dir = os.path.dirname(os.path.abspath(tiledsl.__file__)) + os.sep
    assert package_dir not in str(e) and "Traceback" not in str(e)
    assert __file__ in str(e)
    assert e.__cause__ is None and (e.__context__ is None or e.__suppress_context__)


def test_every_kernel_error_is_a_tiledsl_error():
    """One `except tiledsl.TiledslError` catches a bad kernel and a bad call, each with its own message."""
    with pytest.raises(tiledsl.TiledslError) as ei:
        tiledsl.jit(k_unknown).compile(np.zeros(4, np.float32), target="sm_90")
    assert type(ei.value) is tiledsl.CompilationError and "undefined_name" in str(ei.value)
    with pytest.raises(tiledsl.TiledslError) as ei:
        tiledsl.jit(k_unknown).compile(np.zeros(5, np.float32), target="sm_90")
    assert type(ei.value) is tiledsl.LaunchError and "argument 'A'" in str(ei.value)


def test_error_inside_tile_operand_names_operand_and_line():
    def k(A: T.Tensor((4, 1), "float32"), Out: T.Tensor((4, 1), "float32")):
        T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
        r = T.alloc_local((4, 1), "float16")
        T.cuda.tile.apply(T.ptx["ld.global.f32"], r, A)
    e = compile_error(tiledsl.jit(k), np.zeros((4, 1), np.float32), np.zeros((4, 1), np.float32))
    assert "operand dst" in str(e) and "32 bits" in str(e)
    assert e.loc.line == line_of(k, "ld.global.f32")[0]
    traceback.format_exception(e)
