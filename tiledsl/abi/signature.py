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
    """One parameter as declared: kind "tensor" (dtype, shape of ints and size names), "tensormap" (the same, and
    the map's box, swizzle, fill and L2 promotion in `tensormap`: a lang.tensormap.TensorMapType; passed as a
    128-byte CUtensorMap), "scalar" (dtype), "constexpr" (compile-time, not passed) or "missing" (no annotation;
    refused at launch)."""
    name: str
    kind: str
    dtype: dt.DType | None = None
    shape: tuple = ()
    written: bool = False        # a tensor the kernel stores to (a read-only array is refused for it)
    tensormap: object = None     # kind "tensormap": its TensorMapType


@dataclass(frozen=True)
class Slot:
    """One entry of the kernel's parameter block, in order: what fills it and the C type it holds
    (a dtype name; tensors are 64-bit pointers)."""
    kind: str            # "tensor" | "tensormap" | "scalar" | "size" | "debugbuf"
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
    launch_given: bool = True            # False: the body has no T.device_entry launch; a call needs kernel[g, b]
    cluster: tuple = (1, 1, 1)           # blocks per cluster: other than (1, 1, 1), launches go through cuLaunchKernelEx

    @classmethod
    def from_kernel(cls, k, debug_buffer: bool = False) -> KernelSignature:
        """The signature of an `ir.Kernel` (parsed; the launch grid's expressions become host trees)."""
        from ..ir.eval import serialize
        stored = written_storages(k.body)
        params = tuple(Param(p.name, p.kind, p.dtype, tuple(p.shape), p.storage is not None and id(p.storage) in stored,
                             getattr(p, "tensormap", None)) for p in k.params)
        grid = tuple(_frozen(serialize(g)) for g in k.launch.grid)
        return cls(k.name, params, tuple(k.sizes), debug_buffer, grid, tuple(k.launch.block),
                   getattr(k.launch, "given", True), tuple(getattr(k.launch, "cluster", (1, 1, 1))))

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
            elif p.kind == "tensormap":
                out.append(Slot("tensormap", p.name, "tensormap"))     # 128 bytes, by value
            elif p.kind == "scalar":
                out.append(Slot("scalar", p.name, p.dtype.name))
        out += [Slot("size", s, "int32") for s in self.sizes]
        if self.debug_buffer:
            out.append(Slot("debugbuf", "__debug", "uint64"))
        return tuple(out)

    @functools.cached_property
    def passed(self) -> tuple[tuple[int, Param], ...]:
        """(argument index, parameter) of every tensor and scalar, in slot order."""
        return tuple((i, p) for i, p in enumerate(self.params) if p.kind in ("tensor", "tensormap", "scalar"))

    @property
    def clustered(self) -> bool:
        """Whether launches need the cluster attribute (cuLaunchKernelEx)."""
        return tuple(self.cluster) != (1, 1, 1)

    @property
    def grid_static(self) -> bool:
        return all(isinstance(g, int) for g in self.grid)

    def to_data(self) -> dict:
        """JSON-able data (the disk cache's entry)."""
        return {"name": self.name,
                "params": [[p.name, p.kind, p.dtype.name if p.dtype else None, list(p.shape), p.written]
                           + ([_map_data(p.tensormap)] if p.kind == "tensormap" else []) for p in self.params],
                "sizes": list(self.sizes), "debug_buffer": self.debug_buffer, "grid": _listed(self.grid),
                "block": list(self.block), "launch_given": self.launch_given, "cluster": list(self.cluster)}

    @classmethod
    def from_data(cls, data: dict) -> KernelSignature:
        """The signature of `to_data`'s output; ValueError when `data` is not one (a damaged cache entry)."""
        try:
            params = []
            for n, kind, d, shape, written, *tmap in data["params"]:
                if len(tmap) != (kind == "tensormap") or \
                        not isinstance(n, str) or kind not in _KINDS or not isinstance(written, bool) or \
                        not all(isinstance(s, (int, str)) and not isinstance(s, bool) for s in shape):
                    raise ValueError(f"parameter {n!r}")
                params.append(Param(n, kind, dt.BY_NAME[d] if d is not None else None, tuple(shape), written,
                                    _map_from(tmap[0], tuple(shape), d) if tmap else None))
            sig = cls(data["name"], tuple(params), tuple(data["sizes"]), data["debug_buffer"],
                      _frozen(data["grid"]), tuple(data["block"]), data["launch_given"],
                      tuple(data.get("cluster", (1, 1, 1))))
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise ValueError(f"not a kernel signature ({type(e).__name__}: {e})") from None
        if not isinstance(sig.name, str) or not isinstance(sig.debug_buffer, bool) or len(sig.block) != 3 or \
                not isinstance(sig.launch_given, bool) or \
                len(sig.grid) != 3 or not all(isinstance(b, int) and not isinstance(b, bool) and b > 0
                                              for b in sig.block) or \
                not all(isinstance(s, str) for s in sig.sizes) or len(sig.cluster) != 3 or \
                not all(isinstance(c, int) and not isinstance(c, bool) and c > 0 for c in sig.cluster):
            raise ValueError("not a kernel signature (name, grid, block or sizes)")
        return sig


_KINDS = ("tensor", "tensormap", "scalar", "constexpr", "missing")


def _map_data(m) -> dict:
    return {"box": list(m.box), "swizzle": m.swizzle, "oob_fill": m.oob_fill, "l2_promotion": m.l2_promotion}


def _map_from(data: dict, shape: tuple, dtype: str):
    from ..lang.tensormap import TensorMapType
    return TensorMapType(shape, dt.BY_NAME[dtype], tuple(data["box"]), data["swizzle"], data["oob_fill"],
                         data["l2_promotion"])


def written_storages(body) -> set:
    """The ids of the global storages (tensor parameters) the kernel writes: a Store to it, a native store whose
    destination (its first address) is in it, or a tile.apply whose destination (its first operand, as PTX
    writes it) is a view of it. Walks the statement tree (tile IR or expanded)."""
    from ..ir import nodes as ir
    out = set()

    def mark(storage):
        if storage is not None and storage.scope == "global":
            out.add(id(storage))

    def walk(stmts):
        for s in stmts:
            if isinstance(s, ir.Store):
                mark(s.storage)
            elif isinstance(s, ir.Native):
                if s.effect == "store":
                    addrs = [a for g in s.groups for a in g if isinstance(a, ir.Addr)]
                    mark(addrs[0].storage if addrs else None)
            elif isinstance(s, ir.Apply):
                if s.operands:
                    mark(getattr(s.operands[0], "storage", None))
            elif isinstance(s, (ir.For, ir.While)):
                walk(s.body)
            elif isinstance(s, ir.If):
                walk(s.then)
                walk(s.orelse)
    walk(body)
    return out


def _frozen(tree):
    return tuple(_frozen(x) for x in tree) if isinstance(tree, (list, tuple)) else tree


def _listed(tree):
    return [_listed(x) for x in tree] if isinstance(tree, tuple) else tree
