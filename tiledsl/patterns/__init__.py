"""Explicit tile patterns: one module per instruction family, each with `match(opcode)` and `expand(form, ctx)`.

A family module owns its operand shapes, lane maps and legality rules. Adding a family is adding a module to
FAMILIES; nothing else changes.
"""
from __future__ import annotations

from ..errors import CompilationError
from . import bulk, memory, mma, policy, register, ldmatrix, cp_async

FAMILIES = [mma, ldmatrix, bulk, cp_async, memory, policy, register]


def lookup(opcode: str, loc=None):
    """(family module, parsed form) for an opcode, or a CompilationError naming it."""
    if not isinstance(opcode, str) or not opcode or opcode != opcode.strip():
        raise CompilationError(f"no explicit tile pattern for {opcode!r}", loc)
    for fam in FAMILIES:
        form = fam.match(opcode)
        if form is not None:
            return fam, form
    raise CompilationError(f"no explicit tile pattern for {opcode}", loc)
