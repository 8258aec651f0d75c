"""attention_decode (tiledsl/ops/flash/decode.py, ragged.py's kernel in mode "decode" + the split-KV combine kernel)
without a GPU: contiguous and paged caches (pages of 16 and 32, a shuffled block table), ragged cache_seqlens
(0, 1, up to 200), 1 and 3 new queries (bottom-right causal), GQA groups sharing a kv head's block, split and unsplit,
match a float64 gather-then-attend reference on the interpreter; the split heuristic; bad inputs refused naming the
argument; the GPU configurations compile through ptxas without spills. tests/test_gpu_attention_varlen_decode.py
runs them on the GPU."""
import functools

import numpy as np
import pytest

import tiledsl
from tiledsl.ops.flash import decode as DC
from tiledsl.ops.flash import decode_kernel as DK
from tiledsl.ops.flash import ragged as R
from helpers import ptxas


def _outputs(torch, kern, q, splits, HK):
    """A decode kernel's O and LSE, and with splits its trailing workspace (partials and the groups' counters)."""
    B, lq, H, D = q.shape
    lse = torch.empty((B, lq, H))
    if splits == 1:
        return q, lse, ()
    return q, lse, (torch.empty((splits, B, lq, H, D)), torch.empty((splits, B, lq, H)),
                    torch.zeros((B * HK * kern.nqb,), dtype=torch.int32))


def _check(o, lse, ro, rl):
    assert np.abs(o.astype(np.float64) - ro).max() <= 2e-3
    assert np.array_equal(np.isinf(lse), np.isinf(rl))
    fin = np.isfinite(rl)
    assert np.abs(lse[fin] - rl[fin]).max() <= 1e-4


def _paged(rng, B, P, pages_each, HK, D, spare=2):
    """A paged cache with a shuffled block table (every sequence owns pages_each distinct pages)."""
    npages = B * pages_each + spare
    kp = rng.standard_normal((npages, P, HK, D)).astype(np.float16)
    vp = rng.standard_normal((npages, P, HK, D)).astype(np.float16)
    bt = rng.permutation(npages)[:B * pages_each].reshape(B, pages_each).astype(np.int32)
    return kp, vp, bt


@pytest.mark.parametrize("causal, lq, heads, lens, splits", [
    (False, 1, (4, 2), [0, 17, 40], 1),          # an empty cache (0 / -inf), one query, GQA 2
    (True, 3, (4, 1), [1, 70, 200], 1),          # three queries against one kv head (12 rows), 1-key causal
    (True, 3, (4, 1), [0, 70, 200], 4),          # split-KV: splits past a sequence's end are empty
    (False, 2, (2, 2), [64, 129, 5], 3),         # split boundaries on and off the tile edges
])
@pytest.mark.parametrize("kernel", ["ragged", "split"])
def test_decode_contiguous_on_the_interpreter(causal, lq, heads, lens, splits, kernel):
    rng = np.random.default_rng(sum(lens) + lq)
    H, HK = heads
    B, S, D = len(lens), 256, 64
    q = rng.standard_normal((B, lq, H, D)).astype(np.float16)
    kc, vc = (rng.standard_normal((B, S, HK, D)).astype(np.float16) for _ in range(2))
    lens = np.array(lens, np.int32)
    o, lse = DC.attention_decode(q, kc, vc, lens, scale=0.3, causal=causal, splits=splits, return_lse=True,
                                 kernel=kernel)
    assert o.shape == q.shape and o.dtype == np.float16 and lse.shape == (B, lq, H)
    ro, rl = DC.reference_decode(q, kc, vc, lens, scale=0.3, causal=causal)
    _check(o, lse, ro, rl)


@pytest.mark.parametrize("P, causal, lq, lens, splits", [
    (16, True, 2, [1, 33, 64], 1),               # a page boundary inside a 64-key tile (4 pages a tile)
    (16, False, 1, [0, 100, 7], 2),              # split over pages, an empty sequence
    (32, True, 4, [96, 4, 50], 1),               # 4 queries, a sequence shorter than Lq... and one of Lq
])
@pytest.mark.parametrize("kernel", ["ragged", "split"])
def test_decode_paged_on_the_interpreter(P, causal, lq, lens, splits, kernel):
    rng = np.random.default_rng(P + sum(lens))
    B, H, HK, D = len(lens), 4, 2, 64
    pages_each = -(-128 // P)
    kp, vp, bt = _paged(rng, B, P, pages_each, HK, D)
    q = rng.standard_normal((B, lq, H, D)).astype(np.float16)
    lens = np.array(lens, np.int32)
    o, lse = DC.attention_decode(q, kp, vp, lens, block_table=bt, scale=0.3, causal=causal, splits=splits,
                                 return_lse=True, kernel=kernel)
    ro, rl = DC.reference_decode(q, kp, vp, lens, block_table=bt, scale=0.3, causal=causal)
    _check(o, lse, ro, rl)


@pytest.mark.parametrize("lq, causal, splits", [(1, False, 1), (3, True, 2)])
def test_decode_split_kernel_head_dim_128_on_the_interpreter(lq, causal, splits):
    # decode_kernel.py at D = 128 with 8 query heads a kv head: at lq 3, 24 rows in two 16-row query blocks
    rng = np.random.default_rng(40 + lq)
    B, H, HK, D, S = 2, 16, 2, 128, 320
    q = rng.standard_normal((B, lq, H, D)).astype(np.float16)
    kc, vc = (rng.standard_normal((B, S, HK, D)).astype(np.float16) for _ in range(2))
    lens = np.array([S, 130], np.int32)
    o, lse = DC.attention_decode(q, kc, vc, lens, causal=causal, splits=splits, return_lse=True, kernel="split")
    ro, rl = DC.reference_decode(q, kc, vc, lens, causal=causal)
    _check(o, lse, ro, rl)


def test_decode_kernel_choice_refused_when_unknown():
    q = np.zeros((1, 1, 2, 64), np.float16)
    c = np.zeros((1, 64, 1, 64), np.float16)
    with pytest.raises(tiledsl.LaunchError, match="kernel must be 'split'"):
        DC.attention_decode(q, c, c, np.array([3], np.int32), kernel="fast")


def test_decode_default_scale_and_splits_chosen_from_shapes():
    # splits=None: choose_splits from (B, H_kv, capacity, the default 132 SMs): 2 sequences x 1 kv head -> splits
    rng = np.random.default_rng(9)
    B, H, D, S = 2, 2, 64, 512
    q = rng.standard_normal((B, 1, H, D)).astype(np.float16)
    kc, vc = (rng.standard_normal((B, S, 1, D)).astype(np.float16) for _ in range(2))
    lens = np.array([300, 512], np.int32)
    assert DC.choose_splits(B, 1, 1, S, 132) == (2, 256)
    o = DC.attention_decode(q, kc, vc, lens)
    ro, _ = DC.reference_decode(q, kc, vc, lens)
    assert np.abs(o.astype(np.float64) - ro).max() <= 2e-3


def test_choose_splits():
    assert DC.choose_splits(64, 8, 1, 4096, 132) == (1, 4096)            # the batch fills the SMs: no split
    assert DC.choose_splits(1, 8, 1, 32768, 132) == (29, 1152)           # 8 blocks x 29 fill 232 of 264 slots
    assert DC.choose_splits(16, 8, 1, 8192, 132) == (2, 4096)            # 256 of 264 slots (3 would be 1.45 waves)
    # 128 tiles: 26 splits asked are 5 tiles each, 26 run (208 of 264 slots); judged on the splits that run, 32
    assert DC.choose_splits(1, 8, 1, 8192, 132) == (32, 256)
    # past two blocks an SM (three: the e4m3 kernel) only where the splits stay 16 tiles long
    assert DC.choose_splits(16, 8, 1, 8192, 132, 3) == (3, 2752)          # 3 splits of 43 tiles: 384 of 396 slots
    assert DC.choose_splits(1, 8, 1, 32768, 132, 3) == DC.choose_splits(1, 8, 1, 32768, 132, 2)
    ns, kps = DC.choose_splits(1, 8, 1, 1024, 132)
    assert ns == 4 and kps == 256                                          # at least MIN_SPLIT_TILES tiles a split
    assert DC.choose_splits(1, 1, 1, 10 ** 6, 132)[0] == DC.MAX_SPLITS
    assert DC.choose_splits(3, 1, 1, 50, 132) == (1, 64)                   # one tile: no split


def test_decode_refuses_bad_inputs():
    rng = np.random.default_rng(1)
    q = rng.standard_normal((2, 1, 4, 64)).astype(np.float16)
    kp, vp, bt = _paged(rng, 2, 16, 3, 2, 64, spare=0)
    lens = np.array([10, 40], np.int32)
    call = DC.attention_decode
    with pytest.raises(tiledsl.LaunchError, match="cache_seqlens must lie in 0..48"):
        call(q, kp, vp, np.array([10, 49], np.int32), block_table=bt)
    with pytest.raises(tiledsl.LaunchError, match="block_table points past the cache's 6 pages"):
        call(q, kp, vp, lens, block_table=np.where(bt == bt[1, 2], 6, bt).astype(np.int32))
    with pytest.raises(tiledsl.LaunchError, match="page size must be a power of two"):
        call(q, np.zeros((4, 24, 2, 64), np.float16), np.zeros((4, 24, 2, 64), np.float16), lens, block_table=bt)
    with pytest.raises(tiledsl.LaunchError, match="page_size 32 disagrees"):
        call(q, kp, vp, lens, block_table=bt, page_size=32)
    with pytest.raises(tiledsl.LaunchError, match="block_table must be int32"):
        call(q, kp, vp, lens, block_table=bt.astype(np.int64))
    with pytest.raises(tiledsl.LaunchError, match="cache_seqlens must be int32"):
        call(q, kp, vp, lens.astype(np.int64), block_table=bt)
    with pytest.raises(tiledsl.LaunchError, match="1 to 16 new queries"):
        call(np.zeros((2, 17, 4, 64), np.float16), kp, vp, lens, block_table=bt)
    with pytest.raises(tiledsl.LaunchError, match="must divide"):
        call(np.zeros((2, 1, 3, 64), np.float16), kp, vp, lens, block_table=bt)
    kc = np.zeros((2, 32, 2, 64), np.float16)
    with pytest.raises(tiledsl.LaunchError, match="cache_seqlens must lie in 0..32"):
        call(q, kc, kc, np.array([33, 0], np.int32))
    with pytest.raises(tiledsl.LaunchError, match="page_size needs a block_table"):
        call(q, kc, kc, lens, page_size=16)
    with pytest.raises(tiledsl.LaunchError, match="contiguous cache must be"):
        call(q, np.zeros((3, 32, 2, 64), np.float16), np.zeros((3, 32, 2, 64), np.float16), lens)


def _decode_ptx(D, causal, lq, page, splits, arch, dtype="float16"):
    torch = pytest.importorskip("torch")
    dt = getattr(torch, dtype)
    H, HK, B = 32, 8, 2
    kern = R.make_ragged("decode", dtype, D, causal, H, HK, D ** -0.5, lq=lq, page=page, splits=splits,
                         kps=1024 if splits > 1 else 0)
    q = torch.empty((B, lq, H, D), dtype=dt)
    kv = torch.empty((40, page, HK, D) if page else (B, 2048, HK, D), dtype=dt)
    o, lse, work = _outputs(torch, kern, q, splits, HK)
    x2 = torch.zeros((B, 20), dtype=torch.int32) if page else torch.zeros((B,), dtype=torch.int32)
    return kern.compile(q, kv, kv, o, lse, torch.zeros((B,), dtype=torch.int32), x2, *work,
                       target=arch).asm["ptx"]


@pytest.mark.parametrize("D, causal, lq, page, splits", [
    (128, False, 1, 0, 1), (128, False, 1, 0, 8), (128, True, 4, 16, 8), (128, False, 1, 64, 1),
    (128, True, 16, 256, 4), (64, False, 1, 16, 8), (256, True, 2, 128, 2),
])
def test_decode_kernels_pass_ptxas_without_spills(D, causal, lq, page, splits):
    ptx = _decode_ptx(D, causal, lq, page, splits, "sm_90")
    r = ptxas(ptx, "sm_90", verbose=True)
    assert r.returncode == 0, r.stderr
    assert "0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads" in r.stderr, r.stderr


@pytest.mark.parametrize("D, causal, lq, page, splits, dtype, kv8", [
    (128, False, 1, 0, 1, "bfloat16", False), (128, True, 16, 64, 8, "float16", False),
    (64, False, 1, 16, 4, "bfloat16", False), (128, False, 1, 0, 1, "bfloat16", True),
    (128, False, 1, 64, 8, "float16", True), (64, True, 4, 16, 1, "float16", True),
])
def test_split_decode_kernels_pass_ptxas_without_spills(D, causal, lq, page, splits, dtype, kv8):
    torch = pytest.importorskip("torch")
    H, HK, B = 32, 8, 2
    kern = DK.make_decode(dtype, D, causal, H, HK, D ** -0.5, lq=lq, page=page, splits=splits,
                          kps=1024 if splits > 1 else 0, kv8=kv8)
    q = torch.empty((B, lq, H, D), dtype=getattr(torch, dtype))
    kv = torch.empty((40, page, HK, D) if page else (B, 2048, HK, D), dtype=torch.uint8 if kv8 else q.dtype)
    o, lse, work = _outputs(torch, kern, q, splits, HK)
    lens = torch.zeros((B,), dtype=torch.int32)
    x2 = torch.zeros((B, 20), dtype=torch.int32) if page else lens
    sc = (torch.empty((HK,)), torch.empty((HK,))) if kv8 else ()
    ptx = kern.compile(q, kv, kv, o, lse, lens, x2, *sc, *work, target="sm_90").asm["ptx"]
    r = ptxas(ptx, "sm_90", verbose=True)
    assert r.returncode == 0, r.stderr
    assert "0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads" in r.stderr, r.stderr


def e4m3_values():
    """The 256 e4m3 (float8_e4m3fn) bytes' values, NaN at 0x7F and 0xFF."""
    b = np.arange(256)
    s, e, m = b >> 7, (b >> 3) & 15, b & 7
    v = np.where(e == 0, m / 8 * 2.0 ** -6, (1 + m / 8) * 2.0 ** (e - 7.0))
    v = np.where((e == 15) & (m == 7), np.nan, v)
    return np.where(s == 1, -v, v)


@pytest.mark.parametrize("paged, splits, S, D, kernel", [
    (False, 1, 192, 64, None), (True, 2, 192, 64, None), (False, 1, 640, 64, None), (True, 1, 576, 64, None),
    (False, 2, 320, 128, "split"), (True, 1, 320, 128, "ragged")])
def test_decode_fp8_cache_on_the_interpreter(paged, splits, S, D, kernel):
    # S = 576 / 640: 9 / 10 key tiles, more than the KV8_STAGES staging stages (each stage refilled)
    # e4m3 bytes over the whole range (subnormals, both signs, 448; no NaN) with per-kv-head descales: the kernel
    # widens them by shifts and masks (times 2^-8); k_scale goes into the scores' scale and v_scale (x 2^8) onto O.
    # D = 128 on the split kernel: K's fragments read from the staging in two 16-byte chunk groups per key (the
    # contraction order permuted in Q's fragments to match) and the staging swizzle of 128-byte rows
    tab = e4m3_values()
    rng = np.random.default_rng(8 + paged)
    B, LQ, H, HK = 2, 2, 4, 2

    def rand8(shape):
        x = rng.integers(0, 256, shape).astype(np.uint8)
        return np.where(np.isnan(tab[x]), 0, x).astype(np.uint8)
    ks, vs = np.array([0.01, 0.02], np.float32), np.array([0.5, 0.03], np.float32)
    q = rng.standard_normal((B, LQ, H, D)).astype(np.float16)
    lens = np.array([100, S], np.int32)
    if paged:
        k8, v8 = rand8((2 * S // 16 + 1, 16, HK, D)), rand8((2 * S // 16 + 1, 16, HK, D))
        bt = rng.permutation(2 * S // 16 + 1)[:2 * S // 16].reshape(B, S // 16).astype(np.int32)
    else:
        k8, v8 = rand8((B, S, HK, D)), rand8((B, S, HK, D))
        bt = None
    kf, vf = tab[k8] * ks[:, None], tab[v8] * vs[:, None]
    o, lse = DC.attention_decode(q, k8, v8, lens, block_table=bt, k_scale=ks, v_scale=vs, causal=True,
                                 splits=splits, return_lse=True, kernel=kernel)
    ro, rl = DC.reference_decode(q, kf, vf, lens, block_table=bt, causal=True)
    assert o.dtype == np.float16
    assert np.abs(o - ro).max() <= 2e-3 * np.abs(ro).max()          # O's f16 rounding, relative to its range
    assert np.abs(lse - rl).max() <= 1e-3                           # the products of f16 q


class _OnTheInterpreter:
    """A kernel whose launch kern[grid, threads](*args) runs on the interpreter with numpy views of torch CPU
    tensors (the results land in the tensors' memory): attention_decode's torch host path without a GPU."""

    def __init__(self, kern):
        self._kern = kern

    def __getattr__(self, name):
        return getattr(self._kern, name)

    def __getitem__(self, launch):
        run = DC.interpreted(self._kern)[launch]
        return lambda *args: run(*(a.numpy() if hasattr(a, "numpy") else a for a in args))


@pytest.mark.parametrize("qdtype, paged, splits", [("bfloat16", False, 1), ("float16", True, 2),
                                                   ("bfloat16", True, 3)])
def test_decode_fp8_cache_torch_host_path(monkeypatch, qdtype, paged, splits):
    # GPU run 1 of test_decode_fp8_cache: the torch branch's last step, O * v_scale cast back to q's dtype, called
    # .to("bfloat16") (the dtype's name: Tensor.to(str) takes a device string): "Invalid device string". Here the
    # torch host path runs end to end on CPU tensors (the kernels launched on the interpreter) against the float64
    # reference on the dequantised cache, for bf16 and f16 q, contiguous and paged, split and not
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(DC, "make_ragged", lambda *a, **kw: _OnTheInterpreter(R.make_ragged(*a, **kw)))
    tab = e4m3_values()
    rng = np.random.default_rng(31 + splits)
    B, LQ, H, HK, D, S = 2, 1, 4, 2, 64, 192
    shape = (2 * S // 16 + 1, 16, HK, D) if paged else (B, S, HK, D)
    k8, v8 = (np.where(np.isnan(tab[x]), 0, x).astype(np.uint8) for x in (rng.integers(0, 256, shape),
                                                                           rng.integers(0, 256, shape)))
    bt = rng.permutation(shape[0])[:2 * S // 16].reshape(B, S // 16).astype(np.int32) if paged else None
    ks, vs = np.array([0.01, 0.02], np.float32), np.array([0.5, 0.03], np.float32)
    q = rng.standard_normal((B, LQ, H, D)).astype(np.float32)
    lens = np.array([100, 192], np.int32)
    dt = getattr(torch, qdtype)
    qt = torch.from_numpy(q).to(dt)
    o = DC.attention_decode(qt, torch.from_numpy(k8).view(torch.float8_e4m3fn),
                            torch.from_numpy(v8).view(torch.float8_e4m3fn), torch.from_numpy(lens),
                            block_table=None if bt is None else torch.from_numpy(bt), k_scale=torch.from_numpy(ks),
                            v_scale=torch.from_numpy(vs), splits=splits, validate=True)
    assert o.dtype == dt and tuple(o.shape) == q.shape
    ro, _ = DC.reference_decode(qt.float().numpy(), tab[k8] * ks[:, None], tab[v8] * vs[:, None], lens,
                                block_table=bt)
    tol = 2e-3 * np.abs(ro).max() + (2 * np.abs(torch.from_numpy(ro).to(dt).double().numpy() - ro).max()
                                     if qdtype == "bfloat16" else 0.0)
    assert np.abs(o.double().numpy() - ro).max() <= tol


def test_decode_fp8_refusals():
    q = np.zeros((1, 1, 2, 64), np.float16)
    c8 = np.zeros((1, 64, 1, 64), np.uint8)
    lens = np.array([3], np.int32)
    with pytest.raises(tiledsl.LaunchError, match="needs k_scale and v_scale"):
        DC.attention_decode(q, c8, c8, lens)
    with pytest.raises(tiledsl.LaunchError, match="e4m3 .* KV cache only"):
        DC.attention_decode(q, c8.astype(np.float16), c8.astype(np.float16), lens, k_scale=1.0, v_scale=1.0)
    with pytest.raises(tiledsl.LaunchError, match="share a dtype"):
        DC.attention_decode(q, c8, c8.astype(np.float16), lens, k_scale=1.0, v_scale=1.0)
    c256 = np.zeros((1, 64, 1, 256), np.uint8)
    with pytest.raises(tiledsl.LaunchError, match="head dim 64 or 128"):
        DC.attention_decode(np.zeros((1, 1, 2, 256), np.float16), c256, c256, lens, k_scale=1.0, v_scale=1.0)


@pytest.mark.parametrize("D, page, splits, qdtype", [(128, 0, 1, "float16"), (128, 64, 8, "bfloat16"),
                                                     (64, 16, 1, "float16"), (128, 0, 1, "bfloat16")])
def test_decode_fp8_kernels_pass_ptxas_without_spills(D, page, splits, qdtype):
    torch = pytest.importorskip("torch")
    H, HK, B, lq = 32, 8, 2, 1
    kern = R.make_ragged("decode", qdtype, D, False, H, HK, D ** -0.5, lq=lq, page=page, splits=splits,
                         kps=1024 if splits > 1 else 0, kv8=True)
    q = torch.empty((B, lq, H, D), dtype=getattr(torch, qdtype))
    kv = torch.empty((40, page, HK, D) if page else (B, 2048, HK, D), dtype=torch.uint8)
    o, lse, work = _outputs(torch, kern, q, splits, HK)
    lens = torch.zeros((B,), dtype=torch.int32)
    x2 = torch.zeros((B, 20), dtype=torch.int32) if page else lens
    sc = torch.empty((HK,))
    ptx = kern.compile(q, kv, kv, o, lse, lens, x2, sc, sc, *work, target="sm_90").asm["ptx"]
    r = ptxas(ptx, "sm_90", verbose=True)
    assert r.returncode == 0, r.stderr
    assert "0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads" in r.stderr, r.stderr


@pytest.mark.parametrize("kernel, D, lq, NS, kv8", [("ragged", 128, 1, 33, False), ("ragged", 64, 4, 8, False),
                                                   ("ragged", 256, 16, 2, False), ("split", 128, 1, 27, True),
                                                   ("split", 64, 4, 8, False)])
def test_split_kernels_with_their_combine_pass_ptxas(kernel, D, lq, NS, kv8):
    # the split kernels carry the combine (split_combine.py): its unrolled loads over NS partials must not spill
    torch = pytest.importorskip("torch")
    H, HK, B = 32, 8, 2
    make = DC.make_decode if kernel == "split" else functools.partial(R.make_ragged, "decode")
    kern = make("bfloat16", D, False, H, HK, D ** -0.5, lq=lq, splits=NS, kps=1024, kv8=kv8)
    q = torch.empty((B, lq, H, D), dtype=torch.bfloat16)
    kv = torch.empty((B, 2048 * NS, HK, D), dtype=torch.uint8 if kv8 else torch.bfloat16)
    lens = torch.zeros((B,), dtype=torch.int32)
    sc = (torch.empty((HK,)), torch.empty((HK,))) if kv8 else ()
    o, lse, work = _outputs(torch, kern, q, NS, HK)
    ck = kern.compile(q, kv, kv, o, lse, lens, lens, *sc, *work, target="sm_90")
    r = ptxas(ck.asm["ptx"], "sm_90", verbose=True)
    assert r.returncode == 0 and "0 bytes spill stores" in r.stderr, r.stderr
    assert "atom.acq_rel.gpu.global.inc.u32" in ck.asm["ptx"]


def test_decode_head_dim_128_paged_split_on_the_interpreter():
    # the GPU benchmark's head dim and GQA group (4 query heads a kv head), pages of 32, split in two
    rng = np.random.default_rng(3)
    B, H, HK, D = 2, 8, 2, 128
    kp, vp, bt = _paged(rng, B, 32, 4, HK, D)
    q = rng.standard_normal((B, 1, H, D)).astype(np.float16)
    lens = np.array([128, 77], np.int32)
    o, lse = DC.attention_decode(q, kp, vp, lens, block_table=bt, splits=2, return_lse=True)
    ro, rl = DC.reference_decode(q, kp, vp, lens, block_table=bt)
    _check(o, lse, ro, rl)
