"""attention_decode: a few new queries per sequence against a KV cache, contiguous or paged (ragged.py's kernel in
mode "decode", or decode_kernel.py's), the KV read split across blocks when the batch alone cannot fill the SMs
(the group's last arriving split combines the partials in the same launch: split_combine.py); `reference_decode`,
its float64 numpy twin.

Layouts: q (B, Lq, H, D) (Lq = 1..16 new tokens, already appended to the cache); a contiguous cache k_cache,
v_cache (B, S_max, H_kv, D), or a paged one (num_pages, page_size, H_kv, D) with block_table (B, max_pages) int32
(sequence b's key j lives in page block_table[b, j // page_size], row j % page_size); cache_seqlens int32 (B,), the
keys each sequence has (the Lq new ones included), read by the kernel.

One block serves the GROUP = H / H_kv query heads of one kv head for all Lq queries (GROUP * Lq rows of the mma
tiles): each K/V tile is read once for the whole group. Split-KV: split s of NS reads keys [s * KPS, (s + 1) * KPS);
each writes its normalised float32 partial O and its LSE, and the last of a group's splits to finish weighs them by
exp(LSE_s - max) (split_combine.py). NS comes from shapes only (choose_splits): no host synchronisation.
"""
import functools
import math

import numpy as np

import tiledsl

from .decode_kernel import make_decode
from .ragged import BN, make_ragged
from .. import gates
from .varlen import _dtype_of, _host_ints, attend_reference, interpreted
from ..device import sm_count, stream_buffers
from .common import softmax_scale

MAX_SPLITS = 64
MIN_SPLIT_TILES = 4      # a split reads at least this many 64-key tiles (its prologue and partial write amortised)
WAVES = 2                # blocks the splits aim for, per SM (the D = 128 kernel holds 80 KiB of shared memory and
                         # 231 registers x 128 threads: two blocks an SM)
# whether an e4m3 (True) / f16-bf16 (False) cache runs decode_kernel.py by default. H100, session 38, kernel times:
# e4m3 B 64 x 4k 376 -> 219 us, B 1 x 32k 59 -> 39; bf16 B 64 x 4k 340 (ragged) against 373-385 (split)
WARP_SPLIT = {True: True, False: False}
FILL = 0.85              # the share of the last wave's slots the splits must fill
LONG_SPLIT = 16          # tiles a split keeps where the splits aim past WAVES blocks an SM (choose_splits)

@functools.lru_cache(maxsize=1024)
def choose_splits(B, HK, nqb, max_ctx, sms, waves=WAVES):
    """(NS, KPS): the KV splits and the keys each reads, from shapes only. No split where B * H_kv * query blocks
    already fill the SMs or the context is short; else the fewest splits whose blocks fill the device's waves * sms
    slots (waves: the blocks an SM holds) to at least FILL of their last wave, judged on the splits that run once
    the keys per split are rounded to whole tiles, each split at least MIN_SPLIT_TILES tiles, at most MAX_SPLITS;
    the best filling one if none reaches FILL. Aiming past WAVES blocks an SM (the e4m3 kernel holds three) is kept
    only where the splits stay LONG_SPLIT tiles long: a block's prologue, merge and partials are paid per split
    (H100, session 39, e4m3: 16 x 8k, 3 splits of 43 tiles at three an SM 114 us against 123 for 2 splits at two,
    K alone in registers; 1 x 32k, 43 splits of 12 tiles at three an SM 49 us against 41 for 29 splits at two)."""
    tiles = max(1, -(-max_ctx // BN))
    base = B * HK * nqb
    if base >= sms:
        return 1, tiles * BN
    ns = _fewest_filling(tiles, base, waves * sms)
    if waves > WAVES and -(-tiles // ns) < LONG_SPLIT:
        ns = _fewest_filling(tiles, base, WAVES * sms)
    kps = -(-tiles // ns) * BN
    return -(-tiles * BN // kps), kps


def _fewest_filling(tiles, base, slots):
    """choose_splits' count for `slots` block slots: n splits of ceil(tiles / n) tiles are ceil(tiles / that)
    splits once rounded (n = 28 of 512 tiles: 19 tiles each, 27 splits), so the fill is judged on those."""
    most = max(1, min(tiles // MIN_SPLIT_TILES, MAX_SPLITS))
    runs = sorted({-(-tiles // -(-tiles // n)) for n in range(1, most + 1)})
    fill = {n: (n * base) / (-(-(n * base) // slots) * slots) for n in runs}
    good = [n for n in runs if fill[n] >= FILL]
    return good[0] if good else max(runs, key=lambda n: (fill[n], -n))


def attention_decode(q, k_cache, v_cache, cache_seqlens, block_table=None, page_size=None, scale=None, causal=False,
                     splits=None, return_lse=False, validate=None, lazy=None, k_scale=None, v_scale=None,
                     kernel=None):
    """softmax(scale * q k^T [causal]) v of q's Lq new tokens per sequence against the first cache_seqlens[b] keys of
    sequence b's cache (module docstring for the layouts).

    causal (Lq > 1): query i sees keys j < cache_seqlens[b] - Lq + i + 1 (FlashAttention's kvcache convention; with
    causal=False every query sees all cache_seqlens[b] keys). page_size: the cache's pages (taken from k_cache.shape[1]
    when block_table is given; if passed, it must agree): a power of two, 16 or more. splits: force the KV split count
    (None: choose_splits from B, H_kv, the cache's capacity and the SM count). Returns out (B, Lq, H, D) in q's dtype,
    and with return_lse=True also lse (B, Lq, H) float32 (natural log; -inf for a sequence with no key, whose out
    is 0). validate: check cache_seqlens against the cache's capacity (and the block table against the pages) on the
    host: always for numpy inputs, for torch tensors only when True (a synchronisation); on the GPU unchecked a
    length past the capacity reads other sequences' rows (page indices are clamped to the cache).

    An FP8 cache: k_cache and v_cache of torch.float8_e4m3fn (numpy: uint8 e4m3 bytes) with k_scale and v_scale,
    float32 (H_kv,) per-head descales (the cache holds K / k_scale, V / v_scale), on q's device (or Python floats
    for one scale). The kernel widens the e4m3 tiles to f16 in shared memory and applies both descales itself
    (ragged.py's kv8: k_scale in the scores' scale, v_scale on O; q (f16 or bf16, |q| <= 65504) is made f16 in
    shared memory): no elementwise pass on the host."""
    if q.ndim != 4 or k_cache.ndim != 4 or v_cache.ndim != 4:
        raise tiledsl.LaunchError(f"q must be (B, Lq, H, D) and the caches 4-D; got {tuple(q.shape)}, "
                                  f"{tuple(k_cache.shape)}, {tuple(v_cache.shape)}")
    B, LQ, H, D = q.shape
    if tuple(k_cache.shape) != tuple(v_cache.shape) or k_cache.shape[3] != D:
        raise tiledsl.LaunchError(f"k_cache {tuple(k_cache.shape)} and v_cache {tuple(v_cache.shape)} must share a "
                                  f"shape ending in q's D={D}")
    HK = k_cache.shape[2]
    if H % HK:
        raise tiledsl.LaunchError(f"k/v heads ({HK}) must divide q's heads ({H})")
    if not 1 <= LQ <= 16:
        raise tiledsl.LaunchError(f"attention_decode takes 1 to 16 new queries per sequence, got Lq={LQ}")
    numpy = isinstance(q, np.ndarray)
    kv8 = str(k_cache.dtype) in ("torch.float8_e4m3fn", "uint8")
    if kv8:
        if str(v_cache.dtype) != str(k_cache.dtype):
            raise tiledsl.LaunchError(f"k_cache and v_cache must share a dtype; got {k_cache.dtype}, {v_cache.dtype}")
        if k_scale is None or v_scale is None:
            raise tiledsl.LaunchError("an e4m3 KV cache needs k_scale and v_scale (float32 (H_kv,) descales)")
        dt = _dtype_of(q, q, q)
        ks, vs = _fp8_scales(q, k_scale, v_scale, HK, numpy)
    elif k_scale is not None or v_scale is not None:
        raise tiledsl.LaunchError("k_scale and v_scale apply to an e4m3 (float8_e4m3fn) KV cache only")
    else:
        dt = _dtype_of(q, k_cache, v_cache)
    scale = softmax_scale(scale, D)
    if tuple(cache_seqlens.shape) != (B,) or str(cache_seqlens.dtype) not in ("int32", "torch.int32"):
        raise tiledsl.LaunchError(f"cache_seqlens must be int32 ({B},), got {tuple(cache_seqlens.shape)} "
                                  f"{cache_seqlens.dtype}")
    if block_table is not None:
        page = k_cache.shape[1]
        if page_size is not None and page_size != page:
            raise tiledsl.LaunchError(f"page_size {page_size} disagrees with the paged cache's {page} rows a page")
        if page & (page - 1) or not 16 <= page <= 4096:
            raise tiledsl.LaunchError(f"the page size must be a power of two from 16, got {page}")
        if block_table.ndim != 2 or block_table.shape[0] != B or str(block_table.dtype) not in ("int32", "torch.int32"):
            raise tiledsl.LaunchError(f"block_table must be int32 (B={B}, max_pages), got {tuple(block_table.shape)} "
                                      f"{block_table.dtype}")
        capacity = block_table.shape[1] * page
    else:
        if page_size is not None:
            raise tiledsl.LaunchError("page_size needs a block_table (a contiguous cache has no pages)")
        if k_cache.shape[0] != B:
            raise tiledsl.LaunchError(f"a contiguous cache must be (B={B}, S_max, H_kv, D), got {tuple(k_cache.shape)}")
        page, capacity = 0, k_cache.shape[1]
    if validate or (validate is None and numpy):
        lens = np.asarray(_host_ints(cache_seqlens), np.int64)
        if (lens < 0).any() or (lens > capacity).any():
            raise tiledsl.LaunchError(f"cache_seqlens must lie in 0..{capacity} (the cache's capacity"
                                      f"{' (block_table pages x page_size)' if page else ''}), got {lens.tolist()[:8]}")
        if page:
            bt = np.asarray(_host_ints(block_table), np.int64)
            used = np.arange(bt.shape[1])[None, :] < -(-lens // page)[:, None]
            if ((bt < 0) | (bt >= k_cache.shape[0]))[used].any():
                raise tiledsl.LaunchError(f"block_table points past the cache's {k_cache.shape[0]} pages")
    if kernel is None:
        # decode_kernel.py takes head dims 64 and 128; an explicit kernel="split" at 256 is refused by make_decode
        split = WARP_SPLIT[kv8] and D != 256 and gates.allows("decode_warp_split", q)
        kernel = "split" if split else "ragged"
    if kernel not in ("split", "ragged"):
        raise tiledsl.LaunchError(f"kernel must be 'split' (decode_kernel.py) or 'ragged' (ragged.py), got {kernel!r}")
    maker = make_decode if kernel == "split" else functools.partial(make_ragged, "decode")
    make = functools.partial(maker, dt, D, causal, H, HK, scale, lq=LQ, page=page, lazy=lazy, kv8=kv8)
    probe = make()
    nqb = probe.nqb
    if splits is None:
        ns, kps = choose_splits(B, HK, nqb, capacity, sm_count(q), probe.per_sm)
    else:
        ns = max(1, int(splits))
        kps = -(-max(1, -(-capacity // BN)) // ns) * BN
        ns = max(1, -(-capacity // kps))
    kern = make(splits=ns, kps=kps if ns > 1 else 0)
    grid = (ns * nqb, HK, B)
    if numpy:
        z = np.zeros
        q, k_cache, v_cache = (np.ascontiguousarray(x) for x in (q, k_cache, v_cache))
        x2 = np.ascontiguousarray(block_table) if page else None
        out, lse = z((B, LQ, H, D), q.dtype), z((B, LQ, H), np.float32)
        if B == 0:
            return (out, lse) if return_lse else out
        run = (lambda kk, g, t, *a: interpreted(kk)[g, t](*a))
        mk = z
        counters = (lambda n: z((n,), np.int32))
    else:
        import torch
        dev = q.device
        q, k_cache, v_cache = (x.contiguous() for x in (q, k_cache, v_cache))
        if kv8:
            k_cache, v_cache = k_cache.view(torch.uint8), v_cache.view(torch.uint8)
        x2 = block_table.contiguous() if page else None
        out = torch.empty_like(q)
        lse = torch.empty((B, LQ, H), dtype=torch.float32, device=dev)
        if B == 0:
            return (out, lse) if return_lse else out
        if dev.type == "cpu":    # CPU tensors: the same kernels on the interpreter (the torch ops' convention)
            run = (lambda kk, g, t, *a: interpreted(kk)[g, t](*a))
        else:
            run = (lambda kk, g, t, *a: kk[g, t](*a))
        mk = (lambda shape, dtype: torch.empty(shape, dtype=torch.float32, device=dev))
        if dev.type == "cpu":
            counters = (lambda n: torch.zeros((n,), dtype=torch.int32))
        else:        # every launch leaves the counters at zero: made once per (device, stream, count)
            counters = (lambda n: stream_buffers(q, ("decode counters", n), lambda torch, device: torch.zeros(
                (n,), dtype=torch.int32, device=device)))
    seqlens = cache_seqlens if not numpy else np.ascontiguousarray(cache_seqlens)
    if not numpy:
        seqlens = seqlens.contiguous()
    if x2 is None:
        x2 = seqlens            # a contiguous cache: the kernel's block-table argument is unused
    scales = (ks, vs) if kv8 else ()
    work = ()
    if ns > 1:       # the splits' float32 partials and the groups' arrival counters (split_combine.py)
        work = (mk((ns, B, LQ, H, D), np.float32), mk((ns, B, LQ, H), np.float32), counters(B * HK * nqb))
    run(kern, grid, kern.threads, q, k_cache, v_cache, out, lse, seqlens, x2, *scales, *work)
    return (out, lse) if return_lse else out


def _fp8_scales(q, k_scale, v_scale, HK, numpy):
    """k_scale and v_scale as float32 (H_kv,) on q's device (one float broadcast to every kv head)."""
    if numpy:
        if q.dtype != np.float16:
            raise tiledsl.LaunchError(f"attention supports float16 and bfloat16, got {q.dtype}")
        return tuple(np.ascontiguousarray(np.broadcast_to(np.asarray(x, np.float32), (HK,)))
                     for x in (k_scale, v_scale))
    import torch

    def per_head(x, name):
        if isinstance(x, (int, float)):      # a fill kernel: as_tensor of a Python float copies from the host
            return torch.full((HK,), float(x), dtype=torch.float32, device=q.device)
        x = torch.as_tensor(x, dtype=torch.float32, device=q.device)
        if x.ndim == 0:
            x = x.expand(HK)
        if tuple(x.shape) != (HK,):
            raise tiledsl.LaunchError(f"{name} must be float32 (H_kv={HK},) or one float, got {tuple(x.shape)}")
        return x.contiguous()
    return per_head(k_scale, "k_scale"), per_head(v_scale, "v_scale")


def reference_decode(q, k_cache, v_cache, cache_seqlens, block_table=None, scale=None, causal=False):
    """float64 numpy (out (B, Lq, H, D), lse (B, Lq, H)): each sequence's keys gathered from its pages (or its rows
    of the contiguous cache), then attention with the bottom-right causal mask."""
    q = np.asarray(q, np.float64)
    B, LQ, H, D = q.shape
    g = H // k_cache.shape[2]
    scale = 1.0 / math.sqrt(D) if scale is None else scale
    out = np.zeros_like(q)
    lse = np.full((B, LQ, H), -np.inf)
    for b in range(B):
        n = int(cache_seqlens[b])
        if block_table is not None:
            P = k_cache.shape[1]
            rows = [(int(block_table[b, j // P]), j % P) for j in range(n)]
            k = np.array([k_cache[p, r] for p, r in rows], np.float64).reshape(n, k_cache.shape[2], D)
            v = np.array([v_cache[p, r] for p, r in rows], np.float64).reshape(n, k_cache.shape[2], D)
        else:
            k, v = np.asarray(k_cache[b, :n], np.float64), np.asarray(v_cache[b, :n], np.float64)
        out[b], lse[b] = attend_reference(q[b], k, v, g, causal, scale)
    return out, lse
