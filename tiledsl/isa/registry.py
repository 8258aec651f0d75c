"""Explicit tile patterns: one module per instruction family, each with `match(opcode)` and `expand(form, ctx)`.

A family module owns its operand shapes, lane maps and legality rules. Adding a family is adding a module to
FAMILIES; nothing else changes.
"""
from __future__ import annotations

from ..core.errors import CompilationError
from .bulk import pattern as bulk
from .memory import pattern as memory
from .mma import pattern as mma
from .policy import pattern as policy
from .register import pattern as register
from .ldmatrix import pattern as ldmatrix
from .cp_async import pattern as cp_async

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
