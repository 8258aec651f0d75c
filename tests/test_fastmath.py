"""Fast math in the register family (no GPU needed): every .approx form of ex2 lg2 rcp rsqrt sqrt sin cos tanh and
the three-input min/max.f32 compiles and passes ptxas, or is refused below its target naming the target; the
interpreter's values are the correctly rounded ones, checked against Python's math library with exact rational
rounding, on a grid of inputs that includes the special values of the ISA's tables (inf, NaN, -0, subnormals).

The kernel and the helpers here are shared with tests/test_gpu_fastmath.py, whose kernels are compiled and
assembled below so that CI checks them without a GPU.
"""
import math
import zlib
from fractions import Fraction

import numpy as np
import pytest

import tiledsl
from helpers import ptxas
from tiledsl import T
from tiledsl.interpreter import rounding as R
from tiledsl.isa.register import pattern as P
from tiledsl.isa.register.fastmath import sqrt_fraction

INF, NAN = math.inf, math.nan
FMT = {"f32": R.F32, "f16": R.F16, "bf16": R.BF16, "f64": R.F64, "f16x2": R.F16, "bf16x2": R.BF16}

# every fast-math form the ISA defines (PTX ISA 9.1, 9.7.3.13-22 and 9.7.4.9-10)
FORMS = [
    "ex2.approx.f32", "ex2.approx.ftz.f32", "ex2.approx.f16", "ex2.approx.f16x2", "ex2.approx.ftz.bf16",
    "ex2.approx.ftz.bf16x2", "lg2.approx.f32", "lg2.approx.ftz.f32", "rcp.approx.f32", "rcp.approx.ftz.f32",
    "rcp.approx.ftz.f64", "rsqrt.approx.f32", "rsqrt.approx.ftz.f32", "rsqrt.approx.f64", "rsqrt.approx.ftz.f64",
    "sqrt.approx.f32", "sqrt.approx.ftz.f32", "sin.approx.f32", "sin.approx.ftz.f32", "cos.approx.f32",
    "cos.approx.ftz.f32", "tanh.approx.f32", "tanh.approx.f16", "tanh.approx.f16x2", "tanh.approx.bf16",
    "tanh.approx.bf16x2",
]
MIN_SM = {"ex2.approx.f16": 75, "ex2.approx.f16x2": 75, "ex2.approx.ftz.bf16": 90, "ex2.approx.ftz.bf16x2": 90,
          "tanh.approx.f32": 75, "tanh.approx.f16": 75, "tanh.approx.f16x2": 75, "tanh.approx.bf16": 90,
          "tanh.approx.bf16x2": 90}
MINMAX3 = [f"{op}{q}.f32" for op in ("min", "max")
           for q in ("", ".ftz", ".NaN", ".abs", ".ftz.NaN", ".NaN.abs", ".ftz.NaN.abs")]


# ------------------------------------------------------------------ one kernel for every form


@tiledsl.jit
def fastmath_lanes(X: T.Tensor(("n",), "uint64"), Out: T.Tensor(("m",), "uint64"), OPS: T.constexpr,
                   W: T.constexpr):
    """OPS: (opcode, source count, register dtype, 64 // register bits) per instruction. Lane l's sources of
    instruction k are the low bits of words X[l*W + 3k + j]; its result goes to the low bits of Out[l*len(OPS) + k]."""
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    lane = T.cuda.lane_id()
    for k in T.unroll(len(OPS)):
        f = OPS[k]
        x = X.view(dtype=f[2])
        o = Out.view(dtype=f[2])
        a = T.alloc_local((1,), f[2])
        b = T.alloc_local((1,), f[2])
        c = T.alloc_local((1,), f[2])
        d = T.alloc_local((1,), f[2])
        a[0] = x[(lane * W + 3 * k) * f[3]]
        b[0] = x[(lane * W + 3 * k + 1) * f[3]]
        c[0] = x[(lane * W + 3 * k + 2) * f[3]]
        if f[1] == 1:
            T.cuda.tile.apply(T.ptx[f[0]], d, a)
        elif f[1] == 2:
            T.cuda.tile.apply(T.ptx[f[0]], d, a, b)
        else:
            T.cuda.tile.apply(T.ptx[f[0]], d, a, b, c)
        o[(lane * len(OPS) + k) * f[3]] = d[0]


def entry(opcode, nsrc=None):
    f = P.match(opcode)
    assert isinstance(f, P.Form), f
    bits = P.TYPES[f.type][0]
    return (opcode, nsrc or len(f.names) - 1, P.TYPES[f.type][1].name, 64 // bits)


def pack(ops, srcs):
    """X words for `ops` from srcs[k][j] = 32 bit patterns (uint64) of source j of instruction k."""
    W = 3 * len(ops)
    X = np.zeros((32, W), np.uint64)
    for k, per in enumerate(srcs):
        for j, bits in enumerate(per):
            X[:, 3 * k + j] = np.asarray(bits, np.uint64)
    return X.reshape(-1), W


def results(ops, out):
    """Result bit patterns (uint64) per instruction: shape (len(ops), 32)."""
    words = out.reshape(32, len(ops)).T
    return [words[k] & np.uint64((1 << (64 // ops[k][3])) - 1) for k in range(len(ops))]


def interpret(ops, srcs):
    X, W = pack(ops, srcs)
    out = np.zeros(32 * len(ops), np.uint64)
    tiledsl.jit(fastmath_lanes.fn, interpret=True)(X, out, tuple(ops), W)
    return results(ops, out)


def compile_ops(ops, target="sm_90"):
    X, W = pack(ops, [[np.zeros(32, np.uint64)] * 3 for _ in ops])
    return fastmath_lanes.compile(X, np.zeros(32 * len(ops), np.uint64), tuple(ops), W, target=target)


def assemble(ck, arch):
    r = ptxas(ck.asm["ptx"], arch)
    assert r.returncode == 0, f"ptxas -arch={arch} rejected the PTX:\n{r.stderr}"


# ------------------------------------------------------------------ bits <-> values (numpy only)


def to_bits(fmt, vals):
    """float64 values exactly representable in fmt -> bit patterns as uint64."""
    v = np.asarray(vals, np.float64)
    if fmt is R.F64:
        return v.view(np.uint64)
    if fmt is R.F32:
        return v.astype(np.float32).view(np.uint32).astype(np.uint64)
    if fmt is R.F16:
        return v.astype(np.float16).view(np.uint16).astype(np.uint64)
    return (v.astype(np.float32).view(np.uint32) >> np.uint32(16)).astype(np.uint64)   # bf16: exact values only


def from_bits(fmt, bits):
    b = np.asarray(bits, np.uint64)
    if fmt is R.F64:
        return b.view(np.float64).copy()
    if fmt is R.F32:
        return b.astype(np.uint32).view(np.float32).astype(np.float64)
    if fmt is R.F16:
        return b.astype(np.uint16).view(np.float16).astype(np.float64)
    return (b.astype(np.uint32) << np.uint32(16)).view(np.float32).astype(np.float64)


def halves(word):
    w = np.asarray(word, np.uint64)
    return w & np.uint64(0xFFFF), (w >> np.uint64(16)) & np.uint64(0xFFFF)


def join(lo, hi):
    return np.asarray(lo, np.uint64) | (np.asarray(hi, np.uint64) << np.uint64(16))


# ------------------------------------------------------------------ the reference: math library + exact rounding


# The ISA's special-value tables (PTX ISA 9.1); an .ftz form reads a subnormal input as a zero of its sign.
SPECIAL = {      # op -> (input, result) pairs; a list, since -0.0 and 0.0 are one dict key
    "ex2": [(-INF, 0.0), (-0.0, 1.0), (0.0, 1.0), (INF, INF)],
    "lg2": [(-INF, NAN), (-0.0, -INF), (0.0, -INF), (INF, INF)],
    "rcp": [(-INF, -0.0), (-0.0, -INF), (0.0, INF), (INF, 0.0)],
    "rsqrt": [(-INF, NAN), (-0.0, -INF), (0.0, INF), (INF, 0.0)],
    "sqrt": [(-INF, NAN), (-0.0, -0.0), (0.0, 0.0), (INF, INF)],
    "sin": [(-INF, NAN), (-0.0, -0.0), (0.0, 0.0), (INF, NAN)],
    "cos": [(-INF, NAN), (-0.0, 1.0), (0.0, 1.0), (INF, NAN)],
    "tanh": [(-INF, -1.0), (-0.0, -0.0), (0.0, 0.0), (INF, 1.0)],
}
MATH = {"ex2": math.exp2, "lg2": math.log2, "rcp": lambda x: 1 / Fraction(x), "sqrt": math.sqrt,
        "sin": math.sin, "cos": math.cos, "tanh": math.tanh}


def special(op, x):
    if math.isnan(x):
        return NAN
    for k, v in SPECIAL[op]:
        if x == k and math.copysign(1, x) == math.copysign(1, k):
            return v
    if x < 0 and op in ("lg2", "rsqrt", "sqrt"):          # the tables' "-normal -> NaN"
        return NAN
    return None


def exact(op, x):
    """op(x) as an exact Fraction where it is rational, else as the math library's float64 value."""
    if op == "rsqrt":
        return None                     # checked by exact comparison (rsqrt_is_nearest)
    try:
        return MATH[op](x)
    except OverflowError:
        return INF


def flushed(fmt, v):
    return math.copysign(0.0, v) if v != 0 and abs(v) < fmt.minnormal else v


def reference(op, fmt, x, ftz):
    """The correctly rounded op(x) in fmt, as a float (None: rsqrt, checked separately)."""
    if ftz:
        x = flushed(fmt, x)
    s = special(op, x)
    if s is None:
        e = exact(op, x)
        if e is None:
            return None
        if isinstance(e, float) and math.isinf(e):
            s = e
        else:
            s = R.round_fraction(Fraction(e), fmt, "rn")
            s = math.copysign(abs(s), float(e)) if s == 0 else s
    return flushed(fmt, s) if ftz else s


def rsqrt_is_nearest(x, r, fmt):
    """r is the nearest fmt value to 1/sqrt(x): both neighbouring midpoints m satisfy m^2 x on the right side of 1."""
    fx, fr = Fraction(x), Fraction(r)
    _, e = math.frexp(r)
    ulp = Fraction(2) ** (max(e - fmt.P, fmt.qmin))
    lo, hi = fr - ulp / 2, fr + ulp / 2
    return lo * lo * fx <= 1 <= hi * hi * fx


def grid(fmt, op):
    """Inputs in fmt: the special values, subnormals, and normal values across the range, both signs."""
    tiny = fmt.minnormal * 2.0 ** -(fmt.P - 1)
    vals = [0.0, -0.0, INF, -INF, NAN, tiny, -tiny, fmt.minnormal / 2, -fmt.minnormal / 3, fmt.minnormal,
            -fmt.minnormal, fmt.maxval, -fmt.maxval, 1.0, -1.0, 0.5, 2.0, 3.0, -3.0, 0.1, -0.75, 1.5, 7.25]
    rng = np.random.default_rng(zlib.crc32(op.encode()))
    lim = {R.F16: 15, R.BF16: 120, R.F32: 120, R.F64: 1000}[fmt]
    mags = 2.0 ** rng.uniform(-lim, lim, 40) * rng.choice([-1, 1], 40)
    near = rng.uniform(-8, 8, 40)
    if op in ("ex2",):
        near = rng.uniform(-lim - fmt.P, lim + 1, 40)
    out = np.array(vals + list(mags) + list(near), np.float64)
    with np.errstate(all="ignore"):
        if fmt is not R.F64:          # round the grid into the format (values representable there)
            out = np.array([R.round_fraction(Fraction(v), fmt, "rn") if math.isfinite(v) else v for v in out])
    return out


def run_unary(opcode, xs):
    """Interpreter results (floats) of a unary fast-math form on float inputs xs (32 at a time; packed forms carry
    xs in the low half and reversed xs in the high half, both checked)."""
    f = P.match(opcode)
    fmt = FMT[f.type]
    e = entry(opcode)
    packed = f.type.endswith("x2")
    got_lo, got_hi, ins = [], [], []
    for i in range(0, len(xs), 32):
        chunk = np.resize(xs[i:i + 32], 32)
        bits = to_bits(fmt, chunk)
        src = join(bits, bits[::-1]) if packed else bits
        (out,) = interpret([e], [[src]])
        if packed:
            lo, hi = halves(out)
            got_lo.append(from_bits(fmt, lo))
            got_hi.append(from_bits(fmt, hi)[::-1])
        else:
            got_lo.append(from_bits(fmt, out))
        ins.append(chunk)
    return np.concatenate(ins), np.concatenate(got_lo), (np.concatenate(got_hi) if packed else None)


def same(a, b):
    return (math.isnan(a) and math.isnan(b)) or (a == b and math.copysign(1, a) == math.copysign(1, b))


# ------------------------------------------------------------------ the forms: grammar, targets, ptxas


def test_the_form_list_is_the_tables_approx_forms():
    claimed = set()
    for op in P.FASTMATH:
        for ty, (allowed, _) in P.TABLE[op][1].items():
            for qs in ([("approx",)] + ([("approx", "ftz")] if "ftz" in allowed else [])):
                f = P.match(".".join((op,) + qs + (ty,)))
                if isinstance(f, P.Form):
                    claimed.add(f.opcode)
    assert claimed == set(FORMS)


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_every_form_assembles_or_is_refused_naming_the_target(arch):
    sm = int(arch[3:])
    ok = [o for o in FORMS if MIN_SM.get(o, 50) <= sm]
    ck = compile_ops([entry(o) for o in ok], arch)
    assert all(f"\t{o} " in ck.asm["ptx"] for o in ok)
    assemble(ck, arch)
    for o in FORMS:
        if MIN_SM.get(o, 50) > sm:
            with pytest.raises(tiledsl.CompilationError, match=f"{o}: needs sm_{MIN_SM[o]} or newer; the target is "
                                                               f"{arch}"):
                compile_ops([entry(o)], arch)


def test_min_sm_follows_the_isa():
    for o in FORMS:
        assert P.min_sm(P.match(o)) == MIN_SM.get(o, 50), o
    assert all(P.min_sm(P.match(o)) == 100 for o in MINMAX3 if ".abs" in o)


def test_three_input_min_max_assemble_for_sm100():
    ck = compile_ops([entry(o, 3) for o in MINMAX3], "sm_100")
    ptx = ck.asm["ptx"]
    for o in MINMAX3:
        line = next(ln for ln in ptx.splitlines() if ln.strip().startswith(o + " "))
        assert line.count(",") == 3, line
    assemble(ck, "sm_100")


@pytest.mark.parametrize("opcode", ["min.f32", "max.NaN.f32", "min.ftz.NaN.abs.f32"])
def test_three_input_min_max_refused_on_sm90_naming_the_target(opcode):
    with pytest.raises(tiledsl.CompilationError, match="needs sm_100 or newer; the target is sm_90"):
        compile_ops([entry(opcode, 3)], "sm_90")


def test_two_input_min_max_are_unchanged_and_need_no_sm100():
    ck = compile_ops([entry("min.f32", 2), entry("max.ftz.NaN.f32", 2)], "sm_90")
    assemble(ck, "sm_90")


# ------------------------------------------------------------------ interpreter == correctly rounded


@pytest.mark.parametrize("opcode", FORMS)
def test_interpreter_gives_the_correctly_rounded_value(opcode):
    f = P.match(opcode)
    fmt, ftz = FMT[f.type], "ftz" in f.quals
    if fmt is R.F64 and ftz:
        pytest.skip("the gross 1.11.20 forms: test_gross_f64_forms")
    xs = grid(fmt, f.op)
    ins, got, got_hi = run_unary(opcode, xs)
    for res in [got] + ([got_hi] if got_hi is not None else []):
        for x, g in zip(ins, res):
            want = reference(f.op, fmt, x, ftz)
            if want is None:                                       # rsqrt of a positive finite (or flushed) x
                xx = flushed(fmt, x) if ftz else x
                assert g > 0 and rsqrt_is_nearest(xx, g, fmt), (opcode, x, g)
                continue
            assert same(g, want), (opcode, x, g, want)


def test_nan_results_are_canonical():
    for opcode, fmt, canon in [("ex2.approx.f32", R.F32, 0x7FFFFFFF), ("tanh.approx.f16", R.F16, 0x7FFF),
                               ("tanh.approx.bf16", R.BF16, 0x7FFF), ("lg2.approx.f32", R.F32, 0x7FFFFFFF)]:
        (out,) = interpret([entry(opcode)], [[to_bits(fmt, np.full(32, -1.0 if "lg2" in opcode else np.nan))]])
        assert (out == canon).all(), opcode


def gross_reference(op, x):
    """PTX ISA 9.7.3.14/17: tmp = upper word of x (subnormal -> signed zero); op(tmp) rounded to 1.11.20 (subnormal
    -> signed zero), low word zero; NaN -> 0x7fffffff00000000."""
    hi = np.float64(x).view(np.uint64) & np.uint64(0xFFFFFFFF00000000)
    t = flushed(R.F64, float(hi.view(np.float64)))
    if math.isnan(t) or (op == "rsqrt" and t < 0 and t != 0):
        return 0x7FFFFFFF00000000
    if t == 0:
        r = math.copysign(INF, t)
    elif math.isinf(t):
        r = math.copysign(0.0, t)
    elif op == "rcp":
        r = flushed(R.F64, R.round_fraction(1 / Fraction(t), GROSS, "rn"))
    else:
        r = flushed(R.F64, sqrt_fraction(1 / Fraction(t), GROSS, "rn"))
    return int(np.float64(r).view(np.uint64))


GROSS = R.Fmt("1.11.20", 21, -1022, 1023, 64, 0)


@pytest.mark.parametrize("opcode", ["rcp.approx.ftz.f64", "rsqrt.approx.ftz.f64"])
def test_gross_f64_forms(opcode):
    op = opcode.split(".")[0]
    xs = grid(R.F64, op)
    with np.errstate(all="ignore"):                  # low words that the forms ignore
        xs = np.concatenate([xs, xs * (1 + 2.0 ** -40), [5e-324, -5e-324, 2.0 ** -1023]])
    ins, got, _ = run_unary(opcode, xs)
    for x, g in zip(ins, got):
        gb = int(np.float64(g).view(np.uint64))
        assert gb & 0xFFFFFFFF == 0, (opcode, x)
        assert gb == gross_reference(op, x), (opcode, x, hex(gb), hex(gross_reference(op, x)))


def minmax3_reference(op, q, a, b, c):
    vals = [flushed(R.F32, v) if "ftz" in q else v for v in (a, b, c)]
    if "abs" in q:
        vals = [abs(v) for v in vals]
    if any(math.isnan(v) for v in vals):
        if "NaN" in q or all(math.isnan(v) for v in vals):
            return NAN
        vals = [v for v in vals if not math.isnan(v)]
    key = lambda v: (v, math.copysign(1, v))          # noqa: E731 - -0 < +0
    return min(vals, key=key) if op == "min" else max(vals, key=key)


@pytest.mark.parametrize("opcode", MINMAX3)
def test_three_input_min_max_on_the_interpreter(opcode):
    op, q = opcode.split(".")[0], opcode.split(".")[1:-1]
    rng = np.random.default_rng(7)
    pool = np.array([0.0, -0.0, 1.0, -1.0, 2.5, -2.5, INF, -INF, NAN, 1e-40, -1e-40, 3e38], np.float64)
    cols = [rng.choice(pool, 32) for _ in range(3)]
    # run it as sm_100 code on the interpreter
    X, W = pack([entry(opcode, 3)], [[to_bits(R.F32, c) for c in cols]])
    out = np.zeros(32, np.uint64)
    tiledsl.jit(fastmath_lanes.fn, interpret=True, target="sm_100")(X, out, (entry(opcode, 3),), W)
    got = from_bits(R.F32, results([entry(opcode, 3)], out)[0])
    for i in range(32):
        a, b, c = (float(np.float32(col[i])) for col in cols)
        want = minmax3_reference(op, q, a, b, c)
        want = flushed(R.F32, want) if "ftz" in q and not math.isnan(want) else want
        assert same(got[i], want), (opcode, a, b, c, got[i], want)


# ------------------------------------------------------------------ the GPU tests' kernels, compiled here


def test_gpu_fastmath_kernels_compile_and_assemble():
    import test_gpu_fastmath as G
    for ops in G.form_kernels() + [G.random_kernel(s)[0] for s in range(G.RANDOM_KERNELS)]:
        assemble(compile_ops(ops, "sm_90"), "sm_90")
    assemble(compile_ops(G.minmax3_kernel(), "sm_100"), "sm_100")


def test_gpu_bound_checker_accepts_the_interpreter_and_rejects_a_perturbation():
    """The GPU tests' checker, run here with the interpreter standing in for the GPU: the correctly rounded values
    pass, and a result moved by 2^-8 relative (beyond every bound but bf16 ex2/tanh) fails."""
    import test_gpu_fastmath as G
    for seed in range(3):
        ops, srcs, vals = G.random_kernel(seed)
        interp = interpret(ops, srcs)
        G.check(ops, vals, interp, interp)
    ops = [entry("ex2.approx.f32")]
    x = np.linspace(-3, 3, 32)
    srcs = [[to_bits(R.F32, x)]]
    interp = interpret(ops, srcs)
    moved = [to_bits(R.F32, from_bits(R.F32, interp[0]) * (1 + 2.0 ** -8))]
    with pytest.raises(AssertionError, match="outside the bound"):
        G.check(ops, [(from_bits(R.F32, srcs[0][0]),)], moved, interp)
