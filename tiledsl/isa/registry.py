"""The instruction families, in the order they are asked, and the one place an opcode is parsed and checked.

Each family is a folder isa/<name>/ (pattern.py: grammar and expansion; semantics.py: the interpreter's reading of
the PTX ISA) whose __init__ exports `FAMILY` (a family.Family). Adding a family is adding its folder and a line
to FAMILIES; nothing else changes.
"""
from __future__ import annotations

from ..core.errors import CompilationError
from ..core.target import Target
from ..ir import nodes as ir
from .family import Family, Refusal
from .atomic import FAMILY as atomic
from .bulk import FAMILY as bulk
from .cluster import FAMILY as cluster
from .cp_async import FAMILY as cp_async
from .ldmatrix import FAMILY as ldmatrix
from .memory import FAMILY as memory
from .mma import FAMILY as mma
from .policy import FAMILY as policy
from .register import FAMILY as register
from .warp import FAMILY as warp

FAMILIES: list[Family] = [mma, ldmatrix, bulk, cp_async, cluster, memory, policy, register, atomic, warp]


def lookup(opcode: str, loc=None, target: Target | None = None) -> tuple:
    """(family, parsed form) for an opcode; a CompilationError for an opcode no family supports, a refused form,
    or (given a target) a form the target does not have."""
    if not isinstance(opcode, str) or not opcode or opcode != opcode.strip():
        raise CompilationError(f"no explicit tile pattern for {opcode!r}", loc)
    for fam in FAMILIES:
        form = fam.match(opcode)
        if form is None:
            continue
        if isinstance(form, Refusal):
            raise CompilationError(f"{opcode}: {form.message}", loc)
        if target is not None:
            for sm, what in fam.requirements(form):
                if target.sm < sm:
                    raise CompilationError(f"{opcode}: {what}; the target is sm_{target.sm}", loc)
        return fam, form
    raise CompilationError(f"no explicit tile pattern for {opcode}", loc)


def native(loc, opcode: str, groups: list, pred=None, preserve: bool = False, **fields) -> ir.Native:
    """A native instruction built by hand (tests, tools), its opcode parsed here like the expansion parses it."""
    fam, form = lookup(opcode, loc)
    return ir.Native(loc, opcode, groups, pred, preserve, form=form, family=fam, **fields)
