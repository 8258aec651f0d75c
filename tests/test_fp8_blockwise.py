"""Block-scaled FP8 on any machine: the quantisers (tiledsl/ops/gemm/quantize.py: 1 x 128 blocks, per row, per
tensor) bit for bit against their numpy reference on the interpreter, for f32/f16/bf16 input, zero blocks and a
saturating outlier included; the block-scaled GEMM (grouped_kernel.py's scaled form, dense and grouped) exact with
power-of-two scales and within 2e-3 of an f32 reference with arbitrary scales, the scales applied per 128-wide K
block in the consumer; every kernel compiles for sm_90a and assembles without spills; the host API refuses scales
of the wrong shape naming them. tests/test_gpu_moe.py runs them on the H200."""
import numpy as np
import pytest

import tiledsl
from helpers import ptxas
from tiledsl.interpreter import rounding as R
from tiledsl.ops.gemm import grouped_kernel as GK
from tiledsl.ops.gemm import quantize as Q


def _input(dt, M, K, seed=0):
    """(array the kernel takes, its exact f32 values): rows of very different magnitudes, a zero block, an
    outlier."""
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((M, K)) * np.exp(rng.standard_normal((M, 1)) * 3)).astype(np.float32)
    x[1 % M, :128] = 0
    x[-1, 5] = 3e4
    if dt == "bfloat16":
        bits = (x.view(np.uint32) >> 16).astype(np.uint16)
        return bits, (bits.astype(np.uint32) << 16).view(np.float32)
    if dt == "float16":
        h = x.astype(np.float16)
        return h, h.astype(np.float32)
    return x, x


@pytest.mark.parametrize("dt", Q.DTYPES)
def test_blockwise_quantiser_is_bit_exact_on_the_interpreter(dt):
    M, K = 5, 384
    x, xf = _input(dt, M, K)
    q = np.zeros((M, K), np.uint8)
    s = np.zeros((M, K // 128), np.float32)
    tiledsl.jit(Q.make_quantize_blockwise(dt).fn, interpret=True)(x.reshape(M, K // 8, 8), q.reshape(M, K // 8, 8),
                                                                   s)
    rq, rs = Q.reference(xf)
    np.testing.assert_array_equal(q, rq)
    np.testing.assert_array_equal(s, rs)
    assert s[1 % M, 0] == 1.0 and (q[1 % M, :128] == 0).all()          # a block of zeros: scale 1, zeros
    # the dequantised values are within e4m3's half ulp (2^-4 relative) of x
    back = R.decode(R.E4M3, q) * np.repeat(s, 128, axis=1)
    assert np.all(np.abs(back - xf) <= np.abs(xf) * 2.0 ** -4 + np.repeat(s, 128, axis=1) * 2.0 ** -9)


@pytest.mark.parametrize("dt", ["float32", "bfloat16"])
def test_row_and_tensor_quantisers_are_bit_exact_on_the_interpreter(dt):
    M, K = 4, 264
    x, xf = _input(dt, M, K, seed=1)
    x3 = x.reshape(M, K // 8, 8)
    q = np.zeros((M, K), np.uint8)
    s = np.zeros((M,), np.float32)
    tiledsl.jit(Q.make_quantize_rows(dt, False).fn, interpret=True)(x3, q.reshape(M, K // 8, 8), s)
    rq, rs = Q.reference(xf, K)
    np.testing.assert_array_equal(q, rq)
    np.testing.assert_array_equal(s, rs.reshape(-1))
    a = np.zeros(1, np.uint32)
    tiledsl.jit(Q.make_amax(dt, blocks=3).fn, interpret=True)(x3, a)
    assert a.view(np.float32)[0] == np.abs(xf).max()
    q[...] = 0
    s1 = np.zeros((1,), np.float32)
    tiledsl.jit(Q.make_quantize_rows(dt, True).fn, interpret=True)(x3, q.reshape(M, K // 8, 8), s1, a)
    rq, rs = Q.reference(xf, None)
    np.testing.assert_array_equal(q, rq)
    np.testing.assert_array_equal(s1, rs)


@pytest.mark.parametrize("which", ["block", "rows", "tensor", "amax"])
def test_quantisers_assemble_for_sm90a(which):
    M, K = 64, 512
    x = np.zeros((M, K // 8, 8), np.float16)
    q = np.zeros((M, K // 8, 8), np.uint8)
    if which == "block":
        ck = Q.make_quantize_blockwise("float16").compile(x, q, np.zeros((M, K // 128), np.float32), target="sm_90a")
    elif which == "rows":
        ck = Q.make_quantize_rows("float16", False).compile(x, q, np.zeros(M, np.float32), target="sm_90a")
    elif which == "tensor":
        ck = Q.make_quantize_rows("float16", True).compile(x, q, np.zeros(1, np.float32), np.zeros(1, np.uint32),
                                                           target="sm_90a")
    else:
        ck = Q.make_amax("float16").compile(x, np.zeros(1, np.uint32), target="sm_90a")
    ptx = ck.asm["ptx"]
    if which != "amax":
        assert "cvt.rn.satfinite.e4m3x2.f32" in ptx and "st.global.v2.b32" in ptx
    assert "ld.global.v4.b32" in ptx
    r = ptxas(ptx, "sm_90a")
    assert r.returncode == 0, r.stderr


def _scaled_problem(M, N, K, exact, seed=0, E=1):
    """e4m3 operands (small exact values k/8) and blockwise scales: powers of two (exact) or arbitrary; the f64
    reference sum_kb sa[m, kb] sb[n // 128, kb] (a_kb · b_kb)."""
    rng = np.random.default_rng(seed)
    KB, NB = -(-K // 128), -(-N // 128)
    a = rng.integers(-8, 9, (M, K)) / 8
    b = rng.integers(-8, 9, (E, N, K)) / 8
    if exact:
        sa = (2.0 ** rng.integers(-3, 4, (M, KB))).astype(np.float32)
        sb = (2.0 ** rng.integers(-3, 4, (E, NB, KB))).astype(np.float32)
    else:
        sa = rng.uniform(0.01, 2.0, (M, KB)).astype(np.float32)
        sb = rng.uniform(0.01, 2.0, (E, NB, KB)).astype(np.float32)
    return a, b, sa, sb


def _scaled_ref(a, b, sa, sb):
    M, K = a.shape
    N = b.shape[0]
    ref = np.zeros((M, N))
    for kb in range(sa.shape[1]):
        ks = slice(kb * 128, kb * 128 + 128)
        ref += (a[:, ks] @ b[:, ks].T) * sa[:, kb:kb + 1] * np.repeat(sb[:, kb], 128)[:N][None, :]
    return ref


@pytest.mark.parametrize("bn,exact", [(128, True), (256, True), (128, False)],
                         ids=["bn128-exact", "bn256-exact", "bn128-arbitrary-scales"])
def test_dense_blockwise_gemm_on_the_interpreter(bn, exact):
    """M, N ragged (136 x 200), three K blocks, a persistent grid of 2 blocks; scales applied per K block."""
    M, N, K = 136, 200, 384
    a, b, sa, sb = _scaled_problem(M, N, K, exact, seed=bn)
    ref = _scaled_ref(a, b[0], sa, sb[0])
    c = np.full((M, N), -1.0, np.float32)
    k = GK.build("e4m3", "float32", 2, 2, bn, 2, 2, False, True)
    tiledsl.jit(k.fn, interpret=True)(R.encode(R.E4M3, a), R.encode(R.E4M3, b[0]), c, sa, sb)
    if exact:
        np.testing.assert_array_equal(c, ref)
    else:
        assert np.abs(c - ref).max() <= 2e-3 * np.abs(ref).max()


def test_a_scale_after_the_loop_would_not_match():
    """The reference is per K block: one scale after the loop (sa[:, 0] sb[0]) differs, so the test above checks
    where the scales are applied."""
    a, b, sa, sb = _scaled_problem(64, 128, 256, True, seed=4)
    once = (a @ b[0].T) * sa[:, :1] * sb[0, 0, 0]
    assert not np.allclose(once, _scaled_ref(a, b[0], sa, sb[0]))


def test_quantise_then_gemm_is_within_2e3_of_f32():
    """The whole recipe: x and w quantised by the reference quantiser (1 x 128 on x; w per 128 x 128 block as
    its amax), the block-scaled GEMM against the f32 product of the dequantised operands."""
    rng = np.random.default_rng(7)
    M, N, K = 72, 136, 256
    x = rng.standard_normal((M, K)).astype(np.float32)
    w = rng.standard_normal((N, K)).astype(np.float32) * 0.05
    qx, sx = Q.reference(x)
    NB, KB = 2, 2
    wp = np.zeros((NB * 128, K), np.float32)
    wp[:N] = w
    sw = np.abs(wp.reshape(NB, 128, KB, 128)).max(axis=(1, 3)).astype(np.float32) / np.float32(448)
    qw = R.encode(R.E4M3, np.clip(R.round_to(R.E4M3, (wp / np.repeat(np.repeat(sw, 128, 0), 128, 1))
                                             .astype(np.float32).astype(np.float64)), -448, 448))[:N]
    ref = _scaled_ref(R.decode(R.E4M3, qx), R.decode(R.E4M3, qw), sx, sw)
    c = np.zeros((M, N), np.float32)
    tiledsl.jit(GK.build("e4m3", "float32", 2, 1, 128, 2, 2, False, True).fn, interpret=True)(qx, qw, c, sx, sw[None])
    assert np.abs(c - ref).max() <= 2e-3 * np.abs(ref).max()
    assert np.abs(c - x @ w.T).max() <= 0.1 * np.abs(x @ w.T).max()        # and near the unquantised product


@pytest.mark.parametrize("pipelined,counts,K", [(False, [70, 0, 90], 256), (True, [0, 70, 0, 90], 384),
                                               (True, [30, 0, 130], 256)],
                         ids=["waited", "pipelined-3-blocks", "pipelined-2-blocks"])
def test_grouped_blockwise_gemm_on_the_interpreter(pipelined, counts, K):
    """FP8 MoE: experts of 0 tokens (first, middle), per-expert 128 x 128 weight scales; each K block waited for
    before its promotion, or promoted one block behind the tensor cores (`pipelined`)."""
    E, M, N = len(counts), sum(counts), 136
    off = np.cumsum(counts).astype(np.int32)
    a, b, sa, sb = _scaled_problem(M, N, K, True, seed=11, E=E)
    ref = np.zeros((M, N))
    s = 0
    for e, end in enumerate(off):
        ref[s:end] = _scaled_ref(a[s:end], b[e], sa[s:end], sb[e])
        s = end
    c = np.full((M, N), -1.0, np.float32)
    k = GK.build("e4m3", "float32", 2, 1, 128, 2, 2, True, True, max_groups=16, pipelined=pipelined)
    tiledsl.jit(k.fn, interpret=True)(R.encode(R.E4M3, a), R.encode(R.E4M3, b.reshape(E * N, K)), c, off, sa, sb)
    np.testing.assert_array_equal(c, ref)


@pytest.mark.parametrize("kb,consumers", [(1, 1), (2, 2), (3, 1), (5, 1)])
def test_pipelined_promotion_on_the_interpreter(kb, consumers):
    """grouped_kernel's `pipelined` form (the gated path "gemm_fp8_blockwise_pipelined" on CUDA tensors): odd and
    even K block counts (the loop unrolled by two and its tails), ragged M and N, a ring of 2 stages wrapping around
    and a persistent grid of 2 blocks. Exact against the reference with power-of-two scales; with arbitrary scales
    bit for bit the unpipelined kernel's result (the same products promoted in the same order). The interpreter
    faults on a read of a temporary before the wait_group that retires its wgmma."""
    M, N, K = 72, 136, 128 * kb
    e4 = lambda v: R.encode(R.E4M3, v)                                          # noqa: E731
    a, b, sa, sb = _scaled_problem(M, N, K, True, seed=kb)
    c = np.full((M, N), -1.0, np.float32)
    pipe = GK.build("e4m3", "float32", 2, consumers, 128, 2, 2, False, True, pipelined=True)
    tiledsl.jit(pipe.fn, interpret=True)(e4(a), e4(b[0]), c, sa, sb)
    np.testing.assert_array_equal(c, _scaled_ref(a, b[0], sa, sb[0]))
    a, b, sa, sb = _scaled_problem(M, N, K, False, seed=kb)
    waited = np.zeros((M, N), np.float32)
    tiledsl.jit(GK.build("e4m3", "float32", 2, consumers, 128, 2, 2, False, True).fn, interpret=True)(
        e4(a), e4(b[0]), waited, sa, sb)
    tiledsl.jit(pipe.fn, interpret=True)(e4(a), e4(b[0]), c, sa, sb)
    np.testing.assert_array_equal(c, waited)


@pytest.mark.parametrize("grouped,counts,M,N", [(False, None, 136, 300), (True, [0, 70, 0, 90], 160, 264)],
                         ids=["dense", "grouped"])
def test_halved_promotion_on_the_interpreter(grouped, counts, M, N):
    """grouped_kernel's `halves` form (BN = 256 as two m64n128 products, each promoted into its half of the
    accumulator; the gated path "gemm_fp8_blockwise_halves" on CUDA tensors): ragged N (a tile whose second half is
    partly or wholly past N), three K blocks over a ring of 2 stages, a persistent grid of 2 blocks, experts of 0
    tokens. Exact against the reference with power-of-two scales; with arbitrary scales within f32 rounding of the
    BN = 128 kernel's result (the same products, promoted with one rounding (fma) where that kernel rounds twice)."""
    K = 384
    E = len(counts) if grouped else 1
    e4 = lambda v: R.encode(R.E4M3, v)                                          # noqa: E731
    extra = [np.cumsum(counts).astype(np.int32)] if grouped else []
    halves = GK.build("e4m3", "float32", 2, 2, 256, 2, 2, grouped, True, max_groups=16 * grouped, halves=True)
    narrow = GK.build("e4m3", "float32", 2, 2, 128, 2, 2, grouped, True, max_groups=16 * grouped)
    for exact in (True, False):
        a, b, sa, sb = _scaled_problem(M, N, K, exact, seed=5, E=E)
        ws = b.reshape(E * N, K)
        c = np.full((M, N), -1.0, np.float32)
        tiledsl.jit(halves.fn, interpret=True)(e4(a), e4(ws), c, *extra, sa, sb)
        if exact:
            ref = np.zeros((M, N))
            s = 0
            for e, end in enumerate(np.cumsum(counts) if grouped else [M]):
                ref[s:end] = _scaled_ref(a[s:end], b[e], sa[s:end], sb[e])
                s = end
            np.testing.assert_array_equal(c, ref)
        else:
            want = np.zeros((M, N), np.float32)
            tiledsl.jit(narrow.fn, interpret=True)(e4(a), e4(ws), want, *extra, sa, sb)
            assert not np.array_equal(c, want)                      # fma: other bits somewhere
            assert np.abs(c - want).max() <= 1e-6 * np.abs(want).max()


@pytest.mark.parametrize("grouped,counts,M,N,form", [(False, None, 200, 264, "halves"),
                                                     (False, None, 196, 136, "pipelined")],
                         ids=["dense-halves", "dense-pipelined"])
def test_tma_store_matches_the_register_stores(grouped, counts, M, N, form):
    """tma_store on the dense blockwise GEMM: the same bits as the register stores (bf16 out), rows wholly below M
    through the TMA store, a consumer's part crossing M through the masked stores; the grouped blockwise form
    refuses it (it spills)."""
    with pytest.raises(tiledsl.LaunchError, match="grouped blockwise"):
        GK.build("e4m3", "bfloat16", 4, 2, 256, 132, 8, True, True, max_groups=16, halves=True, tma_store=True)
    K = 384
    E = len(counts) if grouped else 1
    e4 = lambda v: R.encode(R.E4M3, v)                                          # noqa: E731
    extra = [np.cumsum(counts).astype(np.int32)] if grouped else []
    bn = 256 if form == "halves" else 128
    kw = dict(max_groups=16 * grouped, halves=form == "halves", pipelined=form == "pipelined")
    a, b, sa, sb = _scaled_problem(M, N, K, False, seed=9, E=E)
    ws = b.reshape(E * N, K)
    got, want = (np.full((M, N), 0x7FC0, np.uint16) for _ in range(2))          # bf16 NaN: what no store reached
    tiledsl.jit(GK.build("e4m3", "bfloat16", 2, 2, bn, 2, 2, grouped, True, tma_store=True, **kw).fn,
                interpret=True)(e4(a), e4(ws), got, *extra, sa, sb, got)
    tiledsl.jit(GK.build("e4m3", "bfloat16", 2, 2, bn, 2, 2, grouped, True, **kw).fn,
                interpret=True)(e4(a), e4(ws), want, *extra, sa, sb)
    np.testing.assert_array_equal(got, want)

def test_halved_promotion_is_gated_and_checked(monkeypatch):
    """CPU tensors take the halved promotion wherever BN = 256 (a config= asks for it); CUDA tensors unless its gate
    is closed (TILEDSL_DISABLE; verified on an H200 in session 36), and then the default tile of wide N is 128 x 256;
    the builder refuses it off the scaled kernel or with the pipelined form."""
    from tiledsl.ops import gates
    from tiledsl.ops.gemm import grouped as G

    class On:
        def __init__(self, cuda):
            self.is_cuda = cuda
    assert gates.GATED[G.HALVES] == "tests/test_gpu_moe.py"
    assert G.halves_promotion(On(False), 256) and not G.halves_promotion(On(False), 128)
    monkeypatch.setenv("TILEDSL_DISABLE", G.HALVES)
    assert not G.halves_promotion(On(True), 256) and G.blockwise_config(On(True), 4096, None)["bn"] == 128
    assert G.blockwise_config(On(False), 4096, None)["bn"] == 128
    monkeypatch.delenv("TILEDSL_DISABLE")
    assert gates.enabled(G.HALVES) and G.halves_promotion(On(True), 256)
    assert G.blockwise_config(On(True), 4096, None)["bn"] == 256
    assert G.blockwise_config(On(True), 1024, None)["bn"] == 128                # narrow N: more tiles
    assert G.blockwise_config(On(True), 4096, {"bn": 128})["bn"] == 128
    with pytest.raises(tiledsl.LaunchError, match="halved"):
        GK.build("e4m3", "bfloat16", 4, 2, 128, 132, 8, False, True, halves=True)
    with pytest.raises(tiledsl.LaunchError, match="halved"):
        GK.build("bfloat16", "bfloat16", 4, 2, 256, 132, 8, True, False, halves=True)


def test_pipelined_promotion_is_gated_on_cuda_tensors(monkeypatch):
    """CPU tensors (the interpreter) always take the pipelined promotion; CUDA tensors unless its gate is
    closed (TILEDSL_DISABLE; before session 34's GPU run: only with TILEDSL_ENABLE); BN = 256 never (it would spill)."""
    from tiledsl.ops import gates
    from tiledsl.ops.gemm import grouped as G

    class On:
        def __init__(self, cuda):
            self.is_cuda = cuda
    assert gates.GATED[G.PIPELINED] == "tests/test_gpu_moe.py"
    monkeypatch.setenv("TILEDSL_DISABLE", G.PIPELINED)
    assert G.pipelined_promotion(On(False), 128) and not G.pipelined_promotion(On(True), 128)
    monkeypatch.delenv("TILEDSL_DISABLE")
    monkeypatch.setenv("TILEDSL_ENABLE", G.PIPELINED)
    assert G.pipelined_promotion(On(True), 128) and not G.pipelined_promotion(On(True), 256)
    with pytest.raises(tiledsl.LaunchError, match="pipelined"):
        GK.build("bfloat16", "bfloat16", 4, 2, 128, 132, 8, True, False, pipelined=True)


_FORMS = [(g, f, False) for f in ("", "pipelined", "halves") for g in (False, True)] + \
    [(False, f, True) for f in ("", "pipelined", "halves")]          # the TMA store: dense only (build refuses grouped)


@pytest.mark.parametrize("grouped,form,tma", _FORMS,
                         ids=[("grouped" if g else "dense") + (f"-{f}" if f else "") + ("-tma-store" if t else "")
                              for g, f, t in _FORMS])
def test_blockwise_gemm_assembles_for_sm90a_without_spills(grouped, form, tma):
    """The host's configurations (BN = 128, two consumers, 4 stages; the halved form at BN = 256), with the
    register stores or the TMA store: no spills, and no wgmma serialised by ptxas (C7514 / C7515: a non-wgmma
    instruction touching an accumulator in flight; the pipelined form keeps two)."""
    M, N, K = 256, 256, 512
    pipelined = form == "pipelined"
    k = GK.build("e4m3", "bfloat16", 4, 2, 256 if form == "halves" else 128, 132, 8, grouped, True,
                 max_groups=256 * grouped, pipelined=pipelined, halves=form == "halves", tma_store=tma)
    args = [np.zeros((M, K), np.uint8), np.zeros((N, K), np.uint8), np.zeros((M, N), np.uint16)]
    if grouped:
        args.append(np.array([M], np.int32))
    args += [np.zeros((M, K // 128), np.float32), np.zeros((1, N // 128, K // 128), np.float32)]
    if tma:
        args.append(args[2])
    ck = k.compile(*args)
    ptx = ck.asm["ptx"]
    assert "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3" in ptx
    assert ("wgmma.wait_group.sync.aligned 1" in ptx) == pipelined
    r = ptxas(ptx, "sm_90a")
    assert r.returncode == 0, r.stderr
    assert "C7514" not in r.stderr and "C7515" not in r.stderr and "C7517" not in r.stderr, r.stderr
    assert ck.metadata.get("spill_stores", 0) == 0 and ck.metadata.get("spill_loads", 0) == 0


def test_host_api_refuses_bad_scales_naming_them():
    torch = pytest.importorskip("torch")
    from tiledsl.ops.gemm.grouped import matmul_fp8_blockwise
    from tiledsl.ops.gemm.quantize import quantize_fp8, quantize_fp8_blockwise
    a = torch.zeros(64, 256).to(torch.float8_e4m3fn)
    b = torch.zeros(192, 256).to(torch.float8_e4m3fn)
    sa, sb = torch.ones(64, 2), torch.ones(2, 2)
    with pytest.raises(tiledsl.LaunchError, match=r"scale_a must be a float32 tensor of shape \(64, 2\)"):
        matmul_fp8_blockwise(a, b, torch.ones(64, 1), sb)
    with pytest.raises(tiledsl.LaunchError, match=r"scale_b must be a float32 tensor of shape \(2, 2\)"):
        matmul_fp8_blockwise(a, b, sa, torch.ones(192, 2))
    with pytest.raises(tiledsl.LaunchError, match="a must be a 2-D torch.float8_e4m3fn"):
        matmul_fp8_blockwise(a.float(), b, sa, sb)
    with pytest.raises(tiledsl.LaunchError, match="sm_90"):
        matmul_fp8_blockwise(a, b, sa, sb)
    with pytest.raises(tiledsl.LaunchError, match="K=100"):
        quantize_fp8_blockwise(torch.zeros(4, 100, device="meta"))
    with pytest.raises(tiledsl.LaunchError, match="granularity"):
        quantize_fp8(torch.zeros(4, 128), granularity="block")


def test_host_api_on_the_interpreter(monkeypatch):
    """matmul_fp8_blockwise and grouped_mm_fp8_blockwise on torch CPU tensors, their kernels on the interpreter: the
    host glue (uint8 views, scale_b as one group, argument order)."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("tiledsl.interpreter.fibers")
    from tiledsl.ops.gemm import grouped as G
    build = G._kernel
    monkeypatch.setattr(G, "_need_sm90", lambda t, what, name="x": None)
    pipelined = []                      # CPU tensors: the pipelined promotion, whatever the gate says
    monkeypatch.setattr(G, "_kernel", lambda *a, **k: pipelined.append(k["pipelined"]) or
                        tiledsl.jit(build(*a, **k).fn, interpret=True))
    small = G.default_config
    monkeypatch.setattr(G, "default_config", lambda N, scaled: dict(small(N, scaled), stages=2, consumers=1))
    a, b, sa, sb = _scaled_problem(72, 136, 256, True, seed=21, E=2)
    ref = _scaled_ref(a, b[0], sa, sb[0])

    def e4m3(v):
        return torch.from_numpy(R.encode(R.E4M3, v)).view(torch.float8_e4m3fn)
    c = G.matmul_fp8_blockwise(e4m3(a), e4m3(b[0]), torch.from_numpy(sa), torch.from_numpy(sb[0]),
                               out_dtype=torch.float32)
    np.testing.assert_array_equal(c.numpy(), ref)
    off = torch.tensor([30, 72], dtype=torch.int32)
    cg = G.grouped_mm_fp8_blockwise(e4m3(a), e4m3(b), off, torch.from_numpy(sa), torch.from_numpy(sb),
                                    out_dtype=torch.float32)
    want = np.concatenate([ref[:30], _scaled_ref(a[30:], b[1], sa[30:], sb[1])])
    np.testing.assert_array_equal(cg.numpy(), want)
    assert pipelined == [True, True]
