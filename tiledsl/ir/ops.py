"""Typed scalar arithmetic (the front end and the patterns build expressions with it): Python constants fold, IR
expressions get C-like types.

Python numbers are *weak*: they take the type of the typed operand they meet (an int literal with a float32
expression becomes float32). Integer `//` and `%` keep Python's floor semantics; `/` is true division.
"""
from __future__ import annotations

import math
import operator

from ..core import dtypes as dt
from ..ir import nodes as ir
from ..core.errors import CompilationError
from .eval import PY_CMP

ARITH = {"add", "sub", "mul", "div", "floordiv", "mod", "pow", "and", "or", "xor", "shl", "shr", "min", "max"}
PY_OPS = {"add": operator.add, "sub": operator.sub, "mul": operator.mul, "div": operator.truediv,
          "floordiv": operator.floordiv, "mod": operator.mod, "pow": operator.pow, "and": operator.and_,
          "or": operator.or_, "xor": operator.xor, "shl": operator.lshift, "shr": operator.rshift,
          "min": min, "max": max}


def is_number(x) -> bool:
    return isinstance(x, (int, float, bool)) and not isinstance(x, ir.Expr)


def weak_dtype(x) -> dt.DType:
    if isinstance(x, bool):
        return dt.bool_
    if isinstance(x, int):
        return dt.int32 if -2**31 <= x < 2**31 else dt.int64
    return dt.float32


FLOAT_MAX = {"float16": 65504.0, "bfloat16": 3.3895313892515355e38, "float32": 3.4028234663852886e38}
MAX_CONST_BITS = 65536   # a folded integer constant larger than this is a mistake (and printing it would fail)


def show(x) -> str:
    """A number for a message: repr, except integers too long to print (Python refuses to turn an int of more
    than 4300 digits into text, and nobody reads one)."""
    if isinstance(x, int) and not isinstance(x, bool) and x.bit_length() > 200:
        return f"{'-' if x < 0 else ''}an integer of {x.bit_length()} bits (about 2**{x.bit_length() - 1})"
    if isinstance(x, float) and not math.isfinite(x):
        return f"float({str(x)!r})"
    return repr(x)


def const_of(x, dtype: dt.DType, loc, explicit=False) -> ir.Const:
    """A Python number as a typed constant, refusing values the type cannot hold.

    A finite number beyond a float type's range is an error, converted explicitly or not (it would silently become
    infinity); infinity itself is written float('inf'). NaN and infinity have no integer value."""
    if dtype.is_float:
        if isinstance(x, float) and math.isnan(x):
            return ir.Const(dtype, loc, x)
        try:
            v = float(x)
        except OverflowError:                    # an int beyond every float
            v = None
        top = FLOAT_MAX.get(dtype.name)
        if v is None or (top is not None and math.isfinite(v) and abs(v) > top):
            top = top if top is not None else 1.7976931348623157e308
            raise CompilationError(f"{show(x)} is out of range for {dtype.name} (largest finite value {top:g}); "
                                   f"write float('inf') if infinity is meant", loc)
        if dtype.name in ("float16", "float32") and math.isfinite(v):
            import numpy as np
            with np.errstate(over="ignore"):
                v = float((np.float16 if dtype.name == "float16" else np.float32)(v))   # the value the type holds
        return ir.Const(dtype, loc, v)
    if dtype.kind == "bool":
        return ir.Const(dtype, loc, bool(x))
    if isinstance(x, float):
        if not math.isfinite(x):
            raise CompilationError(f"{show(x)} has no {dtype.name} value; a constant converted to an integer type "
                                   f"must be finite", loc)
        if not x.is_integer():
            raise CompilationError(f"{x!r} is not an integer; it cannot be {article(dtype.name)}", loc)
        x = int(x)
    lo, hi = (-(1 << (dtype.bits - 1)), 1 << (dtype.bits - 1)) if dtype.is_signed else (0, 1 << dtype.bits)
    if not lo <= x < hi:
        raise CompilationError(f"{show(x)} does not fit in {dtype.name}", loc)
    return ir.Const(dtype, loc, int(x))


def to_expr(x, loc, dtype: dt.DType | None = None) -> ir.Expr:
    if isinstance(x, ir.Expr):
        return x
    if not is_number(x):
        raise CompilationError(f"expected a scalar value, got {describe(x)}", loc)
    return const_of(x, dtype or weak_dtype(x), loc)


def article(name: str) -> str:
    """'an int32', 'a float32': the name with its indefinite article."""
    return f"{'an' if name[:1] in 'aeio' else 'a'} {name}"


def describe(x) -> str:
    if isinstance(x, ir.Expr):
        return f"{article(x.dtype.name)} value"
    from ..lang.views import View
    if isinstance(x, View):
        return f"the buffer view {x.describe()}"
    if isinstance(x, tuple):
        return "a tuple"
    if is_number(x):
        return f"{type(x).__name__} {show(x)}"
    if isinstance(x, type):                 # a class: its name, not "<class 'module.Name'>"
        return f"the class {x.__name__}"
    return f"{type(x).__name__} {x!r}"


def _common(a, b, loc):
    """Bring two operands to one dtype; at least one is an Expr."""
    if isinstance(a, ir.Expr) and isinstance(b, ir.Expr):
        t = dt.promote(a.dtype, b.dtype)
        return convert(a, t, loc), convert(b, t, loc), t
    e, w = (a, b) if isinstance(a, ir.Expr) else (b, a)
    t = e.dtype
    if isinstance(w, float) and not t.is_float:
        t = dt.float32 if t.bits <= 32 else dt.float64
        e = convert(e, t, loc)
    if t.kind == "bool" and not isinstance(w, bool):
        t = weak_dtype(w)
        e = convert(e, t, loc)
    wc = const_of(w, t, loc)
    return (e, wc, t) if isinstance(a, ir.Expr) else (wc, e, t)


def convert(x: ir.Expr, t: dt.DType, loc) -> ir.Expr:
    if x.dtype == t:
        return x
    if isinstance(x, ir.Const):
        return const_of(x.value, t, loc) if not (t.is_int and x.dtype.is_float) else ir.Cast(t, loc, x)
    return ir.Cast(t, loc, x)


def _too_big(op: str, a, b) -> bool:
    """Would folding `a op b` build an integer beyond MAX_CONST_BITS? Asked before `**` and `<<`, whose results
    grow with the exponent (folding 2 ** 10**12 would take the machine's memory and hours)."""
    if isinstance(a, float) or isinstance(b, float) or not a:
        return False
    if op == "pow":
        return abs(a) > 1 and b > 0 and (abs(a).bit_length() - 1) * b > MAX_CONST_BITS
    return b > MAX_CONST_BITS                   # a << b


def binop(op: str, a, b, loc):
    if is_number(a) and is_number(b):
        if op in ("pow", "shl") and _too_big(op, a, b):
            raise CompilationError(f"constant expression {show(a)} {'**' if op == 'pow' else '<<'} {show(b)} is "
                                   f"too large (compile-time integers are limited to {MAX_CONST_BITS} bits)", loc)
        try:
            r = PY_OPS[op](a, b)
        except (ZeroDivisionError, OverflowError, ValueError, TypeError) as e:
            raise CompilationError(f"constant expression fails: {e}", loc) from None
        if isinstance(r, int) and r.bit_length() > MAX_CONST_BITS:
            raise CompilationError(f"constant expression gives {show(r)}; compile-time integers are limited to "
                                   f"{MAX_CONST_BITS} bits", loc)
        return r
    for x in (a, b):
        if not (is_number(x) or isinstance(x, ir.Expr)):
            raise CompilationError(f"unsupported operand for '{op}': {describe(x)}", loc)
    if op == "pow":
        raise CompilationError("'**' is only supported between compile-time constants", loc)
    if op == "div":
        # a float with an int gives the float (the int converted to it once: int32 / float64 is exact), two ints
        # give float32
        floats = [x.dtype for x in (a, b) if isinstance(x, ir.Expr) and x.dtype.is_float]
        ft = floats[0] if len(floats) == 1 else dt.promote(*floats) if floats else dt.float32
        fa = a if not isinstance(a, ir.Expr) or a.dtype.is_float else convert(a, ft, loc)
        fb = b if not isinstance(b, ir.Expr) or b.dtype.is_float else convert(b, ft, loc)
        if is_number(fa):
            fa = float(fa)
        if is_number(fb):
            fb = float(fb)
        a, b = fa, fb
    ea, eb, t = _common(a, b, loc)
    if op in ("and", "or", "xor", "shl", "shr") and t.is_float:
        raise CompilationError(f"'{op}' needs integer operands, got {t.name}", loc)
    if op in ("floordiv", "mod") and t.is_float:
        raise CompilationError(f"'{'//' if op == 'floordiv' else '%'}' on floats is not supported", loc)
    if op in ("shl", "shr") and t.kind == "bool":
        raise CompilationError("shifts need integer operands", loc)
    if op in ("add", "sub", "mul", "floordiv", "mod") and t.kind == "bool":
        sym = {"add": "+", "sub": "-", "mul": "*", "floordiv": "//", "mod": "%"}[op]
        raise CompilationError(f"'{sym}' on bool values: convert them with T.cast(x, \"int32\") to count "
                               f"(True as 1), or use and / or / ^ for logic", loc)
    if isinstance(eb, ir.Const) and op in ("floordiv", "mod") and eb.value == 0:
        raise CompilationError("integer division by zero", loc)
    return ir.Binary(t, loc, op, ea, eb)


CMP_TEXT = {"lt": "<", "le": "<=", "gt": ">", "ge": ">=", "eq": "==", "ne": "!="}


def _whole_buffer(a, b, op, loc):
    """`A == 0.0`, `A != B`: Python would compare the view objects (and fold to a constant); refuse and show the
    element comparison that was meant."""
    from ..lang.views import View
    if not (isinstance(a, View) or isinstance(b, View)):
        return

    def element(v):
        if isinstance(v, View):
            idx = ", ".join("ijkl"[k] if k < 4 else f"i{k}" for k in range(max(1, v.ndim)))
            return f"{_view_name(v)}[{idx}]"
        return show(v) if is_number(v) else "..."
    x = a if isinstance(a, View) else b
    raise CompilationError(f"cannot compare {describe(x)}: '{CMP_TEXT[op]}' compares the buffer {_view_name(x)} "
                           f"itself, not its elements; index it: {element(a)} {CMP_TEXT[op]} {element(b)}", loc)


def _view_name(v) -> str:
    return getattr(v, "name", None) or v.storage.name


def compare(op: str, a, b, loc):
    _whole_buffer(a, b, op, loc)
    if is_number(a) and is_number(b):
        return PY_CMP[op](a, b)
    if op in ("eq", "ne") and not isinstance(a, ir.Expr) and not isinstance(b, ir.Expr):
        return PY_CMP[op](a, b)             # compile-time values of any kind: Python's equality (0.5 != "x")
    for x in (a, b):
        if not (is_number(x) or isinstance(x, ir.Expr)):
            raise CompilationError(f"cannot compare {describe(x)}", loc)
    ea, eb, _ = _common(a, b, loc)
    return ir.Compare(dt.bool_, loc, op, ea, eb)


def truth(x, loc):
    """A condition: Python truthiness for constants, `!= 0` for non-bool expressions."""
    if isinstance(x, ir.Expr):
        if x.dtype.kind == "bool":
            return x
        return compare("ne", x, 0, loc)
    if is_number(x) or x is None or isinstance(x, (str, tuple)):
        return bool(x)
    raise CompilationError(f"{describe(x)} cannot be used as a condition", loc)


def unary(op: str, a, loc):
    if op == "not" and not is_number(a) and not isinstance(a, ir.Expr):
        return not truth(a, loc)        # a compile-time constant: Python's truthiness, as `if` gives it
    if is_number(a):
        if op == "invert" and isinstance(a, float):
            raise CompilationError("'~' needs an integer operand", loc)
        return {"neg": operator.neg, "pos": operator.pos, "not": operator.not_, "invert": operator.invert}[op](a)
    if not isinstance(a, ir.Expr):
        raise CompilationError(f"unsupported operand for unary '{op}': {describe(a)}", loc)
    if op == "pos":
        return a
    if op == "not":
        return ir.Unary(dt.bool_, loc, "not", truth(a, loc))
    if op == "invert" and a.dtype.is_float:
        raise CompilationError("'~' needs an integer operand", loc)
    if op == "neg" and a.dtype.kind == "uint":
        raise CompilationError(f"negating an unsigned {a.dtype.name} value", loc)
    if op == "neg" and a.dtype.kind == "bool":
        raise CompilationError("'-' on a bool value: write `not x` for the logical negation, or convert with "
                               "T.cast(x, \"int32\") for arithmetic", loc)
    return ir.Unary(a.dtype, loc, op, a)


def select(c, a, b, loc):
    c = truth(c, loc)
    if isinstance(c, bool):
        return a if c else b
    for x in (a, b):
        if not (is_number(x) or isinstance(x, ir.Expr)):
            raise CompilationError(f"a run-time 'a if c else b' needs scalar values on both sides, got {describe(x)}",
                                   loc)
    if is_number(a) and is_number(b):
        t = dt.float32 if isinstance(a, float) or isinstance(b, float) else weak_dtype(a if abs(a) >= abs(b) else b)
        return ir.Select(t, loc, c, const_of(a, t, loc), const_of(b, t, loc))
    ea, eb, t = _common(a, b, loc)
    return ir.Select(t, loc, c, ea, eb)


def cast(x, t: dt.DType, loc):
    """An explicit conversion (`T.cast`, `T.float32(x)`): value conversion, saturating like PTX cvt."""
    if is_number(x):
        if t.is_int and isinstance(x, float) and math.isfinite(x):
            x = math.trunc(x)
        return const_of(x, t, loc, explicit=True)
    if not isinstance(x, ir.Expr):
        raise CompilationError(f"cannot convert {describe(x)} to {t.name}", loc)
    if x.dtype == t:
        return x
    return ir.Cast(t, loc, x)
