"""benchmarks/gemm_fuzz.py (issue 31): on the H200, a fixed sample of 36 shapes (f16, bf16, e4m3; ragged, tiny,
skinny, K % 8 != 0, some tuned) runs with no hang, crash, error or wrong result. On any machine: the shape
generator is deterministic and covers the kinds the sample relies on, and the parent turns a silent worker, a
faulthandler timeout, a crash and a worker that leaves after a fault into per-shape results instead of waiting."""
import json
import os
import subprocess
import sys
import textwrap

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FUZZ = os.path.join(ROOT, "benchmarks", "gemm_fuzz.py")


def _fuzz():
    sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
    try:
        import gemm_fuzz
    finally:
        sys.path.remove(os.path.join(ROOT, "benchmarks"))
    return gemm_fuzz


@pytest.mark.gpu
def test_fuzz_sample_on_the_gpu(tmp_path):
    torch = pytest.importorskip("torch")
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("matmul_fp8 and the Hopper path need sm_90: an H100/H200")
    out = tmp_path / "fuzz.json"
    r = subprocess.run([sys.executable, FUZZ, "--count", "36", "--seed", "1", "--max-dim", "6000", "--timeout", "120",
                        "--out-json", str(out)], capture_output=True, text=True, cwd=ROOT, timeout=1800)
    assert r.returncode == 0, r.stdout[-6000:] + r.stderr[-2000:]
    results = json.loads(out.read_text())["results"]
    assert len(results) == 36 and all(x["status"] == "ok" for x in results)
    assert "fuzz: 36 shapes, 0 hangs, 0 wrong, 0 crashes, 0 errors" in r.stdout


@pytest.mark.parametrize("count,seed,max_dim", [(36, 1, 6000), (300, 0, 20000)])
def test_shape_generator(count, seed, max_dim):
    F = _fuzz()
    shapes = F.draw_shapes(count, seed, max_dim=max_dim)
    assert shapes == F.draw_shapes(count, seed, max_dim=max_dim)
    assert shapes != F.draw_shapes(count, seed + 1, max_dim=max_dim)
    per = {d: sum(s["dtype"] == d for s in shapes) for d in F.DTYPES}
    assert per == {d: count // 3 for d in F.DTYPES}
    half = [s for s in shapes if s["dtype"] != "e4m3"]
    assert any(s["K"] % 8 for s in half)
    assert any(s["M"] < 16 for s in shapes) and any(s["N"] < 16 for s in shapes)
    assert any(s["M"] <= 64 and s["N"] >= 1024 and s["K"] >= 1024 for s in shapes)
    assert all(s["K"] % 16 == 0 for s in shapes if s["dtype"] == "e4m3")
    assert all(1 <= s[d] <= max_dim for s in shapes for d in "MNK")
    assert all(s["M"] * s["N"] * s["K"] <= F.WORK_CAP for s in shapes)
    assert all(max(s["M"] * s["N"], s["M"] * s["K"], s["N"] * s["K"]) <= F.ELEM_CAP for s in shapes)
    assert any(s["tune"] for s in shapes) and not any(s["tune"] for s in shapes if s["dtype"] == "e4m3")


def test_cap_keeps_the_raggedness():
    F = _fuzz()
    M, N, K = F._cap([20003, 19999, 20008])
    assert M * N * K <= F.WORK_CAP and max(M * N, M * K, N * K) <= F.ELEM_CAP
    assert (M % 256, N % 256, K % 256) == (20003 % 256, 19999 % 256, 20008 % 256)


# a stand-in for the GPU worker: #1 (or those FAKE_SILENT names) stays silent, #3 is killed by faulthandler,
# #4 crashes, #5 is wrong, #6 errs and leaves (as after a fault that poisons the CUDA context); the rest pass
FAKE = textwrap.dedent("""
    import faulthandler, json, os, sys, time
    path, start, timeout = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
    silent = {int(x) for x in os.environ.get("FAKE_SILENT", "1").split(",")}
    for s in json.load(open(path))[start:]:
        i = s["i"]
        print(f"START {i}", flush=True)
        faulthandler.dump_traceback_later(timeout, exit=True)
        if i in silent:
            faulthandler.cancel_dump_traceback_later()
            time.sleep(600)
        if i == 3:
            time.sleep(600)
        if i == 4:
            print("boom", file=sys.stderr, flush=True)
            os._exit(7)
        print(f"PLAN {i} fake plan", flush=True)
        if i == 6:
            print(f"NOTE {i} CUDAError: illegal address", flush=True)
        status = {5: "wrong", 6: "error"}.get(i, "ok")
        print(f"DONE {i} {status} {0.5 if i == 5 else 1e-3:.3e} fake plan 1.000", flush=True)
        if i == 6:
            sys.exit(3)
""")


def _fake(tmp_path, monkeypatch, F):
    script = tmp_path / "fake_worker.py"
    script.write_text(FAKE)
    monkeypatch.setattr(F, "GRACE", 1)
    return lambda path, start, timeout: [sys.executable, str(script), path, str(start), str(timeout)]


def test_parent_turns_hangs_and_crashes_into_results(tmp_path, monkeypatch):
    F = _fuzz()
    shapes = F.draw_shapes(8, 0, max_dim=100)
    lines = []
    results = F.run_fuzz(shapes, 1, give_up=3, command=_fake(tmp_path, monkeypatch, F), log=lines.append)
    assert [r["status"] for r in results] == ["ok", "hang", "ok", "hang", "crash", "wrong", "error", "ok"]
    assert "worker killed" in results[1]["what"] and "faulthandler" in results[3]["what"]
    assert results[4]["what"].startswith("exit code 7") and "boom" in results[4]["what"]
    assert results[3]["plan"] == "-" and results[6]["what"] == "CUDAError: illegal address"
    assert F.report(results, 1.0, log=lines.append) == 5
    assert lines[-1] == "fuzz: 8 shapes, 2 hangs, 1 wrong, 1 crashes, 1 errors"


def test_parent_gives_up_on_a_wedged_device(tmp_path, monkeypatch):
    F = _fuzz()
    monkeypatch.setenv("FAKE_SILENT", "0,1,2,3,4")
    lines = []
    results = F.run_fuzz(F.draw_shapes(5, 0, max_dim=100), 1, give_up=2, command=_fake(tmp_path, monkeypatch, F),
                         log=lines.append)
    assert [r["status"] for r in results] == ["hang", "hang", "not run", "not run", "not run"]
    assert "fuzz: gave up after 2 dead workers in a row; 3 shapes not run" in lines
    assert F.report(results, 1.0, log=lines.append) == 5 and lines[-1].startswith("fuzz: 2 shapes, 2 hangs")
