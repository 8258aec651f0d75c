"""cp.async (global -> shared) with commit/wait: placeholder until the pattern-engine issue."""
from __future__ import annotations


def match(opcode: str):
    if opcode.startswith("cp.async"):
        return "todo"
    return None


def expand(form, ctx):
    raise ctx.error("cp.async patterns are not implemented yet")
