"""Text forms of the tile IR, shown as `asm["tile"]` and `asm["expanded"]`."""
from __future__ import annotations

from . import nodes as ir

OPS = {"add": "+", "sub": "-", "mul": "*", "div": "/", "floordiv": "//", "mod": "%", "and": "&", "or": "|",
       "xor": "^", "shl": "<<", "shr": ">>", "lt": "<", "le": "<=", "gt": ">", "ge": ">=", "eq": "==", "ne": "!="}


def expr_str(e) -> str:
    if isinstance(e, (int, float, bool)):
        return repr(e)
    if isinstance(e, ir.Const):
        return f"{e.dtype.name}({e.value!r})" if e.dtype.name not in ("int32",) else repr(e.value)
    if isinstance(e, ir.Var):
        return e.name
    if isinstance(e, ir.Binary):
        if e.op in ("min", "max"):
            return f"{e.op}({expr_str(e.a)}, {expr_str(e.b)})"
        return f"({expr_str(e.a)} {OPS[e.op]} {expr_str(e.b)})"
    if isinstance(e, ir.Compare):
        return f"({expr_str(e.a)} {OPS[e.op]} {expr_str(e.b)})"
    if isinstance(e, ir.Unary):
        sym = {"neg": "-", "not": "not ", "invert": "~"}.get(e.op)
        return f"{sym}{expr_str(e.a)}" if sym else f"{e.op}({expr_str(e.a)})"
    if isinstance(e, ir.Select):
        return f"({expr_str(e.a)} if {expr_str(e.cond)} else {expr_str(e.b)})"
    if isinstance(e, ir.Cast):
        return f"{e.dtype.name}({expr_str(e.a)})"
    if isinstance(e, ir.Load):
        return f"{e.storage.name}<{e.dtype.name}>[{expr_str(e.offset)}]"
    if isinstance(e, ir.Special):
        return f"%{e.name}" + (f".{'xyz'[e.axis]}" if e.name in ("tid", "ntid", "ctaid", "nctaid") else "")
    return f"<{type(e).__name__}>"


def arg_str(a) -> str:
    if isinstance(a, ir.Reg):
        return f"{a.storage.name}[{a.index}]" if a.dtype == a.storage.dtype else \
            f"{a.storage.name}<{a.dtype.name}>[{a.index}]"
    if isinstance(a, ir.Val):
        return expr_str(a.expr)
    if isinstance(a, ir.Addr):
        return f"{a.storage.name}<{a.dtype.name}>+{expr_str(a.offset)}"
    if isinstance(a, ir.Imm):
        return a.text
    return "?"


def native_str(n: ir.Native) -> str:
    groups = []
    for gi, g in enumerate(n.groups):
        if len(g) == 1 and isinstance(g[0], ir.Addr):
            groups.append(f"[{arg_str(g[0])}]")
        elif len(g) == 1 and gi not in n.braces:
            groups.append(arg_str(g[0]))
        else:
            groups.append("{" + ", ".join(arg_str(a) for a in g) + "}")
    pred = ""
    if n.pred is not None:
        pred = f"@{expr_str(n.pred)}{' (preserve)' if n.preserve else ''} "
    return f"{pred}{n.opcode} {', '.join(groups)};".replace(" ;", ";")


def kernel_str(k: ir.Kernel) -> str:
    params = []
    for p in k.params:
        if p.kind == "tensor":
            params.append(f"{p.name}: Tensor{tuple(p.shape)} {p.dtype.name}")
        elif p.kind == "scalar":
            params.append(f"{p.name}: {p.dtype.name}")
    lines = [f"kernel {k.name}({', '.join(params)})"]
    if k.launch is not None:
        grid = tuple(expr_str(g) if isinstance(g, ir.Expr) else g for g in k.launch.grid)
        bounds = "".join(f" {n}={v}" for n, v in (("max_registers", k.launch.max_registers),
                                                   ("min_blocks_per_sm", k.launch.min_blocks_per_sm)) if v)
        lines.append(f"  launch grid={grid} block={k.launch.block}{bounds}")
    for s in k.allocs:
        lines.append(f"  alloc {s.scope} {s.name}: {s.dtype.name}[{s.size}]")
    _stmts(k.body, lines, "  ")
    return "\n".join(lines) + "\n"


def _stmts(body, out, ind):
    for s in body:
        if isinstance(s, ir.Assign):
            out.append(f"{ind}{s.var.name} = {expr_str(s.value)}")
        elif isinstance(s, ir.Store):
            out.append(f"{ind}{s.storage.name}<{s.dtype.name}>[{expr_str(s.offset)}] = {expr_str(s.value)}")
        elif isinstance(s, ir.For):
            step = "" if isinstance(s.step, ir.Const) and s.step.value == 1 else f", {expr_str(s.step)}"
            out.append(f"{ind}for {s.var.name} in range({expr_str(s.start)}, {expr_str(s.stop)}{step}):")
            _stmts(s.body, out, ind + "  ")
        elif isinstance(s, ir.If):
            out.append(f"{ind}if {expr_str(s.cond)}:")
            _stmts(s.then, out, ind + "  ")
            if s.orelse:
                out.append(f"{ind}else:")
                _stmts(s.orelse, out, ind + "  ")
        elif isinstance(s, ir.While):
            out.append(f"{ind}while {expr_str(s.cond)}:")
            _stmts(s.body, out, ind + "  ")
        elif isinstance(s, (ir.Break, ir.Continue, ir.Return)):
            out.append(f"{ind}{type(s).__name__.lower()}")
        elif isinstance(s, ir.Print):
            vals = "".join(f", {expr_str(v)}" for v in s.values)
            out.append(f"{ind}device_print({s.fmt!r}{vals})")
        elif isinstance(s, ir.Apply):
            ops = [o.describe() if hasattr(o, "describe") else expr_str(o) for o in s.operands]
            params = "".join(f", {k}={expr_str(v[0]) if isinstance(v[0], ir.Expr) else v[0]!r}"
                             for k, v in s.params.items())
            out.append(f"{ind}tile.apply {s.opcode}({', '.join(ops)}, scope={s.scope!r}{params})")
        elif isinstance(s, ir.Native):
            out.append(f"{ind}{native_str(s)}")
        elif isinstance(s, ir.Barrier):
            out.append(f"{ind}bar.sync 0;")
        elif isinstance(s, ir.Trap):
            out.append(f"{ind}trap {s.code} if {expr_str(s.cond)}")
        else:
            out.append(f"{ind}<{type(s).__name__}>")
