"""Scalar math in the kernel language (no GPU needed): T.sqrt, T.rsqrt, T.exp2, T.log2, T.exp, T.log, T.sin, T.cos,
T.tanh, T.abs, T.fma, T.min, T.max and `x ** k`.

- On the interpreter every form agrees with numpy and exact rationals: bit for bit where the instruction is exact or
  correctly rounded (sqrt.rn/rz/rm/rp, abs, fma in every rounding mode, min, max, the multiplications of x ** k),
  within the PTX ISA's bound for the .approx forms (the interpreter gives their correctly rounded value, as the
  register family does for every .approx form: isa/register/fastmath.py).
- The PTX holds the instruction the docstring names, and ptxas accepts it; forms newer than the target are refused at
  the user's line.
- A function whose every PTX form is approximate is that form when approx= is left out; each mistake (approx=False, a dtype without the instruction, a bad keyword, math.sqrt, x ** 0.5) is a
  CompilationError at the call that says what to write instead.

The kernels and checks live in tests/scalar_math_kernels.py; tests/test_gpu_scalar_math.py runs them on the GPU.
"""
import inspect
import math
from fractions import Fraction

import numpy as np
import pytest

import scalar_math_kernels as K
import tiledsl
from helpers import ptxas
from tiledsl import T


@pytest.mark.parametrize("case", K.CASES, ids=[c.id for c in K.CASES])
def test_interpreter_agrees_with_numpy(case):
    a, b, c = K.inputs(case)
    out = K.run_interpreter(case, a, b, c)
    assert K.problems(case, a, b, c, out) == []


def _arrays(case):
    a, b, c = K.inputs(case)
    return [x.view(K.VALUE_NP[case.dtype]) if case.dtype != "bfloat16" else x for x in (a, b, c, np.zeros_like(a))]


@pytest.mark.parametrize("case", K.CASES, ids=[c.id for c in K.CASES])
def test_ptx_holds_the_instruction_and_assembles(case):
    ck = K.kernel(case.dtype).compile(*_arrays(case), target="sm_90", **case.constexprs())
    ptx = ck.asm["ptx"]
    for text in case.ptx():
        assert text in ptx, (text, ptx)
    r = ptxas(ptx, "sm_90")
    assert r.returncode == 0, r.stderr


def test_exp_and_log_are_the_cuda_intrinsics_sequences():
    """T.exp: mul.rn by log2(e) rounded to float32, then ex2.approx; T.log: lg2.approx, then mul.rn by ln 2."""
    f32 = lambda v: int(np.float32(v).view(np.uint32))        # noqa: E731
    assert f32(math.log2(math.e)) == 0x3FB8AA3B and f32(math.log(2)) == 0x3F317218
    for fn, order, const in (("exp", ("mul.rn.f32", "ex2.approx.f32"), 0x3FB8AA3B),
                             ("log", ("lg2.approx.f32", "mul.rn.f32"), 0x3F317218)):
        case = K.Case(fn, "float32", approx=True)
        ptx = K.kernel("float32").compile(*_arrays(case), target="sm_90", **case.constexprs()).asm["ptx"]
        assert ptx.index(order[0]) < ptx.index(order[1])
        assert str(const) in ptx                                   # the constant's bits, moved into a register
    x = np.float32(3.25)
    case = K.Case("exp", "float32", approx=True)
    a = np.full(K.N, x)
    out = np.zeros(K.N, np.float32)
    K.kernel("float32", interpret=True)(a, a, a, out, **case.constexprs())
    # the interpreter: the product rounded to float32, then 2**t correctly rounded
    t = np.float32(x * np.float32(math.log2(math.e)))
    assert out[0] == np.float32(2.0 ** float(t))


def _plain_kernel(call):
    return _kernel_with(f"Out[i] = {call}")


@pytest.mark.parametrize("plain, written", [
    ("T.rsqrt(x)", "T.rsqrt(x, approx=True)"), ("T.exp2(x)", "T.exp2(x, approx=True)"),
    ("T.log2(x)", "T.log2(x, approx=True)"), ("T.exp(x)", "T.exp(x, approx=True)"),
    ("T.log(x)", "T.log(x, approx=True)"), ("T.sin(x)", "T.sin(x, approx=True)"),
    ("T.cos(x)", "T.cos(x, approx=True)"), ("T.tanh(x)", "T.tanh(x, approx=True)"),
    ("T.cast(T.exp2(T.cast(x, 'bfloat16')), 'float32')",
     "T.cast(T.exp2(T.cast(x, 'bfloat16'), approx=True, ftz=True), 'float32')"),
])
def test_approximate_only_functions_are_their_one_form_without_keywords(plain, written):
    """T.exp2(x) is ex2.approx.f32, as T.exp2(x, approx=True) is: PTX has no other form, so nothing is picked."""
    a = np.linspace(0.25, 3.0, 32, dtype=np.float32)
    z = [np.zeros(32, d) for d in (np.float16, np.int32, np.uint32)]
    ptx = [tiledsl.jit(_plain_kernel(c)).compile(a, *z, np.zeros_like(a), target="sm_90").asm["ptx"]
           for c in (plain, written)]
    assert ptx[0].split(".entry")[1] == ptx[1].split(".entry")[1]
    outs = []
    for c in (plain, written):
        out = np.zeros_like(a)
        tiledsl.jit(_plain_kernel(c), interpret=True)(a, *z, out)
        outs.append(out)
    assert np.array_equal(outs[0], outs[1])


def test_division_and_plain_arithmetic_are_rounded_per_operation():
    """`/` is div.rn.f32 and a * b + c is mul.rn then add.rn (two roundings; T.fma is the fused one)."""
    @tiledsl.jit
    def k(A: T.Tensor((32,), "float32"), B: T.Tensor((32,), "float32"), Out: T.Tensor((32,), "float32")):
        T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
        i = T.cuda.thread_id()
        Out[i] = A[i] / B[i] + A[i] * B[i] + 1.0
    z = np.zeros(32, np.float32)
    ptx = k.compile(z, z, z, target="sm_90").asm["ptx"]
    assert "div.rn.f32" in ptx and "mul.rn.f32" in ptx and "add.rn.f32" in ptx and "fma" not in ptx


# ------------------------------------------------------------------ targets


@pytest.mark.parametrize("fn, dtype, sm, older", [("tanh", "float32", 75, 70), ("tanh", "bfloat16", 90, 89),
                                                  ("exp2", "bfloat16", 90, 80), ("exp2", "float16", 75, 72)])
def test_a_form_newer_than_the_target_is_refused_at_the_call(fn, dtype, sm, older):
    case = K.Case(fn, dtype, approx=True, ftz=dtype == "bfloat16" and fn == "exp2")
    with pytest.raises(tiledsl.CompilationError) as ei:
        K.kernel(dtype).compile(*_arrays(case), target=f"sm_{older}", **case.constexprs())
    e = ei.value
    assert f"sm_{sm}" in str(e) and f"the target is sm_{older}" in str(e)
    assert e.loc is not None and f"T.{fn}(" in e.loc.text


# ------------------------------------------------------------------ semantics around the calls


def _run(kernel, *arrays):
    tiledsl.jit(interpret=True)(kernel)(*arrays)


def test_results_are_values_not_references_to_the_scratch_register():
    """Every call writes the same one-element local; each result is read into its own variable at once."""
    def k(A: T.Tensor((32,), "float32"), Out: T.Tensor((3, 32), "float32")):
        T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
        i = T.cuda.thread_id()
        r = T.sqrt(A[i])
        s = T.sqrt(A[i] * 4.0)
        Out[0, i] = r
        Out[1, i] = s
        Out[2, i] = T.sqrt(T.sqrt(A[i]))
    a = np.arange(32, dtype=np.float32) ** 2
    out = np.zeros((3, 32), np.float32)
    _run(k, a, out)
    np.testing.assert_array_equal(out, np.stack([np.sqrt(a), np.sqrt(a * 4), np.sqrt(np.sqrt(a))]))
    tile = tiledsl.jit(k).compile(a, out, target="sm_90").asm["tile"]
    assert tile.count("alloc local math.float32") == 1


def test_math_in_a_while_condition_and_a_helper_is_evaluated_every_time():
    @tiledsl.inline
    def softplus_ish(x):
        return T.log2(1.0 + T.exp2(x, approx=True), approx=True)

    def k(A: T.Tensor((32,), "float32"), Out: T.Tensor((2, 32), "float32")):
        T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
        i = T.cuda.thread_id()
        x = A[i]
        steps = 0.0
        while T.sqrt(x) < 100.0:
            x = x * 2.0 + 1.0
            steps += 1.0
        Out[0, i] = steps
        Out[1, i] = softplus_ish(A[i])
    a = np.arange(32, dtype=np.float32)
    out = np.zeros((2, 32), np.float32)
    _run(k, a, out)
    want = []
    for x in a:
        n = 0
        while np.sqrt(x) < 100:
            x, n = np.float32(x * 2 + 1), n + 1
        want.append(n)
    np.testing.assert_array_equal(out[0], want)
    np.testing.assert_allclose(out[1], np.log2(1 + np.exp2(a.astype(np.float64))), rtol=1e-6)


def test_python_numbers_take_the_values_dtype():
    def k(A: T.Tensor((32,), "float64"), H: T.Tensor((32,), "float16"), Out: T.Tensor((32,), "float64"),
          Oh: T.Tensor((32,), "float16")):
        T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
        i = T.cuda.thread_id()
        Out[i] = T.fma(A[i], 3, 0.1) + T.sqrt(2.0, rnd="rz") + T.min(A[i], 7, 5.5)
        Oh[i] = T.fma(H[i], 2, 1)
    a = np.linspace(0, 10, 32)
    h = np.linspace(0, 4, 32).astype(np.float16)
    out, oh = np.zeros(32), np.zeros(32, np.float16)
    _run(k, a, h, out, oh)
    rz2 = np.float32(math.sqrt(2))                      # sqrt(2) rounded toward zero in float32
    if float(rz2) > math.sqrt(2):
        rz2 = np.nextafter(rz2, np.float32(0))
    fused = np.array([float(Fraction(v) * 3 + Fraction(0.1)) for v in a])       # a * 3 + 0.1 rounded once
    np.testing.assert_array_equal(out, fused + float(rz2) + np.minimum(a, 5.5))
    np.testing.assert_array_equal(oh, (h * np.float16(2) + np.float16(1)))
    ptx = tiledsl.jit(k).compile(a, h, out, oh, target="sm_90").asm["ptx"]
    assert "fma.rn.f64" in ptx and "sqrt.rz.f32" in ptx and "fma.rn.f16" in ptx


def test_min_and_max_take_floats_ints_and_several_values():
    def k(A: T.Tensor((32,), "int32"), U: T.Tensor((32,), "uint32"), F: T.Tensor((32,), "float32"),
          Out: T.Tensor((4, 32), "int32"), Of: T.Tensor((32,), "float32")):
        T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
        i = T.cuda.thread_id()
        Out[0, i] = T.min(A[i], -3)
        Out[1, i] = T.max(A[i], 0, 5)
        Out[2, i] = T.cast(T.min(U[i], 7), "int32")
        Out[3, i] = T.max(A[i], T.cast(U[i], "int32"))
        Of[i] = T.max(T.min(F[i], 1.0), -1.0)
    a = np.arange(-16, 16, dtype=np.int32)
    u = np.arange(32, dtype=np.uint32)
    f = np.linspace(-3, 3, 32).astype(np.float32)
    f[3] = np.nan
    out, of = np.zeros((4, 32), np.int32), np.zeros(32, np.float32)
    _run(k, a, u, f, out, of)
    np.testing.assert_array_equal(out, [np.minimum(a, -3), np.maximum(np.maximum(a, 0), 5),
                                        np.minimum(u, 7).astype(np.int32), np.maximum(a, u.astype(np.int32))])
    np.testing.assert_array_equal(of, np.fmax(np.fmin(f, 1), -1))       # the NaN gives the other operand: -1
    ptx = tiledsl.jit(k).compile(a, u, f, out, of, target="sm_90").asm["ptx"]
    assert "min.s32" in ptx and "max.s32" in ptx and "min.u32" in ptx and "min.f32" in ptx and "max.f32" in ptx


def test_power_reads_its_base_once_and_augmented_power():
    def k(A: T.Tensor((32,), "float32"), Out: T.Tensor((2, 32), "float32")):
        T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
        i = T.cuda.thread_id()
        Out[0, i] = (A[i] + 1.0) ** 4
        x = A[i]
        x **= 2
        Out[1, i] = x
    a = np.linspace(-2, 2, 32).astype(np.float32)
    out = np.zeros((2, 32), np.float32)
    _run(k, a, out)
    b = a + np.float32(1)
    np.testing.assert_array_equal(out, [((b * b) * b) * b, a * a])
    tile = tiledsl.jit(k).compile(a, out, target="sm_90").asm["tile"]
    assert tile.count("A<float32>[i.1] + float32(1.0)") == 1, tile


# ------------------------------------------------------------------ mistakes, each at the user's line


def _kernel_with(line):
    src = ("def k(A: T.Tensor((32,), 'float32'), H: T.Tensor((32,), 'float16'), N: T.Tensor((32,), 'int32'),\n"
           "      U: T.Tensor((32,), 'uint32'), Out: T.Tensor((32,), 'float32')):\n"
           "    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))\n"
           "    i = T.cuda.thread_id()\n"
           "    x = A[i]\n"
           "    h = H[i]\n"
           "    n = N[i]\n"
           "    u = U[i]\n"
           f"    {line}\n")
    path = f"<scalar-math-error {abs(hash(line))}>"
    import linecache
    linecache.cache[path] = (len(src), None, src.splitlines(True), path)
    g = {"T": T, "math": math, "sqrt": math.sqrt}
    exec(compile(src, path, "exec"), g)
    return g["k"]


def compile_error(line):
    k = _kernel_with(line)
    z = [np.zeros(32, d) for d in (np.float32, np.float16, np.int32, np.uint32, np.float32)]
    with pytest.raises(tiledsl.CompilationError) as ei:
        tiledsl.jit(k).compile(*z, target="sm_90")
    e = ei.value
    assert e.loc is not None and e.loc.line == 9 and e.loc.text.strip() == line, str(e)
    assert "^" in str(e).splitlines()[2]
    return str(e)


MISTAKES = [
    ("Out[i] = T.exp2(x, approx=False)", "T.exp2: approx=False asks for a correctly rounded exp2, which PTX does "
                                         "not have; PTX has only the approximate form (ex2.approx.f32, within 2 ulp)"),
    ("Out[i] = T.rsqrt(x, approx=False)", "1.0 / T.sqrt(x)"),
    ("Out[i] = T.sin(x, approx=False)", "approx=False asks for a correctly rounded sin, which PTX does not have"),
    ("Out[i] = T.exp(x, approx=False)", "as CUDA's __expf"),
    ("Out[i] = T.sqrt(h)", 'T.sqrt has no PTX form for float16; it exists for float32 (.f32), float64 (.f64): '
                           'write T.sqrt(T.cast(x, "float32"))'),
    ("Out[i] = T.sqrt(n)", "T.sqrt has no PTX form for int32"),
    ("Out[i] = T.log(h, approx=True)", "T.log has no PTX form for float16; it exists for float32 (.f32)"),
    ("Out[i] = T.sqrt(x, approx=True, rnd='rz')", "approx=True and rnd='rz' exclude each other"),
    ("Out[i] = T.sqrt(x, rnd='rx')", "rnd= is one of 'rn', 'rz', 'rm', 'rp'"),
    ("Out[i] = T.sqrt(x, ftz=1)", "ftz= must be a compile-time True or False, got 1"),
    ("Out[i] = T.sqrt(x, True)", "T.sqrt takes 1 value, got 2 (approx=, ftz= and rnd= are keywords)"),
    ("Out[i] = T.sqrt(x, fast=True)", "T.sqrt got an unexpected keyword 'fast' (its keywords: approx=, ftz=, rnd=)"),
    ("Out[i] = T.sqrt(T.cast(x, 'float64'), approx=True)", "PTX has no sqrt.approx.f64"),
    ("Out[i] = T.sqrt(T.cast(x, 'float64'), ftz=True)", "this form has no .ftz"),
    ("Out[i] = T.sqrt(A)", "T.sqrt takes a scalar value, not the buffer view A[32]:float32"),
    ("Out[i] = T.exp2(h, approx=True, ftz=True)", "T.exp2: this form has no .ftz; PTX has it on ex2.approx.ftz.f32"),
    ("Out[i] = T.exp2(T.cast(x, 'bfloat16'), ftz=False)", "the only PTX form is ex2.approx.ftz.bf16"),
    ("Out[i] = T.tanh(x, approx=True, ftz=True)", "T.tanh got an unexpected keyword 'ftz'"),
    ("Out[i] = T.fma(x, h, x)", "T.fma's values are float16 and float32; they must share one dtype"),
    ("Out[i] = T.fma(n, n, n)", "T.fma has no PTX form for int32"),
    ("Out[i] = T.fma(h, h, h, rnd='rz')", "T.fma on float16: PTX has only fma.rn.f16"),
    ("Out[i] = T.abs(u)", "T.abs of a uint32 value: PTX has no abs.u32; an unsigned value is its own absolute value"),
    ("Out[i] = T.abs(T.cast(n, 'int8'))", "T.abs has no PTX form for int8"),
    ("Out[i] = T.abs(n, ftz=True)", "T.abs: this form has no .ftz"),
    ("Out[i] = math.sqrt(x)", "math.sqrt runs on the host, not in a kernel: write T.sqrt(x) (sqrt.rn.f32"),
    ("Out[i] = sqrt(x)", "math.sqrt runs on the host, not in a kernel: write T.sqrt(x)"),
    ("Out[i] = math.exp(x)", "math.exp runs on the host, not in a kernel: write T.exp(x) (ex2.approx.f32"),
    ("Out[i] = math.floor(x)", "math.floor runs on the host, not in a kernel; the kernel's scalar math is T.sqrt"),
    ("Out[i] = x ** 0.5", "x ** 0.5: write T.sqrt(x)"),
    ("Out[i] = x ** -0.5", "x ** -0.5: write T.rsqrt(x) (rsqrt.approx) or 1.0 / T.sqrt(x)"),
    ("Out[i] = x ** 2.0", "write the exponent as an int (x ** 2)"),
    ("Out[i] = x ** 1.5", "only compile-time integer exponents in -8..8"),
    ("Out[i] = x ** 9", "x ** 9: only exponents in -8..8 become multiplications"),
    ("Out[i] = x ** n", "'**' needs a compile-time integer exponent"),
    ("Out[i] = T.cast(2 ** n, 'float32')", "(an integer power of two: 1 << n)"),
    ("Out[i] = T.cast(n ** -1, 'float32')", "an integer to a negative power is not an integer"),
]


@pytest.mark.parametrize("line, message", MISTAKES, ids=[m[0] for m in MISTAKES])
def test_mistakes_say_what_to_write(line, message):
    assert message in compile_error(line)


def test_every_math_builtin_has_its_ptx_in_the_docstring():
    for name in ("sqrt", "rsqrt", "exp2", "log2", "exp", "log", "sin", "cos", "tanh", "abs", "fma", "min", "max"):
        doc = inspect.getdoc(getattr(T, name))
        assert doc.startswith(f"T.{name}("), name
        ptx = {"exp2": "ex2.approx", "log2": "lg2.approx", "exp": "ex2.approx", "log": "lg2.approx"}
        assert ptx.get(name, name + ".") in doc, name
