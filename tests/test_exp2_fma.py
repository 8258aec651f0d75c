"""tiledsl/lib/exp2_fma.py: 2^x on the FMA pipe (the polynomial share of the FA3 softmax's exponentials). Its
coefficients are the Remez minimax ones (re-derived here); a tiny kernel running exp2_fma on the interpreter
(lane-exact float32, the add.rm floor and the integer exponent add included) is within 2^-13 relative of np.exp2
over a dense grid of x in [-126, 0], gives exactly 0 for x < -126 and -inf (as ex2.approx.ftz does), 1 at 0 and
2^n at the integers, is continuous at the integers (no jump just below one: the softmax's row maximum sits at x = a
rounding residual of either sign), and agrees bit for bit with a model of the PTX ISA's rules written here in exact
rational arithmetic; the same kernel compiles for sm_90a and ptxas assembles it."""
import math
from fractions import Fraction

import numpy as np

from tiledsl.lib import exp2_fma as E
from tiledsl.lib.exp2_fma import exp2_fma
import tiledsl
from tiledsl import T
from helpers import check_assembles

LANES, PER = 128, 8                 # one block of 128 threads, 8 registers each (the helper's (k, 1) views)
BOUND = 2.0 ** -13                  # measured 1.03e-4 = 2^-13.2; the brief asks 2^-10


@tiledsl.jit
def exp2_lanes(X: T.Tensor(("R", PER), "float32"), Y: T.Tensor(("R", PER), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=X.shape[0] // LANES, block=LANES))
    row = T.cuda.block_id() * LANES + T.cuda.thread_id()
    r = T.alloc_local((PER, 1), "float32")
    for i in T.unroll(PER):
        r[i, 0] = X[row, i]
    exp2_fma(r, r)
    for i in T.unroll(PER):
        Y[row, i] = r[i, 0]


def run(x):
    """exp2_fma of the float32 values x on the interpreter."""
    x = np.asarray(x, np.float32).ravel()
    n = -(-x.size // (LANES * PER)) * LANES * PER
    X = np.zeros(n, np.float32)
    X[:x.size] = x
    Y = np.zeros_like(X)
    tiledsl.jit(exp2_lanes.fn, interpret=True)(X.reshape(-1, PER), Y.reshape(-1, PER))
    return Y[:x.size]


def test_coefficients_are_the_minimax_ones():
    c = E.minimax_exp2(3)
    assert np.array_equal(c.astype(np.float32), np.array(E.COEFFS, np.float32))
    f = np.linspace(0, 1, 100001)
    err = np.abs(np.polynomial.polynomial.polyval(f, c) / 2 ** f - 1).max()
    assert 1.030e-4 < err < 1.031e-4
    assert run([0.0, -2.0 ** -30, -1.0]).tolist() == [1.0, 1.0, 0.5]    # float32 Horner: p(1) = 2.0 exactly


def test_relative_error_over_the_softmax_range():
    # a dense grid over [-150, 0] (steps of 2^-10 and the points between), random exponents of a softmax's size
    # and tiny negatives (the row maximum's own exponent rounds to about 0)
    x = np.concatenate([np.linspace(-150, 0, 150 * 2 ** 10 * 2 + 1, dtype=np.float32),
                        -np.abs(np.random.default_rng(0).standard_normal(2 ** 14)).astype(np.float32) * 4,
                        np.float32(-1) * np.float32(2.0) ** -np.arange(1, 40, dtype=np.float32)])
    y = run(x)
    normal = x >= E.SMALLEST
    ref = np.exp2(x[normal].astype(np.float64))
    rel = np.abs(y[normal] / ref - 1)
    print(f"max relative error of exp2_fma over {normal.sum()} points in [-126, 0]: {rel.max():.3e} "
          f"(2^{np.log2(rel.max()):.2f})")
    assert rel.max() <= BOUND
    assert not y[~normal].any()                 # below -126: flushed to +0 (ex2.approx.ftz's subnormal results)


def test_special_values():
    ints = np.arange(-126, 1, dtype=np.float32)
    assert np.array_equal(run(ints), np.exp2(ints))                 # p(0) = 1: exact at integers
    x = np.array([0.0, -0.0, -np.inf, -126.0, -126.5, -127, -140.25, -150, -1e30, -np.finfo(np.float32).max],
                 np.float32)
    y = run(x)
    assert y[0] == 1.0 and y[1] == 1.0 and y[3] == 2.0 ** -126
    assert np.array_equal(y[[2] + list(range(4, len(x)))], np.zeros(len(x) - 3, np.float32))
    assert not np.signbit(y).any()


def test_assembles_for_sm90a():
    x = np.zeros((LANES, PER), np.float32)
    ptx = exp2_lanes.compile(x, x, target="sm_90a").asm["ptx"]
    # every instruction as written, once per register: the floor, the fraction, Horner, the exponent add
    for op, n in (("add.rm.f32", 1), ("sub.rn.f32", 2), ("fma.rn.f32", 3), ("mul.lo.u32", 1), ("add.u32", 1),
                  ("selp.f32", 1)):
        assert ptx.count(op) == n * PER, op
    assert "ex2" not in ptx
    check_assembles(ptx)


def test_continuous_at_the_integers():
    # just below an integer k, f = x - floor(x) is 1 or just under it: p(1) = 2 makes 2^(k-1) p(f) meet 2^k. The
    # plain minimax polynomial (p(1) = 2 (1 - 8.6e-5)) jumped there, and the softmax's row maximum lands on either
    # side of 0 by a rounding residual: a last-bit difference in S moved the LSE by 8e-5 (GPU against interpreter)
    k = np.arange(-125, 2, dtype=np.float32)
    below = [np.nextafter(k, np.float32(-np.inf))]
    below += [k - np.float32(d) for d in (2.0 ** -30, 2.0 ** -20, 2.0 ** -12)]
    yk = run(k)
    for x in below:
        rel = run(x).astype(np.float64) / yk - 1
        exact = np.exp2(x.astype(np.float64) - k) - 1                  # the true relative step from k to x
        assert np.abs(rel - exact).max() <= 2.0 ** -21, np.abs(rel - exact).max()


# ---------------------------------------------------------------- the PTX ISA's rules, exactly

def _round_f32(q: Fraction, down: bool) -> float:
    """The exact nonzero rational q rounded once to float32 (subnormals kept: no .ftz): to nearest even, or toward
    -inf (.rm); overflow to inf (beyond the largest finite value rounded down only for a positive q)."""
    neg = q < 0
    a = -q if neg else q
    e = a.numerator.bit_length() - a.denominator.bit_length()
    e += (Fraction(2) ** (e + 1) <= a) - (Fraction(2) ** e > a)     # 2^e <= a < 2^(e+1)
    ulp = Fraction(2) ** (max(e, -126) - 23)
    m, rest = divmod(a / ulp, 1)
    if down:
        m += neg and rest > 0
    else:
        m += rest > Fraction(1, 2) or (rest == Fraction(1, 2) and m % 2 == 1)
    v = float(m * ulp)
    big = float(np.finfo(np.float32).max)
    if v > big:
        v = big if down and not neg else math.inf
    return -v if neg else v


def _add(a, b, down=False):
    """add.rn / add.rm .f32: the exact sum rounded once; an exact zero is +0 in .rn and -0 in .rm (IEEE), except
    that x + x of two zeros keeps their sign."""
    if not (math.isfinite(a) and math.isfinite(b)):
        with np.errstate(invalid="ignore"):
            return float(np.float32(a) + np.float32(b))                   # inf/NaN: exact IEEE results
    q = Fraction(a) + Fraction(b)
    if q == 0:
        same = a == 0 and math.copysign(1, a) == math.copysign(1, b)
        return a if same else (-0.0 if down else 0.0)
    return _round_f32(q, down)


def _fma(a, b, c):
    """fma.rn.f32: a * b + c computed exactly, rounded once (here no operand is inf/NaN or an exact zero sum)."""
    return _round_f32(Fraction(a) * Fraction(b) + Fraction(c), down=False)


def _bits(v):
    return int(np.array(v, np.float32).view(np.uint32))


def exp2_fma_ptx_model(x: float) -> float:
    """exp2_fma's instruction sequence, each instruction from the PTX ISA's definition (not the interpreter's)."""
    t = _add(x, E.MAGIC, down=True)                                   # add.rm.f32
    n = _add(t, -E.MAGIC)                                             # sub.rn.f32
    f = _add(x, -n)                                                   # sub.rn.f32
    if x < E.SMALLEST:                                                # setp.lt.f32 + selp: the arithmetic above
        return 0.0                                                    # is discarded (NaN for -inf)
    p = _fma(f, E.COEFFS[3], E.COEFFS[2])
    p = _fma(p, f, E.COEFFS[1])
    p = _fma(p, f, E.COEFFS[0])
    e = (_bits(t) * E.EXP_ONE) & 0xFFFFFFFF                           # mul.lo.u32: the low 32 bits
    return float(np.array((_bits(p) + e) & 0xFFFFFFFF, np.uint32).view(np.float32))   # add.u32 wraps


def test_bit_for_bit_with_the_ptx_model():
    # a grid over [-150, 2] (steps of 1/32 and the integers' and half-integers' float32 neighbours), tiny inputs of
    # both signs (f rounds to 1 just below 0), -inf and the largest negatives
    k = np.arange(-150, 3, 0.5, dtype=np.float32)
    x = np.concatenate([np.arange(-150, 2, 1 / 32, dtype=np.float32), k,
                        np.nextafter(k, np.float32(-np.inf)), np.nextafter(k, np.float32(np.inf)),
                        np.float32(2.0) ** -np.arange(1, 150, 3, dtype=np.float32),
                        -np.float32(2.0) ** -np.arange(1, 150, 3, dtype=np.float32),
                        np.array([-np.inf, -0.0, 0.0, -126.00001, -125.99999, -1e30, -np.finfo(np.float32).max],
                                 np.float32)])
    y = run(x)
    ref = np.array([exp2_fma_ptx_model(float(v)) for v in x], np.float32)
    bad = y.view(np.uint32) != ref.view(np.uint32)
    assert not bad.any(), list(zip(x[bad][:5], y[bad][:5], ref[bad][:5]))
