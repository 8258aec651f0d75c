"""What an instruction family is: the one object every stage asks about its instructions.

A family parses its opcodes once (`match` gives a Form, a `Refusal` or None), expands a `tile.apply` into
`ir.Native` statements that carry that Form, and answers the later stages from the Form instead of the opcode text:
the interpreter (`semantics`), the debug pass (`access_spans`) and codegen (`asm`, for the rare instruction that is
not emitted as written). The registry (registry.py) checks `min_sm` and refusals once, before `expand` runs.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from ..ir import nodes as ir


@dataclass(frozen=True)
class Refusal:
    """An opcode a family recognises but does not support; `message` follows "<opcode>: " in the error."""
    message: str


def addresses(n: ir.Native) -> list:
    """The Addr operands of a native, in operand order."""
    return [a for g in n.groups for a in g if isinstance(a, ir.Addr)]


def one_element_each(n: ir.Native) -> list:
    """Access spans for a family whose addresses each touch one element (or that has no addresses)."""
    return [1] * len(addresses(n))


@dataclass(frozen=True, eq=False)
class Family:
    """One PTX instruction family. Adding a family: a folder isa/<name>/ exporting one of these, and a line in
    registry.FAMILIES.

    name          the folder's name
    match         opcode -> Form | Refusal | None (None: not this family's opcode)
    expand        (form, Ctx) -> [ir.Native]; build them with ctx.native(...) so each carries its form and family
    min_sm        an int, or form -> int: the oldest target that has the form ("needs sm_N or newer")
    semantics     (native, ExprCompiler) -> closure f(machine, idx): the interpreter's reading of the PTX ISA
    access_spans  native -> elements (of each Addr's dtype) accessed from each Addr operand, in operand order
    requires      form -> [(sm, what)]: further target requirements, raised as "<what>; the target is sm_N"
    asm           (native, rendered operands) -> the inline-asm text, or None to emit `opcode operands;`
    arch          form -> the SM whose arch-specific target the form needs (90: sm_90a only), or None
    """
    name: str
    match: Callable
    expand: Callable
    min_sm: int | Callable
    semantics: Callable | None = None
    access_spans: Callable = one_element_each
    requires: Callable | None = None
    asm: Callable | None = None
    arch: Callable | None = None

    def __repr__(self) -> str:
        return f"<instruction family {self.name}>"

    def requirements(self, form) -> list:
        """[(sm, what)] the target must meet for `form`, checked in order by the registry."""
        sm = self.min_sm(form) if callable(self.min_sm) else self.min_sm
        out = [(sm, f"needs sm_{sm} or newer")]
        if self.requires is not None:
            out += list(self.requires(form))
        return out

    def arch_specific(self, form) -> int | None:
        """The SM whose arch-specific target (sm_90a) `form` needs, or None."""
        return self.arch(form) if self.arch is not None else None
