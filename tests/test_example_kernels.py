"""The softmax and layer norm kernels (tiledsl/ops/rowwise/) and the reduction and histogram examples: on the
interpreter at small sizes, compiled and checked by ptxas at the benchmark's sizes, and (marked gpu) against torch on
the GPU."""
import numpy as np
import pytest

from helpers import ptxas

import reduce as reduce_ex
from tiledsl.ops.rowwise import softmax as softmax_ex
from tiledsl.ops.rowwise import layernorm as layernorm_ex
import histogram as histogram_ex


def test_softmax_on_the_interpreter():
    rng = np.random.default_rng(1)
    for cols in (256, 512):
        x = (rng.standard_normal((3, cols)) * 4).astype(np.float16)
        y = softmax_ex.softmax(x)
        assert np.abs(y.astype(np.float64) - softmax_ex.reference(x)).max() < 2e-3


@pytest.mark.parametrize("n, threads", [(512, 32), (2048, 64)])
def test_pipelined_softmax_on_the_interpreter(n, threads):
    # 3 resident blocks walk 7 rows: every block prefetches a next row but the last
    import tiledsl
    k = softmax_ex.make_softmax(n, threads, pipelined=True, sms=3)
    x = (np.random.default_rng(n).standard_normal((7, n)) * 4).astype(np.float16)
    y = np.full_like(x, np.nan)
    tiledsl.jit(k.fn, interpret=True)(x, y)
    assert np.abs(y.astype(np.float64) - softmax_ex.reference(x)).max() < 2e-3


def test_layernorm_on_the_interpreter():
    rng = np.random.default_rng(2)
    x = (rng.standard_normal((3, 512)) * 3 + 1).astype(np.float16)
    w, b = rng.standard_normal(512).astype(np.float16), rng.standard_normal(512).astype(np.float16)
    y = layernorm_ex.layer_norm(x, w, b)
    assert np.abs(y.astype(np.float64) - layernorm_ex.reference(x, w, b, 1e-5)).max() < 1e-2


@pytest.mark.parametrize("n", [1, 1000, reduce_ex.CHUNK, 3 * reduce_ex.CHUNK + 17])
def test_reduce_on_the_interpreter(n):
    x = np.random.default_rng(n).standard_normal(n).astype(np.float32)
    s, m = reduce_ex.reduce(x, "add"), reduce_ex.reduce(x, "max")
    assert abs(float(s[0]) - x.astype(np.float64).sum()) < 1e-3 * max(1.0, np.abs(x).sum())
    assert m[0] == x.max()


def test_softmax_rejects_rows_it_does_not_tile():
    import tiledsl
    with pytest.raises(tiledsl.LaunchError, match="multiples of 256"):
        softmax_ex.make_softmax(1000)


@pytest.mark.parametrize("cols", [4096, 8192, 16384, 32768])
def test_softmax_and_layernorm_pass_ptxas_at_benchmark_sizes(cols):
    x = np.zeros((8, cols), np.float16)
    ck = softmax_ex.make_softmax(cols).compile(x, x, target="sm_90")
    r = ptxas(ck.asm["ptx"], "sm_90")
    assert r.returncode == 0, r.stderr
    ptx = ck.asm["ptx"]
    assert "ex2.approx.ftz.f32" in ptx and ("ld.global.v4.b32" in ptx or "cp.async.cg.shared.global" in ptx)
    assert ck.metadata.get("spill_stores", 0) == 0
    if cols <= 16384:
        w = np.zeros(cols, np.float16)
        ck = layernorm_ex.make_layernorm(cols).compile(x, w, w, x, 1e-5, target="sm_90")
        assert ptxas(ck.asm["ptx"], "sm_90").returncode == 0
        assert "rsqrt.approx.ftz.f32" in ck.asm["ptx"]


def test_reduce_passes_ptxas():
    x, p, o = np.zeros(1 << 20, np.float32), np.zeros(512, np.float32), np.zeros(1, np.float32)
    for op in ("add", "max"):
        k1, k2 = reduce_ex.KERNELS[op]
        for ck in (k1.compile(x, p, target="sm_90"), k2.compile(p, o, target="sm_90")):
            assert ptxas(ck.asm["ptx"], "sm_90").returncode == 0


@pytest.mark.parametrize("n, bins", [(1, 1), (700, 7), (histogram_ex.CHUNK * 3 + 5, 256), (5000, 512)])
def test_histogram_on_the_interpreter(n, bins):
    x = np.random.default_rng(n).integers(-2, bins + 2, n).astype(np.int32)
    h = histogram_ex.histogram(x, bins)
    assert (h == np.bincount(x[(x >= 0) & (x < bins)], minlength=bins)).all()


def test_histogram_passes_ptxas():
    ck = histogram_ex.make_histogram(256).compile(np.zeros(1 << 20, np.int32), np.zeros(256, np.uint32),
                                                  target="sm_90")
    assert ptxas(ck.asm["ptx"], "sm_90").returncode == 0
    assert "red.shared.add.u32" in ck.asm["ptx"] and "red.global.add.u32" in ck.asm["ptx"]


@pytest.mark.gpu
def test_examples_on_the_gpu_against_torch():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    for cols in (4096, 32768):
        for rows in (64, 1000):
            x = torch.randn(rows, cols, device="cuda", dtype=torch.float16) * 4
            torch.testing.assert_close(softmax_ex.softmax(x), torch.softmax(x.float(), 1).half(), rtol=2e-3,
                                       atol=2e-4)
    x = torch.randn(64, 4096, device="cuda", dtype=torch.float16) * 3 + 1
    w = torch.randn(4096, device="cuda", dtype=torch.float16)
    b = torch.randn(4096, device="cuda", dtype=torch.float16)
    ref = torch.nn.functional.layer_norm(x.float(), (4096,), w.float(), b.float(), 1e-5).half()
    torch.testing.assert_close(layernorm_ex.layer_norm(x, w, b), ref, rtol=1e-2, atol=1e-2)
    for n in (1, 12345, 1 << 22):
        v = torch.randn(n, device="cuda")
        assert abs(reduce_ex.reduce(v, "add").double().item() - v.double().sum().item()) < 1e-5 * v.abs().sum().item() + 1e-6
        assert reduce_ex.reduce(v, "max").item() == v.max().item()
    for n in (1, 4099, 1 << 22):
        v = torch.randint(0, 256, (n,), device="cuda", dtype=torch.int32)
        assert torch.equal(histogram_ex.histogram(v, 256).long(), torch.bincount(v, minlength=256))
