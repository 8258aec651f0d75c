"""The launch contract of one compiled specialization, derived once from the kernel's IR at compile time.

Everything a launcher needs to know about a kernel lives here: its parameters (tensors with their dtype and
shape, where a string names a size bound at run time; scalars; constexprs, which are not passed), the hidden
parameters appended after them (one int32 per named size, then the debug buffer of debug=True kernels), and the
launch configuration (grid entries are ints or host-expression trees over sizes and scalars, see
ir/eval.py; the block is fixed). The reference checker (check.py) validates a call against it, and every
launcher (runtime/launchers/) packs its parameter slots from it. It travels through the disk cache as JSON-able
data (`to_data`/`from_data`).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

from ..core import dtypes as dt


@dataclass(frozen=True)
class Param:
    """One parameter as declared: kind "tensor" (dtype, shape of ints and size names), "scalar" (dtype),
    "constexpr" (compile-time, not passed) or "missing" (no annotation; refused at launch)."""
    name: str
    kind: str
    dtype: dt.DType | None = None
    shape: tuple = ()


@dataclass(frozen=True)
class Slot:
    """One entry of the kernel's parameter block, in order: what fills it and the C type it holds
    (a dtype name; tensors are 64-bit pointers)."""
    kind: str            # "tensor" | "scalar" | "size" | "debugbuf"
    name: str
    ctype: str


@dataclass(frozen=True)
class KernelSignature:
    name: str
    params: tuple[Param, ...]
    sizes: tuple[str, ...] = ()          # named sizes, in the order of their hidden int32 slots
    debug_buffer: bool = False           # a last pointer slot: the debug=True bounds-check record
    grid: tuple = ()                     # three entries: int or host-expression tree (nested tuples)
    block: tuple = ()                    # three ints

    @classmethod
    def from_kernel(cls, k, debug_buffer: bool = False) -> KernelSignature:
        """The signature of an `ir.Kernel` (parsed; the launch grid's expressions become host trees)."""
        from ..ir.eval import serialize
        params = tuple(Param(p.name, p.kind, p.dtype, tuple(p.shape)) for p in k.params)
        grid = tuple(_frozen(serialize(g)) for g in k.launch.grid)
        return cls(k.name, params, tuple(k.sizes), debug_buffer, grid, tuple(k.launch.block))

    @classmethod
    def declared(cls, name: str, params: tuple[Param, ...]) -> KernelSignature:
        """The parameters alone, before compilation (the first call of a specialization is checked with them:
        the target, hence the compilation, depends on the device the arguments live on)."""
        return cls(name, params)

    @functools.cached_property
    def slots(self) -> tuple[Slot, ...]:
        out = []
        for p in self.params:
            if p.kind == "tensor":
                out.append(Slot("tensor", p.name, "uint64"))
            elif p.kind == "scalar":
                out.append(Slot("scalar", p.name, p.dtype.name))
        out += [Slot("size", s, "int32") for s in self.sizes]
        if self.debug_buffer:
            out.append(Slot("debugbuf", "__debug", "uint64"))
        return tuple(out)

    @functools.cached_property
    def passed(self) -> tuple[tuple[int, Param], ...]:
        """(argument index, parameter) of every tensor and scalar, in slot order."""
        return tuple((i, p) for i, p in enumerate(self.params) if p.kind in ("tensor", "scalar"))

    @property
    def grid_static(self) -> bool:
        return all(isinstance(g, int) for g in self.grid)

    def to_data(self) -> dict:
        """JSON-able data (the disk cache's entry)."""
        return {"name": self.name,
                "params": [[p.name, p.kind, p.dtype.name if p.dtype else None, list(p.shape)] for p in self.params],
                "sizes": list(self.sizes), "debug_buffer": self.debug_buffer, "grid": _listed(self.grid),
                "block": list(self.block)}

    @classmethod
    def from_data(cls, data: dict) -> KernelSignature:
        params = tuple(Param(n, kind, dt.BY_NAME[d] if d else None, tuple(shape))
                       for n, kind, d, shape in data["params"])
        return cls(data["name"], params, tuple(data["sizes"]), data["debug_buffer"], _frozen(data["grid"]),
                   tuple(data["block"]))


def _frozen(tree):
    return tuple(_frozen(x) for x in tree) if isinstance(tree, (list, tuple)) else tree


def _listed(tree):
    return [_listed(x) for x in tree] if isinstance(tree, tuple) else tree
