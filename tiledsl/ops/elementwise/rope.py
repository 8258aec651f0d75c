"""The fused QKV split + rotary position embedding (RoPE): the output of one GEMM over the concatenated
[W_q; W_k; W_v] weight, (B, L, (H + 2 H_kv) D), becomes q and k rotated by their token's position and v copied, each
written where the attention reads it, in one pass (no separate split, transpose-copy or rotation kernels).

Rotation (Llama / GPT-NeoX "rotate half" convention): for i < D/2 and angle pos * theta^(-2i/D),
  y[i] = x[i] cos - x[i + D/2] sin,   y[i + D/2] = x[i + D/2] cos + x[i] sin,
with cos and sin read from float32 (P, D/2) tables (the host builds them once) and the math in float32, rounded once
at the store. Positions are int32 (B, L) ("bhld"), or (B,) cache lengths that the L new tokens follow ("paged"),
read on the device (clamped to the table: an out-of-range position reads the last row rather than memory past the
table).

Layouts (`layout`):
- "bhld": q (B, H, L, D), k and v (B, H_kv, L, D): the attention op's (B, heads, tokens, D), contiguous.
- "paged": q (B, L, H, D) (attention_decode's), and k, v written into a paged KV cache (num_pages, page, H_kv, D)
  at row pos % page of page block_table[b, pos // page], pos = cache_seqlens[b] + l: the decode step's cache update
  in the same pass (and its positions from the cache lengths, with no separate kernel to make them).

Backward ("bhld" only): dqkv from dq, dk, dv by the inverse rotation (sin negated), in the packed layout.

A block per token and HPB of its H + 2 H_kv heads (HPB the most of 8, 4, 2, 1 dividing the heads within 512
threads: one block per (token, head) would be 64-thread blocks doing a few loads each, and a training step's
400 thousand of them would be paced by block launches), D/2 threads a head: thread i of a head owns elements i and
i + D/2."""
import tiledsl
from tiledsl import T

LAYOUTS = ("bhld", "paged")
MAX_THREADS = 512
_KERNELS = {}


def heads_per_block(H, HK, D):
    NT = H + 2 * HK
    return next(h for h in (8, 4, 2, 1) if NT % h == 0 and (h == 1 or h * (D // 2) <= MAX_THREADS))


def launch(B, L, H, HK, D):
    """(grid, threads) of the kernels for B x L tokens."""
    hpb = heads_per_block(H, HK, D)
    return (B * L, (H + 2 * HK) // hpb), hpb * (D // 2)


def make_qkv_rope(H, HK, D, dtype, layout="bhld", backward=False):
    """Kernels (launch(B, L, H, HK, D): grid (B * L, (H + 2 H_kv) / HPB), HPB * D / 2 threads):
    bhld forward:  (QKV (B, L, NT D), Pos (B, L) int32, Cos (P, D/2) f32, Sin, Q (B, H, L, D), K (B, HK, L, D), V)
    paged forward: (QKV, Lens (B,) int32, Cos, Sin, Q (B, L, H, D), Kc (NP, PG, HK, D), Vc, BT (B, MP) int32):
                   token l of sequence b at position Lens[b] + l (Lens: the tokens cached before these)
    bhld backward: (DQ (B, H, L, D), DK, DV, Pos, Cos, Sin, DQKV (B, L, NT D))."""
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    if backward and layout != "bhld":
        raise ValueError("the backward kernel is for the 'bhld' layout only (the paged one is inference)")
    key = (H, HK, D, dtype, layout, backward)
    if key in _KERNELS:
        return _KERNELS[key]
    NT = H + 2 * HK
    D2 = D // 2
    HPB = heads_per_block(H, HK, D)
    ROWS = 2 ** 40 // D          # the paged caches viewed as (rows, D) rows addressed in 64 bits

    if backward:
        @tiledsl.jit
        def qkv_rope_backward(DQ: T.Tensor(("B", H, "L", D), dtype), DK: T.Tensor(("B", HK, "L", D), dtype),
                              DV: T.Tensor(("B", HK, "L", D), dtype), Pos: T.Tensor(("B", "L"), "int32"),
                              Cos: T.Tensor(("P", D2), "float32"), Sin: T.Tensor(("P", D2), "float32"),
                              DQKV: T.Tensor(("B", "L", NT * D), dtype)):
            T.device_entry(launch=T.cuda.LaunchConfig(grid=(1, NT // HPB), block=D2 * HPB))
            t = T.cuda.block_id(0)
            b = t // L  # noqa: F821
            l = t % L  # noqa: F821, E741
            hh = T.cuda.block_id(1) * HPB + T.cuda.thread_id() // D2
            i = T.cuda.thread_id() % D2
            y1 = T.float32(0)
            y2 = T.float32(0)
            if hh < H:
                y1 = T.cast(DQ[b, hh, l, i], "float32")
                y2 = T.cast(DQ[b, hh, l, i + D2], "float32")
            elif hh < H + HK:
                y1 = T.cast(DK[b, hh - H, l, i], "float32")
                y2 = T.cast(DK[b, hh - H, l, i + D2], "float32")
            else:
                y1 = T.cast(DV[b, hh - H - HK, l, i], "float32")
                y2 = T.cast(DV[b, hh - H - HK, l, i + D2], "float32")
            c = T.float32(1)
            s = T.float32(0)
            if hh < H + HK:
                pos = T.min(T.max(Pos[b, l], 0), P - 1)  # noqa: F821
                c = Cos[pos, i]
                s = Sin[pos, i]
            DQKV[b, l, hh * D + i] = T.cast(y1 * c + y2 * s, dtype)          # the transpose of the rotation
            DQKV[b, l, hh * D + i + D2] = T.cast(y2 * c - y1 * s, dtype)

        _KERNELS[key] = qkv_rope_backward
        return qkv_rope_backward

    if layout == "bhld":
        @tiledsl.jit
        def qkv_rope(QKV: T.Tensor(("B", "L", NT * D), dtype), Pos: T.Tensor(("B", "L"), "int32"),
                     Cos: T.Tensor(("P", D2), "float32"), Sin: T.Tensor(("P", D2), "float32"),
                     Q: T.Tensor(("B", H, "L", D), dtype), K: T.Tensor(("B", HK, "L", D), dtype),
                     V: T.Tensor(("B", HK, "L", D), dtype)):
            T.device_entry(launch=T.cuda.LaunchConfig(grid=(1, NT // HPB), block=D2 * HPB))
            t = T.cuda.block_id(0)
            b = t // L  # noqa: F821
            l = t % L  # noqa: F821, E741
            hh = T.cuda.block_id(1) * HPB + T.cuda.thread_id() // D2
            i = T.cuda.thread_id() % D2
            x1 = T.cast(QKV[b, l, hh * D + i], "float32")
            x2 = T.cast(QKV[b, l, hh * D + i + D2], "float32")
            c = T.float32(1)
            s = T.float32(0)
            if hh < H + HK:
                pos = T.min(T.max(Pos[b, l], 0), P - 1)  # noqa: F821
                c = Cos[pos, i]
                s = Sin[pos, i]
            y1 = T.cast(x1 * c - x2 * s, dtype)
            y2 = T.cast(x2 * c + x1 * s, dtype)
            if hh < H:
                Q[b, hh, l, i] = y1
                Q[b, hh, l, i + D2] = y2
            elif hh < H + HK:
                K[b, hh - H, l, i] = y1
                K[b, hh - H, l, i + D2] = y2
            else:
                V[b, hh - H - HK, l, i] = y1
                V[b, hh - H - HK, l, i + D2] = y2

        _KERNELS[key] = qkv_rope
        return qkv_rope

    @tiledsl.jit
    def qkv_rope_paged(QKV: T.Tensor(("B", "L", NT * D), dtype), Lens: T.Tensor(("B",), "int32"),
                       Cos: T.Tensor(("P", D2), "float32"), Sin: T.Tensor(("P", D2), "float32"),
                       Q: T.Tensor(("B", "L", H, D), dtype), Kc: T.Tensor(("NP", "PG", HK, D), dtype),
                       Vc: T.Tensor(("NP", "PG", HK, D), dtype), BT: T.Tensor(("B", "MP"), "int32")):
        T.device_entry(launch=T.cuda.LaunchConfig(grid=(1, NT // HPB), block=D2 * HPB))
        t = T.cuda.block_id(0)
        b = t // L  # noqa: F821
        l = t % L  # noqa: F821, E741
        hh = T.cuda.block_id(1) * HPB + T.cuda.thread_id() // D2
        i = T.cuda.thread_id() % D2
        x1 = T.cast(QKV[b, l, hh * D + i], "float32")
        x2 = T.cast(QKV[b, l, hh * D + i + D2], "float32")
        pos = T.max(Lens[b] + l, 0)          # the new tokens follow the cached ones
        c = T.float32(1)
        s = T.float32(0)
        if hh < H + HK:
            pc = T.min(pos, P - 1)  # noqa: F821
            c = Cos[pc, i]
            s = Sin[pc, i]
        y1 = T.cast(x1 * c - x2 * s, dtype)
        y2 = T.cast(x2 * c + x1 * s, dtype)
        if hh < H:
            Q[b, l, hh, i] = y1
            Q[b, l, hh, i + D2] = y2
        else:
            # the page index clamped to the cache, as attention_decode's kernel clamps it
            page = T.min(T.max(BT[b, T.min(pos // PG, MP - 1)], 0), NP - 1)  # noqa: F821
            # the cache's (page, row, head) row in 64 bits: a cache may pass 2^31 elements (batch 256 x 32k
            # tokens x 8 heads x D = 128 is 2^33)
            r = (T.cast(page, "int64") * PG + pos % PG) * HK  # noqa: F821
            if hh < H + HK:
                Kw = Kc.view(ROWS, D)
                Kw[r + (hh - H), i] = y1
                Kw[r + (hh - H), i + D2] = y2
            else:
                Vw = Vc.view(ROWS, D)
                Vw[r + (hh - H - HK), i] = y1
                Vw[r + (hh - H - HK), i + D2] = y2

    _KERNELS[key] = qkv_rope_paged
    return qkv_rope_paged


def rope_tables(max_positions, D, theta):
    """(cos, sin) float32 numpy (max_positions, D/2): angle pos * theta^(-2i/D), computed in float64."""
    import numpy as np
    inv = theta ** (-np.arange(0, D, 2, dtype=np.float64) / D)
    ang = np.arange(max_positions, dtype=np.float64)[:, None] * inv[None, :]
    return np.cos(ang).astype(np.float32), np.sin(ang).astype(np.float32)
