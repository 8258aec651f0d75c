"""benchmarks/model.py (issue 36's side-by-side) without a GPU: its case list, and --smoke, which runs every code
path once on the tiny layer (CPU tensors, the interpreter, aot_eager compiles)."""
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "benchmarks", "model.py")


def _run(*args, timeout=600):
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True, env=env, timeout=timeout)


def test_case_lists():
    full = _run("--list")
    assert full.returncode == 0, full.stderr
    rows = [line.split() for line in full.stdout.splitlines()]
    assert ["train", "2", "4096"] in rows and ["prefill", "1", "32768"] in rows
    assert sum(r[0] == "decode" for r in rows) == 12
    quick = _run("--list", "--quick", "--only", "decode")
    assert quick.stdout.split("\n")[0].startswith("decode")
    bad = _run("--list", "--only", "training")
    assert bad.returncode != 0 and "--only takes" in bad.stderr


@pytest.mark.slow
def test_smoke_runs_every_path():
    pytest.importorskip("torch")
    r = _run("--smoke", "--modes", "default")
    assert r.returncode == 0, r.stderr[-3000:]
    for what in ("training step, 1 x 16", "prefill, 1 x 16", "decode step, batch 2, context 40"):
        assert what in r.stdout, r.stdout[-3000:]
    assert "failed" not in r.stdout, r.stdout[-3000:]
