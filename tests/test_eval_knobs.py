"""The one static evaluator (pinned for patterns, with an env for host grids) and the typed switch declarations."""
import itertools
import os
import re

import pytest

from tiledsl.core import dtypes as dt
from tiledsl.core import knobs
from tiledsl.core.errors import CompilationError
from tiledsl.ir import eval as ev
from tiledsl.ir import nodes as ir

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def bin_(op, a, b):
    return ir.Binary(dt.int32, None, op, a, b)


def test_host_trees_have_python_semantics():
    x = ir.Var(dt.int32, None, "n")
    for op, a, b in itertools.product(ev.HOST_OPS, (-7, 0, 5, 13), (-3, 0, 2, 4)):
        tree = [op, ["var", "a"], b]
        got = ev.evaluate(tree, {"a": a})
        py = {"add": a + b, "sub": a - b, "mul": a * b, "min": min(a, b), "max": max(a, b)}.get(op)
        if op in ("floordiv", "mod"):
            py = None if b == 0 else (a // b if op == "floordiv" else a % b)
        if op in ("shl", "shr"):
            py = None if b < 0 else (a << b if op == "shl" else a >> b)
        assert got == py, (op, a, b)
    assert ev.serialize(x) == ["var", "n"] and ev.evaluate(ev.serialize(bin_("mul", x, 3)), {"n": 5}) == 15


def test_pinned_evaluation_shares_the_op_table():
    e = bin_("floordiv", bin_("sub", ir.Const(dt.int32, None, -7), 0), 2)
    assert ev.evaluate_pinned(e, 0) == -4                         # Python floors
    assert ev.evaluate_pinned(bin_("mod", 5, bin_("sub", 3, 3)), 0) is None      # % 0: not static
    assert ev.evaluate_pinned(bin_("xor", 6, 3), 0) == 5
    for op in ev.HOST_OPS:
        assert op in ev.OPS


def test_pinned_evaluation_takes_a_select_branch():
    # a snake walk's `G - 1 - pid if k % 2 == 1 else pid` under a wgmma stage index: every run-time value (pid,
    # k) pinned, the branch its pinned condition takes (an unevaluable select failed the descriptor proof)
    pid = ir.Special(dt.int32, None, "ctaid.x")
    odd = ir.Compare(dt.bool_, None, "eq", bin_("mod", pid, 2), 1)
    walk = ir.Select(dt.int32, None, odd, bin_("sub", 131, pid), pid)
    assert [ev.evaluate_pinned(walk, p) for p in ev.PINS] == [0, 128]          # pins 0 (even) and 3 (odd)
    assert ev.evaluate_pinned(bin_("mod", bin_("add", walk, 1), 2), 3) == 1
    unknown = ir.Select(dt.int32, None, ir.Unary(dt.bool_, None, "not", odd), 1, 2)
    assert ev.evaluate_pinned(unknown, 0) is None                              # a condition it cannot evaluate


def test_serialize_refuses_what_launchers_cannot_evaluate():
    with pytest.raises(CompilationError, match="a grid dimension may use"):
        ev.serialize(bin_("xor", 6, 3))
    assert ev.serialize(bin_("add", 1, ir.Const(dt.int32, None, 2))) == ["add", 1, 2]


def test_switch_types_and_defaults(monkeypatch):
    for s in knobs.SWITCHES:
        monkeypatch.delenv(s.name, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", "/xdg")
    assert knobs.cache_dir() == "/xdg/tiledsl" and knobs.cache_max_bytes() == 1024 ** 3
    assert knobs.disk_cache_enabled() and not knobs.interpret() and not knobs.debug() and knobs.native_launch()
    assert knobs.dump_dir() is None
    for raw, want in (("1", True), ("yes", True), ("ON", True), ("0", False), ("off", False), ("junk", False)):
        monkeypatch.setenv("TILEDSL_DEBUG", raw)
        assert knobs.debug() is want
    for raw, want in (("0", False), ("no", False), ("junk", True), ("", True)):
        monkeypatch.setenv("TILEDSL_NATIVE_LAUNCH", raw)
        assert knobs.native_launch() is want
    monkeypatch.setenv("TILEDSL_CACHE_MAX_MB", "7")
    assert knobs.cache_max_bytes() == 7 * 1024 * 1024
    monkeypatch.setenv("TILEDSL_CACHE_MAX_MB", "lots")
    assert knobs.cache_max_bytes() == 1024 ** 3
    assert knobs.interpret_order() == "lockstep" and knobs.interpret_seed() == 0
    assert all(s.kind in ("bool", "int", "path", "str") and s.doc for s in knobs.SWITCHES)
    assert len({s.name for s in knobs.SWITCHES}) == len(knobs.SWITCHES)


def test_every_switch_is_read_only_through_knobs():
    """No module but core/knobs.py reads a TILEDSL_* variable from the environment."""
    pkg = os.path.join(ROOT, "tiledsl")
    for dirpath, _, files in os.walk(pkg):
        for f in files:
            if not f.endswith(".py") or os.path.join(dirpath, f) == os.path.join(pkg, "core", "knobs.py"):
                continue
            text = open(os.path.join(dirpath, f)).read()
            assert not re.search(r"(environ|getenv)[^\n]*TILEDSL_", text), f
    declared = {s.name for s in knobs.SWITCHES}
    text = open(os.path.join(pkg, "core", "knobs.py")).read()
    assert all(text.count(f'"{n}"') == 1 for n in declared)
