"""The warp-specialised Hopper GEMM (tiledsl/ops/gemm/hopper.py) on the H200: several sizes and dtypes against
torch.matmul (relative error <= 1e-2; ragged shapes too), each configuration (consumers, stages, plain or TMA-store
epilogue), one tile exactly equal to the interpreter's result, and the SASS shows HGMMA, UTMALDG (and UTMASTG)
with no local-memory traffic, the PTX setmaxnreg. Fused bias + relu/gelu/silu against torch's addmm + the
activation in fp32; FP8 (e4m3/e5m2) against torch._scaled_mm and an fp32 reference (<= 5e-2), QGMMA in its
SASS. tests/test_hopper_gemm.py compiles the same configurations and assembles them with ptxas -arch=sm_90a on
any machine. Split-K (split_k=2, 4) against torch, deterministic, equal to the interpreter, fused and fp8
(tests/test_hopper_gemm_splitk.py runs it on the interpreter)."""
import numpy as np
import pytest

from tiledsl.ops.gemm import hopper as H
import tiledsl

pytestmark = pytest.mark.gpu

CONFIGS = {"default": {}, "one-consumer": dict(stages=3, consumers=1, bn=64),
           "plain-stores": dict(tma_store=False), "tma-store": dict(tma_store=True),
           "one-consumer-tma-store": dict(stages=3, consumers=1, bn=64, tma_store=True),
           "multicast": dict(multicast=True, tma_store=False),
           "multicast-tma-store": dict(multicast=True, tma_store=True),
           "persistent-bn256-tma-store": dict(persistent=True, bn=256, tma_store=True),
           "persistent-bn256-plain-stores": dict(persistent=True, bn=256, tma_store=False),
           "persistent-tma-store": dict(persistent=True, tma_store=True),
           "bn256-4-stages-split-tma-store": dict(bn=256, stages=4, tma_store=True),
           "persistent-bn256-multicast-tma-store": dict(persistent=True, bn=256, tma_store=True, multicast=True),
           "persistent-multicast-plain-stores": dict(persistent=True, tma_store=False, multicast=True),
           "split-k-2-tma-store": dict(split_k=2, tma_store=True),
           "split-k-2-plain-stores": dict(split_k=2, tma_store=False),
           "split-k-4-tma-store": dict(split_k=4, tma_store=True)}


def _hopper():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("the Hopper GEMM needs sm_90 (sm_90a): an H100/H200")
    return torch


def _operands(torch, M, N, K, dt, seed):
    """(a, b, ref, g): a (M, K) and b (N, K) of dtype dt, standard normal, drawn on the GPU from the generator g
    seeded `seed` (returned: a test may draw more from it, e.g. a bias), and ref = a @ b^T in fp32."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    a = torch.randn(M, K, device="cuda", dtype=dt, generator=g)
    b = torch.randn(N, K, device="cuda", dtype=dt, generator=g)
    return a, b, a.float() @ b.float().T, g


def _rel_err(torch, c, ref):
    c = c.float()
    return max(((c - ref).norm() / ref.norm()).item(), ((c - ref).abs().max() / ref.abs().max()).item())


@pytest.mark.parametrize("M,N,K", [(128, 128, 64), (128, 128, 128), (256, 384, 512), (1024, 1024, 1024),
                                   (2048, 1024, 4096), (384, 2048, 832),
                                   # ragged: the TMA unit's zero fill and the epilogue's bounds
                                   (200, 136, 136), (1000, 1500, 776), (4095, 4097, 4096)])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_against_torch(M, N, K, dtype):
    torch = _hopper()
    dt = getattr(torch, dtype)
    a, b, ref, _ = _operands(torch, M, N, K, dt, M + N + K)
    for _ in range(2):                       # the reference launcher (encodes the maps), then the generated one
        c = H.hopper_matmul(a, b)
        torch.cuda.synchronize()
        assert c.dtype == dt and c.shape == (M, N)
        assert _rel_err(torch, c, ref) <= 1e-2
    torch.testing.assert_close(c.float(), torch.matmul(a, b.T).float(), rtol=1e-2, atol=1e-2 * ref.abs().max().item())


@pytest.mark.parametrize("M,N,K", [(330, 136, 520), (1000, 1504, 776), (4096, 4096, 4096)])
@pytest.mark.parametrize("tma_store", [False, True])
def test_multicast_clusters_against_torch(M, N, K, tma_store):
    """2-CTA clusters sharing B through TMA multicast; odd block-row counts leave a block of zero fill."""
    torch = _hopper()
    a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(N, K, device="cuda", dtype=torch.bfloat16)
    for _ in range(2):
        c = H.hopper_matmul(a, b, multicast=True, tma_store=tma_store)
        torch.cuda.synchronize()
        assert _rel_err(torch, c, a.float() @ b.float().T) <= 1e-2


@pytest.mark.parametrize("M,N,K", [(128, 128, 64), (256, 384, 512), (2048, 1024, 4096), (4096, 4096, 4096),
                                   (200, 136, 136), (1000, 1504, 776), (4095, 4097, 4096)])
@pytest.mark.parametrize("bn", [256, 192, 128])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_persistent_against_torch(M, N, K, bn, dtype):
    """The persistent grid (one block per SM, grouped tile order, the ring running across tiles), BN 256 with its
    split TMA-store epilogue where C's rows allow a tensor map (plain stores at N = 4097)."""
    torch = _hopper()
    dt = getattr(torch, dtype)
    a, b, ref, _ = _operands(torch, M, N, K, dt, M + N + K + bn)
    for _ in range(2):
        c = H.hopper_matmul(a, b, persistent=True, bn=bn)
        torch.cuda.synchronize()
        assert c.dtype == dt and c.shape == (M, N)
        assert _rel_err(torch, c, ref) <= 1e-2


@pytest.mark.parametrize("M,N,K", [(128, 128, 64), (2048, 1024, 4096), (4096, 4096, 4096), (1000, 1504, 776),
                                   (4095, 4097, 4096)])
@pytest.mark.parametrize("bn", [256, 128])
def test_persistent_multicast_against_torch(M, N, K, bn):
    """The persistent grid in 2-CTA clusters walking tile pairs, B multicast (odd tile-row counts: zero fill)."""
    torch = _hopper()
    a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(N, K, device="cuda", dtype=torch.bfloat16)
    for _ in range(2):
        c = H.hopper_matmul(a, b, persistent=True, multicast=True, bn=bn)
        torch.cuda.synchronize()
        assert _rel_err(torch, c, a.float() @ b.float().T) <= 1e-2


@pytest.mark.parametrize("num_sms,group_m", [(7, 8), (3, 2), (1, 1), (4, 3)])
@pytest.mark.parametrize("tma_store", [False, True])
@pytest.mark.parametrize("multicast", [False, True])
def test_persistent_small_grids_walk_many_tiles(num_sms, group_m, tma_store, multicast):
    """Few blocks, many tiles each (1000 x 1504 with BN 256: 8 x 6 tiles; ragged M and a ragged last group): the
    ring's phase across tiles and the staging buffer's reuse by the next tile's epilogue (with multicast the grid
    is num_sms rounded down to pairs, at least one cluster)."""
    torch = _hopper()
    M, N, K = 1000, 1504, 776
    a = torch.randn(M, K, device="cuda", dtype=torch.float16)
    b = torch.randn(N, K, device="cuda", dtype=torch.float16)
    k = H.make_hopper_gemm("float16", "float16", bn=256, tma_store=tma_store, persistent=True,
                           num_sms=num_sms, group_m=group_m, multicast=multicast)
    c = torch.full((M, N), float("nan"), device="cuda", dtype=torch.float16)
    k(a, b, c)
    torch.cuda.synchronize()
    assert _rel_err(torch, c, a.float() @ b.float().T) <= 1e-2


@pytest.mark.parametrize("cfg", list(CONFIGS), ids=list(CONFIGS))
@pytest.mark.parametrize("out", ["float16", "float32"])
def test_configurations_and_outputs(cfg, out):
    torch = _hopper()
    M, N, K = 512, 256, 768                  # 12 K tiles: every stage of the ring is refilled several times
    a = torch.randn(M, K, device="cuda", dtype=torch.float16)
    b = torch.randn(N, K, device="cuda", dtype=torch.float16)
    c = H.hopper_matmul(a, b, out_dtype=getattr(torch, out), **CONFIGS[cfg])
    torch.cuda.synchronize()
    assert _rel_err(torch, c, a.float() @ b.float().T) <= 1e-2


def test_one_tile_equals_the_interpreter():
    torch = _hopper()
    from test_hopper_gemm import _inputs
    a, b, ref = _inputs(128, 128, 128, seed=1)
    c = torch.zeros(128, 128, dtype=torch.float16, device="cuda")
    H.make_hopper_gemm("float16")(torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda(), c)
    torch.cuda.synchronize()
    host = np.zeros((128, 128), np.float16)
    tiledsl.jit(H.make_hopper_gemm("float16").fn, interpret=True)(a, b, host)
    np.testing.assert_array_equal(c.cpu().numpy(), host)
    np.testing.assert_array_equal(host.astype(np.float64), ref)


@pytest.mark.parametrize("cfg", list(CONFIGS), ids=list(CONFIGS))
def test_sass_shows_hgmma_utmaldg_and_no_local_memory(cfg):
    _hopper()
    k = H.make_hopper_gemm("float16", "float16", **CONFIGS[cfg])
    a = np.zeros((256, 512), np.float16)
    ck = k.compile(a, a, np.zeros((256, 256), np.float16))      # the device's sm_90, compiled as sm_90a
    ptx = ck.asm["ptx"]
    assert ".target sm_90a" in ptx and "setmaxnreg.dec.sync.aligned.u32" in ptx
    assert "setmaxnreg.inc.sync.aligned.u32" in ptx
    assert ck.metadata.get("spill_stores", 0) == 0 and ck.metadata.get("spill_loads", 0) == 0
    sass = ck.asm["sass"]
    if not sass:
        pytest.skip("no cuobjdump/nvdisasm to disassemble with")
    assert "HGMMA" in sass and "UTMALDG" in sass, sass[:2000]
    assert ("UTMASTG" in sass) == bool(CONFIGS[cfg].get("tma_store"))
    assert "STL" not in sass and "LDL" not in sass


def test_throughput_is_reported():
    """Not a target (the kernel is not tuned yet): the 4096^3 f16 figure, printed for the notes."""
    torch = _hopper()
    n = 4096
    a = torch.randn(n, n, device="cuda", dtype=torch.float16)
    b = torch.randn(n, n, device="cuda", dtype=torch.float16)
    c = H.hopper_matmul(a, b)
    for _ in range(10):       # past the first launches (the native launcher is built after a few): steady state
        H.hopper_matmul(a, b, out=c)
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(10):
        H.hopper_matmul(a, b, out=c)
    end.record()
    torch.cuda.synchronize()
    ms = start.elapsed_time(end) / 10
    print(f"hopper gemm 4096^3 f16: {2 * n ** 3 / ms / 1e9:.0f} TFLOP/s ({ms:.3f} ms)")
    assert _rel_err(torch, c, a.float() @ b.float().T) <= 1e-2


# ------------------------------------------------------------------ fused epilogues and FP8 (issue 17)

def _act_torch(torch, x, activation):
    F = torch.nn.functional
    return {"relu": F.relu, "gelu": F.gelu, "silu": F.silu, None: lambda v: v}[activation](x)


EPILOGUES = [(None, True), ("relu", False), ("gelu", True), ("silu", True), ("gelu", False)]


@pytest.mark.parametrize("M,N,K", [(4096, 4096, 4096), (4095, 4097, 4096), (1000, 1504, 776)])
@pytest.mark.parametrize("activation,with_bias", EPILOGUES)
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_fused_epilogues_against_torch(M, N, K, activation, with_bias, dtype):
    """act(a @ b.T + bias) against torch's addmm + relu/gelu/silu in fp32, the persistent BN 256 kernel (TMA
    store where C's rows allow it: plain stores at N = 4097, the bias read clamped at the ragged edge)."""
    torch = _hopper()
    dt = getattr(torch, dtype)
    a, b, ref, g = _operands(torch, M, N, K, dt, M + N + K)
    bias = (torch.randn(N, device="cuda", dtype=dt, generator=g) * 8) if with_bias else None
    if with_bias:
        ref = torch.addmm(bias.float(), a.float(), b.float().T)
    ref = _act_torch(torch, ref, activation)
    for _ in range(2):
        c = H.hopper_matmul(a, b, bias=bias, activation=activation, persistent=True, bn=256)
        torch.cuda.synchronize()
        assert c.dtype == dt and c.shape == (M, N)
        assert _rel_err(torch, c, ref) <= 1e-2


@pytest.mark.parametrize("cfg", [dict(), dict(persistent=True, bn=256, tma_store=False), dict(tma_store=True),
                                 dict(persistent=True, multicast=True)],
                         ids=["one-tile-plain", "persistent-plain", "one-tile-tma", "persistent-multicast"])
@pytest.mark.parametrize("bias_dtype", ["float32", "same", "bfloat16"])
@pytest.mark.parametrize("out", ["float16", "float32"])
def test_bias_gelu_configurations(cfg, bias_dtype, out):
    """Every store path with a bias of the output's dtype or float32 and gelu, f16 / f32 C (a bf16 bias is
    converted to float32 on the host)."""
    torch = _hopper()
    M, N, K = 512, 264, 768
    a = torch.randn(M, K, device="cuda", dtype=torch.float16)
    b = torch.randn(N, K, device="cuda", dtype=torch.float16)
    odt = getattr(torch, out)
    bias = torch.randn(N, device="cuda", dtype=odt if bias_dtype == "same" else getattr(torch, bias_dtype))
    c = H.hopper_matmul(a, b, out_dtype=odt, bias=bias, activation="gelu", **cfg)
    torch.cuda.synchronize()
    ref = torch.nn.functional.gelu(torch.addmm(bias.float(), a.float(), b.float().T))
    assert _rel_err(torch, c, ref) <= 1e-2


def _fp8_inputs(torch, M, N, K, at="e4m3", bt="e4m3", seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    ta = {"e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}
    a = (torch.randn(M, K, device="cuda", generator=g) * 2).to(ta[at])
    b = (torch.randn(N, K, device="cuda", generator=g) * 2).to(ta[bt])
    sa = torch.tensor(0.5, device="cuda", dtype=torch.float32)
    sb = torch.tensor(0.25, device="cuda", dtype=torch.float32)
    return a, b, sa, sb, (a.float() @ b.float().T) * 0.125


@pytest.mark.parametrize("M,N,K", [(4096, 4096, 4096), (1024, 1024, 1024)])
@pytest.mark.parametrize("at,bt", [("e4m3", "e4m3"), ("e5m2", "e5m2"), ("e4m3", "e5m2")])
def test_fp8_against_scaled_mm_and_fp32(M, N, K, at, bt):
    """hopper_matmul_fp8 (persistent, BN 256, TMA store) against torch._scaled_mm and an fp32 reference of the
    fp8 values, relative error <= 5e-2; the scales stay on the device."""
    torch = _hopper()
    a, b, sa, sb, ref = _fp8_inputs(torch, M, N, K, at, bt, seed=M + K)
    for _ in range(2):
        c = H.hopper_matmul_fp8(a, b, sa, sb)
        torch.cuda.synchronize()
        assert c.dtype == torch.bfloat16 and c.shape == (M, N)
        assert _rel_err(torch, c, ref) <= 5e-2
    if (at, bt) != ("e5m2", "e5m2"):       # _scaled_mm takes no e5m2 x e5m2
        want = torch._scaled_mm(a, b.T, sa, sb, out_dtype=torch.bfloat16)
        assert _rel_err(torch, c, want.float()) <= 5e-2


@pytest.mark.parametrize("M,N,K", [(4095, 4097, 4096), (1000, 1504, 784), (200, 136, 144)])
@pytest.mark.parametrize("out", ["bfloat16", "float16", "float32"])
def test_fp8_ragged_against_fp32(M, N, K, out):
    """Ragged M and N (TMA zero fill, plain stores where C's rows are not 16-byte multiples), K a multiple of 16."""
    torch = _hopper()
    a, b, sa, sb, ref = _fp8_inputs(torch, M, N, K, seed=M + N)
    c = H.hopper_matmul_fp8(a, b, sa, sb, out_dtype=getattr(torch, out))
    torch.cuda.synchronize()
    assert _rel_err(torch, c, ref) <= 5e-2


@pytest.mark.parametrize("M,N,K,cfg", [(1, 4096, 4096, dict(bn=128, consumers=1, stages=8)),
                                       (128, 11008, 4096, dict(bn=256, consumers=1, stages=4)),
                                       (3000, 3000, 3072, dict(bn=256, consumers=2, stages=4)),
                                       (1536, 1536, 4096, dict(bn=192, consumers=2, stages=4)),
                                       (4096, 14336, 4096, dict(bn=256, consumers=2, stages=4))])
@pytest.mark.parametrize("out", ["bfloat16", "float32"])
@pytest.mark.parametrize("sk", [True, 2])
def test_fp8_stream_k_against_fp32(M, N, K, cfg, out, sk):
    """FP8 with stream-K (every SM's block, the split tiles' partial sums scaled once by their finisher; sk = 2: the
    last whole wave shared too): right against fp32 twice on one workspace, the flags and ticket counter back at
    zero."""
    torch = _hopper()
    a, b, sa, sb, ref = _fp8_inputs(torch, M, N, K, seed=M + N + 7)
    for _ in range(2):
        c = H.hopper_matmul_fp8(a, b, sa, sb, out_dtype=getattr(torch, out), persistent=True, stream_k=sk, **cfg)
        torch.cuda.synchronize()
        assert _rel_err(torch, c, ref) <= 5e-2
    k = H.make_hopper_gemm_fp8("e4m3", None, out, persistent=True, stream_k=sk, num_sms=H.sm_count(a),
                               tma_store=(N * (4 if out == "float32" else 2)) % 16 == 0, **cfg)
    assert not H.workspace(k, a)[1].any().item()


@pytest.mark.parametrize("activation", [None, "gelu"])
def test_fp8_with_bias_and_activation(activation):
    torch = _hopper()
    M, N, K = 1024, 1024, 1024
    a, b, sa, sb, ref = _fp8_inputs(torch, M, N, K, seed=3)
    bias = torch.randn(N, device="cuda", dtype=torch.bfloat16) * 4
    c = H.hopper_matmul_fp8(a, b, sa, sb, bias=bias, activation=activation)
    torch.cuda.synchronize()
    assert _rel_err(torch, c, _act_torch(torch, ref + bias.float(), activation)) <= 5e-2


@pytest.mark.parametrize("cfg", [dict(), dict(tma_store=False), dict(persistent=False, bn=128),
                                 dict(multicast=True)], ids=["default", "plain-stores", "one-tile-bn128", "multicast"])
def test_fp8_configurations(cfg):
    torch = _hopper()
    a, b, sa, sb, ref = _fp8_inputs(torch, 512, 256, 768, seed=5)
    c = H.hopper_matmul_fp8(a, b, sa, sb, **cfg)
    torch.cuda.synchronize()
    assert _rel_err(torch, c, ref) <= 5e-2


def test_fp8_small_equals_the_interpreter():
    """Halves up to 2 (every K = 128 sum within the tensor cores' fp8 accumulation precision): GPU and
    interpreter agree bit for bit, f32 C."""
    torch = _hopper()
    from wgmma_cases import fp8_codes
    rng = np.random.default_rng(12)
    M, N, K = 128, 256, 128
    a = rng.choice(fp8_codes("e4m3", hi=2.0), (M, K)).astype(np.uint8)
    b = rng.choice(fp8_codes("e4m3", hi=2.0), (N, K)).astype(np.uint8)
    sa, sb = np.array([0.5], np.float32), np.array([4.0], np.float32)
    k = H.make_hopper_gemm_fp8("e4m3", "e4m3", "float32")
    c = torch.zeros(M, N, dtype=torch.float32, device="cuda")
    k(*(torch.from_numpy(x).cuda() for x in (a, b)), c, *(torch.from_numpy(x).cuda() for x in (sa, sb)))
    torch.cuda.synchronize()
    host = np.zeros((M, N), np.float32)
    tiledsl.jit(k.fn, interpret=True)(a, b, host, sa, sb)
    np.testing.assert_array_equal(c.cpu().numpy(), host)


@pytest.mark.parametrize("at,bt,out", [("e4m3", "e4m3", "bfloat16"), ("e5m2", "e4m3", "float32")])
def test_fp8_sass_shows_qgmma_utmaldg_and_no_local_memory(at, bt, out):
    _hopper()
    k = H.make_hopper_gemm_fp8(at, bt, out)
    a = np.zeros((256, 512), np.uint8)
    od = {"bfloat16": np.uint16, "float32": np.float32}[out]
    ck = k.compile(a, a, np.zeros((256, 256), od), np.ones(1, np.float32), np.ones(1, np.float32))
    assert ck.metadata.get("spill_stores", 0) == 0 and ck.metadata.get("spill_loads", 0) == 0
    sass = ck.asm["sass"]
    if not sass:
        pytest.skip("no cuobjdump/nvdisasm to disassemble with")
    assert "QGMMA" in sass and "UTMALDG" in sass and "UTMASTG" in sass, sass[:2000]
    assert "STL" not in sass and "LDL" not in sass


# The gelu/silu epilogues once had a small stack frame on the H200: nvJitLink's relocatable compile, gone with ptxas
@pytest.mark.parametrize("activation", ["gelu", "silu"])
def test_fused_sass_has_no_local_memory(activation):
    _hopper()
    k = H.make_hopper_gemm("float16", "float16", persistent=True, bn=256, tma_store=True, bias="float16",
                           activation=activation)
    a = np.zeros((256, 512), np.float16)
    ck = k.compile(a, a, np.zeros((256, 256), np.float16), np.zeros(256, np.float16))
    assert ck.metadata.get("spill_stores", 0) == 0 and ck.metadata.get("stack_frame", 0) == 0, ck.metadata
    sass = ck.asm["sass"]
    if not sass:
        pytest.skip("no cuobjdump/nvdisasm to disassemble with")
    assert "HGMMA" in sass and "MUFU.EX2" in sass and "STL" not in sass and "LDL" not in sass


# ------------------------------------------------------------------ split-K (issue 17: small shapes)

@pytest.mark.parametrize("M,N,K", [(1024, 1024, 1024), (512, 512, 512), (2048, 2048, 2048), (128, 128, 64),
                                   (200, 136, 136), (1000, 1504, 776), (4095, 4097, 4096)])
@pytest.mark.parametrize("split_k", [2, 4])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_split_k_against_torch(M, N, K, split_k, dtype):
    """128 x 128 tiles whose K loop 2 or 4 blocks of a cluster share (K = 64: ranks without K tiles), each block
    finishing its columns; deterministic: a second run is bit for bit the first."""
    torch = _hopper()
    dt = getattr(torch, dtype)
    a, b, ref, _ = _operands(torch, M, N, K, dt, M + N + K)
    first = H.hopper_matmul(a, b, split_k=split_k)
    again = H.hopper_matmul(a, b, split_k=split_k)
    torch.cuda.synchronize()
    assert first.dtype == dt and first.shape == (M, N)
    assert _rel_err(torch, first, ref) <= 1e-2
    assert torch.equal(first, again)


def test_split_k_equals_the_interpreter():
    """Small exact inputs (every sum exact in f32), f32 C, two K tiles per rank: the GPU and the interpreter agree
    bit for bit."""
    torch = _hopper()
    from test_hopper_gemm import _inputs
    a, b, ref = _inputs(256, 128, 256, seed=4)
    k = H.make_hopper_gemm("float16", "float32", split_k=2, tma_store=True)
    c = torch.zeros(256, 128, dtype=torch.float32, device="cuda")
    k(torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda(), c)
    torch.cuda.synchronize()
    host = np.zeros((256, 128), np.float32)
    tiledsl.jit(k.fn, interpret=True)(a, b, host)
    np.testing.assert_array_equal(c.cpu().numpy(), host)
    np.testing.assert_array_equal(host, ref)


@pytest.mark.parametrize("tma_store", [False, True])
def test_split_k_bias_gelu_and_fp8(tma_store):
    """The fused epilogue (bias + gelu) and the fp8 kernel (scales read on the device) with split_k=2."""
    torch = _hopper()
    M, N, K = 1000, 1504, 776
    a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(N, K, device="cuda", dtype=torch.bfloat16)
    bias = torch.randn(N, device="cuda", dtype=torch.float32) * 4
    c = H.hopper_matmul(a, b, bias=bias, activation="gelu", split_k=2, tma_store=tma_store)
    torch.cuda.synchronize()
    ref = torch.nn.functional.gelu(torch.addmm(bias, a.float(), b.float().T))
    assert _rel_err(torch, c, ref) <= 1e-2
    a8, b8, sa, sb, ref8 = _fp8_inputs(torch, 1024, 1024, 1024, seed=6)
    c8 = H.hopper_matmul_fp8(a8, b8, sa, sb, persistent=False, bn=128, split_k=2, tma_store=tma_store)
    torch.cuda.synchronize()
    assert _rel_err(torch, c8, ref8) <= 5e-2


def test_split_k_throughput_is_reported():
    """Not asserted (the lead's benchmark is benchmarks/gemm.py): 1024^3 f16, split_k=2 against cuBLAS, printed."""
    torch = _hopper()
    n = 1024
    a = torch.randn(n, n, device="cuda", dtype=torch.float16)
    b = torch.randn(n, n, device="cuda", dtype=torch.float16)
    c = torch.empty(n, n, device="cuda", dtype=torch.float16)
    runs = {"split_k=2": lambda: H.hopper_matmul(a, b, out=c, split_k=2),
            "64x128 one consumer": lambda: H.hopper_matmul(a, b, out=c, consumers=1, bn=128, tma_store=True),
            "cuBLAS": lambda: torch.matmul(a, b.T, out=c)}
    for name, run in runs.items():
        for _ in range(10):
            run()
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(50):
            run()
        end.record()
        torch.cuda.synchronize()
        ms = start.elapsed_time(end) / 50
        print(f"1024^3 f16 {name}: {2 * n ** 3 / ms / 1e9:.0f} TFLOP/s ({ms * 1e3:.1f} us, back to back)")


# ------------------------------------------------------------------ stream-K (issue 17: the partial last wave)

@pytest.mark.parametrize("M,N,K,cfg", [
    # 1792 tiles of 128 x 256 over 132 blocks: the benchmark's LLM shape (13 waves + 0.58)
    (4096, 14336, 4096, dict(bn=256, stages=4)),
    # small grids: many tiles split two and three ways, ragged M, N, short and long K loops
    (1000, 1504, 776, dict(bn=128, num_sms=7)), (4095, 4097, 4096, dict(bn=256, stages=4, num_sms=20)),
    (640, 512, 64, dict(bn=256, stages=4, num_sms=3)), (1536, 1536, 2048, dict(bn=128, num_sms=5)),
    # issue 31's hang: 4096 tiles = 31 waves + 4 tiles of 16 K steps, fewer K steps than blocks (the old walk left
    # shares empty and waited for them); and a partial wave of one tile of one K step
    (16384, 8192, 1024, dict(bn=256, stages=4)), (2176, 512, 64, dict(bn=256, stages=4, num_sms=8)),
    # fewer tiles than SMs (decode-sized M): every SM's block shares the tiles' K steps
    (1, 4096, 4096, dict(bn=128, consumers=1, stages=8)), (64, 14336, 4096, dict(bn=256, consumers=1, stages=4)),
    (37, 1000, 3000, dict(bn=128, consumers=1, stages=8)),
    # 128 x 160 tiles at 4000^3: 800 tiles, 6 waves + 8 tiles (stream_k=2: 140 tiles over 132 blocks)
    (4000, 4000, 4000, dict(bn=160, stages=4))])
@pytest.mark.parametrize("dtype,out", [("float16", None), ("bfloat16", None), ("float16", "float32")])
@pytest.mark.parametrize("sk", [1, 2])
def test_stream_k_against_torch(M, N, K, cfg, dtype, out, sk):
    """The persistent grid with stream-K (sk = 2: the last whole wave shared too): right against fp32 at every
    shape, and the workspace flags left down for the next launch (a second launch gives the same bits)."""
    torch = _hopper()
    dt = getattr(torch, dtype)
    a, b, ref, _ = _operands(torch, M, N, K, dt, M + N + K + 1)
    od = getattr(torch, out) if out else dt
    cfg = dict(cfg)
    k = H.make_hopper_gemm(dtype, out or dtype, persistent=True, tma_store=(N * (4 if out else 2)) % 16 == 0,
                           stream_k=sk, num_sms=cfg.pop("num_sms", 132), **cfg)
    W, F = H.workspace(k, a)
    first = torch.empty(M, N, device="cuda", dtype=od)
    again = torch.empty(M, N, device="cuda", dtype=od)
    k(a, b, first, W, F)
    k(a, b, again, W, F)
    torch.cuda.synchronize()
    assert _rel_err(torch, first, ref) <= 1e-2
    assert torch.equal(first, again)
    assert not F.any().item()


def test_matmul_takes_stream_k_at_the_llm_shape():
    from tiledsl.ops.gemm import matmul as MM
    torch = _hopper()
    if torch.cuda.get_device_properties(0).multi_processor_count != 132:
        pytest.skip("the shape's waves are counted for 132 SMs")
    a, b, ref, _ = _operands(torch, 4096, 14336, 4096, torch.float16, 5)
    c = MM.matmul(a, b, config=None, tune=False)
    torch.cuda.synchronize()
    assert "stream-K" in MM.plan_of(a, b, c, tune=False).describe
    assert _rel_err(torch, c, ref) <= 1e-2


@pytest.mark.parametrize("tune", [False, True])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_the_shape_that_hung_returns_the_product(tune, dtype):
    """Issue 31: matmul(a (16384, 1024), b (8192, 1024)) never returned (stream-K waiting for a block with no K
    steps). Now it returns the product, tuned or not, twice (the workspace left ready)."""
    from tiledsl.ops.gemm import matmul as MM
    torch = _hopper()
    a, b, ref, _ = _operands(torch, 16384, 8192, 1024, getattr(torch, dtype), 31)
    for _ in range(2):
        c = MM.matmul(a, b, tune=tune)
        torch.cuda.synchronize()
        assert _rel_err(torch, c, ref) <= 1e-2
