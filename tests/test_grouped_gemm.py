"""The grouped Hopper GEMM (tiledsl/ops/gemm/grouped_kernel.py, grouped.py) on any machine: it compiles for sm_90a
and ptxas assembles it without spills; on the fibered interpreter a persistent grid of two blocks walks ragged
groups (an expert of 0 tokens first, in the middle and last; counts that are not tile multiples; a ragged N and K)
exactly against a per-expert numpy loop; offsets that end before T leave the rows past the end alone; offsets that
are not monotone are clamped on the device (nothing written outside the clamped groups); the walk's host replay
covers every tile once; the host API refuses bad arguments naming them. tests/test_gpu_moe.py runs it on the H200."""
import numpy as np
import pytest

import tiledsl
from helpers import ptxas
from tiledsl.ops.gemm import grouped_kernel as GK

WGMMA = "wgmma.mma_async.sync.aligned.m64n{bn}k16.f32.{t}.{t}"
_T = {"float16": "f16", "bfloat16": "bf16"}


def _bits(x, ab):
    if ab == "float16":
        return x.astype(np.float16)
    return (x.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)


def _as_float(c, out):
    if out == "bfloat16":
        return (c.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    return c.astype(np.float64)


def _round(ref, out):
    """The exact f64 sums rounded once to the output type (what the kernel's one conversion gives)."""
    if out == "float16":
        return ref.astype(np.float16).astype(np.float64)
    if out == "bfloat16":
        from tiledsl.interpreter import rounding as R
        return R.round_to(R.BF16, ref)
    return ref.astype(np.float32).astype(np.float64)


def _problem(counts, N, K, seed=0):
    """Small exact values (k/8): every product and partial sum is exact in f32. Returns x (T, K), w (E, N, K),
    offsets (E,) int32 and the per-expert reference (T, N)."""
    rng = np.random.default_rng(seed)
    off = np.cumsum(counts).astype(np.int32)
    Tn = int(off[-1]) if len(off) else 0
    x = rng.integers(-8, 9, (Tn, K)) / 8
    w = rng.integers(-8, 9, (len(counts), N, K)) / 8
    ref = np.zeros((Tn, N))
    s = 0
    for e, end in enumerate(off):
        ref[s:end] = x[s:end] @ w[e].T
        s = end
    return x, w, off, ref


def _host_out(Tn, N, out, fill=1.0):
    c = np.full((Tn, N), fill, {"float16": np.float16, "bfloat16": np.float32, "float32": np.float32}[out])
    return _bits(c, out) if out == "bfloat16" else c


# (operand dtype, output dtype, configuration): the default tile (128 x 256, 4 stages) and the narrow one
COMPILED = [("bfloat16", "bfloat16", dict(stages=4, consumers=2, bn=256)),
            ("float16", "float16", dict(stages=4, consumers=2, bn=128)),
            ("bfloat16", "float32", dict(stages=4, consumers=2, bn=128))]


@pytest.mark.parametrize("ab,out,cfg", COMPILED, ids=["bf16-bn256", "f16-bn128", "bf16-f32-out"])
def test_compiles_for_sm90a_and_assembles_without_spills(ab, out, cfg):
    k = GK.build(ab, out, cfg["stages"], cfg["consumers"], cfg["bn"], 132, GK.GROUP_M, True, False, max_groups=256)
    x, w, off, _ = _problem([50, 0, 150], 256, 256)
    E, N, K = w.shape
    ck = k.compile(_bits(x, ab), _bits(w.reshape(E * N, K), ab), _host_out(200, N, out), off)
    ptx = ck.asm["ptx"]
    assert ".target sm_90a" in ptx
    assert WGMMA.format(bn=cfg["bn"], t=_T[ab]) in ptx
    assert "setmaxnreg.dec.sync.aligned.u32" in ptx and "elect.sync" in ptx
    assert "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes" in ptx
    assert "__local_depot" not in ptx
    r = ptxas(ptx, "sm_90a")
    assert r.returncode == 0, r.stderr
    assert "C7515" not in r.stderr                  # no wgmma serialised (only wgmma defines the accumulators)
    assert ck.metadata.get("spill_stores", 0) == 0 and ck.metadata.get("spill_loads", 0) == 0


def test_k_grouped_form_compiles_without_serialised_wgmma():
    k = GK.build("bfloat16", "bfloat16", 4, 2, 256, 132, GK.GROUP_M, True, False, kgrouped=True, max_groups=16)
    ck = k.compile(np.zeros((256, 512), np.uint16), np.zeros((512, 512), np.uint16),
                   np.zeros((4 * 256, 512), np.uint16), np.array([100, 100, 300, 512], np.int32))
    ptx = ck.asm["ptx"]
    assert "fence.proxy.async.shared::cta" in ptx and "bar.sync" in ptx
    r = ptxas(ptx, "sm_90a")
    assert r.returncode == 0, r.stderr
    assert "C7515" not in r.stderr
    assert ck.metadata.get("spill_stores", 0) == 0 and ck.metadata.get("spill_loads", 0) == 0


@pytest.mark.parametrize("counts,ab,out,cfg", [([50, 0, 70, 20], "float16", "float32", (2, 1, 64)),
                                               ([0, 77, 60], "bfloat16", "bfloat16", (3, 2, 128)),
                                               ([13, 3, 0, 61, 9, 85], "bfloat16", "float32", (2, 2, 128))],
                         ids=["f16-f32-zero-middle", "bf16-zero-first", "bf16-small-unaligned-groups"])
def test_k_grouped_weight_gradient_on_the_interpreter(counts, ab, out, cfg):
    """dW[e] = dY_eᵀ X_e: each group's tokens are the reduction; the tokens are the maps' innermost dimension, so
    a group's K tiles start at its first token rounded down to a multiple of 8 (16 bytes: the interpreter faults on
    an unaligned innermost TMA coordinate, as the H200 does with an illegal instruction), the previous group's
    tokens heading the first K tile and the next group's past the end of the last one zeroed in A's stage before
    the wgmma (a group of 3 tokens inside one 8-token span too); a group of 0 tokens stores zeros; the token
    dimension padded to a multiple of 8 with zeros."""
    pytest.importorskip("tiledsl.interpreter.fibers")
    rng = np.random.default_rng(len(counts))
    off = np.cumsum(counts).astype(np.int32)
    Tn, E, M, N = int(off[-1]), len(counts), 72, 136
    dy = rng.integers(-8, 9, (Tn, M)) / 8
    x = rng.integers(-8, 9, (Tn, N)) / 8
    ref = np.zeros((E, M, N))
    s = 0
    for e in range(E):
        ref[e] = dy[s:off[e]].T @ x[s:off[e]]
        s = off[e]
    Tp = -(-Tn // 8) * 8
    A = np.zeros((M, Tp))
    A[:, :Tn] = dy.T
    B = np.zeros((N, Tp))
    B[:, :Tn] = x.T
    c = _host_out(E * M, N, out, fill=-1.0)
    stages, consumers, bn = cfg
    k = GK.build(ab, out, stages, consumers, bn, 2, 2, True, False, kgrouped=True, max_groups=16 * (ab == "bfloat16"))
    tiledsl.jit(k.fn, interpret=True)(_bits(A, ab), _bits(B, ab), c, off)
    np.testing.assert_array_equal(_as_float(c, out).reshape(E, M, N), _round(ref, out))


@pytest.mark.parametrize("cfg", [(2, 1, 64), (3, 2, 128)], ids=["bn64", "bn128-two-consumers"])
def test_transposed_weights_on_the_interpreter(cfg):
    """dx_e = dy_e @ w[e] with w (E, K, N) read as stored: BN / 64 TMA boxes of 64 columns, wgmma's transposed B;
    ragged N, an expert of 0 tokens."""
    pytest.importorskip("tiledsl.interpreter.fibers")
    counts = [50, 0, 70, 20]
    rng = np.random.default_rng(cfg[2])
    off = np.cumsum(counts).astype(np.int32)
    Tn, E, K, N = int(off[-1]), len(counts), 128, 136
    dy = rng.integers(-8, 9, (Tn, K)) / 8
    w = rng.integers(-8, 9, (E, K, N)) / 8
    ref = np.zeros((Tn, N))
    s = 0
    for e in range(E):
        ref[s:off[e]] = dy[s:off[e]] @ w[e]
        s = off[e]
    c = np.full((Tn, N), -1.0, np.float32)
    k = GK.build("float16", "float32", cfg[0], cfg[1], cfg[2], 2, 2, True, False, max_groups=16, trans_w=True)
    tiledsl.jit(k.fn, interpret=True)(_bits(dy, "float16"), _bits(w.reshape(E * K, N), "float16"), c, off)
    np.testing.assert_array_equal(c, ref)


def test_transposed_weights_compile_without_spills():
    k = GK.build("bfloat16", "bfloat16", 4, 2, 256, 132, GK.GROUP_M, True, False, max_groups=256, trans_w=True)
    ck = k.compile(np.zeros((512, 256), np.uint16), np.zeros((4 * 256, 512), np.uint16),
                   np.zeros((512, 512), np.uint16), np.array([100, 100, 300, 512], np.int32))
    ptx = ck.asm["ptx"]
    r = ptxas(ptx, "sm_90a")
    assert r.returncode == 0, r.stderr
    assert "C7515" not in r.stderr
    assert ck.metadata.get("spill_stores", 0) == 0 and ck.metadata.get("spill_loads", 0) == 0


def _token_major_problem(counts, M, N, seed):
    """The weight gradient's operands token-major: offsets, dY (T, M) and X (T, N) of small exact values (k/8), and
    the per-expert reference dW (E, M, N) in float64."""
    rng = np.random.default_rng(seed)
    off = np.cumsum(counts).astype(np.int32)
    Tn, E = int(off[-1]), len(counts)
    dy = rng.integers(-8, 9, (Tn, M)) / 8
    x = rng.integers(-8, 9, (Tn, N)) / 8
    ref = np.zeros((E, M, N))
    s = 0
    for e in range(E):
        ref[e] = dy[s:off[e]].T @ x[s:off[e]]
        s = off[e]
    return off, dy, x, ref


@pytest.mark.parametrize("counts,cfg", [([50, 0, 70, 21], (2, 1, 64)), ([0, 77, 60], (3, 2, 128))],
                         ids=["bn64-zero-middle", "bn128-two-consumers-zero-first"])
def test_token_major_weight_gradient_on_the_interpreter(counts, cfg):
    """dW[e] = dY_eᵀ X_e with dY (T, M) and X (T, N) read as stored (wgmma's transposed A and B, 64-column boxes):
    the next group's tokens are rows of A's boxes, zeroed before the wgmma; T odd (no padding needed)."""
    pytest.importorskip("tiledsl.interpreter.fibers")
    off, dy, x, ref = _token_major_problem(counts, 64 * cfg[1] + 8, 72, seed=cfg[2])
    E, M, N = ref.shape
    c = np.full((E * M, N), -1.0, np.float32)
    k = GK.build("float16", "float32", cfg[0], cfg[1], cfg[2], 2, 2, True, False, kgrouped=True, max_groups=16,
                 trans_w=True)
    tiledsl.jit(k.fn, interpret=True)(_bits(dy, "float16"), _bits(x, "float16"), c, off)
    np.testing.assert_array_equal(c.reshape(E, M, N), ref)


def test_token_major_weight_gradient_compiles_without_spills():
    k = GK.build("bfloat16", "bfloat16", 4, 2, 128, 132, GK.GROUP_M, True, False, kgrouped=True, max_groups=16,
                 trans_w=True)
    ck = k.compile(np.zeros((1001, 256), np.uint16), np.zeros((1001, 512), np.uint16),
                   np.zeros((4 * 256, 512), np.uint16), np.array([100, 100, 300, 1001], np.int32))
    r = ptxas(ck.asm["ptx"], "sm_90a")
    assert r.returncode == 0, r.stderr
    assert "C7515" not in r.stderr
    assert ck.metadata.get("spill_stores", 0) == 0 and ck.metadata.get("spill_loads", 0) == 0



@pytest.mark.parametrize("counts,cfg", [([50, 0, 70, 21], (2, 1, 64)), ([0, 77, 60], (3, 2, 128)),
                                        ([40, 90], (2, 2, 256))],
                         ids=["bn64-zero-middle", "bn128-two-consumers-zero-first", "bn256"])
def test_weight_gradient_through_the_tma_store(counts, cfg):
    """The TMA-store epilogue (tma_store): dW (E, M, N) as a 3-D tensor map, each consumer's part staged by stmatrix
    and stored by one thread; the rows clip at M inside each expert's matrix (M = 64 * consumers + 8: the last row
    tile's 56 rows past M are the next expert's), the columns at N, and an expert of no tokens gets zeros. f16 out:
    the f32 sums of these eighths are exact, so dW is the reference rounded once."""
    pytest.importorskip("tiledsl.interpreter.fibers")
    off, dy, x, ref = _token_major_problem(counts, 64 * cfg[1] + 8, 72, seed=cfg[2])
    E, M, N = ref.shape
    c = np.full((E, M, N), -1.0, np.float16)
    k = GK.build("float16", "float16", cfg[0], cfg[1], cfg[2], 2, 2, True, False, kgrouped=True, max_groups=16,
                 trans_w=True, tma_store=True)
    tiledsl.jit(k.fn, interpret=True)(_bits(dy, "float16"), _bits(x, "float16"), c, off)
    np.testing.assert_array_equal(c, ref.astype(np.float16))


@pytest.mark.parametrize("stages,bn", [(4, 128), (3, 256), (4, 256)])
def test_tma_store_weight_gradient_assembles(stages, bn):
    """The TMA-store form assembles for sm_90a without serialised wgmma (BN = 256 at 4 stages stages two parts of
    128 columns); spills as the register-store form does (none at BN = 128)."""
    k = GK.build("bfloat16", "bfloat16", stages, 2, bn, 132, GK.GROUP_M, True, False, kgrouped=True, max_groups=256,
                 trans_w=True, tma_store=True)
    ck = k.compile(np.zeros((1001, 256), np.uint16), np.zeros((1001, 512), np.uint16),
                   np.zeros((4, 256, 512), np.uint16), np.array([100, 100, 300, 1001], np.int32))
    r = ptxas(ck.asm["ptx"], "sm_90a")
    assert r.returncode == 0, r.stderr
    assert "C7515" not in r.stderr
    if bn == 128:
        assert ck.metadata.get("spill_stores", 0) == 0 and ck.metadata.get("spill_loads", 0) == 0


def test_tma_store_needs_a_grouped_unscaled_form_and_a_half_out():
    with pytest.raises(tiledsl.LaunchError, match="tma_store"):
        GK.build("e4m3", "bfloat16", 4, 2, 128, 132, 8, True, True, tma_store=True)
    with pytest.raises(tiledsl.LaunchError, match="tma_store"):
        GK.build("bfloat16", "float32", 4, 2, 128, 132, 8, True, False, kgrouped=True, trans_w=True, tma_store=True)
    with pytest.raises(tiledsl.LaunchError, match="tma_store"):
        GK.build("bfloat16", "float32", 4, 2, 128, 132, 8, True, False, tma_store=True)


@pytest.mark.parametrize("counts,N,cfg", [([130, 0, 70, 64], 136, (2, 1, 64)), ([0, 300, 1, 128], 256, (2, 2, 128)),
                                          ([200, 57], 264, (2, 2, 256))],
                         ids=["bn64-zero-middle", "bn128-straddling", "bn256-ragged-n"])
def test_row_grouped_tma_store_on_the_interpreter(counts, N, cfg):
    """The row-grouped form (forward, dx) with tma_store: a consumer's 64 rows wholly inside the tile's group go
    out through the TMA store (clipped at T and N), a part crossing the group's end through the masked register
    stores; exact against the per-expert loop, every row past an expert's end left to its own tile."""
    pytest.importorskip("tiledsl.interpreter.fibers")
    K = 128
    x, w, off, ref = _problem(counts, N, K, seed=sum(counts))
    E = len(counts)
    c = _host_out(ref.shape[0], N, "float16")
    k = GK.build("float16", "float16", cfg[0], cfg[1], cfg[2], 2, 2, True, False, max_groups=16, tma_store=True)
    tiledsl.jit(k.fn, interpret=True)(_bits(x, "float16"), _bits(w.reshape(E * N, K), "float16"), c, off, c)
    np.testing.assert_array_equal(_as_float(c, "float16"), _round(ref, "float16"))

CASES = [
    # an expert of 0 tokens in the middle; ragged counts, N and K; f32 out; offsets staged in shared memory
    ([50, 0, 100], 72, 136, "float16", "float32", 16),
    # 0 tokens first and last; bf16 out (the half2 word stores); offsets read from global memory
    ([0, 70, 130, 0], 136, 128, "bfloat16", "bfloat16", 0),
    # every expert smaller than a tile, one of them a single token; f16 out with an odd N (element stores)
    ([1, 63, 64, 65], 65, 64, "float16", "float16", 16),
]


@pytest.mark.parametrize("counts,N,K,ab,out,gmax", CASES, ids=["zero-middle", "zero-ends-bf16", "tiny-odd-n"])
def test_grouped_walk_on_the_fibered_interpreter(counts, N, K, ab, out, gmax):
    """A persistent grid of 2 blocks (64 x 64 tiles, 2 stages: the ring turns within and across tiles and
    groups), exact against the per-expert loop; rows past an expert's end are never written by its tiles."""
    pytest.importorskip("tiledsl.interpreter.fibers")
    x, w, off, ref = _problem(counts, N, K, seed=sum(counts))
    E = len(counts)
    c = _host_out(ref.shape[0], N, out)
    k = GK.build(ab, out, 2, 1, 64, 2, 2, True, False, max_groups=gmax)
    assert GK.check_walk(list(off), ref.shape[0], N, 64, 64, 2, 2) is None
    tiledsl.jit(k.fn, interpret=True)(_bits(x, ab), _bits(w.reshape(E * N, K), ab), c, off)
    np.testing.assert_array_equal(_as_float(c, out), _round(ref, out))


def test_two_consumers_bn128_on_the_interpreter():
    """The default block shape (two consumer warpgroups, 128 x 128) over three groups."""
    x, w, off, ref = _problem([130, 0, 70], 128, 128, seed=3)
    c = _host_out(200, 128, "float32")
    k = GK.build("float16", "float32", 2, 2, 128, 2, 8, True, False)
    tiledsl.jit(k.fn, interpret=True)(_bits(x, "float16"), _bits(w.reshape(3 * 128, 128), "float16"), c, off)
    np.testing.assert_array_equal(c, ref)


def test_offsets_ending_before_t_and_not_monotone_are_clamped():
    """offsets [40, 20, 90] over 120 rows: group 1 (end 20 < 40) is empty after clamping, group 2 takes rows
    40..89, rows 90.. are untouched (the -1 fill stays)."""
    x, w, _, _ = _problem([40, 50, 30], 64, 64, seed=5)
    off = np.array([40, 20, 90], np.int32)
    ref = np.full((120, 64), -1.0)
    ref[:40] = x[:40] @ w[0].T
    ref[40:90] = x[40:90] @ w[2].T
    c = np.full((120, 64), -1.0, np.float32)
    k = GK.build("float16", "float32", 2, 1, 64, 2, 2, True, False)
    tiledsl.jit(k.fn, interpret=True)(_bits(x, "float16"), _bits(w.reshape(3 * 64, 64), "float16"), c, off)
    np.testing.assert_array_equal(c, ref)


@pytest.mark.parametrize("G", [1, 2, 3, 7, 132])
def test_the_walk_covers_every_tile_once(G):
    """The kernel's own walk helpers on the host: every (group, tile row, tile column) computed by one block."""
    rng = np.random.default_rng(G)
    for _ in range(20):
        E = int(rng.integers(1, 9))
        counts = rng.integers(0, 300, E) * (rng.random(E) > 0.3)
        off = list(np.cumsum(counts))
        assert GK.check_walk(off, int(off[-1]), int(rng.integers(1, 600)), 128, 128, 8, G) is None


@pytest.mark.parametrize("G", [1, 2, 5, 132])
def test_the_masked_walk_covers_every_tile_once(G):
    rng = np.random.default_rng(100 + G)
    for _ in range(20):
        E, cap = int(rng.integers(1, 9)), int(rng.integers(1, 300))
        counts = list(rng.integers(0, cap + 1, E) * (rng.random(E) > 0.3))
        assert GK.check_walk(counts, E * cap, int(rng.integers(1, 600)), 128, 128, 8, G, cap=cap) is None


@pytest.mark.parametrize("gmax", [0, 16])
def test_masked_decode_form_on_the_interpreter(gmax):
    """x (E, C, K) flattened with a count per expert: 0 tokens, a full group, ragged ones, a count past C
    (clamped); the rows past each count keep their fill."""
    pytest.importorskip("tiledsl.interpreter.fibers")
    E, C, N, K = 4, 72, 136, 64
    counts = np.array([0, 72, 5, 99], np.int32)
    rng = np.random.default_rng(gmax)
    x = rng.integers(-8, 9, (E, C, K)) / 8
    w = rng.integers(-8, 9, (E, N, K)) / 8
    ref = np.full((E, C, N), -1.0)
    for e in range(E):
        n = min(int(counts[e]), C)
        ref[e, :n] = x[e, :n] @ w[e].T
    c = np.full((E * C, N), -1.0, np.float32)
    k = GK.build("float16", "float32", 2, 1, 64, 2, 2, True, False, max_groups=gmax, masked=True)
    tiledsl.jit(k.fn, interpret=True)(_bits(x.reshape(E * C, K), "float16"), _bits(w.reshape(E * N, K), "float16"),
                                      c, counts)
    np.testing.assert_array_equal(c.reshape(E, C, N), ref)


def test_check_walk_names_a_tile_never_computed(monkeypatch):
    """The check is not vacuous: a walk that skips a block's last tile is caught."""
    real = GK.walk

    def short(*a):
        out = real(*a)
        out[0] = out[0][:-1]
        return out
    monkeypatch.setattr(GK, "walk", short)
    assert "never computed" in GK.check_walk([100, 300], 300, 256, 128, 128, 8, 2)


def test_the_reference_follows_torch_grouped_mm():
    """torch._grouped_mm's convention (offsets: cumulative ends; its mat_b (E, K, N) is our w transposed) is the
    one the per-expert reference above implements."""
    torch = pytest.importorskip("torch")
    if not hasattr(torch, "_grouped_mm"):
        pytest.skip("this torch has no _grouped_mm")
    x, w, off, ref = _problem([5, 0, 11], 24, 32, seed=9)
    try:
        got = torch._grouped_mm(torch.tensor(x, dtype=torch.bfloat16), torch.tensor(w, dtype=torch.bfloat16)
                                .transpose(1, 2), offs=torch.tensor(off))
    except RuntimeError as e:
        pytest.skip(f"torch._grouped_mm on the host: {e}")
    np.testing.assert_allclose(got.float().numpy(), ref, rtol=1e-2, atol=1e-2)


def test_host_api_refuses_bad_arguments_naming_them():
    torch = pytest.importorskip("torch")
    from tiledsl.ops.gemm.grouped import grouped_mm
    x = torch.zeros(16, 32, dtype=torch.bfloat16)
    w = torch.zeros(2, 24, 32, dtype=torch.bfloat16)
    off = torch.tensor([8, 16], dtype=torch.int32)
    with pytest.raises(tiledsl.LaunchError, match="w is"):
        grouped_mm(x, w[0], off)
    with pytest.raises(tiledsl.LaunchError, match="float16 or both bfloat16"):
        grouped_mm(x.float(), w.float(), off)
    with pytest.raises(tiledsl.LaunchError, match="offsets must be a 1-D torch.int32"):
        grouped_mm(x, w, off.long())
    with pytest.raises(tiledsl.LaunchError, match="offsets has 3 entries"):
        grouped_mm(x, w, torch.tensor([8, 16, 16], dtype=torch.int32))
    with pytest.raises(tiledsl.LaunchError, match="offsets are not monotone"):
        grouped_mm(x, w, torch.tensor([9, 8], dtype=torch.int32), validate=True)
    with pytest.raises(tiledsl.LaunchError, match="offsets end at 12"):
        grouped_mm(x, w, torch.tensor([8, 12], dtype=torch.int32), validate=True)
    with pytest.raises(tiledsl.LaunchError, match="sm_90"):
        grouped_mm(x, w, off)


@pytest.fixture
def host_on_interpreter(monkeypatch):
    """The host API (tiledsl.ops.gemm.grouped) on torch CPU tensors: its kernels run on the interpreter, with small
    tiles, so the glue (views, argument order, the paths each layout takes) is checked without a GPU."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("tiledsl.interpreter.fibers")
    from tiledsl.ops.gemm import grouped as G
    build = G._kernel
    monkeypatch.setattr(G, "_need_sm90", lambda t, what, name="x": None)
    monkeypatch.setattr(G, "_kernel", lambda *a, **k: tiledsl.jit(build(*a, **k).fn, interpret=True))
    small = G.default_config
    monkeypatch.setattr(G, "default_config", lambda N, scaled: dict(small(N, scaled), stages=2, consumers=1,
                                                                    bn=128 if scaled else 64))
    return torch, G


def test_host_api_on_the_interpreter(host_on_interpreter):
    torch, G = host_on_interpreter
    gen = torch.Generator().manual_seed(0)

    def ints(*shape):
        return torch.randint(-8, 9, shape, generator=gen) / 8
    E, N, K = 3, 72, 128
    off = torch.tensor([50, 50, 120], dtype=torch.int32)
    x, w, dy = ints(120, K), ints(E, N, K), ints(120, N)
    ref, rdx, rdw = torch.zeros(120, N), torch.zeros(120, K), torch.zeros(E, N, K)
    s = 0
    for e, end in enumerate(off.tolist()):
        ref[s:end] = x[s:end] @ w[e].T
        rdx[s:end] = dy[s:end] @ w[e]
        rdw[e] = dy[s:end].T @ x[s:end]
        s = end
    bf = torch.bfloat16
    assert torch.equal(G.grouped_mm(x.to(bf), w.to(bf), off, out_dtype=torch.float32), ref)
    # the backward: dx reads w as stored (w_kn), dw reads dy and x as stored (token-major)
    dx = G.grouped_mm(dy.to(bf), w.to(bf), off, out_dtype=torch.float32, w_kn=True)
    dw = G.grouped_mm_weight_grad(dy.to(bf), x.to(bf), off, out=torch.empty(E, N, K))
    assert torch.equal(dx, rdx) and torch.equal(dw, rdw)
    # dw through the transposed copies (N = 20: dy's rows are not 16-byte multiples)
    dw20 = G.grouped_mm_weight_grad(dy[:, :20].to(bf), x.to(bf), off, out=torch.empty(E, 20, K))
    assert torch.equal(dw20, rdw[:, :20])
    # the masked form
    xm, cnt = ints(E, 40, K), torch.tensor([0, 40, 17], dtype=torch.int32)
    om = torch.full((E, 40, N), 5.0)
    G.grouped_mm_masked(xm.half(), w.half(), cnt, out=om)
    for e, n in enumerate(cnt.tolist()):
        assert torch.equal(om[e, :n], xm[e, :n] @ w[e].T) and bool((om[e, n:] == 5).all())


def test_weight_gradient_configuration_follows_the_tokens_per_expert():
    """weight_grad_config: the TMA store for a 16-bit dW, 128 x 256 tiles where experts average >= 512 tokens (the
    Mixtral-like reduction), 128 x 128 at DeepSeek-like 128 tokens an expert; a float32 dW keeps the register
    stores on 128 x 128; config= wins."""
    torch = pytest.importorskip("torch")
    from tiledsl.ops.gemm.grouped import weight_grad_config
    x = torch.empty(0)
    assert weight_grad_config(x, torch.bfloat16, 16384, 8, None)["bn"] == 256
    cfg = weight_grad_config(x, torch.bfloat16, 32768, 256, None)
    assert cfg["bn"] == 128 and cfg["tma_store"] is True and cfg["stages"] == 4
    cfg = weight_grad_config(x, torch.float32, 16384, 8, None)
    assert cfg["bn"] == 128 and cfg["tma_store"] is False
    assert weight_grad_config(x, torch.float16, 16384, 8, dict(bn=128, tma_store=False)) == dict(
        stages=4, consumers=2, bn=128, group_m=GK.GROUP_M, tma_store=False)


def test_an_explicit_tma_store_that_cannot_be_honoured_is_refused():
    """config tma_store=True is never dropped silently: an f32 out, N not a multiple of 8, BN not a multiple of 64 or
    an out 8 bytes off a 16-byte boundary are LaunchErrors naming the need; without the request the register stores
    serve them."""
    torch = pytest.importorskip("torch")
    from tiledsl.ops.gemm.grouped import row_tma_store
    x = torch.empty(0)
    cases = [(torch.empty(4, 64), 64, 128, "float16/bfloat16"),
             (torch.empty(4, 60, dtype=torch.bfloat16), 60, 128, "multiple of 8"),
             (torch.empty(4, 64, dtype=torch.bfloat16), 64, 96, "BN a multiple of 64"),
             (torch.empty(4 * 64 + 4, dtype=torch.bfloat16)[4:].view(4, 64), 64, 128, "16-byte-aligned")]
    for out, N, bn, need in cases:
        with pytest.raises(tiledsl.LaunchError, match=need):
            row_tma_store(x, out, N, dict(bn=bn, tma_store=True))
        assert row_tma_store(x, out, N, dict(bn=bn)) is False
    assert row_tma_store(x, torch.empty(4, 64, dtype=torch.bfloat16), 64, dict(bn=128)) is True
