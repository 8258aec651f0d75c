"""The warp-specialised Hopper GEMM (tiledsl/ops/gemm/hopper.py) on any machine: it compiles for sm_90a with no target
named, ptxas -arch=sm_90a assembles it without spills, the PTX holds the producer/consumer structure (setmaxnreg,
elect.sync, TMA loads, the full/empty mbarrier ring, wgmma from shared descriptors), and small cases (one 128 x 128
tile over two K tiles; ragged shapes; the ring turning over eight K tiles on the fibered interpreter) run exactly
there. tests/test_gpu_hopper_gemm.py runs it on the H200 against torch."""
import numpy as np
import pytest

from tiledsl.ops.gemm import hopper as H
import tiledsl
from helpers import ptxas

LOAD = "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
STMX4 = "stmatrix.sync.aligned.m8n8.x4.shared.b16"
_HALF = {"float16": "f16", "bfloat16": "bf16", "float32": "f32"}


def _bits(x: np.ndarray, ab: str) -> np.ndarray:
    """Host operands: float16 as it is, bfloat16 as its uint16 bits (the top half of the float32)."""
    if ab == "float16":
        return x.astype(np.float16)
    return (x.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)


def _inputs(M, N, K, ab="float16", seed=0):
    """Small exact values (k/8 for |k| <= 8): every product and partial sum is exact in f32."""
    rng = np.random.default_rng(seed)
    a = rng.integers(-8, 9, (M, K)) / 8
    b = rng.integers(-8, 9, (N, K)) / 8
    return _bits(a, ab), _bits(b, ab), a @ b.T


def _host_out(M, N, out):
    return np.zeros((M, N), {"float16": np.float16, "bfloat16": np.uint16, "float32": np.float32}[out])


def _as_float(c: np.ndarray, out: str) -> np.ndarray:
    if out == "bfloat16":
        return (c.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    return c.astype(np.float64)


# (input, output, configuration, registers at launch, consumer registers after setmaxnreg.inc); the GPU tests
# (tests/test_gpu_hopper_gemm.py) run each of these configurations
COMPILED = [("float16", "float16", {}, 168, H.CONSUMER_REGS), ("bfloat16", "bfloat16", {}, 168, H.CONSUMER_REGS),
            ("float16", "float32", {}, 168, H.CONSUMER_REGS),
            ("float16", "float16", dict(stages=3, consumers=1, bn=64), 248, 248),
            ("float16", "float32", dict(stages=3, consumers=1, bn=64), 248, 248),
            ("float16", "float16", dict(tma_store=True), 168, H.CONSUMER_REGS),
            ("bfloat16", "float32", dict(tma_store=True), 168, H.CONSUMER_REGS),
            ("float16", "float16", dict(stages=3, consumers=1, bn=64, tma_store=True), 248, 248),
            ("float16", "float16", dict(multicast=True), 168, H.CONSUMER_REGS),
            ("bfloat16", "bfloat16", dict(multicast=True, tma_store=True), 168, H.CONSUMER_REGS),
            # the persistent grid (BN 256 first: the benchmark's lead variant), and BN 256 with 4 stages, whose
            # TMA-store epilogue stages C in halves beside the 192 KB ring
            ("float16", "float16", dict(persistent=True, bn=256, tma_store=True), 168, H.CONSUMER_REGS),
            ("bfloat16", "float32", dict(persistent=True, bn=256, tma_store=True), 168, H.CONSUMER_REGS),
            ("float16", "float16", dict(persistent=True, bn=256, tma_store=False), 168, H.CONSUMER_REGS),
            ("float16", "float16", dict(persistent=True, tma_store=True), 168, H.CONSUMER_REGS),
            ("float16", "float16", dict(bn=256, tma_store=True), 168, H.CONSUMER_REGS),
            ("float16", "float16", dict(bn=256, tma_store=False), 168, H.CONSUMER_REGS),
            ("float16", "float16", dict(persistent=True, bn=256, tma_store=True, multicast=True), 168,
             H.CONSUMER_REGS),
            ("bfloat16", "bfloat16", dict(persistent=True, tma_store=False, multicast=True), 168, H.CONSUMER_REGS)]


@pytest.mark.parametrize("ab,out,cfg,cap,regs", COMPILED)
def test_compiles_for_sm90a_and_assembles_without_spills(ab, out, cfg, cap, regs):
    k = H.make_hopper_gemm(ab, out, **cfg)
    a, b, _ = _inputs(256, 256, 512, ab)
    ck = k.compile(a, b, _host_out(256, 256, out))              # no target named: sm_90a (wgmma, setmaxnreg)
    ptx = ck.asm["ptx"]
    assert ".target sm_90a" in ptx
    t = {"float16": "f16", "bfloat16": "bf16"}[ab]
    bn = cfg.get("bn", H.BN)
    n_mma = ptx.count(f"wgmma.mma_async.sync.aligned.m64n{bn}k16.f32.{t}.{t}")
    assert n_mma and n_mma % (H.BK // 16) == 0                  # BK/16 per K tile (LLVM may peel the first)
    # 128B swizzle, SBO 1024 bytes, from the layout: the descriptor's high and low static words
    assert "0x40000040;" in ptx and "0x00010000;" in ptx
    assert f"setmaxnreg.dec.sync.aligned.u32 {H.PRODUCER_REGS};" in ptx
    assert f"setmaxnreg.inc.sync.aligned.u32 {regs};" in ptx
    assert "elect.sync" in ptx and LOAD in ptx
    assert "mbarrier.arrive.expect_tx.shared::cta.b64" in ptx and "mbarrier.try_wait.parity.shared::cta.b64" in ptx
    assert "wgmma.wait_group.sync.aligned 1;" in ptx and "wgmma.wait_group.sync.aligned 0;" in ptx
    assert f".maxnreg {cap}" in ptx
    store = "cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group"
    assert ptx.count(".param .align 64 .b8") == 2 + bool(cfg.get("tma_store"))    # A, B (and C) as tensor maps
    assert (store in ptx) == bool(cfg.get("tma_store"))
    # f16/bf16 C through the TMA store: half2 words by stmatrix.x4 (one per 16 x 16 block), no scalar st.shared
    stm = bool(cfg.get("tma_store")) and out != "float32"
    assert (STMX4 in ptx) == stm and (f"cvt.rn.{_HALF[out]}x2.f32" in ptx if stm else True)
    if stm:
        assert "st.shared.b16" not in ptx and "st.shared.u16" not in ptx
    mc = bool(cfg.get("multicast"))
    # one builder: clusters along the grid's x, persistent or one tile per block
    assert (".reqnctapercluster 2, 1, 1" in ptx) == mc and (".multicast::cluster" in ptx) == mc
    assert ("mbarrier.arrive.shared::cluster.b64" in ptx) == mc
    assert "__local_depot" not in ptx
    r = ptxas(ptx, "sm_90a")
    assert r.returncode == 0, r.stderr
    assert ck.metadata.get("spill_stores", 0) == 0 and ck.metadata.get("spill_loads", 0) == 0
    assert ck.metadata["dynamic_shared"] <= H.SMEM_LIMIT


def test_bn256_with_four_stages_stages_c_in_halves():
    """192 KB of ring leave no room for the 64 KB C tile of two consumers: the epilogue stages 128 columns twice
    (f32: 64 columns four times); with 3 stages the whole tile still fits (the kernel is unchanged)."""
    assert H.epilogue_columns(128, 256, 4, 2, "float16", "float16") == 128
    assert H.epilogue_columns(128, 256, 4, 2, "float16", "float32") == 64
    assert H.epilogue_columns(128, 256, 3, 2, "float16", "float16") == 256
    assert H.epilogue_columns(128, 128, 4, 2, "float16", "float16") == 128


def test_a_named_sm90_target_is_refused_naming_sm90a():
    k = H.make_hopper_gemm("float16")
    a, b, _ = _inputs(128, 128, 128)
    with pytest.raises(tiledsl.CompilationError, match="sm_90a"):
        k.compile(a, b, _host_out(128, 128, "float16"), target="sm_90")


@pytest.mark.parametrize("ab,out", [("float16", "float16"), ("bfloat16", "float32")])
def test_one_tile_on_the_interpreter_matches_numpy(ab, out):
    """One 128 x 128 block tile, K = 128: two K tiles through the ring (within STAGES, see the module's note)."""
    M = N = K = 128
    a, b, ref = _inputs(M, N, K, ab, seed=1)
    c = _host_out(M, N, out)
    tiledsl.jit(H.make_hopper_gemm(ab, out).fn, interpret=True)(a, b, c)
    np.testing.assert_array_equal(_as_float(c, out), ref)


@pytest.mark.parametrize("ab,cfg", [("float16", dict(tma_store=True)),
                                    ("bfloat16", dict(stages=3, consumers=1, bn=64, tma_store=True)),
                                    ("bfloat16", dict(bn=192, tma_store=True, multicast=True)),
                                    ("float16", dict(bn=96, tma_store=True))],
                         ids=["f16-two-consumers", "bf16-one-consumer-bn64", "bf16-multicast-bn192-three-boxes",
                              "f16-bn96-scalar-fallback"])
def test_stmatrix_epilogue_on_the_interpreter(ab, cfg):
    """A half C through the TMA store: the half2 words that stmatrix.x4 writes into the 128-byte swizzled staging
    boxes are exactly where the TMA unit reads them (the store's layout proof and the interpreter's swizzled
    bytes agree with the word view stmatrix addresses); ragged M and N clip at C's edge. A part that is not a
    whole number of 64-column boxes (BN 96) keeps the scalar writes into a row-major buffer."""
    M, N, K = 136, 72, 128
    a, b, ref = _inputs(M, N, K, ab, seed=12)
    c = _host_out(M, N, ab)
    c[...] = 1
    k = H.make_hopper_gemm(ab, ab, **cfg)
    assert (STMX4 in k.compile(a, b, c).asm["ptx"]) == (cfg.get("bn", H.BN) % 64 == 0)
    tiledsl.jit(k.fn, interpret=True)(a, b, c)
    want = ref.astype(np.float16).astype(np.float64) if ab == "float16" else \
        _as_float(_round_bf16(ref), "bfloat16")
    np.testing.assert_array_equal(_as_float(c, ab), want)


def test_two_blocks_of_one_consumer_on_the_interpreter():
    """One consumer warpgroup (BM = 64), BN = 64: a grid of 2 x 2 blocks, each over three K tiles."""
    M, N, K = 128, 128, 192
    a, b, ref = _inputs(M, N, K, seed=2)
    c = _host_out(M, N, "float32")
    k = H.make_hopper_gemm("float16", "float32", stages=3, consumers=1, bn=64)
    tiledsl.jit(k.fn, interpret=True)(a, b, c)
    np.testing.assert_array_equal(c, ref)


def test_the_ring_turns_on_the_fibered_interpreter():
    """Eight K tiles through four stages: the producer waits for released stages, which the interpreter can run
    only with its producer and consumers as fibers (interpreter/fibers.py; without them the wait faults)."""
    pytest.importorskip("tiledsl.interpreter.fibers")
    M, N, K = 128, 128, 512
    a, b, ref = _inputs(M, N, K, seed=3)
    c = _host_out(M, N, "float32")
    tiledsl.jit(H.make_hopper_gemm("float16", "float32").fn, interpret=True)(a, b, c)
    np.testing.assert_array_equal(c, ref)


@pytest.mark.parametrize("tma_store", [False, True], ids=["plain-stores", "tma-store"])
def test_ragged_shapes_on_the_interpreter(tma_store):
    """M, N and the last K tile ragged: the TMA unit's zero fill, and the epilogue's bounds (or the TMA store's
    clipping), keep C exact."""
    M, N, K = 200, 136, 136
    a, b, ref = _inputs(M, N, K, seed=4)
    c = np.full((M, N), -1.0, np.float32)
    tiledsl.jit(H.make_hopper_gemm("float16", "float32", tma_store=tma_store).fn, interpret=True)(a, b, c)
    np.testing.assert_array_equal(c, ref)


@pytest.mark.parametrize("M,N,K,tma_store", [(256, 128, 128, False), (330, 136, 136, True)])
def test_multicast_clusters_on_the_interpreter(M, N, K, tma_store):
    """2-CTA clusters along M, each block loading half of the cluster's B tile and multicasting it to both; 330
    rows make three block rows, rounded up to two clusters (the fourth block's loads are all zero fill)."""
    a, b, ref = _inputs(M, N, K, seed=5)
    c = np.full((M, N), -1.0, np.float32)
    k = H.make_hopper_gemm("float16", "float32", multicast=True, tma_store=tma_store)
    tiledsl.jit(k.fn, interpret=True)(a, b, c)
    np.testing.assert_array_equal(c, ref)


def test_multicast_ring_turns_on_the_fibered_interpreter():
    """Six K tiles through four stages in 2-CTA clusters: a producer refills a stage only after the consumers of
    both blocks released it (remote arrives); a missing release would be the wait's KernelFault."""
    pytest.importorskip("tiledsl.interpreter.fibers")
    M, N, K = 256, 128, 384
    a, b, ref = _inputs(M, N, K, seed=6)
    c = _host_out(M, N, "float32")
    tiledsl.jit(H.make_hopper_gemm("float16", "float32", multicast=True).fn, interpret=True)(a, b, c)
    np.testing.assert_array_equal(c, ref)


@pytest.mark.parametrize("M,N,K,out,cfg", [
    # 2 blocks walk 6 tiles (3 each) over 4 K tiles through 2 stages: the ring turns within and across tiles
    (256, 192, 256, "float32", dict(stages=2, bn=64, tma_store=False)),
    # 12 tiles in groups of 2 tile rows (the last group ragged: 3 tile rows), ragged M, N and K, TMA-store epilogue
    (300, 200, 264, "float32", dict(stages=3, bn=64, tma_store=True, group_m=2)),
    # BN 256 with 4 stages: the epilogue stages each consumer's C tile in halves, per tile; 9 K tiles
    (200, 320, 520, "float16", dict(stages=4, bn=256, tma_store=True)),
    # 2-CTA clusters walking tile pairs (2 clusters of 4 blocks; 330 rows: 3 tile rows, the last pair half zero
    # fill), B multicast, stages released in both blocks, across tiles
    (330, 200, 264, "float32", dict(stages=2, bn=64, tma_store=True, group_m=2, multicast=True)),
    (256, 192, 256, "float32", dict(stages=3, bn=64, tma_store=False, multicast=True)),
    # f16 C through stmatrix: each tile's parts go out during the next tile's first K steps (deferred epilogue);
    # one K tile: both halves of the previous tile at the tile's only K step
    (200, 320, 64, "float16", dict(stages=4, bn=256, tma_store=True, defer_epilogue=True)),
    (330, 200, 264, "float16", dict(stages=2, bn=64, tma_store=True, group_m=2, multicast=True, defer_epilogue=True)),
    # 128 x 192 tiles (three 64-column boxes a part), ragged N
    (256, 400, 192, "float16", dict(stages=4, bn=192, tma_store=True))],
    ids=["plain-stores", "grouped-ragged-tma-store", "bn256-4-stages-halves", "multicast-tma-store",
         "multicast-plain-stores", "deferred-one-k-tile", "deferred-multicast", "bn192"])
def test_persistent_grid_on_the_fibered_interpreter(M, N, K, out, cfg):
    """A persistent grid of 2 blocks (2 clusters of 2 with multicast): each walks its tiles bid, bid + 2, ...
    with the producer's ring index and phase running on across tiles (the next tile's loads overlap this tile's
    epilogue) and the consumers restarting their accumulators with scale_d = 0; exact against numpy (f16 C: the
    exact sums rounded once)."""
    pytest.importorskip("tiledsl.interpreter.fibers")
    a, b, ref = _inputs(M, N, K, seed=7)
    c = _host_out(M, N, out)
    c[...] = 1
    k = H.make_hopper_gemm("float16", out, persistent=True, num_sms=4 if cfg.get("multicast") else 2, **cfg)
    tiledsl.jit(k.fn, interpret=True)(a, b, c)
    want = ref.astype(np.float16 if out == "float16" else np.float32).astype(np.float64)
    np.testing.assert_array_equal(_as_float(c, out), want)


def test_split_epilogue_one_tile_per_block_on_the_interpreter():
    """BN 256, 4 stages, f32 C, not persistent: one tile per block, C staged 64 columns at a time (four parts)."""
    pytest.importorskip("tiledsl.interpreter.fibers")
    M, N, K = 256, 264, 136
    a, b, ref = _inputs(M, N, K, seed=8)
    c = np.full((M, N), -1.0, np.float32)
    tiledsl.jit(H.make_hopper_gemm("float16", "float32", bn=256, tma_store=True).fn, interpret=True)(a, b, c)
    np.testing.assert_array_equal(c, ref)
    c[...] = -1.0                                   # the same with 2-CTA clusters sharing B (330 -> 200 rows)
    tiledsl.jit(H.make_hopper_gemm("float16", "float32", bn=256, tma_store=True, multicast=True).fn,
                interpret=True)(a, b, c)
    np.testing.assert_array_equal(c, ref)


def test_hopper_matmul_refuses_k_that_is_not_a_multiple_of_8():
    torch = pytest.importorskip("torch")
    a = torch.zeros(100, 100, dtype=torch.float16)
    b = torch.zeros(128, 100, dtype=torch.float16)
    with pytest.raises(tiledsl.LaunchError, match="K=100"):
        H.hopper_matmul(a, b)
    with pytest.raises(tiledsl.LaunchError, match=r"\(M, K\) and \(N, K\)"):
        H.hopper_matmul(a, torch.zeros(128, 64, dtype=torch.float16))


def test_main_compiles_without_a_gpu(capsys):
    import hopper_gemm as example           # examples/hopper_gemm.py (tests/conftest.py puts examples/ on the path)
    example.main(["--size", "256"])
    assert "compiled for sm_90a" in capsys.readouterr().out


# ------------------------------------------------------------------ fused epilogues and FP8 (issue 17)

from tiledsl.ops.gemm.epilogue import reference as _activation_ref  # noqa: E402
from wgmma_cases import decode_fp8, fp8_codes  # noqa: E402

# (input, output, configuration) of the fused-epilogue and FP8 kernels the GPU tests run; each compiles here
FUSED = [("float16", "float16", dict(persistent=True, bn=256, tma_store=True, bias="float16")),
         ("float16", "float16", dict(persistent=True, bn=256, tma_store=True, bias="float16", activation="gelu")),
         ("bfloat16", "bfloat16", dict(persistent=True, bn=256, tma_store=True, bias="float32", activation="gelu")),
         ("float16", "float32", dict(persistent=True, bn=256, tma_store=True, bias="float32", activation="silu")),
         ("float16", "float16", dict(persistent=True, bn=256, tma_store=True, activation="relu")),
         ("float16", "float16", dict(persistent=True, bn=256, tma_store=False, bias="float16", activation="gelu")),
         ("bfloat16", "bfloat16", dict(persistent=True, bn=256, tma_store=False, activation="silu")),
         ("float16", "float16", dict(tma_store=True, bias="float16", activation="relu")),
         ("float16", "float16", dict(bias="float32", activation="gelu")),
         ("float16", "float16", dict(persistent=True, multicast=True, bias="float16", activation="gelu")),
         ("float16", "float32", dict(persistent=True, multicast=True, tma_store=True, bias="float32",
                                     activation="gelu"))]
FP8_COMPILED = [("e4m3", "e4m3", "bfloat16", {}), ("e5m2", "e5m2", "bfloat16", {}), ("e4m3", "e5m2", "float16", {}),
                ("e4m3", "e4m3", "float32", {}), ("e4m3", "e4m3", "bfloat16", dict(bias="bfloat16")),
                ("e4m3", "e4m3", "bfloat16", dict(bias="float32", activation="gelu")),
                ("e4m3", "e4m3", "bfloat16", dict(tma_store=False)),
                ("e5m2", "e4m3", "float16", dict(persistent=False, bn=128)),
                ("e4m3", "e4m3", "bfloat16", dict(multicast=True)),
                ("e4m3", "e5m2", "float32", dict(tma_store=False, bias="float32", activation="silu"))]
_NP_OUT = {"float16": np.float16, "bfloat16": np.uint16, "float32": np.float32}


def _assemble(ck):
    ptx = ck.asm["ptx"]
    assert ".target sm_90a" in ptx and "__local_depot" not in ptx
    r = ptxas(ptx, "sm_90a")
    assert r.returncode == 0, r.stderr
    assert ck.metadata.get("spill_stores", 0) == 0 and ck.metadata.get("spill_loads", 0) == 0
    assert ck.metadata["dynamic_shared"] <= H.SMEM_LIMIT
    return ptx


def _assembled_ptx(ab, out, cfg):
    """make_hopper_gemm(ab, out, **cfg) compiled for 256 x 256 x 512 (with a bias of cfg["bias"]'s type when it has
    one) and checked by _assemble."""
    k = H.make_hopper_gemm(ab, out, **cfg)
    a, b, _ = _inputs(256, 256, 512, ab)
    args = [a, b, _host_out(256, 256, out)]
    if cfg.get("bias"):
        args.append(np.zeros(256, _NP_OUT[cfg["bias"]]))
    return _assemble(k.compile(*args))


@pytest.mark.parametrize("ab,out,cfg", FUSED, ids=[f"{a}-{o}-" + "-".join(f"{k}={v}" for k, v in c.items())
                                                    for a, o, c in FUSED])
def test_fused_epilogues_compile_and_assemble_without_spills(ab, out, cfg):
    ptx = _assembled_ptx(ab, out, cfg)
    act = cfg.get("activation")
    assert ("ex2.approx.ftz.f32" in ptx) == (act in ("gelu", "silu"))
    assert ("rcp.approx.ftz.f32" in ptx) == (act in ("gelu", "silu"))
    assert ("max.f32" in ptx) or act != "relu"
    assert (ptx.count(".param .u64") + ptx.count(".param .align 64 .b8")) >= 3 + bool(cfg.get("bias"))


@pytest.mark.parametrize("at,bt,out,cfg", FP8_COMPILED,
                         ids=[f"{a}-{b}-{o}-" + "-".join(f"{k}={v}" for k, v in c.items())
                              for a, b, o, c in FP8_COMPILED])
def test_fp8_compiles_and_assembles_without_spills(at, bt, out, cfg):
    """wgmma m64nNk32 e4m3/e5m2 (mixed too) from the 128-byte swizzled ring, K tiles of 128 bytes, the scales
    read in the kernel; persistent, BN 256, TMA store by default."""
    k = H.make_hopper_gemm_fp8(at, bt, out, **cfg)
    a = np.zeros((256, 512), np.uint8)
    args = [a, a, _host_out(256, 256, out)]
    if cfg.get("bias"):
        args.append(np.zeros(256, _NP_OUT[cfg["bias"]]))
    args += [np.ones(1, np.float32), np.ones(1, np.float32)]
    ptx = _assemble(k.compile(*args))
    bn = cfg.get("bn", 256)
    n_mma = ptx.count(f"wgmma.mma_async.sync.aligned.m64n{bn}k32.f32.{at}.{bt}")
    assert n_mma and n_mma % 4 == 0                             # 128-byte K tiles: four k32 steps each
    assert "0x40000040;" in ptx and "0x00010000;" in ptx       # 128B swizzle, SBO 1024 bytes, as for f16
    assert LOAD in ptx and "elect.sync" in ptx
    store = "cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group"
    assert (store in ptx) == cfg.get("tma_store", True)


def _round_bf16(x):
    """float64 -> bfloat16 bits, round to nearest even through float32 (as cvt.rn.bf16.f32)."""
    b = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    return ((b + 0x7FFF + ((b >> 16) & 1)) >> 16).astype(np.uint16)


@pytest.mark.parametrize("tma_store", [False, True], ids=["plain-stores", "tma-store"])
def test_bias_gelu_on_the_interpreter(tma_store):
    """Ragged M and N (the bias read clamped, its last columns never stored), a persistent grid of 2 blocks over
    4 tiles: the interpreter's bias + gelu (A&S erf, correctly rounded ex2/rcp) within 1e-5 of numpy's erf."""
    pytest.importorskip("tiledsl.interpreter.fibers")
    M, N, K = 130, 72, 128
    a, b, ref = _inputs(M, N, K, seed=9)
    bias = (np.random.default_rng(9).integers(-16, 17, N) / 4).astype(np.float32)
    c = np.full((M, N), -1.0, np.float32)
    k = H.make_hopper_gemm("float16", "float32", stages=2, bn=64, tma_store=tma_store, persistent=True, num_sms=2,
                           bias="float32", activation="gelu")
    tiledsl.jit(k.fn, interpret=True)(a, b, c, bias)
    want = _activation_ref(ref + bias, "gelu")
    np.testing.assert_allclose(c, want, rtol=1e-5, atol=1e-5)


def test_fused_stmatrix_epilogue_on_the_interpreter():
    """bias + relu packed four values at a time into half2 words for stmatrix (f16 C, TMA store): a persistent
    grid of 2 blocks over 4 tiles of BN 64, ragged M and N; exact against numpy rounded once to f16."""
    pytest.importorskip("tiledsl.interpreter.fibers")
    M, N, K = 130, 72, 128
    a, b, ref = _inputs(M, N, K, seed=13)
    bias = (np.random.default_rng(13).integers(-16, 17, N) / 4).astype(np.float16)
    c = np.full((M, N), 1, np.float16)
    k = H.make_hopper_gemm("float16", "float16", stages=2, bn=64, tma_store=True, persistent=True, num_sms=2,
                           bias="float16", activation="relu")
    tiledsl.jit(k.fn, interpret=True)(a, b, c, bias)
    want = np.maximum(ref + bias.astype(np.float64), 0.0).astype(np.float16)
    np.testing.assert_array_equal(c, want)


@pytest.mark.parametrize("act", ["relu", "silu"])
def test_relu_and_silu_on_the_interpreter(act):
    pytest.importorskip("tiledsl.interpreter.fibers")
    M, N, K = 64, 64, 64
    a, b, ref = _inputs(M, N, K, seed=10)
    c = np.zeros((M, N), np.float32)
    k = H.make_hopper_gemm("float16", "float32", stages=2, consumers=1, bn=64, activation=act)
    tiledsl.jit(k.fn, interpret=True)(a, b, c)
    np.testing.assert_allclose(c, _activation_ref(ref, act), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("at,bt,out", [("e4m3", "e4m3", "float32"), ("e5m2", "e4m3", "bfloat16")])
def test_fp8_on_the_interpreter_matches_numpy_exactly(at, bt, out):
    """fp8 bytes whose values are halves up to 3 (every sum exact in f32), K = 256 (two 128-byte K tiles), ragged
    M and N, scales 0.25 and 2 read on the device; f32 C exact, bf16 C the exact value rounded once."""
    pytest.importorskip("tiledsl.interpreter.fibers")
    M, N, K = 100, 72, 256
    rng = np.random.default_rng(11)
    a = rng.choice(fp8_codes(at), (M, K)).astype(np.uint8)
    b = rng.choice(fp8_codes(bt), (N, K)).astype(np.uint8)
    sa, sb = np.array([0.25], np.float32), np.array([2.0], np.float32)
    ref = (decode_fp8(a, at) @ decode_fp8(b, bt).T) * 0.5
    c = _host_out(M, N, out)
    k = H.make_hopper_gemm_fp8(at, bt, out, stages=2, bn=64, num_sms=2)
    tiledsl.jit(k.fn, interpret=True)(a, b, c, sa, sb)
    if out == "float32":
        np.testing.assert_array_equal(c, ref)
    else:
        np.testing.assert_array_equal(c, _round_bf16(ref))


@pytest.mark.parametrize("M,N,sk", [(40, 128, True), (40, 448, 2)], ids=["partial-wave", "last-wave-too"])
def test_fp8_stream_k_on_the_interpreter_matches_numpy_exactly(M, N, sk):
    """FP8 with stream-K: 2 tiles of 64 x 64 (one consumer) over 5 blocks, K = 1280 (10 K tiles of 128 bytes, shares
    of 4: each tile split over 2 or 3 blocks); the finishing block scales the summed f32 partial sums once. With
    stream_k=2, 7 tiles over 5 blocks: all seven shared, 14 K tiles a share. Twice on one workspace (flags and
    ticket counter back at zero)."""
    pytest.importorskip("tiledsl.interpreter.fibers")
    K = 1280
    rng = np.random.default_rng(12)
    a = rng.choice(fp8_codes("e4m3"), (M, K)).astype(np.uint8)
    b = rng.choice(fp8_codes("e4m3"), (N, K)).astype(np.uint8)
    sa, sb = np.array([0.25], np.float32), np.array([2.0], np.float32)
    ref = (decode_fp8(a, "e4m3") @ decode_fp8(b, "e4m3").T) * 0.5
    k = H.make_hopper_gemm_fp8("e4m3", None, "float32", stages=4, bn=64, consumers=1, tma_store=True, num_sms=5,
                               stream_k=sk)
    W, F = np.full(k.slots, np.nan, np.float32), np.zeros(k.flags, np.int32)
    run = tiledsl.jit(k.fn, interpret=True)
    for _ in range(2):
        c = np.ones((M, N), np.float32)
        run(a, b, c, sa, sb, W, F)
        np.testing.assert_array_equal(c, ref)
        assert not F.any()


def test_fp8_make_refuses_half_types():
    with pytest.raises(tiledsl.LaunchError, match="e4m3/e5m2"):
        H.make_hopper_gemm_fp8("float16")
    with pytest.raises(tiledsl.LaunchError, match="activation='tanh'"):
        H.make_hopper_gemm("float16", activation="tanh")


@pytest.mark.gpu
@pytest.mark.parametrize("ab,cfg", [("float16", dict(persistent=True, bn=256, tma_store=True)),
                                    ("bfloat16", dict(persistent=True, bn=256, tma_store=True, bias="float32",
                                                      activation="gelu"))], ids=["f16", "bf16-bias-gelu"])
def test_gpu_sass_of_the_half_tma_store_epilogue_shows_stsm(ab, cfg):
    """On the H200 (where a disassembler comes with the toolkit): the half C staging is written by STSM (the
    stmatrix above), not by 16-bit STS, and leaves through UTMASTG. The PTX side runs everywhere in
    test_compiles_for_sm90a_and_assembles_without_spills / test_fused_epilogues_compile_and_assemble_without_spills."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("the Hopper GEMM needs sm_90 (sm_90a): an H100/H200")
    a, b, _ = _inputs(256, 256, 512, ab)
    args = [a, b, _host_out(256, 256, ab)] + ([np.zeros(256, np.float32)] if cfg.get("bias") else [])
    ck = H.make_hopper_gemm(ab, ab, **cfg).compile(*args)
    sass = ck.asm["sass"]
    if not sass:
        pytest.skip("no cuobjdump/nvdisasm to disassemble with")
    assert "STSM" in sass and "UTMASTG" in sass, sass[:2000]
    assert "STS.U16" not in sass


@pytest.mark.parametrize("M,N,K,out,cfg,sms", [
    # 12 tiles of 128 x 64 over 5 blocks: 2 whole waves (10 tiles), then the last 2 tiles' 10 K steps each split
    # over the 5 blocks in shares of 4 (hopper_gemm_schedule): block 2 publishes tile 11's head and finishes tile 10
    # after adding blocks 0's and 1's partial sums; block 4 finishes tile 11 after blocks 2 and 3; f32 C through
    # plain stores
    (384, 256, 640, "float32", dict(stages=2, bn=64, tma_store=False), 5),
    # f16 C through the stmatrix epilogue and TMA store, ragged M, N and K; 12 tiles over 5 blocks
    (300, 200, 648, "float16", dict(stages=3, bn=64, tma_store=True, group_m=2), 5),
    # BN 256 halves (the staging buffer used twice a tile), 4 tiles over 3 blocks: one tile split three ways
    (256, 512, 768, "float16", dict(stages=4, bn=256, tma_store=True), 3),
    # fewer tiles than blocks (a decode-sized M): 2 tiles of 64 x 128 (one consumer), their 16 K steps over all 6
    # blocks; M and K ragged
    (50, 256, 1000, "float16", dict(stages=4, bn=128, consumers=1, tma_store=True), 6),
    # M = 20: warps 2 and 3 of the one consumer hold rows past M only, and neither publish nor add partial sums
    (20, 256, 1000, "float32", dict(stages=4, bn=128, consumers=1, tma_store=False), 6),
    # stream_k=2: the last whole wave shared too. 12 tiles over 5 blocks: tiles 0-4 whole, the K steps of tiles 5-11
    # (70) in shares of 14, each across one or two tiles; f16 C ragged through the stmatrix epilogue
    (300, 200, 648, "float16", dict(stages=3, bn=64, tma_store=True, group_m=2, stream_k=2), 5),
    # 4 tiles over 3 blocks (one whole wave and one tile): all four tiles shared, 16 K steps a share
    (256, 512, 768, "float16", dict(stages=4, bn=256, tma_store=True, stream_k=2), 3)],
    ids=["f32-plain", "f16-stmatrix-ragged", "bn256-three-way", "fewer-tiles-than-blocks", "rows-past-m",
         "last-wave-too-ragged", "last-wave-too-bn256"])
def test_stream_k_on_the_fibered_interpreter(M, N, K, out, cfg, sms):
    """Stream-K: the tiles past the whole waves are split by K steps over the blocks; the blocks that ran a split
    tile's head (or middle) publish partial sums (workspace row + flag), the block that ran its last K step adds
    them and stores the tile; exact against numpy (sums of k/8 values are exact in any order), flags and the
    ticket counter left at zero."""
    pytest.importorskip("tiledsl.interpreter.fibers")
    a, b, ref = _inputs(M, N, K, seed=8)
    c = _host_out(M, N, out)
    c[...] = 1
    k = H.make_hopper_gemm("float16", out, persistent=True, num_sms=sms, **dict(dict(stream_k=True), **cfg))
    W = np.full(k.slots, np.nan, np.float32)
    F = np.zeros(k.flags, np.int32)
    run = tiledsl.jit(k.fn, interpret=True)
    want = ref.astype(np.float16 if out == "float16" else np.float32).astype(np.float64)
    for _ in range(2):          # the second launch on the same workspace: flags down, tickets from 0 again
        run(a, b, c, W, F)
        np.testing.assert_array_equal(_as_float(c, out), want)
        assert not F.any()
        c[...] = 1


def test_stream_k_workspace_for_host_tensors():
    """The stream-K kernel on CPU torch tensors (the interpreter; what hopper_matmul and matmul's plans launch
    there): workspace makes the pair fresh for a host tensor (device.stream_buffers keeps them per CUDA stream,
    which a host tensor has none of; it used to fail there); 3 tiles of 64 x 64 on 2 blocks: a partial wave."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("tiledsl.interpreter.fibers")
    a, b, ref = _inputs(130, 64, 384, seed=41)
    a, b = torch.from_numpy(a), torch.from_numpy(b)
    k = H.make_hopper_gemm("float16", "float32", stages=2, consumers=1, bn=64, persistent=True, num_sms=2,
                           stream_k=True)
    W, F = H.workspace(k, a)
    assert tuple(W.shape) == tuple(np.atleast_1d(k.slots)) and not F.any() and F.numel() == k.flags
    c = torch.full((130, 64), float("nan"))
    H._launcher(k, a)(a, b, c, W, F)
    np.testing.assert_array_equal(c.numpy(), ref)
    assert not F.any()                         # the launch leaves its flags and ticket counter at zero


def test_stream_k_takes_one_or_two():
    with pytest.raises(tiledsl.LaunchError, match="stream_k=3"):
        H.make_hopper_gemm("float16", "float16", 4, 2, 256, True, False, True, 132, 8, stream_k=3)
    from tiledsl.ops.gemm import hopper_plan as HP
    kw = HP.hopper_kwargs((256, 2, 4, 1, 1, 0, 1, 2), 14336, 2)
    assert kw["stream_k"] == 2 and "last whole wave" in HP.describe_hopper(kw)
    assert HP.hopper_kwargs((256, 2, 4, 1, 1, 0, 1, 1), 14336, 2)["stream_k"] is True


def test_stream_k_refuses_what_it_does_not_combine_with():
    for kw in (dict(persistent=False), dict(persistent=True, multicast=True), dict(persistent=True, bias="float16"),
               dict(persistent=True, activation="relu")):
        with pytest.raises(tiledsl.LaunchError, match="stream_k"):
            H.make_hopper_gemm("float16", "float16", stream_k=True, **kw)


@pytest.mark.parametrize("ab,out", [("float16", "float16"), ("bfloat16", "bfloat16"), ("float16", "float32")])
def test_stream_k_assembles_without_spills(ab, out):
    """The benchmark's stream-K kernel (BN 256, 4 stages, TMA store; f32 C without the deferred epilogue): the
    workspace rows written and read at one base a thread and compile-time offsets, no spills."""
    k = H.make_hopper_gemm(ab, out, 4, 2, 256, True, False, True, 132, 8, stream_k=True)
    a = _host_out(1024, 512, ab)
    ck = k.compile(a, a, _host_out(1024, 1024, out), np.zeros(k.slots, np.float32), np.zeros(k.flags, np.int32),
                   target="sm_90a")
    ptx = ck.asm["ptx"]
    assert "atom.acquire.gpu.global.exch.b32" in ptx and "red.release.gpu.global.add.s32" in ptx
    r = ptxas(ptx, "sm_90a", verbose=True)
    assert r.returncode == 0, r.stderr
    assert "C7518" not in r.stderr and "C7517" not in r.stderr     # no wgmma serialised, no wait injected
    assert ck.metadata.get("spill_stores", 0) == 0 and ck.metadata.get("spill_loads", 0) == 0


def test_stream_k_is_added_only_where_a_short_partial_wave_follows_two_whole_ones():
    from tiledsl.ops.gemm import hopper_plan as HP
    big = (256, 2, 4, 1, 1, 0)
    assert HP.stream_k_helps(big, 4096, 14336)           # 1792 tiles: 13 waves + 0.58
    assert HP.stream_k_helps(big, 8192, 8192)            # 2048 tiles: 15 waves + 0.52
    assert not HP.stream_k_helps(big, 4096, 4096)        # 512 tiles: 3 waves + 0.88
    assert not HP.stream_k_helps(big, 2048, 2048)        # 128 tiles: under one wave
    assert not HP.stream_k_helps((256, 2, 4, 1, 1, 1), 8192, 8192)     # multicast
    assert not HP.stream_k_helps((128, 2, 4, 0, 1, 0), 8192, 8192)     # one tile per block
    assert HP.hopper_kwargs(big + (1, 1), 14336, 2)["stream_k"] is True
    assert "stream-K" in HP.describe_hopper(HP.hopper_kwargs(big + (1, 1), 14336, 2))


def test_deferred_epilogue_refuses_stream_k():
    with pytest.raises(tiledsl.LaunchError, match="defer_epilogue does not combine with stream_k"):
        H.make_hopper_gemm("bfloat16", "bfloat16", 4, 2, 256, True, False, True, 132, 8, stream_k=True,
                           defer_epilogue=True)


@pytest.mark.parametrize("ab,stream_k", [("float16", False), ("bfloat16", False)])
def test_deferred_epilogue_assembles_without_serialising_wgmma(ab, stream_k):
    """defer_epilogue's stores sit between a wgmma's commit and its wait: ptxas must keep the wgmmas asynchronous
    (no C7514/C7517/C7518 warning) and spill nothing."""
    k = H.make_hopper_gemm(ab, ab, 4, 2, 256, True, False, True, 132, 8, stream_k=stream_k, defer_epilogue=True)
    a = _host_out(1024, 512, ab)
    extra = (np.zeros(k.slots, np.float32), np.zeros(k.flags, np.int32)) if stream_k else ()
    ck = k.compile(a, a, _host_out(1024, 1024, ab), *extra, target="sm_90a")
    r = ptxas(ck.asm["ptx"], "sm_90a", verbose=True)
    assert r.returncode == 0, r.stderr
    assert not any(w in r.stderr for w in ("C7514", "C7517", "C7518")), r.stderr
    assert ck.metadata.get("spill_stores", 0) == 0 and ck.metadata.get("spill_loads", 0) == 0
