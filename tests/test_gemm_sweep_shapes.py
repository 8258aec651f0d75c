"""benchmarks/gemm_sweep.py's shape set and summary, on the CPU: the module imports without torch or a GPU (the
sweep itself runs with `python benchmarks/gemm.py --sweep-shapes` on one)."""
import importlib.util
import pathlib
import subprocess
import sys

import pytest

PATH = pathlib.Path(__file__).resolve().parent.parent / "benchmarks" / "gemm_sweep.py"


def _load():
    # by path, as benchmarks/gemm.py loads it: the folder on sys.path would shadow examples/ (gemm, hopper_gemm)
    spec = importlib.util.spec_from_file_location("gemm_sweep", PATH)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


S = _load()


def test_imports_without_torch():
    # a fresh interpreter: this one may have torch loaded by other tests
    code = (f"import importlib.util, sys; spec = importlib.util.spec_from_file_location('gemm_sweep', "
            f"{str(PATH)!r}); m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m); m.shapes(); "
            "m.shapes(True, 'e4m3'); "
            "assert 'torch' not in sys.modules and 'tiledsl' not in sys.modules, sorted(sys.modules)")
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize("quick", [False, True])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "e4m3"])
def test_no_duplicates_and_operands_fit(quick, dtype):
    sh = S.shapes(quick, dtype)
    assert len(sh) == len(set(sh)) and sh
    assert all(len(s) == 3 and all(isinstance(x, int) and x > 0 for x in s) for s in sh)
    assert max(S.operand_bytes(*s, dtype) for s in sh) <= S.MAX_OPERAND_BYTES


def test_llm_shapes_every_m():
    full = set(S.shapes())
    assert S.M_VALUES == (1, 16, 64, 128, 256, 1024, 4096, 16384)
    weights = S.llm_weights()
    assert len(weights) == 14
    for H, F in ((4096, 11008), (4096, 14336), (5120, 13824), (8192, 28672)):
        for N, K in ((H, H), (3 * H, H), (F, H), (H, F)):        # out-proj, fused QKV, up/gate, down
            assert (N, K) in weights
            assert {(M, N, K) for M in S.M_VALUES} <= full, (N, K)
    assert {s[0] for s in full} >= set(S.M_VALUES)


def test_squares_and_ragged():
    full = set(S.shapes())
    for n in (1024, 2048, 3072, 4000, 4096, 8192):
        assert (n, n, n) in full
    for s in ((16384, 8192, 1024), (1000, 3000, 4000), (5000, 7000, 3000), (4095, 4097, 4096), (1536, 1536, 4104),
              (256, 8192, 8192), (777, 12345, 2048), (16384, 1024, 8192)):
        assert s in full, s


def test_fp8_filter():
    full, fp8 = S.shapes(), S.shapes(dtype="e4m3")
    # exactly the shapes both sides take: the kernel's K % 16 and torch._scaled_mm's N % 16 and K % 16
    assert fp8 == [s for s in full if s[2] % 16 == 0 and s[1] % 16 == 0]
    assert (4095, 4097, 4096) not in fp8 and (1536, 1536, 4104) not in fp8
    assert (16384, 8192, 1024) in fp8 and (4000, 4000, 4000) in fp8
    assert S.shapes(True, "e4m3") == [s for s in S.shapes(True) if S.fp8_ok(*s)]


def test_quick_is_a_representative_subset():
    full, quick = S.shapes(), S.shapes(quick=True)
    assert set(quick) <= set(full) and quick == [s for s in full if s in set(quick)]   # table order kept
    assert len(full) / 4 <= len(quick) <= len(full) / 2
    assert {s[0] for s in quick} >= set(S.M_VALUES)                      # still every M
    assert {K for (_, N, K) in quick if (N, K) in S.llm_weights()} >= set(S.MLP)   # and every hidden size
    assert (16384, 8192, 1024) in quick and (4000, 4000, 4000) in quick


def test_docstring_counts():
    # the module docstring states the set's sizes; keep it honest
    doc = S.__doc__
    assert f"({len(S.shapes())} shapes)" in doc and f"--quick` keeps {len(S.shapes(True))}" in doc
    assert f"({len(S.shapes(dtype='e4m3'))} shapes, {len(S.shapes(True, 'e4m3'))} quick)" in doc


def test_parse_shapes():
    assert S.parse_shapes("1,2,3;4,5,6") == [(1, 2, 3), (4, 5, 6)]


def _row(M, N, K, ratio, status="ok", frac=None):
    return {"dtype": "float16", "M": M, "N": N, "K": K, "plan": "p", "ms": 1.0, "ms_cublas": ratio, "tflops": 1.0,
            "tflops_cublas": ratio, "ratio": ratio, "err": 1e-3, "status": status, "weight_copy_fraction": frac}


def test_summary_line():
    rows = [_row(4096, 4096, 4096, 0.9), _row(1, 4096, 4096, 0.5, frac=0.6), _row(64, 8192, 8192, 2.0, frac=0.8),
            _row(777, 12345, 2048, 0.4), _row(128, 128, 128, 5.0, "wrong"), _row(16, 16, 16, None, "n/a")]
    s = S.summarize("float16", rows)
    assert s["geomean"] == pytest.approx((0.9 * 0.5 * 2.0 * 0.4) ** 0.25)
    assert s["wrong"] == 1 and s["na"] == 1 and s["failed"] == 0
    line = S.summary_line(s)
    assert line.startswith("float16: geomean 0.77x, min 0.40x at 777x12345x2048, shapes with M,N,K >= 1024: min "
                           "0.90x at 4096x4096x4096, M<=64: min ratio 0.50 at 1x4096x4096, min weight-read fraction "
                           "of copy 0.60 at 1x4096x4096; wrong: 1")
    table = S.table("float16", rows)
    assert len(table) == 3 + len(rows) and "WRONG" in table[3 + 4]
    assert all(line.count("|") == 13 for line in table[1:])
