"""What the FlashAttention kernels and entry points of this package share: the checks of q, k, v and of the softmax
scale, the constants, and the `@tiledsl.inline` helpers every forward kernel (fa2.py, fa3.py, fp8.py) or both
backward kernels (fa2_backward.py, fa3_backward.py) call, written once so they agree.
"""
import math

import tiledsl
from tiledsl import T

LOG2E = 1.4426950408889634
LN2 = 0.6931471805599453
NEG = -math.inf
LAZY_BITS = 8.0         # lazy rescale (FA4's): a row's max moves only by more than this (log2 domain): P up to 2^8
DTYPES = {"torch.float16": "float16", "torch.bfloat16": "bfloat16", "float16": "float16"}


_INTERPRETED = {}      # kernel -> the same kernel run by the interpreter (host_launcher)


def host_launcher(kern, x):
    """What launches `kern` for torch tensor x: the kernel itself for a CUDA tensor; for a CPU tensor the same kernel
    on the interpreter (made once per kernel: its expanded program is then reused), which writes CPU tensors in
    place. The torch ops' CPU route (tiledsl.ops.library) runs the GPU's kernels this way."""
    if getattr(x, "device", None) is None or x.device.type != "cpu":
        return kern
    run = _INTERPRETED.get(kern)
    if run is None:
        run = _INTERPRETED.setdefault(kern, tiledsl.jit(kern.fn, interpret=True))
    return run


def check_qkv(q, k, v):
    """The checks every attention entry point makes of q, k, v: (dtype name, (B, H, H_kv, N, N_kv), D)."""
    if q.ndim != 4 or k.ndim != 4 or v.ndim != 4:
        raise tiledsl.LaunchError(f"q, k, v must be (B, H, N, D); got {tuple(q.shape)}, {tuple(k.shape)}, "
                                  f"{tuple(v.shape)}")
    B, H, N, D = q.shape
    if k.shape != v.shape or k.shape[0] != B or k.shape[3] != D:
        raise tiledsl.LaunchError(f"k {tuple(k.shape)} and v {tuple(v.shape)} must be (B, H_kv, N_kv, D) with "
                                  f"q's B={B} and D={D}")
    if H % k.shape[1]:
        raise tiledsl.LaunchError(f"k/v heads ({k.shape[1]}) must divide q's heads ({H})")
    if q.dtype != k.dtype or q.dtype != v.dtype:
        raise tiledsl.LaunchError(f"q, k, v must share one dtype; got {q.dtype}, {k.dtype}, {v.dtype}")
    dt = DTYPES.get(str(q.dtype))
    if dt is None:
        raise tiledsl.LaunchError(f"attention supports float16 and bfloat16, got {q.dtype}")
    return dt, (B, H, k.shape[1], N, k.shape[2]), D


def softmax_scale(scale, D: int) -> float:
    """The scale attention applies to q k^T: 1/sqrt(D) by default, else `scale`, which must be positive and finite
    (masked scores are -inf before scaling: a negative scale would turn them into +inf)."""
    scale = 1.0 / math.sqrt(D) if scale is None else float(scale)
    if not scale > 0 or math.isinf(scale):
        raise tiledsl.LaunchError(f"attention needs a positive finite scale, got {scale}")
    return scale


# The lazy rescale's max step (fa2.py's lazy=True, the FA3 kernels' config[8]: fa3_parts.softmax)
@tiledsl.inline
def lazy_max(m, sh, al, x, cs):
    """Row x's running max m moves to the tile's sh[x] only when it passes m by more than LAZY_BITS in the log2
    domain (cs: the scores' log2-domain scale; from -inf: any score, and -inf - -inf is NaN, so a row with no score
    yet stays -inf): al[x] is then the log2 rescale factor, else 0 (2^0 = 1 exactly). sh[x] becomes the max the
    tile's exponents are taken against."""
    if (sh[x, 0] - m[x, 0]) * cs > LAZY_BITS:
        al[x, 0] = m[x, 0] * cs - sh[x, 0] * cs
        m[x, 0] = sh[x, 0]
    else:
        al[x, 0] = 0.0
    sh[x, 0] = m[x, 0]


# The mma.sync forward kernels' online softmax over one tile's scores (fa2.py's kernel and ragged.py's varlen /
# decode kernel run the same lines): written once; the two kernels' PTX is what each emitted when it wrote them itself
@tiledsl.inline
def moved(al, rows):
    """lazy: whether the max of any of the thread's `rows` rows moved on this tile (its al, after ex2, is not 1)."""
    any_ = al[0, 0] != 1.0
    for x in T.unroll(1, rows):
        any_ = any_ or al[x, 0] != 1.0
    return any_


@tiledsl.inline
def online_softmax(s, m, sh, al, lsum, o, pk, MI, NI, DN, C, lazy, cvt):
    """One key tile's step of the online softmax for a thread's MI * 2 query rows: the new row max over the tile's
    scores s (MI x NI m16n8 C fragments) and the row's 4 lanes (m, sh, al: (MI * 2, 1) float32), the exponents
    2^(s C - m C) (one fma a score, ex2.approx.ftz), the row sums lsum, O (MI x DN fragments) rescaled by al (lazy:
    only when one of the thread's rows moved), and P packed to f16x2 / bf16x2 words `pk` by `cvt` in the A fragment
    order of P V's k16 steps. C: the scores' log2-domain scale."""
    for x in T.unroll(MI * 2):
        mi, r = x // 2, x % 2
        sh[x, 0] = m[x, 0]
        for n in T.unroll(NI):
            e0 = (mi * NI + n) * 4 + 2 * r
            sh[x, 0] = T.max(sh[x, 0], T.max(s[e0], s[e0 + 1]))
    for k in T.unroll(2):
        T.cuda.tile.apply(T.ptx["shfl.sync.bfly.b32"], al, sh, 1 << k, 0x1F, 0xFFFFFFFF)
        for x in T.unroll(MI * 2):
            sh[x, 0] = T.max(sh[x, 0], al[x, 0])
    for x in T.unroll(MI * 2):
        mi, r = x // 2, x % 2
        if lazy:
            lazy_max(m, sh, al, x, C)
        # a row with no score yet keeps m = -inf: use 0 as its base so no inf - inf appears
        mc = sh[x, 0] * C if sh[x, 0] != NEG else 0.0
        if not lazy:
            al[x, 0] = m[x, 0] * C - mc
            m[x, 0] = sh[x, 0]
        # the exponent s * C - m * C as one fma per score (scalar * and + round separately: two ops)
        srow = s.view(MI, NI, 2, 2, 1)[x // 2, :, x % 2]
        T.cuda.tile.apply(T.ptx["fma.rn.f32"], srow, srow, C, -mc)
    T.cuda.tile.apply(T.ptx["ex2.approx.ftz.f32"], s.view(MI * NI * 4, 1), s.view(MI * NI * 4, 1))
    T.cuda.tile.apply(T.ptx["ex2.approx.ftz.f32"], al, al)
    for x in T.unroll(MI * 2):
        mi, r = x // 2, x % 2
        acc = lsum[x, 0] * al[x, 0]
        for n in T.unroll(NI):
            e0 = (mi * NI + n) * 4 + 2 * r
            acc = acc + s[e0] + s[e0 + 1]
        lsum[x, 0] = acc
    # lazy: al is exactly 1 for a row whose max stayed; the 4 * MI * DN multiplies run only when one of the thread's
    # rows moved
    if moved(al, MI * 2) if lazy else True:
        for i in T.unroll(MI * DN * 4):
            o[i] = o[i] * al[2 * (i // (DN * 4)) + (i % 4) // 2, 0]
    pairs = s.view(MI * NI * 2, 2)
    T.cuda.tile.apply(T.ptx[cvt], pk, pairs[:, 1:2], pairs[:, 0:1])


# The causal tile count of every forward kernel (fa2.py's, and the FA3 ones of fa3.py and fp8.py): one
# definition, so the three agree. One expression (not an assignment the causal case
# overwrites): the kernels' PTX stays what it was when each wrote these lines itself.
@tiledsl.inline
def key_tiles(qb, NKT, BM, BN, causal, qoff=0):
    """The key tiles (of BN keys; NKT in all) that query block qb (of BM rows, the first qoff of the first block
    below row 0) visits: causal stops at the one holding the block's last row's diagonal."""
    return T.min(NKT, ((qb + 1) * BM - qoff + BN - 1) // BN) if causal else NKT


@tiledsl.inline
def cast_row8(X, src, Y, i, dtype):
    """Y's row i (8 values of `dtype`, round to nearest even) from X's row src (8 float32): two 16-byte loads and
    one 16-byte store a thread. The gradient casts of fa2_backward.py and fa3_backward.py's dQ cast differ only
    in which row they read."""
    f = T.alloc_local((2, 4), "uint32")
    ff = f.view(dtype="float32")
    Xw = X.view(dtype="uint32")
    T.cuda.tile.apply(T.ptx["ld.global.v4.b32"], f[0], Xw[src, 0:4])
    T.cuda.tile.apply(T.ptx["ld.global.v4.b32"], f[1], Xw[src, 4:8])
    r = T.alloc_local((1, 4), "uint32")
    h = r.view(dtype=dtype)
    for j in T.unroll(8):
        h[0, j] = T.cast(ff[j // 4, j % 4], dtype)
    T.cuda.tile.apply(T.ptx["st.global.v4.b32"], Y.view(dtype="uint32")[i, 0:4], r[0])


@tiledsl.inline
def e4m3_halves_to_f16(t):
    """A word whose two halves each hold an e4m3 byte in their low byte, as an f16x2 word of those values times
    2^-8: s.eeee.mmm becomes the f16 bits s.0eeee.mmm0000000 by shifts and masks, exact for normal and subnormal
    e4m3 alike (f16's exponent bias 15 against e4m3's 7); the e4m3fn NaN bytes become finite values."""
    return ((t & T.uint32(0x007F007F)) << 7) | ((t & T.uint32(0x00800080)) << 8)


@tiledsl.inline
def e4m3x4_to_f16(w):
    """Four e4m3 bytes (a uint32 word, byte 0 first) as two f16x2 words (byte 0 in the first word's low half), each
    value times 2^-8 (e4m3_halves_to_f16)."""
    t0 = (w & T.uint32(0xFF)) | ((w & T.uint32(0xFF00)) << 8)
    t1 = ((w >> 16) & T.uint32(0xFF)) | ((w >> 8) & T.uint32(0xFF0000))
    return (e4m3_halves_to_f16(t0), e4m3_halves_to_f16(t1))


@tiledsl.inline
def bf16_chunk_to_f16(cp_q, r, ch):
    """A 16-byte chunk (4 words: row r, chunk ch of a shared tile view) of bfloat16 values as f16, in place: each
    bf16 is the top half of its float32, then cvt.rn.f16x2.f32 (exact in range; |x| > 65504 overflows)."""
    w = T.alloc_local((4, 2), "uint32")
    for i in T.unroll(4):
        x = cp_q[r, ch, i]
        w[i, 0] = x << 16
        w[i, 1] = x & T.uint32(0xFFFF0000)
    f = w.view(dtype="float32")
    hw = T.alloc_local((4, 1), "uint32")
    T.cuda.tile.apply(T.ptx["cvt.rn.f16x2.f32"], hw, f[:, 1:2], f[:, 0:1])
    for i in T.unroll(4):
        cp_q[r, ch, i] = hw[i, 0]


@tiledsl.inline
def decode_keys(K, b, sp, seqlen, paged, split, kps):
    """A decode block's keys: (kb, the first cache row of sequence b (contiguous cache; 0 when paged), last_page,
    the last page index (paged), k_lo, k_hi: split sp's keys [sp * kps, ...) within the sequence's seqlen)."""
    if paged:
        kb = 0
        last_page = K.shape[0] - 1
    else:
        kb = b * K.shape[1]
        last_page = 0
    k_lo = sp * kps if split else 0
    k_hi = T.min(seqlen, k_lo + kps) if split else seqlen
    return (kb, last_page, k_lo, k_hi)
