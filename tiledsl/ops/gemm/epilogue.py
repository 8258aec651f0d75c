"""The fused epilogue of the Hopper GEMM (hopper.py): what the consumers do to their f32
accumulators after the last K tile and before the store, in place, as one `@tiledsl.inline` helper.

In order: the FP8 per-tensor scales (acc * scale_a * scale_b, the two scalars read on the device: the host never
syncs for them), the bias (one value per column, from a (N,) tensor of the output dtype or float32; the column is
clamped to N - 1, so a ragged tile's last columns read a valid element whose sums are never stored), then the
activation:

  * relu: max(x, 0);
  * silu: x / (1 + exp(-x)), exp as ex2.approx of -x log2(e) and the division as rcp.approx (exp(-x) = inf for
    very negative x gives x * 0 = -0, as torch's silu);
  * gelu: torch's default (erf form) 0.5 x (1 + erf(x / sqrt 2)). With z = |x| / sqrt 2 and q = erfc(z) from
    Abramowitz & Stegun 7.1.26 (q = t (a1 + t (a2 + t (a3 + t (a4 + t a5)))) exp(-z^2), t = 1 / (1 + p z), absolute
    error <= 1.5e-7), gelu(x) = x (1 - q/2) for x >= 0 and x q/2 for x < 0: one formula for both signs, no
    cancellation where q is tiny (large negative x), exp as ex2.approx and t as rcp.approx.

Register fragment (wgmma m64nN, f32): register i of lane l holds column 8(i//4) + 2(l%4) + i%2, so registers
4j + e and 4j + 2 + e share a column: one bias value each. The epilogue runs four registers at a time, just
before they are stored, into a 4-register buffer (and two 4-register scratch buffers for the fast math), so it
adds a handful of live registers, not a second copy of the accumulators (BN 256 keeps 128 of them per thread).
A half C through the TMA store packs each buffer into two half2 words (v[0], v[1]: rows l//4; v[2], v[3]: rows
l//4 + 8) for stmatrix (hopper_kernel.py)."""
import tiledsl
from tiledsl import T

ACTIVATIONS = (None, "relu", "gelu", "silu")
LOG2E = 1.4426950408889634
RSQRT2 = 0.7071067811865476
AS_P = 0.3275911                                    # Abramowitz & Stegun 7.1.26
AS_A1, AS_A2, AS_A3, AS_A4, AS_A5 = 0.254829592, -0.284496736, 1.421413741, -1.453152027, 1.061405429


def make_epilogue(has_bias: bool, scaled: bool, activation: str | None):
    """Two inline helpers: scale(scale_a, scale_b), the fp8 scales' product (read once per thread, 1.0 where
    unscaled), and chunk(acc, v, i0, bias, sc, col0, lane, n), which writes to the 4-register buffer v the
    finished values of accumulators i0 .. i0 + 3 (i0 a multiple of 4: columns col0 + 8 (i0 / 4) + 2 (lane % 4)
    + 0 / 1; n: C's columns; bias None where unused). The accumulators stay as they are: the next tile's wgmma
    names them (its scale_d = 0 ignores their values), so writing the results back would keep a second set of
    128 values live across the TMA-store epilogue's waits."""
    relu, gelu, silu = activation == "relu", activation == "gelu", activation == "silu"

    @tiledsl.inline
    def scale(scale_a, scale_b):
        sc = T.float32(1.0)
        if scaled:
            sc = scale_a[0] * scale_b[0]
        return sc

    @tiledsl.inline
    def chunk(acc, v, i0, bias, sc, col0, lane, n):
        for e in T.unroll(2):
            if has_bias:
                bv = T.cast(bias[T.min(col0 + 2 * i0 + 2 * (lane % 4) + e, n - 1)], "float32")
            for r in T.unroll(2):
                v[2 * r + e] = acc[i0 + 2 * r + e]
                if scaled:
                    v[2 * r + e] = v[2 * r + e] * sc
                if has_bias:
                    v[2 * r + e] = v[2 * r + e] + bv
        if relu:
            for q in T.unroll(4):
                v[q] = T.max(v[q], 0.0)
        if silu:
            t = T.alloc_local((4,), "float32")
            for q in T.unroll(4):
                t[q] = v[q] * -LOG2E
            T.cuda.tile.apply(T.ptx["ex2.approx.ftz.f32"], t.view(4, 1), t.view(4, 1))
            for q in T.unroll(4):
                t[q] = t[q] + 1.0
            T.cuda.tile.apply(T.ptx["rcp.approx.ftz.f32"], t.view(4, 1), t.view(4, 1))
            for q in T.unroll(4):
                v[q] = v[q] * t[q]
        if gelu:
            t = T.alloc_local((4,), "float32")
            u = T.alloc_local((4,), "float32")
            for q in T.unroll(4):
                z = T.max(v[q], -v[q]) * RSQRT2
                t[q] = 1.0 + AS_P * z
                u[q] = z * z * -LOG2E
            T.cuda.tile.apply(T.ptx["rcp.approx.ftz.f32"], t.view(4, 1), t.view(4, 1))
            T.cuda.tile.apply(T.ptx["ex2.approx.ftz.f32"], u.view(4, 1), u.view(4, 1))
            for q in T.unroll(4):
                h = 0.5 * t[q] * (AS_A1 + t[q] * (AS_A2 + t[q] * (AS_A3 + t[q] * (AS_A4 + t[q] * AS_A5)))) * u[q]
                v[q] = v[q] * (1.0 - h if v[q] >= 0.0 else h)

    return scale, chunk


def reference(x, activation):
    """The activation in float64 numpy (gelu through math.erf), for the tests."""
    import math

    import numpy as np
    x = np.asarray(x, np.float64)
    if activation == "relu":
        return np.maximum(x, 0.0)
    if activation == "silu":
        with np.errstate(over="ignore"):
            return x / (1.0 + np.exp(-x))
    if activation == "gelu":
        return 0.5 * x * (1.0 + np.vectorize(math.erf)(x / math.sqrt(2.0)))
    return x
