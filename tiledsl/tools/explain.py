"""What each `tile.apply` became: its source line, opcode, repeat count and every native instruction it emitted.

    ck = kernel.compile(*args, target="sm_90")
    print(ck.explain())          # or tiledsl.explain.explain(ck), or explain(expanded ir.Kernel)

The pattern expansion gives each native instruction the location of the `apply` it came from (`.loc`) and its
repeat coordinate (`.origin`); consecutive instructions with the same location and opcode are one apply.
"""
from __future__ import annotations

import ast
import linecache
import os
import textwrap

from ..core import knobs
from ..ir import nodes as ir
from ..core.errors import TiledslError
from ..ir.printer import expr_str, native_str


def explain(obj) -> str:
    """A text report for a CompiledKernel (compiled in this process, or served from the disk cache by a kernel's
    compile() or call, which expands it again), or for an expanded `ir.Kernel`."""
    kernel, sm = _expanded(obj)
    groups = _groups(kernel.body)
    n_native = sum(len(g["natives"]) for g in groups)
    target = f" for sm_{sm}" if sm is not None else ""
    lines = [f"kernel {kernel.name}{target}: {len(groups)} tile.apply call{'s' if len(groups) != 1 else ''} "
             f"-> {n_native} native instruction{'s' if n_native != 1 else ''}"]
    for g in groups:
        first = g["natives"][0]
        lines.append("")
        lines.append(f"{_where(first.loc)}  {_statement(first.loc)}")
        lines.append(f"  opcode:  {first.opcode}")
        n = len(g["natives"])
        lines.append(f"  repeats: {n} (one native instruction each)")
        for loop in g["context"]:
            lines.append(f"  inside:  {loop}")
        width = max(len(x.origin) for x in g["natives"])
        for x in g["natives"]:
            tag = f"[{x.origin}]".ljust(width + 2) if width else ""
            lines.append(f"    {tag}  {native_str(x)}".rstrip() if tag else f"    {native_str(x)}")
    return "\n".join(lines) + "\n"


def _expanded(obj):
    if isinstance(obj, ir.Kernel):
        return obj, None
    k = getattr(obj, "expanded_ir", None)
    if k is None and getattr(obj, "reexpand", None) is not None:
        k = obj.expanded_ir = obj.reexpand()      # served from the disk cache: expanded again (no codegen)
    if isinstance(k, ir.Kernel):
        return k, getattr(obj, "sm", None)
    if hasattr(obj, "asm") and hasattr(obj, "expanded_ir"):
        raise TiledslError(
            f"kernel {obj.name} has no expanded IR to explain and no kernel function to make it again from (a "
            f"disk cache entry keeps the stages as text only: see .asm['expanded']); get it from "
            f"kernel.compile(...), or compile with {knobs.DISABLE_DISK_CACHE.name}=1")
    raise TiledslError(f"explain() takes a CompiledKernel or an expanded ir.Kernel, not {type(obj).__name__}")


def _groups(body):
    """[{natives: [...], context: [enclosing loops and ifs]}] in program order."""
    out = []

    def walk(stmts, context):
        prev = None                      # the native just before, in this statement list
        for s in stmts:
            if isinstance(s, ir.Native):
                if prev is not None and prev.loc == s.loc and prev.opcode == s.opcode:
                    out[-1]["natives"].append(s)
                else:
                    out.append({"natives": [s], "context": list(context)})
                prev = s
                continue
            prev = None
            if isinstance(s, ir.For):
                step = "" if isinstance(s.step, ir.Const) and s.step.value == 1 else f", {expr_str(s.step)}"
                walk(s.body, context + (f"for {s.var.name} in range({expr_str(s.start)}, {expr_str(s.stop)}"
                                        f"{step}){_at(s.loc)}: issued on every iteration",))
            elif isinstance(s, ir.While):
                walk(s.body, context + (f"while {expr_str(s.cond)}{_at(s.loc)}: issued on every iteration",))
            elif isinstance(s, ir.If):
                walk(s.then, context + (f"if {expr_str(s.cond)}{_at(s.loc)}",))
                walk(s.orelse, context + (f"else branch of if {expr_str(s.cond)}{_at(s.loc)}",))

    walk(body, ())
    return out


def _at(loc) -> str:
    return f" (line {loc.line})" if loc is not None else ""


def _where(loc) -> str:
    if loc is None:
        return "<unknown location>"
    path = loc.file
    try:
        rel = os.path.relpath(path)
        if not rel.startswith(".."):
            path = rel
    except ValueError:
        pass
    return f"{path}:{loc.line}"


def _statement(loc) -> str:
    """The whole apply call, on one line, even where the source spreads it over several."""
    if loc is None:
        return ""
    text = loc.text.strip()
    src = []
    for i in range(loc.line, loc.line + 40):
        line = linecache.getline(loc.file, i)
        if not line:
            break
        src.append(line)
        try:
            tree = ast.parse(textwrap.dedent("".join(src)))
        except SyntaxError:
            continue
        if tree.body and isinstance(tree.body[0], ast.Expr):
            return ast.unparse(tree.body[0].value)
        break
    return text
