"""The tile IR: a small structured program of typed scalar expressions and statements.

Every node carries the user's source location (`loc`) so any later stage can report errors at the user's line.
Expressions are immutable trees; statements are lists. Tile operations appear as `Apply` before expansion
and as `Native` (one PTX instruction each) after it.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..core import dtypes as dt
from ..core.dtypes import DType
from ..core.errors import Loc


# ---------------------------------------------------------------- storage

@dataclass(eq=False)
class Storage:
    """A region of memory: a kernel tensor parameter, or a local/shared allocation."""
    name: str
    scope: str                   # "global" | "shared" | "local"
    dtype: DType
    size: int | None             # elements; None for tensor parameters
    loc: Loc | None = None
    param_index: int | None = None

    def __repr__(self) -> str:
        return self.name


# ---------------------------------------------------------------- expressions

@dataclass(eq=False)
class Expr:
    dtype: DType
    loc: Loc | None


@dataclass(eq=False)
class Const(Expr):
    value: Any


@dataclass(eq=False)
class Var(Expr):
    name: str


@dataclass(eq=False)
class Binary(Expr):
    op: str                      # add sub mul div floordiv mod and or xor shl shr min max
    a: Expr
    b: Expr


@dataclass(eq=False)
class Compare(Expr):
    op: str                      # lt le gt ge eq ne
    a: Expr
    b: Expr


@dataclass(eq=False)
class Unary(Expr):
    op: str                      # neg not invert
    a: Expr


@dataclass(eq=False)
class Select(Expr):
    cond: Expr
    a: Expr
    b: Expr


@dataclass(eq=False)
class Cast(Expr):
    a: Expr


@dataclass(eq=False)
class DimCheck:
    """A bound an access's flat offset does not show: `0 <= index < extent` in dimension `dim` of the view `view`
    (`X[r, 64]` in a 64-wide row lands inside the buffer, in the next row). The interpreter and debug=True check
    it; code generation ignores it. `low` / `high`: whether each side still needs checking (the front end drops a
    side it proves); `text`: the index as the user wrote it."""
    index: Expr
    extent: Any                  # int | Expr
    dim: int
    view: str
    text: str
    low: bool = True
    high: bool = True


@dataclass(eq=False)
class Load(Expr):
    storage: Storage
    offset: Expr                 # in elements of `dtype`
    checks: tuple = ()           # DimCheck, innermost view first


@dataclass(eq=False)
class Special(Expr):
    name: str                    # tid ntid ctaid nctaid laneid warpid, cluster.ctarank cluster.nctarank clusterid cluster.ctaid
    axis: int = 0


# ---------------------------------------------------------------- statements

@dataclass(eq=False)
class Stmt:
    loc: Loc | None


@dataclass(eq=False)
class Assign(Stmt):
    var: Var
    value: Expr


@dataclass(eq=False)
class Store(Stmt):
    storage: Storage
    dtype: DType
    offset: Expr
    value: Expr
    checks: tuple = ()           # DimCheck, as Load's


@dataclass(eq=False)
class For(Stmt):
    var: Var
    start: Expr
    stop: Expr
    step: Expr
    body: list
    unroll: int | None = None    # None: the compiler decides; 1: keep rolled; n: unroll by n


@dataclass(eq=False)
class If(Stmt):
    cond: Expr
    then: list
    orelse: list


@dataclass(eq=False)
class While(Stmt):
    """`while cond:`: `cond` is evaluated before every iteration, per thread."""
    cond: Expr
    body: list


@dataclass(eq=False)
class Break(Stmt):
    """Leave the innermost enclosing run-time loop (For or While)."""


@dataclass(eq=False)
class Continue(Stmt):
    """Skip to the next iteration of the innermost enclosing run-time loop (a For still adds its step)."""


@dataclass(eq=False)
class Return(Stmt):
    """The thread leaves the kernel (a bare `return` before the end of the body)."""


@dataclass(eq=False)
class Print(Stmt):
    """`T.device_print(fmt, *values)`: printf through vprintf; `fmt` was checked against the values' types."""
    fmt: str
    values: list                 # of Expr


@dataclass(eq=False)
class Apply(Stmt):
    """`T.cuda.tile.apply(T.ptx[opcode], *operands, scope=..., **params)` as written."""
    opcode: str
    operands: list               # View | Expr
    scope: str
    params: dict
    operand_locs: list


@dataclass(eq=False)
class Barrier(Stmt):
    kind: str = "cta"


@dataclass(eq=False)
class Trap(Stmt):
    """Stop the kernel; with a code the host can turn into an error at the user's line (and a value it records,
    the index of a per-dimension check, or None)."""
    cond: Expr
    code: int
    value: Expr | None = None


# Operands of a native instruction.
@dataclass(eq=False)
class Reg:
    storage: Storage
    index: int                   # element index in units of `dtype`
    dtype: DType
    write: bool = False


@dataclass(eq=False)
class Val:
    expr: Expr


@dataclass(eq=False)
class Addr:
    storage: Storage
    offset: Expr                 # elements of `dtype`
    dtype: DType


@dataclass(eq=False)
class Imm:
    text: str


@dataclass(eq=False)
class Native(Stmt):
    """One PTX instruction: `opcode` then operand groups ({a, b} for a group of several, [x] for an address)."""
    opcode: str
    groups: list                 # list[list[Reg|Val|Addr|Imm]]
    pred: Expr | None = None
    preserve: bool = False
    effect: str = "pure"         # pure | load | store | sync
    origin: str = ""
    braces: tuple = ()           # groups written as {a} even with one register (PTX vector operands)
    # The parsed opcode and the instruction family that parsed it (tiledsl.isa): the interpreter, the debug pass
    # and codegen read these instead of parsing `opcode` again. None only for a hand-built native no family knows.
    form: object = field(default=None, repr=False)
    family: object = field(default=None, repr=False)
    # What the instruction's register groups hold, for passes/register_provenance.py: its Written/Read entries
    frags: tuple = field(default=(), repr=False)


@dataclass
class LaunchSpec:
    grid: tuple                  # of int | Expr over scalar params / sizes
    block: tuple[int, int, int]
    max_registers: int | None = None       # PTX .maxnreg
    min_blocks_per_sm: int | None = None   # PTX .minnctapersm
    given: bool = True           # False: no T.device_entry launch and no override (a launch must say kernel[g, b])
    cluster: tuple = (1, 1, 1)   # blocks per cluster (PTX .reqnctapercluster; (1, 1, 1): no cluster launch)


@dataclass
class Param:
    name: str
    kind: str                    # "tensor" | "scalar" | "constexpr"
    dtype: DType | None = None
    shape: tuple = ()            # ints or size names (str)
    storage: Storage | None = None
    var: Var | None = None
    tensormap: object = None     # kind "tensormap": its lang.tensormap.TensorMapType


@dataclass
class Kernel:
    name: str
    params: list[Param]
    body: list
    launch: LaunchSpec | None
    allocs: list[Storage] = field(default_factory=list)
    sizes: dict = field(default_factory=dict)       # size name -> Var (runtime int64 hidden params)
    loc: Loc | None = None


# ---------------------------------------------------------------- folding builders

def const(value, dtype: DType, loc=None) -> Const:
    return Const(dtype, loc, value)


def is_const(x) -> bool:
    return isinstance(x, (int, float, bool)) or isinstance(x, Const)


def as_expr(x, dtype: DType = dt.int32, loc=None) -> Expr:
    if isinstance(x, Expr):
        return x
    return Const(dtype, loc, x)


def _static(x):
    if type(x) is Const:                       # Const has no subclasses; `type` is the cheaper test
        return x.value
    return x


def _int_dtype(a, b) -> DType:
    ta = a.dtype if isinstance(a, Expr) else None
    tb = b.dtype if isinstance(b, Expr) else None
    if ta and tb:
        return dt.promote(ta, tb)
    return ta or tb or dt.int32


def add(a, b, loc=None):
    """Integer index arithmetic that folds constants, so static offsets stay Python ints."""
    if type(a) is int and type(b) is int:      # the common case first (the result is the same)
        return a + b
    a, b = _static(a), _static(b)
    if isinstance(a, int) and isinstance(b, int):
        return a + b
    if isinstance(a, int) and a == 0:
        return b
    if isinstance(b, int) and b == 0:
        return a
    t = _int_dtype(a, b)
    return Binary(t, loc, "add", as_expr(a, t), as_expr(b, t))


def mul(a, b, loc=None):
    if type(a) is int and type(b) is int:
        return a * b
    a, b = _static(a), _static(b)
    if isinstance(a, int) and isinstance(b, int):
        return a * b
    if (isinstance(a, int) and a == 0) or (isinstance(b, int) and b == 0):
        return 0
    if isinstance(a, int) and a == 1:
        return b
    if isinstance(b, int) and b == 1:
        return a
    t = _int_dtype(a, b)
    return Binary(t, loc, "mul", as_expr(a, t), as_expr(b, t))


def floordiv(a, b, loc=None):
    if type(a) is int and type(b) is int:
        return a // b
    a, b = _static(a), _static(b)
    if isinstance(a, int) and isinstance(b, int):
        return a // b
    if isinstance(b, int) and b == 1:
        return a
    t = _int_dtype(a, b)
    return Binary(t, loc, "floordiv", as_expr(a, t), as_expr(b, t))


def mod(a, b, loc=None):
    if type(a) is int and type(b) is int:
        return a % b
    a, b = _static(a), _static(b)
    if isinstance(a, int) and isinstance(b, int):
        return a % b
    if isinstance(b, int) and b == 1:
        return 0
    t = _int_dtype(a, b)
    return Binary(t, loc, "mod", as_expr(a, t), as_expr(b, t))


def bitop(op, a, b, loc=None):
    """and/xor/shl/shr on index values, folding constants."""
    a, b = _static(a), _static(b)
    if isinstance(a, int) and isinstance(b, int):
        return {"and": a & b, "xor": a ^ b, "shl": a << b, "shr": a >> b, "or": a | b}[op]
    t = _int_dtype(a, b)
    return Binary(t, loc, op, as_expr(a, t), as_expr(b, t))


def split_const(e):
    """(run-time part, constant addend) of an index expression: a sum's integer terms are collected."""
    if isinstance(e, int):
        return 0, e
    if _const_int(e) is not None:
        return 0, e.value
    if isinstance(e, Binary) and e.op == "add":
        a, ca = split_const(e.a)
        b, cb = split_const(e.b)
        return add(a, b), ca + cb
    if isinstance(e, Binary) and e.op == "sub":
        b, cb = split_const(e.b)
        if isinstance(b, int) and b == 0:          # x - c
            a, ca = split_const(e.a)
            return a, ca - cb
    k = _const_int(e.b) if isinstance(e, Binary) else None
    if k is not None and e.op in ("mul", "shl", "floordiv", "mod"):
        a, ca = split_const(e.a)
        if isinstance(a, int):                     # wholly constant
            if e.op == "mul":
                return 0, ca * k
            if k > 0:
                return 0, {"shl": ca << k, "floordiv": ca // k, "mod": ca % k}[e.op]
            return e, 0
        if ca and e.op == "mul":                   # (x + c) * k = x*k + c*k
            return Binary(e.dtype, e.loc, "mul", as_expr(a, e.dtype), e.b), ca * k
        if ca and e.op == "shl" and k >= 0:
            return Binary(e.dtype, e.loc, "shl", as_expr(a, e.dtype), e.b), ca << k
        # floor division: (x + c*k) // k = x // k + c and (x + c*k) % k = x % k, for every integer x
        if ca and k > 0 and ca % k == 0 and e.op == "floordiv":
            return Binary(e.dtype, e.loc, "floordiv", as_expr(a, e.dtype), e.b), ca // k
        if ca and k > 0 and ca % k == 0 and e.op == "mod":
            return Binary(e.dtype, e.loc, "mod", as_expr(a, e.dtype), e.b), 0
    return e, 0


def _const_int(e):
    if isinstance(e, Const) and isinstance(e.value, int) and not isinstance(e.value, bool):
        return e.value
    return None


def static_int(x) -> int | None:
    x = _static(x)
    return x if isinstance(x, int) and not isinstance(x, bool) else None


def walk_stmts(body):
    """Every statement, depth first."""
    for s in body:
        yield s
        if isinstance(s, (For, While)):
            yield from walk_stmts(s.body)
        elif isinstance(s, If):
            yield from walk_stmts(s.then)
            yield from walk_stmts(s.orelse)
