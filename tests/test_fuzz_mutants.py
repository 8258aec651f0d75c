"""The mutation fuzzer (tests/fuzz/): its judge tells the outcomes apart, and a bounded run with a fixed seed finds
no internal exception, leak, unlocated error or hang. `python -m tests.fuzz --seconds 600` runs it longer."""
import textwrap

import pytest

import tiledsl
from tests.fuzz import judge as J
from tests.fuzz.run import fuzz
from tests.fuzz.seeds import all_seeds

KERNEL = '''\
import tiledsl
from tiledsl import T
from tiledsl.layout import S, TileLayout


@tiledsl.jit
def k(A: T.Tensor((4,), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    A[0] = {value}
'''


def _judge(tmp_path, text, driver=("kernels", ("k",))):
    path = tmp_path / "mutant_under_test.py"
    path.write_text(textwrap.dedent(text))
    return J.judge(str(path), driver, "mutant_under_test")


def test_judge_tells_the_outcomes_apart(tmp_path, monkeypatch):
    assert _judge(tmp_path, KERNEL.format(value="1.0"))[0] == "compiled"
    out, detail, _ = _judge(tmp_path, KERNEL.format(value="no_such_name"))
    assert out == "located" and "no_such_name" in detail
    assert _judge(tmp_path, KERNEL.format(value="(1.0"))[0] == "not_a_kernel"          # not Python
    assert _judge(tmp_path, KERNEL + "1 / 0\n")[0] == "not_a_kernel"                    # its own Python fails
    assert _judge(tmp_path, KERNEL + "T.no_such_thing\n")[0] == "not_a_kernel"          # Python's AttributeError
    assert _judge(tmp_path, KERNEL, ("kernels", ("gone",)))[0] == "not_a_kernel"

    # tiledsl failing with an internal exception, or with a message that names ptxas, is a failure: here
    # layout.py's own `raise LayoutError(...)` is made to raise a KeyError, then a CompilationError about ptxas
    bad_layout = KERNEL.format(value="1.0") + "L = TileLayout(S[(0,) : (1,)])\n"
    monkeypatch.setattr(tiledsl.layout, "LayoutError", KeyError)
    out, detail, tb = _judge(tmp_path, bad_layout)
    assert out == "internal" and detail.startswith("KeyError at layout.py:"), detail
    assert "Traceback" in tb
    monkeypatch.setattr(tiledsl.layout, "LayoutError", lambda m: tiledsl.CompilationError("ptxas rejected: " + m))
    assert _judge(tmp_path, bad_layout)[0] == "leak"


def test_every_seed_compiles_unmutated(tmp_path):
    """The fuzzer's starting points are kernels that compile: otherwise every mutant is noise."""
    for s in all_seeds():
        for d in s.drivers[:1]:
            path = tmp_path / f"seed_{s.name}.py"
            path.write_text(s.text)
            out, detail, _ = J.judge(str(path), d, f"seed_{s.name}")
            assert out == "compiled", (s.name, out, detail)


def _report(rep):
    return rep.table() + "".join(f"\n- {f.kind} in {f.seed}: {f.detail}\n  mutations: {f.mutations}\n"
                                 f"{f.source}" for f in rep.distinct())


def test_fuzz_smoke(tmp_path):
    rep = fuzz(seconds=20, seed=0, max_mutants=12, out=tmp_path)
    total = sum(c["mutants"] for c in rep.counts.values())
    assert 0 < total <= 12
    assert not rep.failures, _report(rep)


@pytest.mark.slow
def test_fuzz_bounded_run(tmp_path):
    rep = fuzz(seconds=35, seed=1, out=tmp_path)
    assert not rep.failures, _report(rep)


def test_a_hang_is_placed_by_the_stack(tmp_path):
    """A mutant that never answers is killed at the timeout; the stack dumped just before says whose code hung:
    the mutant's own Python (not a kernel) here, tiledsl's (a hang, a failure) otherwise."""
    import multiprocessing
    from tests.fuzz.run import Worker
    path = tmp_path / "sleeper.py"
    path.write_text("import time\n\n\ndef nap():\n    time.sleep(60)\n\n\nnap()\n")
    w = Worker(multiprocessing.get_context("spawn"), str(tmp_path))
    try:
        out, detail, _ = w.ask((str(path), ("import", ()), "sleeper"), timeout=4)
    finally:
        w.stop(kill=True)
    assert (out, detail) == ("not_a_kernel", "slow in its own code at line 5")
