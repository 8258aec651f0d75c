"""The scalar math kernels (T.sqrt ... T.fma, T.min, T.max, x ** k), their inputs and the checks of their results:
shared by tests/test_scalar_math.py (interpreter against numpy and exact rationals, PTX through ptxas) and
tests/test_gpu_scalar_math.py (the GPU against the interpreter).

One kernel per dtype computes Out[i] = f(A[i], B[i], C[i]) for the function and keywords its constexprs name. Inputs
are bit patterns (numpy has no bfloat16: bfloat16 travels as uint16 bits), with the special values of the ISA's
tables (+-0, +-inf, NaN, subnormals) first, then random values over the function's domain.
"""

import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

import tiledsl
from tiledsl import T

N = 1024
BLOCK = 256
FLOATS = ("float32", "float64", "float16", "bfloat16")
BITS_NP = {"float32": np.uint32, "float64": np.uint64, "float16": np.uint16, "bfloat16": np.uint16,
           "int16": np.uint16, "int32": np.uint32, "int64": np.uint64, "uint32": np.uint32}
VALUE_NP = {"float32": np.float32, "float64": np.float64, "float16": np.float16, "int16": np.int16,
            "int32": np.int32, "int64": np.int64, "uint32": np.uint32}
PTX_TYPE = {"float32": "f32", "float64": "f64", "float16": "f16", "bfloat16": "bf16", "int16": "s16",
            "int32": "s32", "int64": "s64", "uint32": "u32"}
MANT = {"float32": 23, "float64": 52, "float16": 10, "bfloat16": 7}
MIN_NORMAL = {"float32": 2.0 ** -126, "float64": 2.0 ** -1022, "float16": 2.0 ** -14, "bfloat16": 2.0 ** -126}


def _make(dtype):
    def scalar_math(A: T.Tensor(("n",), dtype), B: T.Tensor(("n",), dtype), C: T.Tensor(("n",), dtype),
                    Out: T.Tensor(("n",), dtype), FN: T.constexpr, APPROX: T.constexpr, FTZ: T.constexpr,
                    RND: T.constexpr, K: T.constexpr):
        T.device_entry(launch=T.cuda.LaunchConfig(grid=N // BLOCK, block=BLOCK))
        i = T.cuda.block_id() * BLOCK + T.cuda.thread_id()
        a = A[i]
        b = B[i]
        c = C[i]
        if FN == "sqrt":
            y = T.sqrt(a, approx=APPROX, ftz=FTZ, rnd=RND)
        elif FN == "rsqrt":
            y = T.rsqrt(a, approx=True, ftz=FTZ)
        elif FN == "exp2":
            y = T.exp2(a, approx=True, ftz=FTZ)
        elif FN == "log2":
            y = T.log2(a, approx=True, ftz=FTZ)
        elif FN == "exp":
            y = T.exp(a, approx=True, ftz=FTZ)
        elif FN == "log":
            y = T.log(a, approx=True, ftz=FTZ)
        elif FN == "sin":
            y = T.sin(a, approx=True, ftz=FTZ)
        elif FN == "cos":
            y = T.cos(a, approx=True, ftz=FTZ)
        elif FN == "tanh":
            y = T.tanh(a, approx=True)
        elif FN == "abs":
            y = T.abs(a, ftz=FTZ)
        elif FN == "fma":
            y = T.fma(a, b, c, rnd=RND, ftz=FTZ)
        elif FN == "min":
            y = T.min(a, b)
        elif FN == "max":
            y = T.max(a, b)
        else:
            y = a ** K
        Out[i] = y
    return scalar_math


KERNELS = {d: _make(d) for d in FLOATS + ("int16", "int32", "int64", "uint32")}


_JITTED = {}


def kernel(dtype, **jit):
    """The dtype's kernel under tiledsl.jit(**jit) (one wrapper per dtype and options: specialisations are reused)."""
    key = (dtype, tuple(sorted(jit.items())))
    if key not in _JITTED:
        _JITTED[key] = tiledsl.jit(**jit)(KERNELS[dtype])
    return _JITTED[key]


# ------------------------------------------------------------------ the cases


@dataclass(frozen=True)
class Case:
    fn: str                  # a T function, "min"/"max", or "pow"
    dtype: str
    approx: bool = False
    ftz: bool = False
    rnd: str | None = None
    k: int = 0               # the exponent of "pow"

    @property
    def id(self) -> str:
        q = ["approx"] * self.approx + [self.rnd] * bool(self.rnd) + ["ftz"] * self.ftz
        return ".".join([self.fn if self.fn != "pow" else f"pow{self.k}"] + q + [PTX_TYPE[self.dtype]])

    def constexprs(self) -> dict:
        return {"FN": self.fn, "APPROX": self.approx, "FTZ": self.ftz, "RND": self.rnd, "K": self.k}

    def ptx(self) -> list:
        """The instructions the PTX must hold, as written there (LLVM's own are checked by name only)."""
        t, f = PTX_TYPE[self.dtype], ".ftz" * self.ftz
        if self.fn == "sqrt":
            return [f"sqrt.{'approx' if self.approx else self.rnd or 'rn'}{f}.{t} "]
        if self.fn in ("rsqrt", "sin", "cos", "tanh"):
            return [f"{self.fn}.approx{f}.{t} "]
        if self.fn == "exp2":
            return [f"ex2.approx{f}.{t} "]
        if self.fn == "log2":
            return [f"lg2.approx{f}.{t} "]
        if self.fn == "exp":
            return [f"mul.rn{f}.f32 ", f"ex2.approx{f}.f32 "]
        if self.fn == "log":
            return [f"lg2.approx{f}.f32 ", f"mul.rn{f}.f32 "]
        if self.fn == "abs":
            return [f"abs{f}.{t} "]
        if self.fn == "fma":
            return [f"fma.{self.rnd or 'rn'}{f}.{t} "]
        if self.fn in ("min", "max"):
            return [f"{self.fn}."]
        return ["mul."] if abs(self.k) > 1 else []

    @property
    def exact(self) -> bool:
        """Is the instruction exact or correctly rounded (the GPU must agree with the interpreter bit for bit)?"""
        return not self.approx and self.fn in ("sqrt", "abs", "fma", "min", "max", "pow")


def _cases():
    out = []
    for rnd in (None, "rz", "rm", "rp"):
        out += [Case("sqrt", "float32", rnd=rnd), Case("sqrt", "float64", rnd=rnd)]
    out += [Case("sqrt", "float32", ftz=True), Case("sqrt", "float32", approx=True),
            Case("sqrt", "float32", approx=True, ftz=True)]
    for ftz in (False, True):
        out += [Case("rsqrt", "float32", approx=True, ftz=ftz), Case("exp2", "float32", approx=True, ftz=ftz)]
        out += [Case(fn, "float32", approx=True, ftz=ftz) for fn in ("log2", "exp", "log", "sin", "cos")]
    out += [Case("rsqrt", "float64", approx=True), Case("exp2", "float16", approx=True),
            Case("exp2", "bfloat16", approx=True, ftz=True)]
    out += [Case("tanh", d, approx=True) for d in ("float32", "float16", "bfloat16")]
    out += [Case("abs", d) for d in FLOATS + ("int16", "int32", "int64")]
    out += [Case("abs", "float32", ftz=True), Case("abs", "float16", ftz=True)]
    for rnd in (None, "rz", "rm", "rp"):
        out += [Case("fma", "float32", rnd=rnd), Case("fma", "float64", rnd=rnd)]
    out += [Case("fma", "float32", ftz=True), Case("fma", "float16"), Case("fma", "float16", ftz=True),
            Case("fma", "bfloat16")]
    out += [Case(op, d) for op in ("min", "max") for d in ("float32", "float64", "float16", "int32", "uint32")]
    out += [Case("pow", "float32", k=k) for k in (0, 1, 2, 3, 5, 8, -1, -2, -3)]
    out += [Case("pow", "float64", k=3), Case("pow", "int32", k=3), Case("pow", "int64", k=8)]
    return out


CASES = _cases()


# ------------------------------------------------------------------ values and bits


def to_bits(dtype, x) -> np.ndarray:
    x = np.asarray(x, np.float64)
    if dtype == "bfloat16":
        return tiledsl.core.dtypes.bf16_bits_array(x)
    with np.errstate(over="ignore", invalid="ignore"):
        return x.astype(VALUE_NP[dtype]).view(BITS_NP[dtype])


def from_bits(dtype, bits) -> np.ndarray:
    """Values as float64 (floats) or as the signed/unsigned integers (ints)."""
    bits = np.asarray(bits, BITS_NP[dtype])
    with np.errstate(invalid="ignore"):
        return _values(dtype, bits)


def _values(dtype, bits):
    if dtype == "bfloat16":
        return (bits.astype(np.uint32) << np.uint32(16)).view(np.float32).astype(np.float64)
    v = bits.view(VALUE_NP[dtype])
    return v.astype(np.float64) if dtype in FLOATS else v


def _domain(case: Case, rng, n):
    """Ordinary inputs where the function is defined and the ISA's bound applies."""
    d, fn = case.dtype, case.fn
    top = {"float32": 120, "float64": 1000, "float16": 14, "bfloat16": 120}.get(d, 0)
    if fn in ("sqrt", "rsqrt", "log2", "log"):
        v = 2.0 ** rng.uniform(-top, top, n)
        if fn in ("log2", "log"):
            v[: n // 2] = rng.uniform(0.5, 2.0, n // 2)
        return v
    if fn in ("exp2", "exp"):
        lim = {"float32": (-125, 127), "float16": (-14, 15), "bfloat16": (-125, 127)}[d]
        v = rng.uniform(*lim, n)
        return v / math.log2(math.e) if fn == "exp" else v
    if fn in ("sin", "cos"):
        return np.concatenate([rng.uniform(-2 * math.pi, 2 * math.pi, n // 2),
                               rng.uniform(-100 * math.pi, 100 * math.pi, n - n // 2)])
    if fn == "tanh":
        return rng.choice([-1.0, 1.0], n) * 2.0 ** rng.uniform(-12, 4, n)
    if fn == "pow":
        return rng.choice([-1.0, 1.0], n) * 2.0 ** rng.uniform(-top / 8, top / 8, n)
    return rng.choice([-1.0, 1.0], n) * 2.0 ** rng.uniform(-top / 2, top / 2, n)       # abs fma min max


def inputs(case: Case, seed=0):
    """(A, B, C) bit arrays of N elements: special values first, then the domain."""
    rng = np.random.default_rng(seed)
    d = case.dtype
    if d not in FLOATS:
        info = np.iinfo(VALUE_NP[d])
        lo, hi = (-12, 12) if case.fn == "pow" else (info.min, info.max)
        specials = [0, 1, -1, info.min, info.max] if info.min < 0 else [0, 1, info.max]
        arrs = []
        for _ in range(3):
            v = np.concatenate([specials, rng.integers(lo, hi, N - len(specials), dtype=np.int64, endpoint=True)])
            arrs.append(v.astype(VALUE_NP[d]).view(BITS_NP[d]))
        return tuple(arrs)
    sub = MIN_NORMAL[d] * 2.0 ** -(MANT[d] // 2)
    specials = [0.0, -0.0, math.inf, -math.inf, math.nan, sub, -sub, MIN_NORMAL[d], 1.0, -1.0]
    arrs = []
    for j in range(3):
        v = np.concatenate([np.roll(specials, j), _domain(case, rng, N - len(specials))])
        if case.fn == "fma" and j == 2:          # c near -a*b now and then: cancellation, the zero's sign
            v[len(specials):: 7] = 0.0
        arrs.append(to_bits(d, v))
    if case.fn == "fma":                         # exact cancellations: c = -(a * b) where that is representable
        a, b = from_bits(d, arrs[0]), from_bits(d, arrs[1])
        c = from_bits(d, arrs[2]).copy()
        with np.errstate(all="ignore"):
            p = a * b
        pick = (np.arange(N) % 11 == 3) & np.isfinite(p) & (from_bits(d, to_bits(d, p)) == p)
        c[pick] = -p[pick]
        arrs[2] = to_bits(d, c)
    return tuple(arrs)


def run_interpreter(case: Case, a, b, c) -> np.ndarray:
    out = np.zeros(N, BITS_NP[case.dtype])
    args = [x.view(VALUE_NP[case.dtype]) if case.dtype != "bfloat16" else x for x in (a, b, c)]
    o = out.view(VALUE_NP[case.dtype]) if case.dtype != "bfloat16" else out
    kernel(case.dtype, interpret=True)(*args, o, **case.constexprs())
    return out


# ------------------------------------------------------------------ exact references


def _neighbours(dtype, r):
    """The representable values just below and above r (float64 values of dtype)."""
    bits = to_bits(dtype, np.asarray([r]))[0]
    b = int(bits)
    sign = 1 << ({"float32": 31, "float64": 63, "float16": 15, "bfloat16": 15}[dtype])
    if r == 0:
        up, down = 1, sign | 1
    elif r > 0:
        up, down = b + 1, b - 1
    else:
        up, down = b - 1, b + 1
    conv = lambda x: float(from_bits(dtype, np.asarray([x], BITS_NP[dtype]))[0])   # noqa: E731
    return conv(down), conv(up)


def rounded_ok(dtype, q, r, mode) -> bool:
    """Is the finite value r the rounding of the exact value q (a Fraction, or a float) in `mode`?"""
    if not math.isfinite(r):
        return False
    q, rf = Fraction(q), Fraction(r)
    down, up = _neighbours(dtype, r)
    fin = lambda x: Fraction(x) if math.isfinite(x) else None                     # noqa: E731
    lo, hi = fin(down), fin(up)
    if mode == "rn":
        if lo is not None and abs(q - lo) < abs(q - rf):
            return False
        if hi is not None and abs(q - hi) < abs(q - rf):
            return False
        tie = (lo is not None and abs(q - lo) == abs(q - rf)) or (hi is not None and abs(q - hi) == abs(q - rf))
        return not tie or int(to_bits(dtype, np.asarray([r]))[0]) % 2 == 0
    if mode == "rz":
        mode = "rm" if q >= 0 else "rp"
    if mode == "rm":
        return rf <= q and (hi is None or q < hi)
    return q <= rf and (lo is None or lo < q)          # rp


def sqrt_rounded_ok(dtype, x, r, mode) -> bool:
    """r = sqrt(x) rounded in `mode`, checked on squares (exact rationals, no square root taken)."""
    if not math.isfinite(r) or r < 0:
        return False
    x, rf = Fraction(x), Fraction(r)
    down, up = _neighbours(dtype, r)
    lo, hi = Fraction(max(down, 0.0)), Fraction(up) if math.isfinite(up) else None
    if mode in ("rz", "rm"):
        return rf * rf <= x and (hi is None or x < hi * hi)
    if mode == "rp":
        return x <= rf * rf and lo * lo < x
    # rn: x lies between the squares of the midpoints around r (a midpoint itself is never a square root here)
    return ((lo + rf) / 2) ** 2 <= x and (hi is None or x <= ((rf + hi) / 2) ** 2)


def ulp(dtype, v) -> float:
    """The gap between |v| and the next larger value of dtype (subnormal gap below the normal range)."""
    e = max(math.frexp(abs(v))[1] - 1, math.frexp(MIN_NORMAL[dtype])[1] - 1) if v else \
        math.frexp(MIN_NORMAL[dtype])[1] - 1
    return 2.0 ** (e - MANT[dtype])


def approx_bound(case: Case, x: float, exact: float) -> float:
    """The absolute error the PTX ISA allows (CUDA's documented bound for the exp sequence); see the docstrings."""
    d, fn = case.dtype, case.fn
    if fn == "sqrt":
        return abs(exact) * 2.0 ** -23
    if fn == "rsqrt":                      # (float64: no bound stated; 2^-32 is tests/test_gpu_fastmath.py's)
        return abs(exact) * (2.0 ** -22.9 if d == "float32" else 2.0 ** -32)
    if fn == "exp2":
        return {"float32": 2 * ulp(d, exact), "float16": abs(exact) * 2.0 ** -9.9,
                "bfloat16": abs(exact) * 2.0 ** -7}[d]
    if fn in ("log2", "log"):
        base = 2.0 ** -22 if 0.5 < x < 2 else abs(math.log2(x)) * 2.0 ** -22
        return base * (math.log(2) if fn == "log" else 1.0) + (ulp(d, exact) if fn == "log" else 0.0)
    if fn == "exp":
        return (2 + math.floor(abs(1.173 * x))) * ulp(d, exact)
    if fn in ("sin", "cos"):
        # CUDA documents __sinf / __cosf (sin/cos.approx.f32) as 2^-21.41 absolute on [-pi, pi] and "larger
        # otherwise"; the H200 gave cos.approx(4.9000745) 6.9e-7 (2^-20.48) off: past pi only the loose bound holds
        return 2.0 ** -20.5 if abs(x) <= math.pi else 2.0 ** -14.7
    return {"float32": abs(exact) * 2.0 ** -11, "float16": 2.0 ** -10.987, "bfloat16": 2.0 ** -8}[d]   # tanh


def same(x, y) -> bool:
    """Equal values with equal signs (zeros), or both NaN."""
    if math.isnan(x) or math.isnan(y):
        return math.isnan(x) and math.isnan(y)
    return x == y and math.copysign(1, x) == math.copysign(1, y)


def _flush(case, v):
    return math.copysign(0.0, v) if case.ftz and v != 0 and abs(v) < MIN_NORMAL[case.dtype] else v


# ------------------------------------------------------------------ checking one result


def problems(case: Case, a, b, c, out, ref_out=None, limit=5) -> list:
    """The elements where `out` is not what the instruction may give: exact and correctly rounded forms against
    numpy and exact rationals; approximate forms within approx_bound of the exact function (special values, and
    subnormal inputs of .ftz forms, exactly). With `ref_out` (the interpreter's bits, for the GPU run) exact forms
    must equal it bit for bit (NaN: any NaN) instead."""
    bad = []
    d = case.dtype
    xs = [from_bits(d, v) for v in (a, b, c)]
    got = from_bits(d, out)
    ref = None if ref_out is None else from_bits(d, ref_out)
    for i in range(N):
        args = [v[i] for v in xs]
        g = got[i]
        if ref is not None and case.exact:
            ok = same(float(g), float(ref[i])) if d in FLOATS else g == ref[i]
        else:
            ok = _element_ok(case, args, g)
        if not ok:
            bad.append(f"{case.id}: element {i}: inputs {args[:_arity(case)]} gave {g!r}"
                       + (f", the interpreter {ref[i]!r}" if ref is not None else ""))
            if len(bad) >= limit:
                break
    return bad


def _arity(case) -> int:
    return {"fma": 3, "min": 2, "max": 2}.get(case.fn, 1)


def _element_ok(case: Case, args, g) -> bool:
    d, fn = case.dtype, case.fn
    if d not in FLOATS:
        x, y = args[0], args[1]
        with np.errstate(over="ignore"):
            if fn == "abs":
                want = np.abs(x)
            elif fn in ("min", "max"):
                want = (np.minimum if fn == "min" else np.maximum)(x, y)
            else:
                want = VALUE_NP[d](1)
                for _ in range(case.k):
                    want = want * x
        return g == want
    g = float(g)
    args = [_flush(case, float(v)) for v in args]
    x = args[0]
    if fn == "abs":
        return same(g, abs(x)) if not math.isnan(x) else math.isnan(g)
    if fn in ("min", "max"):
        y = args[1]
        if math.isnan(x) or math.isnan(y):
            return same(g, y if math.isnan(x) else x)
        if x == 0 and y == 0:
            neg = math.copysign(1, x) < 0, math.copysign(1, y) < 0
            return same(g, -0.0 if (any(neg) if fn == "min" else all(neg)) else 0.0)
        return same(g, min(x, y) if fn == "min" else max(x, y))
    if fn == "pow":
        return same(g, _power(d, x, case.k))
    if fn == "fma":
        return _fma_ok(case, args, g)
    if fn == "sqrt" and not case.approx:
        if math.isnan(x) or x < 0:
            return math.isnan(g)
        if x == 0 or math.isinf(x):
            return same(g, x)
        return sqrt_rounded_ok(d, x, g, case.rnd or "rn")
    with np.errstate(all="ignore"):
        exact = float({"sqrt": np.sqrt, "rsqrt": lambda v: 1 / np.sqrt(v), "exp2": np.exp2, "log2": np.log2,
                       "exp": np.exp, "log": np.log, "sin": np.sin, "cos": np.cos, "tanh": np.tanh}[fn](x))
    if math.isnan(x) or math.isinf(x) or x == 0 or not math.isfinite(exact) or math.isnan(exact):
        return same(g, exact)
    if fn == "rsqrt" and d == "float64" and abs(x) < MIN_NORMAL[d]:
        return True                        # rsqrt.approx.f64 of a subnormal: the ISA states nothing
    return math.isfinite(g) and abs(g - exact) <= approx_bound(case, x, exact)


def _power(d, x, k):
    t = VALUE_NP.get(d, np.float32)
    if d == "bfloat16":
        raise ValueError("no bfloat16 power cases")
    if k == 0:
        return 1.0
    v = t(x)
    r = v
    with np.errstate(all="ignore"):
        for _ in range(abs(k) - 1):
            r = t(r * v)
        return float(t(1) / r if k < 0 else r)


def _fma_ok(case, args, g) -> bool:
    d, mode = case.dtype, case.rnd or "rn"
    a, b, c = args
    if not all(math.isfinite(v) for v in args):
        with np.errstate(all="ignore"):
            return same(g, float(np.float64(a) * np.float64(b) + np.float64(c)))
    q = Fraction(a) * Fraction(b) + Fraction(c)
    if q == 0:
        p_neg = (math.copysign(1, a) < 0) != (math.copysign(1, b) < 0)
        c_neg = math.copysign(1, c) < 0
        if a * b == 0 and c == 0 and p_neg == c_neg:
            return same(g, -0.0 if c_neg else 0.0)
        return same(g, -0.0 if mode == "rm" else 0.0)
    if case.ftz and abs(q) < MIN_NORMAL[d]:
        return (g == 0 and (math.copysign(1, g) < 0) == (q < 0)) or (abs(g) == MIN_NORMAL[d] and
                                                                       rounded_ok(d, q, g, mode))
    return rounded_ok(d, q, g, mode)
