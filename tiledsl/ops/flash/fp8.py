"""FlashAttention forward in FP8 (e4m3) on Hopper (sm_90a), FA3 style, written only in the kernel language: the
producer/consumer schedule of fa3.py (read its docstring first) with both matrix products on
e4m3 wgmma (k32 steps, f32 accumulators).

attention_fp8(q, k, v, scale_q=1.0, scale_k=1.0, scale_v=1.0, causal=False, scale=None, out_dtype=bfloat16)
-> (O, LSE): q (B, H, N, D), k and v (B, H_kv, N_kv, D) in float8_e4m3fn, with per-tensor DEscale factors as
torch._scaled_mm and FA3 take them (the real values are scale_q * q, ...; floats or 1-element float32 tensors, > 0).
D in {64, 128, 256}, any N, grouped-query attention and causal (top-left) as attention_hopper. O is out_dtype
(bfloat16 or float16), LSE float32 (B, H, N) in natural log of the real scores.

What differs from the f16/bf16 kernel, and why:
  * e4m3 wgmma reads both shared operands K-major only (no transpose bit). S = Q K^T is K-major as stored (rows
    of D bytes); the TMA boxes are 128 bytes wide (64 at D = 64, with the 64-byte swizzle) and 32-byte K steps;
  * O += P V needs V K-major, i.e. V^T (D, N_kv) with the keys contiguous. THE HOST WRAPPER TRANSPOSES V ONCE with
    torch (numpy on the interpreter), one pass over V that the benchmark times as part of attention_fp8;
  * P goes through registers as wgmma's A fragment. The fp8 fragment gives thread (l % 4 = t) the 4 consecutive
    keys 16q + 4t .. 16q + 4t + 3 of each 16-key block q (row half r % 2), but S's accumulators give it keys
    16q + 2t, +1, 16q + 8 + 2t, +1. Instead of permuting bytes across lanes in the loop (FA3's byte permute), the
    host's transpose also permutes the keys inside every 16-key block: column 4t + 2a + b of the block in V^T holds
    key 8a + 2t + b, so A position 4t + j meets exactly the key whose probability the thread holds. P V sums over
    keys, so the order is free; the masks and LSE still see true key indices (K is not permuted);
  * P: the f32 probabilities (in [0, 1] after the online softmax's max subtraction) become e4m3 pairs with
    cvt.rn.satfinite.e4m3x2.f32 (16-bit halves) and two halves one A word with mov.b32 {lo, hi}. The row sums use
    the f32 values (as FA3), so O carries P's rounding (3 mantissa bits: up to 2^-4 relative per probability);
  * the descales: scores are scaled by scale * scale_q * scale_k (folded into the softmax's one fma per score,
    read from a 3-element float32 tensor at run time so new descales do not recompile), and O by scale_v / l.
"""
import math

import numpy as np

import tiledsl
from tiledsl import T
from tiledsl.layout import S, TileLayout, laneid, wid_in_wg

from ...lib.producer import consumer_registers, warpgroup_index
from .common import key_tiles, softmax_scale
from .fa3 import CONSUMER_REGS, LOG2E, PRODUCER_REGS, SMEM_LIMIT, _flat
from .fa3_parts import forward_parts

SWIZZLE = {64: (2, 4, 3), 128: (3, 4, 3)}   # 16-byte chunk c of a 64/128-byte row r at c ^ (r % 4 or 8), in bytes
KEY_BLOCK = 16                              # V^T's keys are permuted within blocks of 16 (the P fragment's period)

# (consumers, BN, stages, overlap) per head dim, as fa3.CONFIGS; BN is 64 or 128 (one V^T box of 64
# or 128 bytes of keys per row). Not yet measured on the H200: the f16 kernel's choices (serial schedule at D >= 128)
CONFIGS = {64: (2, 128, 4, 1), 128: (2, 128, 2, 0), 256: (2, 64, 2, 0)}
SUPPORTED_D = tuple(CONFIGS)
# what a benchmark may compare (each assembles without spills: tests/test_attention_fp8.py)
CANDIDATES = {64: [(2, 128, 4, 1), (2, 128, 2, 0), (3, 128, 2, 1)],
              128: [(2, 128, 2, 0), (2, 128, 2, 1), (2, 128, 3, 1), (2, 128, 4, 0)],
              256: [(2, 64, 2, 0), (2, 64, 2, 1), (2, 128, 2, 0)]}
OUT_TYPES = {"float16": "f16", "bfloat16": "bf16"}

_KERNELS = {}


def layouts(D: int, bm: int, bn: int, stages: int, consumers: int) -> dict:
    """Shared memory as the TMA unit writes it and as wgmma reads it (bytes), and the register fragments. Q is (D/BC
    boxes, BM rows, BC bytes) and K (stage, D/BC boxes, BN rows, BC bytes), BC = min(D, 128); V^T is (stage, D rows,
    BN keys)."""
    bc = min(D, 128)
    dh, ks, kr = D // bc, bc // 32, bn // 32
    L = {}
    L["tma_q"] = T.tma_layout((dh, 1, bm, bc), "uint8", bc)
    L["tma_k"] = T.tma_layout((stages, dh, 1, bn, bc), "uint8", bc)
    L["tma_v"] = T.tma_layout((stages, 1, D, bn), "uint8", bn)
    # Q as A (ss, K-major): (box, consumer, M rep, K step, 64 rows, 32 k)
    L["wg_q"] = TileLayout(S[(dh, consumers, 1, ks, 64, 32) : (bm * bc, 64 * bc, 1, 32, bc, 1)],
                           swizzle=SWIZZLE[bc])
    # K as B (K-major): (stage, box, N rep, K step, BN keys, 32 k)
    L["wg_k"] = TileLayout(S[(stages, dh, 1, ks, bn, 32) : (dh * bn * bc, bn * bc, 1, 32, bc, 1)],
                           swizzle=SWIZZLE[bc])
    # V^T as B (K-major over the keys): (stage, N rep, key step, D rows, 32 keys)
    L["wg_v"] = TileLayout(S[(stages, 1, kr, D, 32) : (D * bn, 1, 32, bn, 1)], swizzle=SWIZZLE[bn])
    # P as A (rs, e4m3): word 4 kk + r -> row 16w + l//4 + 8(r%2), word column 4(r//2) + l%4 of key step kk
    L["p"] = TileLayout(S[(1, kr, 4, 2, 8, 2, 4) : (1, 4, 1 @ wid_in_wg, 1, 4 @ laneid, 2, 1 @ laneid)])
    # the e4m3 halves h[4q + 2s + a] (16-key block q, row half s, a: keys 8a + ..) as the cvt writes them, indexed
    # like S's registers (q, a, s): S register 8q + 4a + 2s + b
    L["halves"] = TileLayout(S[(bn // 16, 2, 2, 1) : (4, 1, 2, 1)])
    return L


def smem_bytes(D: int, consumers: int, bn: int, stages: int) -> int:
    """Shared memory of the Q tile and the K/V ring in bytes (the barriers and alignment add under 2 KB)."""
    return 64 * consumers * D + 2 * stages * bn * D


def make_attention_fp8(out, D, causal, shape, scale, config=None):
    """The FP8 forward kernel for output dtype `out` ("bfloat16"/"float16"), head dim D, causal or not, shape =
    (B, H, H_kv, N, N_kv) and softmax scale `scale` (the descales come at run time); sm_90a only.

    config = (consumers, BN, stages, overlap) as attention_hopper's (BN 64 or 128). Arguments: Q (B * H, N, D) and
    K (B * H_kv, N_kv, D) as uint8 (e4m3 bytes; tensor maps), VT (B * H_kv, D, N_kv rounded up to 16) the
    key-permuted V^T (vt_permuted), O (B, H, N, D), LSE (B, H, N) float32, DESCALE (3,) float32: q, k, v."""
    if D not in SUPPORTED_D:
        raise tiledsl.LaunchError(f"attention_fp8 supports head dims {', '.join(map(str, SUPPORTED_D))}, got {D}")
    config = tuple(config or CONFIGS[D])
    key = (out, D, bool(causal), tuple(shape), float(scale), config)
    if key in _KERNELS:
        return _KERNELS[key]
    if out not in OUT_TYPES:
        raise tiledsl.LaunchError(f"attention_fp8 writes O as bfloat16 or float16, not {out}")
    if len(config) != 4:
        raise tiledsl.LaunchError(f"attention_fp8 configuration {config}: (consumers, BN, stages, overlap)")
    CONS, BN, STG, OVERLAP = config
    B, H, HK, N, NK = shape
    if H % HK:
        raise tiledsl.LaunchError(f"k/v have {HK} heads, which does not divide q's {H}")
    if CONS not in (1, 2, 3) or BN not in (64, 128) or STG < 2 or OVERLAP not in (0, 1) or \
            smem_bytes(D, CONS, BN, STG) + 2048 > SMEM_LIMIT:
        raise tiledsl.LaunchError(f"attention_fp8 configuration {config}: 1 to 3 consumers, BN 64 or 128, at "
                                  f"least 2 stages, overlap 0 or 1, within {SMEM_LIMIT} bytes of shared memory")
    MMA_S = f"wgmma.mma_async.sync.aligned.m64n{BN}k32.f32.e4m3.e4m3"
    MMA_O = f"wgmma.mma_async.sync.aligned.m64n{D}k32.f32.e4m3.e4m3"
    CVT_P = "cvt.rn.satfinite.e4m3x2.f32"
    CVT_O = f"cvt.rn.{OUT_TYPES[out]}x2.f32"
    BM = 64 * CONS
    THREADS = 128 * (1 + CONS)
    BC = min(D, 128)                    # bytes (e4m3 columns) of one Q/K box
    DH, KR = D // BC, BN // 32
    NKP = -(-NK // KEY_BLOCK) * KEY_BLOCK
    NS = BN // 2                        # f32 accumulators of S per consumer thread
    NQB = -(-N // BM)                   # query blocks per head
    NKT = -(-NK // BN)                  # key tiles
    GROUP = H // HK
    C0 = float(scale) * LOG2E           # scores to the log2 domain (times the q and k descales at run time)
    TXQ, TXKV = BM * D, BN * D           # bytes the boxes pay to their barriers (K's and V^T's are the same)
    CAP = min((65536 // THREADS) // 8 * 8, 248)
    CREGS = consumer_registers(THREADS, CAP, CONS, PRODUCER_REGS, CONSUMER_REGS)
    LY = layouts(D, BM, BN, STG, CONS)
    L_TQ, L_TK, L_TV, L_WQ, L_WK, L_WV = LY["tma_q"], LY["tma_k"], LY["tma_v"], LY["wg_q"], LY["wg_k"], LY["wg_v"]
    L_P, L_H = LY["p"], LY["halves"]
    STEP = ((0, 0, BC),)                # the D / BC boxes of a Q or K tile: BC columns apart

    @tiledsl.inline
    def p_regs():
        """P's registers: the e4m3 pairs hp and the A words pk they are packed into (viewed as wgmma's A fragment)."""
        hp = T.alloc_local((NS // 2,), "uint16")
        pk = T.alloc_local((NS // 4, 1), "uint32")
        return pk, hp, pk.view(1, KR, 64, 8, layout=L_P)

    @tiledsl.inline
    def to_p(pk, hp, sacc):
        """P of S's probabilities as e4m3 A words: halves h[4q + 2s + a] = (S[8q + 4a + 2s + 1], S[8q + 4a + 2s])
        (the upper byte first), then word 2q + s = {h[4q + 2s], h[4q + 2s + 1]}: keys 16q + 4t + (0..3) in V^T's
        permuted order."""
        s4 = sacc.view(BN // 16, 2, 2, 2)
        T.cuda.tile.apply(T.ptx[CVT_P], hp.view(BN // 16, 2, 2, 1, layout=L_H), s4[:, :, :, 1:2], s4[:, :, :, 0:1])
        T.cuda.tile.apply(T.ptx["mov.b32"], pk, hp.view(BN // 8, 2))

    parts = forward_parts(shape=shape, D=D, BN=BN, STG=STG, CONS=CONS, boxes=DH, step=STEP, tx_q=TXQ, tx_kv=TXKV,
                          causal=causal, mma_s=MMA_S, mma_o=MMA_O, trans_v=False, cvt_o=CVT_O, overlap=OVERLAP,
                          pingpong=0, p_regs=p_regs, to_p=to_p,
                          producer_regs=PRODUCER_REGS)
    ring_barriers, produce, consume, store = parts.ring_barriers, parts.produce, parts.consume, parts.store

    @tiledsl.jit
    def attention_fp8_fa3(Q: T.TensorMap((B * H, N, D), "uint8", box=(1, BM, BC), swizzle=BC),
                          K: T.TensorMap((B * HK, NK, D), "uint8", box=(1, BN, BC), swizzle=BC),
                          VT: T.TensorMap((B * HK, D, NKP), "uint8", box=(1, D, BN), swizzle=BN),
                          O: T.Tensor((B, H, N, D), out), LSE: T.Tensor((B, H, N), "float32"),
                          DESCALE: T.Tensor((3,), "float32")):
        T.device_entry(launch=T.cuda.LaunchConfig(grid=NQB * B * H, block=THREADS, max_registers=CAP))
        tid = T.cuda.thread_id()
        wg = warpgroup_index(tid)
        pid = T.cuda.block_id()
        bh = pid // NQB
        qb = pid % NQB
        if causal:
            qb = NQB - 1 - qb
        b = bh // H
        h = bh % H
        hk = h // GROUP
        sq = T.alloc_shared((DH * BM * BC,), "uint8")
        sk = T.alloc_shared((STG * DH * BN * BC,), "uint8")
        sv_ = T.alloc_shared((STG * D * BN,), "uint8")
        qbar, fullk, fullv, empty = ring_barriers(tid)
        tq = sq.view(DH, 1, BM, BC, layout=L_TQ)
        tk = sk.view(STG, DH, 1, BN, BC, layout=L_TK)
        tv = sv_.view(STG, 1, D, BN, layout=L_TV)
        wq = sq.view(DH, CONS, 1, BC // 32, 64, 32, layout=L_WQ)
        wk = sk.view(STG, DH, 1, BC // 32, BN, 32, layout=L_WK)
        wv = sv_.view(STG, 1, KR, D, 32, layout=L_WV)
        ntiles = key_tiles(qb, NKT, BM, BN, causal)
        if wg == 0:
            produce(Q, K, VT, tq, tk, tv, qbar, fullk, fullv, empty, bh, qb, b, hk, ntiles)
        else:
            T.cuda.tile.apply(T.ptx["setmaxnreg.inc.sync.aligned.u32"], CREGS)
            c = wg - 1
            lane = tid % 32
            w = (tid % 128) // 32
            cs = C0 * DESCALE[0] * DESCALE[1]           # the log2-domain scale of the raw e4m3 scores
            row0 = qb * BM + 64 * c + 16 * w + lane // 4
            oacc, lsum, m, al = consume(c, lane, row0, qb, ntiles, wq, wk, wv, qbar, fullk, fullv, empty, cs)

            # epilogue: O * scale_v / l, LSE
            dv = DESCALE[2]
            store(O, LSE, oacc, lsum, m, al, dv, cs, row0, lane, bh, b, h)

    attention_fp8_fa3.tile = (BM, BN)
    _KERNELS[key] = attention_fp8_fa3
    return attention_fp8_fa3


def vt_permuted(v, xp=np):
    """V (B, H_kv, N_kv, D) of e4m3 bytes -> V^T (B, H_kv, D, N_kv rounded up to 16, zero-padded) with the keys of
    every 16-key block reordered: column 4t + 2a + b holds key 8a + 2t + b (the P fragment's order; module doc).
    xp: numpy, or torch for torch tensors (then one permute-copy on the GPU)."""
    B, HK, NK, D = v.shape
    pad = -NK % KEY_BLOCK
    if xp is np:
        v = np.pad(v, ((0, 0), (0, 0), (0, pad), (0, 0))) if pad else v
        r = v.reshape(B, HK, (NK + pad) // 16, 2, 4, 2, D).transpose(0, 1, 6, 2, 4, 3, 5)
        return np.ascontiguousarray(r).reshape(B, HK, D, NK + pad)
    if pad:
        v = xp.nn.functional.pad(v, (0, 0, 0, pad))
    r = v.reshape(B, HK, (NK + pad) // 16, 2, 4, 2, D).permute(0, 1, 6, 2, 4, 3, 5)
    return r.contiguous().reshape(B, HK, D, NK + pad)


def _descales(scale_q, scale_k, scale_v, device):
    """The (3,) float32 descale tensor the kernel reads: floats (checked > 0) or 1-element float32 tensors (kept on
    the device: no synchronising read; they must be > 0, which the kernel cannot check)."""
    import torch
    parts = []
    for name, s in (("scale_q", scale_q), ("scale_k", scale_k), ("scale_v", scale_v)):
        if isinstance(s, torch.Tensor):
            if s.numel() != 1:
                raise tiledsl.LaunchError(f"attention_fp8: {name} must be a float or a 1-element tensor, got shape "
                                          f"{tuple(s.shape)}")
            parts.append(s.reshape(1).to(device=device, dtype=torch.float32))
        else:
            parts.append(torch.tensor([_positive(name, s)], dtype=torch.float32, device=device))
    return torch.cat(parts)


def _positive(name, s) -> float:
    s = float(s)
    if not s > 0 or math.isinf(s):
        raise tiledsl.LaunchError(f"attention_fp8: {name} must be positive and finite, got {s}")
    return s


def _check_fp8(q, k, v):
    """(shape, D) of e4m3 q, k, v: torch float8_e4m3fn tensors, or numpy uint8 arrays of e4m3 bytes."""
    if q.ndim != 4 or k.ndim != 4 or v.ndim != 4:
        raise tiledsl.LaunchError(f"q, k, v must be (B, H, N, D); got {tuple(q.shape)}, {tuple(k.shape)}, "
                                  f"{tuple(v.shape)}")
    B, H, N, D = q.shape
    if tuple(k.shape) != tuple(v.shape) or k.shape[0] != B or k.shape[3] != D:
        raise tiledsl.LaunchError(f"k {tuple(k.shape)} and v {tuple(v.shape)} must be (B, H_kv, N_kv, D) with "
                                  f"q's B={B} and D={D}")
    if H % k.shape[1]:
        raise tiledsl.LaunchError(f"k/v heads ({k.shape[1]}) must divide q's heads ({H})")
    want = "uint8" if isinstance(q, np.ndarray) else "torch.float8_e4m3fn"
    for name, x in (("q", q), ("k", k), ("v", v)):
        if str(x.dtype) != want:
            raise tiledsl.LaunchError(f"attention_fp8: {name} must be {want} (e4m3), got {x.dtype}")
    if D not in SUPPORTED_D:
        raise tiledsl.LaunchError(f"attention_fp8 supports head dims {', '.join(map(str, SUPPORTED_D))}, got {D}")
    return (B, H, k.shape[1], N, k.shape[2]), D


def attention_fp8(q, k, v, scale_q=1.0, scale_k=1.0, scale_v=1.0, causal=False, scale=None, out_dtype=None,
                  config=None):
    """(O, LSE) of softmax(scale * (scale_q q)(scale_k k)^T [causal mask]) (scale_v v) for e4m3 q (B, H, N, D), k
    and v (B, H_kv, N_kv, D): torch float8_e4m3fn CUDA tensors on an sm_90 GPU (O out_dtype, default
    torch.bfloat16), or numpy uint8 arrays of e4m3 bytes on the CPU interpreter (descales floats; O float16).

    V is transposed (and its keys permuted) once per call on the host side (vt_permuted): part of the call's time.
    scale defaults to 1/sqrt(D); LSE is float32 (B, H, N), natural log, of the descaled, scaled scores."""
    shape, D = _check_fp8(q, k, v)
    scale = softmax_scale(scale, D)
    B, H, _, N, _ = shape
    if isinstance(q, np.ndarray):
        if out_dtype not in (None, np.float16, "float16"):
            raise tiledsl.LaunchError("attention_fp8 on the interpreter writes O as float16")
        kern = make_attention_fp8("float16", D, causal, shape, scale, config)
        desc = np.array([_positive(n, s) for n, s in (("scale_q", scale_q), ("scale_k", scale_k),
                                                      ("scale_v", scale_v))], np.float32)
        q, k = np.ascontiguousarray(q), np.ascontiguousarray(k)
        vt = vt_permuted(v)
        o = np.zeros(q.shape, np.float16)
        lse = np.zeros((B, H, N), np.float32)
        tiledsl.jit(kern.fn, interpret=True)(*_flat(q, k, vt), o, lse, desc)
        return o, lse
    import torch
    out_dtype = out_dtype or torch.bfloat16
    out = {torch.bfloat16: "bfloat16", torch.float16: "float16"}.get(out_dtype)
    if out is None:
        raise tiledsl.LaunchError(f"attention_fp8 writes O as torch.bfloat16 or torch.float16, not {out_dtype}")
    kern = make_attention_fp8(out, D, causal, shape, scale, config)
    q8, k8 = (x.contiguous().view(torch.uint8) for x in (q, k))
    vt = vt_permuted(v.contiguous().view(torch.uint8), torch)
    o = torch.empty(q.shape, dtype=out_dtype, device=q.device)
    lse = torch.empty((B, H, N), dtype=torch.float32, device=q.device)
    kern(*_flat(q8, k8, vt), o, lse, _descales(scale_q, scale_k, scale_v, q.device))
    return o, lse


def quantize_e4m3(x, amax=None):
    """numpy float array -> (e4m3 bytes, descale) with the per-tensor scale that maps max |x| to 448 (the
    interpreter tests' and the demo's quantiser; torch users call x.to(torch.float8_e4m3fn) themselves)."""
    from tiledsl.interpreter import rounding as R
    x = np.asarray(x, np.float64)
    amax = float(np.abs(x).max()) if amax is None else float(amax)
    descale = amax / 448.0 if amax > 0 else 1.0
    r = R.round_to(R.E4M3, x / descale, None, "rn")
    r = np.clip(r, -448.0, 448.0)
    return R.encode(R.E4M3, r), descale


def dequantize_e4m3(b, descale=1.0):
    """e4m3 bytes -> float64 values times descale."""
    from tiledsl.interpreter import rounding as R
    return R.decode(R.E4M3, b) * descale
