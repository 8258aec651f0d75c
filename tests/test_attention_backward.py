"""The FA2-style attention backward (tiledsl/ops/flash/fa2_backward.py, through backward.attention_backward) without
a GPU: the kernels of every GPU test shape compile and pass ptxas for sm_80 and sm_90 without spills, small ragged
cases (causal, GQA) match a float64 reference of the gradients on the interpreter, and bad calls are refused with
LaunchErrors."""
import os
import re
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import pytest

from tiledsl.ops.flash import backward as BWD
from tiledsl.ops.flash import fa2_backward as AB
from tiledsl.ops.flash import forward as FWD
from helpers import ptxas


def _args(dtype, D, shape):
    """Empty torch arrays standing for the main kernel's arguments (the CPU build of torch gives bfloat16)."""
    torch = pytest.importorskip("torch")
    B, H, HK, N, NK = shape
    dt = getattr(torch, dtype)
    NP = -(-N // AB.QTILE[D]) * AB.QTILE[D]
    q = torch.empty((B, H, N, D), dtype=dt)
    kv = torch.empty((B, HK, NK, D), dtype=dt)
    stats = torch.empty((B * H, NP))
    kvacc = kv if H == HK else torch.empty((B * HK * NK, D))
    return q, kv, kv, q, stats, stats, torch.empty((B * H * N, D)), kvacc, kvacc, N


def _kernel_ptx(dtype, D, causal, shape, arch, warps=None):
    k = AB.make_attention_backward(dtype, D, causal, shape, 1.0 / D ** 0.5, warps)
    return k.compile(*_args(dtype, D, shape), target=arch).asm["ptx"]


def _ptxas_v(ptx, arch):
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "k.ptx")
        with open(path, "w") as f:
            f.write(ptx)
        return subprocess.run([shutil.which("ptxas"), f"-arch={arch}", "-v", path, "-o", os.path.join(d, "k.o")],
                              capture_output=True, text=True)


NO_SPILL = r"\b0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads"


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("D", [64, 128])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_backward_passes_ptxas_without_spills(dtype, D, causal, arch):
    # the GPU tests' shapes: GQA with a ragged N, and whole tiles without GQA
    for shape in ((2, 4, 4, 1000, 1000), (2, 4, 4, 1024, 1024)):
        ptx = _kernel_ptx(dtype, D, causal, shape, arch)
        for op in ("mma.sync.aligned.m16n8k16", "ldmatrix.sync.aligned.m8n8.x4.trans", "cp.async.cg.shared.global",
                   "ex2.approx.ftz.f32", "red.global.add.f32", f"cvt.rn.{'f16' if dtype == 'float16' else 'bf16'}x2"):
            assert op in ptx, op
        r = _ptxas_v(ptx, arch)
        assert r.returncode == 0, r.stderr
        assert re.search(NO_SPILL, r.stderr), (shape, r.stderr)


# tests/test_gpu_attention_backward.py's other kernels (dtype, D, causal, (B, H, H_kv, N, N_kv)), and the benchmark's
# shapes (B*N = 16384 tokens, H*D = 2048; whole-tile shapes differ only in constants: one dtype each)
OTHER_SHAPES = [(dt, 128, c, (2, 8, hk, 1000, 1000)) for dt in ("float16", "bfloat16") for c in (False, True)
                for hk in (2, 1)]
OTHER_SHAPES += [("float16", d, c, (1, 4, 2, 300, 1234)) for d in (64, 128) for c in (False, True)]
OTHER_SHAPES += [("bfloat16", 128, True, (4, 16, 16, 4096, 4096)), ("float16", 64, False, (2, 4, 2, 333, 333)),
                 ("float16", 64, True, (2, 4, 2, 333, 333)), ("float16", 64, True, (1, 2, 2, 200, 200)),
                 ("float16", 64, False, (1, 2, 1, 40, 40)), ("float16", 64, True, (1, 2, 1, 40, 40))]
OTHER_SHAPES += [(dt, d, c, (16384 // n, 2048 // d, 2048 // d, n, n)) for d in (64, 128) for c in (False, True)
                 for dt, n in (("float16", 16384), ("bfloat16", 1024))]
OTHER_SHAPES += [("float16", d, c, (1, 4, 4, 4096, 4096)) for d in (64, 128) for c in (False, True)]   # the SASS test's


@pytest.mark.parametrize("D", [64, 128])
@pytest.mark.parametrize("causal", [False, True])
def test_backward_with_4_warps_passes_ptxas_without_spills(D, causal):
    # the other block size benchmarks/attention.py --bwd-warps 4,8 times (64 key rows a block)
    for dtype, shape in (("float16", (2, 4, 4, 1024, 1024)), ("bfloat16", (1, 4, 2, 1000, 1000))):
        r = _ptxas_v(_kernel_ptx(dtype, D, causal, shape, "sm_90", warps=4), "sm_90")
        assert r.returncode == 0, r.stderr
        assert re.search(NO_SPILL, r.stderr), (shape, r.stderr)


@pytest.mark.parametrize("dtype, D, causal, shape", OTHER_SHAPES)
def test_backward_other_gpu_and_benchmark_shapes_pass_ptxas(dtype, D, causal, shape):
    r = _ptxas_v(_kernel_ptx(dtype, D, causal, shape, "sm_90"), "sm_90")
    assert r.returncode == 0, r.stderr
    assert re.search(NO_SPILL, r.stderr), r.stderr


def test_helper_kernels_pass_ptxas():
    torch = pytest.importorskip("torch")
    for dtype in ("float16", "bfloat16"):
        for D in (64, 128):
            dt = getattr(torch, dtype)
            k = AB.make_delta(dtype, D, 8, 1000, 1024)
            o = torch.empty((8000, D), dtype=dt)
            ptx = k.compile(o, o, torch.empty(8000), torch.empty(8192), torch.empty(8192), target="sm_80").asm["ptx"]
            assert "shfl.sync.bfly.b32" in ptx
            for arch in ("sm_80", "sm_90"):
                assert ptxas(ptx, arch).returncode == 0
            c = AB.make_cast(dtype, 8000 * D // 8)
            ptx = c.compile(torch.empty((8000 * D // 8, 8)), torch.empty((8000 * D // 8, 8), dtype=dt),
                            target="sm_80").asm["ptx"]
            for arch in ("sm_80", "sm_90"):
                assert ptxas(ptx, arch).returncode == 0


def _rel(got, ref):
    return np.linalg.norm(got.astype(np.float64) - ref) / np.linalg.norm(ref)


def _case(H, HK, N, NK, D, causal, scale, seed, warps=None):
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((1, H, N, D)).astype(np.float16)
    k = rng.standard_normal((1, HK, NK, D)).astype(np.float16)
    v = rng.standard_normal((1, HK, NK, D)).astype(np.float16)
    do = rng.standard_normal((1, H, N, D)).astype(np.float16)
    o, lse = FWD.attention(q, k, v, causal=causal, scale=scale, config=(4, 1, 1))
    got = BWD.attention_backward(q, k, v, o, lse, do, causal=causal, scale=scale, warps=warps)
    ref = BWD.reference_backward(q, k, v, do, causal=causal, scale=scale)
    for g, r, x in zip(got, ref, (q, k, v)):
        assert g.dtype == np.float16 and g.shape == x.shape
        assert _rel(g, r) <= 1e-2, _rel(g, r)
    return got


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("heads", [(2, 2), (2, 1)])
def test_backward_on_the_interpreter(causal, heads):
    # the brief's case: B=1, H=2, N=40 (a ragged tail in one query tile and one key block), D=64, GQA H_kv=1
    _case(*heads, 40, 40, 64, causal, None, 40 + causal + heads[1])


@pytest.mark.parametrize("causal, heads, n, nk, D", [
    (True, (4, 2), 150, 150, 64),      # three key blocks and query tiles: the diagonal's tiles, phase 1 tiles
    (False, (2, 1), 70, 130, 128),     # D = 128 (32-row query tiles), more keys than queries, GQA
    (True, (2, 2), 40, 40, 128),
    (True, (2, 1), 40, 100, 64),       # causal with more keys than queries: key block 1 walks no query tile
])
def test_backward_on_the_interpreter_more_tiles(causal, heads, n, nk, D):
    _case(*heads, n, nk, D, causal, 0.3, n + nk + D)


@pytest.mark.parametrize("D", [64, 128])
def test_backward_with_4_warps_on_the_interpreter(D):
    # 64 key rows a block: three key blocks, the causal diagonal crossing them, GQA
    _case(4, 2, 150, 150, D, True, 0.3, D, warps=4)


def test_reference_backward_matches_finite_differences():
    # the float64 reference itself: d/dq of sum(o * do) by central differences on a tiny case
    rng = np.random.default_rng(2)
    q, k, v, do = (rng.standard_normal((1, 2, 5, 4)) for _ in range(4))
    k, v = k[:, :1], v[:, :1]
    dq, dk, dv = BWD.reference_backward(q, k, v, do, causal=True, scale=0.7)
    f = lambda q_, k_, v_: (FWD.reference(q_, k_, v_, causal=True, scale=0.7)[0] * do).sum()  # noqa: E731
    eps = 1e-6
    for arr, grad, idx in ((q, dq, (0, 1, 3, 2)), (k, dk, (0, 0, 1, 0)), (v, dv, (0, 0, 2, 3))):
        plus, minus = arr.copy(), arr.copy()
        plus[idx] += eps
        minus[idx] -= eps
        args_p = [plus if a is arr else a for a in (q, k, v)]
        args_m = [minus if a is arr else a for a in (q, k, v)]
        assert abs((f(*args_p) - f(*args_m)) / (2 * eps) - grad[idx]) <= 1e-6


def test_benchmark_backward_table_and_plot_without_a_gpu(tmp_path, capsys):
    # benchmarks/attention.py's backward row and --plot: the table line names the fastest backend and the ratio;
    # the chart is written where matplotlib is installed, else a clear message (no exception)
    import importlib.util
    spec = importlib.util.spec_from_file_location("bench_attention", os.path.join(
        os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks", "attention.py"))
    bench = importlib.util.module_from_spec(spec)
    saved = list(sys.path)
    try:
        spec.loader.exec_module(bench)
    finally:                    # its path setup puts benchmarks/ first (benchmarks/gemm.py shadows examples/gemm.py)
        sys.path[:] = saved
    row = {"dtype": "bfloat16", "causal": True, "D": 128, "N": 4096, "BH": "4x16", "ours": 400.0, "flash": 200.0,
           "cudnn": 500.0, "eff": None, "ok": True, "err": 3e-3, "warps": 8, "each": {4: 300.0, 8: 400.0}}
    line = bench._bwd_line(row)
    assert "| cudnn | 0.80 | 3.0e-03 |" in line and "| n/a |" in line and "| 8 (4: 300, 8: 400) |" in line
    assert "FAIL" in bench._bwd_line(dict(row, ok=False, err=2e-2))
    path = tmp_path / "chart.png"
    wrote = bench.plot(str(path), [], [row], "test")
    out = capsys.readouterr().out
    if wrote:
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    else:
        assert "matplotlib is not installed" in out and not path.exists()
