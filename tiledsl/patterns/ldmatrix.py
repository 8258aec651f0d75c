"""ldmatrix / stmatrix (m8n8, .b16): placeholder until the pattern-engine issue; refuses every form clearly."""
from __future__ import annotations


def match(opcode: str):
    if opcode.startswith("ldmatrix") or opcode.startswith("stmatrix"):
        return "todo"
    return None


def expand(form, ctx):
    raise ctx.error("ldmatrix/stmatrix patterns are not implemented yet")
