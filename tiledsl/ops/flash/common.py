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
