"""The front end of the scalar math builtins (`T.sqrt` ... `T.fma`, lang/scalar_math.py), `x ** k`, and the refusal
of `math.*` inside a kernel (mixed into the Parser).

A math call is the register family's own instruction, not a second implementation of it: the front end writes
`tile.apply(T.ptx["sqrt.rn.f32"], scratch, x)` into a one-element local of the result's dtype (one per dtype and
kernel, registers after LLVM's SROA) and reads it back into a fresh variable at once, so later calls may reuse the
scratch. The pattern expansion, the target checks (tanh.approx.f32 needs sm_75 ...), the PTX text and the
interpreter's semantics are then exactly those of the written-out tile pattern.
"""
from __future__ import annotations

import math

from ..core import dtypes as dt
from ..ir import nodes as ir
from ..ir import ops
from ..lang.views import RootView, View

RND = ("rn", "rz", "rm", "rp")
LOG2E = 1.4426950408889634       # log2(e) and ln(2); const_of rounds them to float32 (0f3FB8AA3B, 0f3F317218)
LN2 = 0.6931471805599453
MAX_POWER = 8                    # x ** k for |k| <= 8 becomes |k| - 1 multiplications
_SCRATCH = object()              # an operand that is the scratch register itself (the previous step's result)
_NO_APPROX = "PTX has only the approximate form"

# math.<name> inside a kernel: what to write instead
HOST_MATH = {
    "sqrt": "T.sqrt(x) (sqrt.rn.f32; approx=True for sqrt.approx.f32)",
    "exp": "T.exp(x) (ex2.approx.f32 of x * log2(e))", "exp2": "T.exp2(x) (ex2.approx.f32)",
    "log": "T.log(x) (lg2.approx.f32 times ln 2)", "log2": "T.log2(x) (lg2.approx.f32)",
    "sin": "T.sin(x) (sin.approx.f32)", "cos": "T.cos(x) (cos.approx.f32)", "tanh": "T.tanh(x) (tanh.approx.f32)",
    "fabs": "T.abs(x)", "fma": "T.fma(a, b, c)",
    "pow": "x ** k for a compile-time integer k in -8..8 (multiplications), else T.exp2(y * T.log2(x))",
}
ALL_T_MATH = "T.sqrt, T.rsqrt, T.exp2, T.log2, T.exp, T.log, T.sin, T.cos, T.tanh, T.abs, T.fma, T.min, T.max"


def host_math_message(fn) -> str | None:
    """The message for a function of Python's math module used in a kernel, or None for anything else."""
    name = getattr(fn, "__name__", None)
    if getattr(fn, "__module__", None) != "math" or getattr(math, name or "", None) is not fn:
        return None
    use = HOST_MATH.get(name)
    if use is not None:
        return f"math.{name} runs on the host, not in a kernel: write {use}"
    return f"math.{name} runs on the host, not in a kernel; the kernel's scalar math is {ALL_T_MATH} " \
           f"(docs/semantics.md)"


class ScalarMath:
    """`T.sqrt` ... `T.fma` and `x ** k` for the Parser."""

    # ------------------------------------------------------------ the builtins
    def b_sqrt(self, node):
        x, kw = self._math_args(node, "sqrt", 1, {"approx": False, "ftz": False, "rnd": None})
        d = self._math_dtype(node, "sqrt", x, ("float32", "float64"), 'T.sqrt(T.cast(x, "float32"))')
        approx, ftz, rnd = kw["approx"], kw["ftz"], kw["rnd"]
        if d.name == "float64":
            if approx:
                raise self.error("T.sqrt: PTX has no sqrt.approx.f64 (float64 has sqrt.rn/rz/rm/rp.f64, and "
                                 "T.rsqrt(x, approx=True) for rsqrt.approx.f64)", node)
            self._no_ftz(node, "sqrt", ftz, "sqrt.rn.ftz.f32 (float32 only)")
        if approx and rnd is not None:
            raise self.error(f"T.sqrt: approx=True and rnd={rnd!r} exclude each other (sqrt.approx.f32 has no "
                             f"rounding mode)", node)
        q = "approx" if approx else rnd or "rn"
        return self._math_emit(node, "sqrt", d, [(_op("sqrt", q, ftz, d), x)])

    def b_rsqrt(self, node):
        x, kw = self._math_args(node, "rsqrt", 1, {"approx": None, "ftz": False})
        self._approx_required(node, "rsqrt", kw["approx"], "rsqrt.approx.f32; the correctly rounded alternative "
                              "is 1.0 / T.sqrt(x), two roundings")
        d = self._math_dtype(node, "rsqrt", x, ("float32", "float64"), 'T.rsqrt(T.cast(x, "float32"))')
        return self._math_emit(node, "rsqrt", d, [(_op("rsqrt", "approx", kw["ftz"], d), x)])

    def b_exp2(self, node):
        x, kw = self._math_args(node, "exp2", 1, {"approx": None, "ftz": None})
        self._approx_required(node, "exp2", kw["approx"], "ex2.approx.f32, within 2 ulp")
        d = self._math_dtype(node, "exp2", x, ("float32", "float16", "bfloat16"),
                             'T.exp2(T.cast(x, "float32"))')
        ftz = kw["ftz"]
        if d.name == "float16":
            self._no_ftz(node, "exp2", ftz, "ex2.approx.ftz.f32 and ex2.approx.ftz.bf16 (ex2.approx.f16 has none)")
        if d.name == "bfloat16":
            if ftz is False:
                raise self.error("T.exp2 on bfloat16: the only PTX form is ex2.approx.ftz.bf16, which flushes "
                                 "subnormals; leave ftz= out (or write ftz=True)", node)
            ftz = True                       # the one bf16 form, as approx is the one form of every dtype
        ftz = bool(ftz)
        return self._math_emit(node, "exp2", d, [(_op("ex2", "approx", ftz, d), x)])

    def b_log2(self, node):
        return self._approx_f32(node, "log2", "lg2")

    def b_sin(self, node):
        return self._approx_f32(node, "sin", "sin")

    def b_cos(self, node):
        return self._approx_f32(node, "cos", "cos")

    def b_exp(self, node):
        x, kw = self._math_args(node, "exp", 1, {"approx": None, "ftz": False})
        self._approx_required(node, "exp", kw["approx"], "ex2.approx.f32 of x * log2(e), as CUDA's __expf")
        d = self._math_dtype(node, "exp", x, ("float32",), 'T.exp(T.cast(x, "float32"))')
        ftz = kw["ftz"]
        return self._math_emit(node, "exp", d, [(_op("mul", "rn", ftz, d), x, LOG2E),
                                                (_op("ex2", "approx", ftz, d), _SCRATCH)])

    def b_log(self, node):
        x, kw = self._math_args(node, "log", 1, {"approx": None, "ftz": False})
        self._approx_required(node, "log", kw["approx"], "lg2.approx.f32 times ln(2), as CUDA's __logf")
        d = self._math_dtype(node, "log", x, ("float32",), 'T.log(T.cast(x, "float32"))')
        ftz = kw["ftz"]
        return self._math_emit(node, "log", d, [(_op("lg2", "approx", ftz, d), x),
                                                (_op("mul", "rn", ftz, d), _SCRATCH, LN2)])

    def b_tanh(self, node):
        x, kw = self._math_args(node, "tanh", 1, {"approx": None})
        self._approx_required(node, "tanh", kw["approx"], "tanh.approx.f32, relative error 2^-11")
        d = self._math_dtype(node, "tanh", x, ("float32", "float16", "bfloat16"),
                             'T.tanh(T.cast(x, "float32"))')
        return self._math_emit(node, "tanh", d, [(_op("tanh", "approx", False, d), x)])

    def b_abs(self, node):
        x, kw = self._math_args(node, "abs", 1, {"ftz": False})
        if isinstance(x, ir.Expr) and x.dtype.kind == "uint":
            raise self.error(f"T.abs of {ops.article(x.dtype.name)} value: PTX has no abs.{x.dtype.ptx}; an unsigned "
                             f"value is its own absolute value", node)
        d = self._math_dtype(node, "abs", x, ("float32", "float64", "float16", "bfloat16", "int16", "int32", "int64"),
                             'T.abs(T.cast(x, "int32"))', ints=True)
        ftz = kw["ftz"]
        if d.name not in ("float32", "float16"):
            self._no_ftz(node, "abs", ftz, "abs.ftz.f32 and abs.ftz.f16")
        return self._math_emit(node, "abs", d, [(_op("abs", None, ftz, d), x)])

    def b_fma(self, node):
        (a, b, c), kw = self._math_args(node, "fma", 3, {"rnd": None, "ftz": False})
        d = self._math_dtype(node, "fma", (a, b, c), ("float32", "float64", "float16", "bfloat16"),
                             'T.fma(T.cast(a, "float32"), ...) (for integers: a * b + c)')
        rnd, ftz = kw["rnd"] or "rn", kw["ftz"]
        if d.bits == 16 and rnd != "rn":
            raise self.error(f"T.fma on {d.name}: PTX has only fma.rn.{d.ptx}; rnd={rnd!r} exists for float32 and "
                             f"float64", node)
        if d.name in ("float64", "bfloat16"):
            self._no_ftz(node, "fma", ftz, "fma.rn.ftz.f32 and fma.rn.ftz.f16")
        return self._math_emit(node, "fma", d, [(_op("fma", rnd, ftz, d), a, b, c)])

    def _approx_f32(self, node, name, ptx_op):
        """log2, sin, cos: float32 only, .approx only, optional .ftz."""
        x, kw = self._math_args(node, name, 1, {"approx": None, "ftz": False})
        self._approx_required(node, name, kw["approx"], f"{ptx_op}.approx.f32")
        d = self._math_dtype(node, name, x, ("float32",), f'T.{name}(T.cast(x, "float32"))')
        return self._math_emit(node, name, d, [(_op(ptx_op, "approx", kw["ftz"], d), x)])

    # ------------------------------------------------------------ checks
    def _math_args(self, node, name, n, keywords: dict):
        """(the operand, or the tuple of n operands; {keyword: compile-time value}). Keywords are keyword-only."""
        if len(node.args) != n:
            raise self.error(f"T.{name} takes {n} value{'s' if n > 1 else ''}, got {len(node.args)}"
                             + (" (approx=, ftz= and rnd= are keywords)" if len(node.args) > n else ""), node)
        vals = []
        for a in node.args:
            v = self.eval(a)
            if isinstance(v, View):
                raise self.error(f"T.{name} takes a scalar value, not {ops.describe(v)}; index it (x[i]) or apply the "
                                 f"instruction to the buffer with T.cuda.tile.apply", a)
            if not (ops.is_number(v) or isinstance(v, ir.Expr)):
                raise self.error(f"T.{name} takes a scalar value, got {ops.describe(v)}", a)
            vals.append(v)
        kw = dict(keywords)
        for k in node.keywords:
            if k.arg not in keywords:
                allowed = ", ".join(f"{x}=" for x in keywords) or "none"
                raise self.error(f"T.{name} got an unexpected keyword '{k.arg}' (its keywords: {allowed})", k.value)
            v = self.eval(k.value)
            if k.arg in ("approx", "ftz") and not isinstance(v, bool):
                raise self.error(f"T.{name}: {k.arg}= must be a compile-time True or False, got {_shown(v)}", k.value)
            if k.arg == "rnd" and v is not None and v not in RND:       # (None: the default, as if not written)
                raise self.error(f"T.{name}: rnd= is one of {', '.join(map(repr, RND))} (round to nearest even, "
                                 f"toward zero, down, up), got {_shown(v)}", k.value)
            kw[k.arg] = v
        return (vals[0] if n == 1 else tuple(vals)), kw

    def _approx_required(self, node, name, approx, form):
        """approx left out (None) or True: the one form PTX has; approx=False asks for what does not exist."""
        if approx is False:
            raise self.error(f"T.{name}: approx=False asks for a correctly rounded {name}, which PTX does not have; "
                             f"{_NO_APPROX} ({form})", node)

    def _no_ftz(self, node, name, ftz, where):
        if ftz:
            raise self.error(f"T.{name}: this form has no .ftz; PTX has it on {where}", node)

    def _math_dtype(self, node, name, vals, allowed, convert, ints=False) -> dt.DType:
        """The one dtype of the operands (Python numbers take the typed operands' dtype; all numbers: float32, or
        int32 for an int where `ints`), checked against the dtypes whose PTX form exists."""
        vals = vals if isinstance(vals, tuple) else (vals,)
        typed = sorted({v.dtype.name for v in vals if isinstance(v, ir.Expr)})
        if len(typed) > 1:
            raise self.error(f"T.{name}'s values are {' and '.join(typed)}; they must share one dtype (convert with "
                             f"T.cast)", node)
        if typed:
            d = dt.BY_NAME[typed[0]]
        elif ints and all(isinstance(v, int) and not isinstance(v, bool) for v in vals):
            d = dt.int32
        else:
            d = dt.float32
        if d.name not in allowed:
            exists = ", ".join(_ptx_type(dt.BY_NAME[a]) for a in allowed)
            raise self.error(f"T.{name} has no PTX form for {d.name}; it exists for {exists}: write {convert}", node)
        return d

    # ------------------------------------------------------------ emission
    def _math_emit(self, node, name, d: dt.DType, steps) -> ir.Var:
        """Each step `(opcode, *sources)` as a tile.apply into the dtype's scratch register; the result read into a
        fresh variable."""
        loc = self.loc(node)
        scratch = self._math_scratch(d, node)
        for opcode, *srcs in steps:
            operands = [scratch] + [scratch if s is _SCRATCH else ops.to_expr(s, loc, d) for s in srcs]
            self.emit(ir.Apply(loc, opcode, operands, "thread", {}, [loc] * len(operands)))
        var = self.new_var(name, d, loc)
        self.emit(ir.Assign(loc, var, ir.Load(d, loc, scratch.storage, ir.Const(dt.int32, loc, 0))))
        return var

    def _math_scratch(self, d: dt.DType, node) -> RootView:
        """The kernel's one-element local of dtype `d` for math results (a dotted name no Python name can take)."""
        name = f"math.{d.name}"
        for st in self.allocs:
            if st.name == name:
                return RootView(st, d, (1,), None, name)
        self._check_memory_budget("local", d.nbytes, node)
        st = ir.Storage(name, "local", d, 1, self.loc(node))
        self.allocs.append(st)
        return RootView(st, d, (1,), None, name)

    # ------------------------------------------------------------ x ** k
    def power(self, a, b, node):
        """`a ** b`: compile-time numbers fold as Python computes them; `x ** k` for a compile-time int k with
        |k| <= MAX_POWER is k - 1 multiplications left to right (x * x * x for k = 3, each rounded as `*` is), 1 for
        k = 0, and 1 / (x ** -k) for k < 0 (floats only)."""
        loc = self.loc(node)
        if ops.is_number(a) and ops.is_number(b):
            return ops.binop("pow", a, b, loc)
        other = "T.exp2(y * T.log2(x))"
        if isinstance(b, ir.Expr):
            shift = " (an integer power of two: 1 << n)" if isinstance(a, int) and a == 2 and b.dtype.is_int else ""
            raise self.error(f"'**' needs a compile-time integer exponent (x ** k, |k| <= {MAX_POWER}, becomes "
                             f"multiplications); for a run-time exponent write {other}{shift}", node)
        if not isinstance(a, ir.Expr):
            raise self.error(f"unsupported operand for '**': {ops.describe(a)}", node)
        if a.dtype.kind == "bool":
            raise self.error("'**' of a bool value", node)
        if isinstance(b, float) or isinstance(b, bool) or not isinstance(b, int):
            if isinstance(b, float) and b in (0.5, -0.5):
                use = "T.sqrt(x)" if b > 0 else "T.rsqrt(x) (rsqrt.approx) or 1.0 / T.sqrt(x)"
                raise self.error(f"x ** {b!r}: write {use}", node)
            if isinstance(b, float) and b.is_integer() and abs(b) <= MAX_POWER:
                raise self.error(f"x ** {b!r}: write the exponent as an int (x ** {int(b)}), which becomes "
                                 f"multiplications", node)
            raise self.error(f"x ** {ops.show(b) if ops.is_number(b) else ops.describe(b)}: only compile-time "
                             f"integer exponents in -{MAX_POWER}..{MAX_POWER} are supported (as multiplications); "
                             f"otherwise write {other}", node)
        if abs(b) > MAX_POWER:
            raise self.error(f"x ** {ops.show(b)}: only exponents in -{MAX_POWER}..{MAX_POWER} become "
                             f"multiplications; multiply explicitly (e.g. square repeatedly) or write {other}", node)
        if b < 0 and not a.dtype.is_float:
            raise self.error(f"x ** {b}: an integer to a negative power is not an integer; convert x to a float "
                             f"first (T.cast), and it becomes 1 / (x ** {-b})", node)
        if b == 0:
            return ops.const_of(1, a.dtype, loc)
        if not isinstance(a, (ir.Var, ir.Const)) and abs(b) > 1:
            t = self.new_var("pow", a.dtype, loc)       # read the base once, not once per factor
            self.emit(ir.Assign(loc, t, a))
            a = t
        r = a
        for _ in range(abs(b) - 1):
            r = ops.binop("mul", r, a, loc)
        return ops.binop("div", 1.0, r, loc) if b < 0 else r


def _op(op: str, qual: str | None, ftz: bool, d: dt.DType) -> str:
    """The opcode text in PTX's qualifier order: op{.rnd|.approx}{.ftz}.type."""
    return ".".join([op] + ([qual] if qual else []) + (["ftz"] if ftz else []) + [d.ptx])


def _ptx_type(d: dt.DType) -> str:
    return f"{d.name} (.{d.ptx})"


def _shown(v) -> str:
    return repr(v) if isinstance(v, (str, bool, int, float)) else ops.describe(v)
