"""2^x on the FMA pipe instead of the special-function unit (MUFU), for the softmax of the FA3 forward.

At head dim 64 an attention tile's two GEMMs take about as many SM cycles as its exponentials on MUFU (16 per clock
per SM), so MUFU bounds the kernel; evaluating a share of the exponentials with ordinary float arithmetic (128 lanes
per clock per SM) splits the work between the two units (the remedy FlashAttention-4 describes).

exp2_fma(y, x) writes 2^x into y for x < 128, every instruction explicit:
  * floor: t = x + 1.5 * 2^23 rounded toward -inf (add.rm.f32). Numbers in [2^23, 2^24) are spaced 1 apart, so
    t = 1.5 * 2^23 + floor(x) exactly, and the low bits of t's pattern are floor(x) in two's complement; then
    n = t - 1.5 * 2^23 is exact and f = x - n in [0, 1] (rounded: just below an integer, e.g. x = -2^-30, f is
    1 - 2^-30 rounded to 1.0);
  * 2^f: the minimax polynomial of relative error on [0, 1] with p(0) = 1 and p(1) = 2 (COEFFS, derived below),
    evaluated by Horner in fma.rn.f32; p(f) in [1, 2] has the exponent field 127 (128 for exactly 2);
  * 2^n * p(f): n added to p's exponent field as an integer. t's pattern shifted left by 23 (mul.lo.u32 by 2^23)
    keeps exactly n << 23 modulo 2^32 (the constant part of t's pattern, 0x4B400000, has no bit below 22), so one
    add.u32 of the two patterns scales p;
  * x < -126 gives +0, as ex2.approx.ftz.f32 does (2^x is subnormal there and flushed; -inf is 0 too): one compare
    and select, after the arithmetic (whose intermediates there may be anything, NaN for -inf).
Pinning p(1) = 2 (the float32 Horner sum at f = 1 is exactly 2.0) makes the result continuous at the integers: x
just below k gives 2^(k-1) * p(1) = 2^k. A polynomial free at f = 1 (the plain minimax, p(1) = 2 (1 - 8.6e-5))
jumps by its whole error there, and the softmax puts every row's maximum at x = s * c - fl(s * c), a rounding
residual of either sign: a last-bit difference in S (the GPU's tensor-core accumulation against the interpreter's
exact one) then moved the LSE by up to 8e-5.
The relative error is that of the polynomial plus a few float32 roundings: 1.03e-4 (2^-13.2) for degree 3; the
softmax rounds P to f16/bf16 (2^-11 / 2^-8) for the P V GEMM anyway. tests/test_exp2_fma.py measures it on the
interpreter over x in [-150, 0] against np.exp2. A kernel takes it as `from tiledsl.lib.exp2_fma import exp2_fma`
(tiledsl/ops/flash/fa3_parts.py does).
"""
import numpy as np

import tiledsl
from tiledsl import T

MAGIC = 12582912.0          # 1.5 * 2^23: x + MAGIC rounded down holds floor(x) in its low mantissa bits
EXP_ONE = 1 << 23           # 2^n's exponent step in a float32 pattern
SMALLEST = -126.0           # below it 2^x is subnormal: flushed to 0 as by ex2.approx.ftz


def minimax_exp2(degree: int = 3, iterations: int = 30, points: int = 200001) -> np.ndarray:
    """The coefficients c_0 = 1, c_1 .. c_degree (ascending) of the polynomial p minimising max |p(f) / 2^f - 1|
    over f in [0, 1] with p(0) = 1 and p(1) = 2 (exact at integers from both sides): Remez exchange in float64.
    p is written p(f) = 1 + f + f (f - 1) q(f), which meets both ends for any q of degree - 2; each round solves,
    for the degree current reference points x_i inside (0, 1), the linear system
    p(x_i) - 2^x_i = (-1)^i E 2^x_i for q's coefficients and E, then moves the points to the alternating extrema of
    the error on a fine grid; it stops changing within a few rounds (the error then equioscillates with
    amplitude |E|)."""
    m = degree - 1                                                  # q's coefficients, plus E: m + 1 points
    x = 0.5 + 0.5 * np.cos(np.linspace(np.pi, 0, m + 1))           # start at Chebyshev-like points in (0, 1)
    x = 0.05 + 0.9 * x
    grid = np.linspace(0.0, 1.0, points)
    c = None
    for _ in range(iterations):
        a = np.array([[xi * (xi - 1) * xi ** k for k in range(m)] + [-(-1.0) ** i * 2.0 ** xi]
                      for i, xi in enumerate(x)])
        q = np.linalg.solve(a, 2.0 ** x - 1.0 - x)[:-1]
        c = np.zeros(degree + 1)
        c[:2] = 1.0
        for k, qk in enumerate(q):                                  # f (f - 1) qk f^k = qk f^(k+2) - qk f^(k+1)
            c[k + 2] += qk
            c[k + 1] -= qk
        e = np.polynomial.polynomial.polyval(grid, c) / 2.0 ** grid - 1.0
        ae = np.abs(e)
        peaks = [i for i in range(1, points - 1) if ae[i] >= ae[i - 1] and ae[i] >= ae[i + 1]]
        alt = []                              # the largest extremum of each run of one sign (both ends are 0)
        for i in peaks:
            if alt and np.sign(e[i]) == np.sign(e[alt[-1]]):
                if ae[i] > ae[alt[-1]]:
                    alt[-1] = i
            else:
                alt.append(i)
        while len(alt) > m + 1:               # drop the smaller end until m + 1 alternating points remain
            alt.pop(0 if ae[alt[0]] < ae[alt[-1]] else -1)
        x = grid[alt]
    return c


# minimax_exp2(3) rounded to float32 (tests/test_exp2_fma.py re-derives it): max relative error 1.03e-4 on [0, 1];
# float32 Horner at f = 1 gives exactly 2.0
COEFFS = (1.0, 0.6954243183135986, 0.226307675242424, 0.07826796919107437)


@tiledsl.inline
def exp2_fma(y, x):
    """y = 2^x (x < 128; x < -126 and -inf give +0) for (k, 1) views of float32 registers (y may be x), on the
    FMA and integer pipes: the module docstring says how."""
    # (x.shape[0] is written out each time: a name assigned inside the caller's run-time loop is a run-time value)
    t = T.alloc_local((x.shape[0], 1), "float32")
    f = T.alloc_local((x.shape[0], 1), "float32")
    p = T.alloc_local((x.shape[0], 1), "float32")
    T.cuda.tile.apply(T.ptx["add.rm.f32"], t, x, MAGIC)                 # MAGIC + floor(x)
    T.cuda.tile.apply(T.ptx["sub.rn.f32"], f, t, MAGIC)                 # floor(x)
    T.cuda.tile.apply(T.ptx["sub.rn.f32"], f, x, f)                     # f = x - floor(x)
    T.cuda.tile.apply(T.ptx["fma.rn.f32"], p, f, COEFFS[3], COEFFS[2])
    T.cuda.tile.apply(T.ptx["fma.rn.f32"], p, p, f, COEFFS[1])
    T.cuda.tile.apply(T.ptx["fma.rn.f32"], p, p, f, COEFFS[0])
    tb = t.view(dtype="uint32")
    pb = p.view(dtype="uint32")
    T.cuda.tile.apply(T.ptx["mul.lo.u32"], tb, tb, EXP_ONE)             # floor(x) << 23 (mod 2^32)
    T.cuda.tile.apply(T.ptx["add.u32"], pb, pb, tb)                     # p * 2^floor(x)
    for i in T.unroll(x.shape[0]):
        y[i, 0] = 0.0 if x[i, 0] < SMALLEST else p[i, 0]
