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
from .barrier import FAMILY as barrier
from .bulk import FAMILY as bulk
from .tma import FAMILY as tma
from .cluster import FAMILY as cluster
from .cp_async import FAMILY as cp_async
from .ldmatrix import FAMILY as ldmatrix
from .memory import FAMILY as memory
from .mma import FAMILY as mma
from .policy import FAMILY as policy
from .register import FAMILY as register
from .warp import FAMILY as warp
from .wgmma import FAMILY as wgmma

FAMILIES: list[Family] = [mma, ldmatrix, tma, bulk, cp_async, cluster, memory, policy, register, atomic, warp, wgmma,
                          barrier]


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
            # an arch-specific form (wgmma: sm_90a only) names that target first, also to an older one: "sm_90 or
            # newer" would send the user to sm_90, which is refused too
            need = fam.arch_specific(form)
            if need is not None and not target.admits_arch_specific(need):
                raise CompilationError(f"{opcode}: needs the arch-specific target sm_{need}a (only sm_{need}a has "
                                       f"it); the target is {target.name}"
                                       + (f" (name target='sm_{need}a', or name no target on an sm_{need} GPU)"
                                          if target.sm == need else ""), loc)
            for sm, what in fam.requirements(form):
                if target.sm < sm:
                    raise CompilationError(f"{opcode}: {what}; the target is sm_{target.sm}", loc)
        return fam, form
    raise CompilationError(f"no explicit tile pattern for {opcode}", loc)


def arch_target(body, target: Target) -> Target:
    """The target an expanded kernel compiles for: a chosen target raised to its arch-specific form when one of the
    kernel's instructions needs it (registry.lookup has refused every other mismatch)."""
    if target.arch_specific or not target.chosen:
        return target
    for s in ir.walk_stmts(body):
        fam = getattr(s, "family", None) if isinstance(s, ir.Native) else None
        if fam is not None and fam.arch_specific(s.form) == target.sm:
            return target.as_arch_specific()
    return target


def native(loc, opcode: str, groups: list, pred=None, preserve: bool = False, **fields) -> ir.Native:
    """A native instruction built by hand (tests, tools), its opcode parsed here like the expansion parses it."""
    fam, form = lookup(opcode, loc)
    return ir.Native(loc, opcode, groups, pred, preserve, form=form, family=fam, **fields)
