"""Tile layouts: where each coordinate of a view lives (a storage offset plus offsets on execution axes).

`TileLayout(S[(shape) : (strides)])` is a flat list of factors. Taken in order, the factors multiply out to the
view's dimensions; inside one dimension the first factor is the most significant. A stride is an integer (the
storage axis: register slot for registers, element offset for memory) or `value @ axis` for an execution axis
such as `laneid`. This one module answers every layout question: the legality checker, codegen, the interpreter
and the pictures (tiledsl/tools/pictures.py, which draws a layout) all ask it; `TileLayout.owner` answers
"which lane, warp and slot hold this coordinate".
"""
from __future__ import annotations

import operator
from dataclasses import dataclass
from functools import lru_cache
from itertools import product

from .core.errors import LayoutError, shown, too_big
from .ir import nodes as ir

STORAGE = "storage"
AXIS_NAMES = ("laneid", "warpid", "tx", "wid_in_wg", "tid_in_wg")     # the execution axes a stride may name


def _int(x, what: str) -> int:
    """`x` as a Python int (numpy integers too), or a LayoutError naming what it was meant to be."""
    if isinstance(x, bool):
        raise LayoutError(f"{what} must be an int, not {x!r}")
    try:
        v = operator.index(x)
    except TypeError:
        raise LayoutError(f"{what} must be an int, not {shown(x)}") from None
    if too_big(v):
        raise LayoutError(f"{what} must fit in 64 bits, not {shown(v)}")
    return v


@dataclass(frozen=True)
class Axis:
    """An execution axis (`laneid`, `warpid`, `tx`, ...): `4 @ laneid` is a stride on it."""
    name: str

    def __post_init__(self):
        if self.name not in AXIS_NAMES:
            raise LayoutError(f"unknown execution axis {shown(self.name)}; the axes are {', '.join(AXIS_NAMES)}")

    def __rmatmul__(self, value: int) -> AxisStride:
        return AxisStride(_int(value, f"a stride on axis {self.name}"), self)

    def __repr__(self) -> str:
        return self.name


@dataclass(frozen=True)
class AxisStride:
    value: int
    axis: Axis

    def __post_init__(self):
        if not isinstance(self.axis, Axis):
            raise LayoutError(f"a stride's axis must be one of {', '.join(AXIS_NAMES)}, not {shown(self.axis)}")
        object.__setattr__(self, "value", _int(self.value, f"a stride on axis {self.axis.name}"))

    def __repr__(self) -> str:
        return f"{self.value}@{self.axis.name}"


laneid = Axis("laneid")
warpid = Axis("warpid")
tx = Axis("tx")
wid_in_wg = Axis("wid_in_wg")
tid_in_wg = Axis("tid_in_wg")
AXES = {a.name: a for a in (laneid, warpid, tx, wid_in_wg, tid_in_wg)}


@dataclass(frozen=True)
class Shape:
    """What `S[(shape) : (strides)]` builds: the flat factors with their strides."""
    extents: tuple
    strides: tuple

    def __post_init__(self):
        # checked here, not only in S[...], so that a Shape built directly is as safe as one from S
        ext, st = self.extents, self.strides
        ext = tuple(ext) if isinstance(ext, (tuple, list)) else (ext,)
        st = tuple(st) if isinstance(st, (tuple, list)) else (st,)
        if len(ext) != len(st):
            raise LayoutError(f"layout has {len(ext)} extents but {len(st)} strides")
        if not ext:
            raise LayoutError("a layout needs at least one factor")
        out_e, out_s = [], []
        for e in ext:
            if isinstance(e, bool) or not hasattr(type(e), "__index__") or operator.index(e) <= 0 or too_big(e):
                raise LayoutError(f"layout extents must be positive ints, got {shown(e)}")
            out_e.append(operator.index(e))
        for x in st:
            if isinstance(x, AxisStride):
                if x.value < 0:
                    raise LayoutError(f"layout strides must not be negative, got {x!r}")
                out_s.append(x)
            elif isinstance(x, Axis):
                raise LayoutError(f"write a stride on an axis as `value @ {x.name}`, e.g. `1 @ {x.name}`")
            elif isinstance(x, bool) or not hasattr(type(x), "__index__") or too_big(operator.index(x)):
                raise LayoutError(f"layout strides must be ints or `value @ axis`, got {shown(x)}")
            elif operator.index(x) < 0:
                raise LayoutError(f"layout strides must not be negative, got {shown(x)} (storage offsets only grow)")
            else:
                out_s.append(operator.index(x))
        object.__setattr__(self, "extents", tuple(out_e))
        object.__setattr__(self, "strides", tuple(out_s))


class _ShapeBuilder:
    """`S[(extents) : (strides)]`: the factors of a TileLayout. Strides are ints (storage: register slot or element
    offset) or `value @ axis` (an execution axis); factors taken in order multiply out to the view's dimensions."""

    def __getitem__(self, item) -> Shape:
        if not isinstance(item, slice) or item.step is not None:
            raise LayoutError("write a layout as S[(extents) : (strides)]")
        if item.start is None or item.stop is None:
            raise LayoutError("write a layout as S[(extents) : (strides)], with both sides")
        return Shape(item.start, item.stop)


S = _ShapeBuilder()


@dataclass(frozen=True)
class Factor:
    extent: int
    stride: int
    axis: str                    # STORAGE or an execution axis name
    inner: int                   # product of the later factors in the same dimension


def _swizzled_array(sw, storage, high):
    """The int64 arrays of storage offsets and high parts as the swizzle `sw` places them, summed (without a
    swizzle, the storage offsets as they are): the numpy form of the per-int step in storages_int, shared by
    storages_array and owners_array."""
    if not sw:
        return storage
    import numpy as np
    period = 1 << sum(sw)
    bits, base, shift = sw
    moved = (storage != 0) & (storage % period == 0)
    high = np.where(moved, high + storage, high)
    storage = np.where(moved, 0, storage)
    if bits:
        storage = storage ^ (((storage >> (base + shift)) & ((1 << bits) - 1)) << base)
    return storage + high


class TileLayout:
    """Where each coordinate of a view lives: `TileLayout(S[(2, 8, 4) : (1, 4 @ laneid, 1 @ laneid)])`.

    `locate(coord, dims)` gives the storage offset and the execution-axis offsets, `owner(coord, dims)` the lane,
    warp and slot that hold a coordinate; `swizzle=(bits, base, shift)` XORs storage offsets (shared-memory bank
    swizzles). `tiledsl.tools.pictures.svg(layout, shape)` draws one. Immutable; compares and hashes by value so
    it can key caches."""

    def __init__(self, shape: Shape, swizzle: tuple[int, int, int] | None = None):
        if not isinstance(shape, Shape):
            raise LayoutError("TileLayout takes S[(extents) : (strides)]")
        if swizzle is not None:
            if not (isinstance(swizzle, tuple) and len(swizzle) == 3 and
                    all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in swizzle)):
                raise LayoutError("swizzle=(bits, base, shift): three non-negative ints")
            if sum(swizzle) > 63:     # (also keeps absurd values out of every message and repr that prints them)
                raise LayoutError("swizzle=(bits, base, shift) must fit a 64-bit storage offset: bits + base + shift "
                                  "is at most 63")
            if swizzle[0] and swizzle[2] < swizzle[0]:
                raise LayoutError("swizzle shift must be at least its bits, so the xor reads higher bits only")
        self.shape = shape
        self.swizzle = swizzle
        self._key = (shape.extents, tuple(repr(s) for s in shape.strides), swizzle)
        self._static_cache = {}
        self._owner_cache = {}
        self._int_plans = {}                 # dims -> the factors as int tuples (_locate_int)
        self._storage_plans = {}             # dims -> the storage factors as int tuples (storages_int)

    def __repr__(self) -> str:
        ext = ", ".join(map(str, self.shape.extents))
        st = ", ".join(map(repr, self.shape.strides))
        sw = f", swizzle={self.swizzle}" if self.swizzle else ""
        return f"TileLayout(S[({ext}) : ({st})]{sw})"

    def __eq__(self, other) -> bool:
        return isinstance(other, TileLayout) and self._key == other._key

    def __hash__(self) -> int:
        return hash(self._key)

    # -- grouping factors over a view's dimensions
    def factors(self, dims: tuple) -> tuple:
        """Group the flat factors over `dims`; one tuple of Factors per dimension."""
        return _group(self.shape.extents, tuple(map(repr, self.shape.strides)), _dims(dims))

    def locate(self, coord, dims) -> tuple:
        """(storage offset, {axis: offset}) of `coord` in a view of shape `dims`. Coordinates may be IR exprs."""
        for c in coord:
            if type(c) is not int:
                return self._locate(coord, dims)
        # static coordinates recur across a kernel's unrolled tiles (every k step's fragments): one answer
        key = (tuple(coord), tuple(dims))
        hit = self._static_cache.get(key)
        if hit is None:
            hit = self._static_cache[key] = self._locate_int(coord, key[1])
        return hit[0], dict(hit[1])     # callers may add to the axis offsets

    def owner_static(self, coord: tuple, dims: tuple) -> tuple:
        """(slot, lane, warp) of int coordinates: `owner(coord, dims)` as a tuple, cached (ownership proofs ask for
        every lane of every fragment register)."""
        key = (coord, dims)
        hit = self._owner_cache.get(key)
        if hit is None:
            o = owner_of(*self.locate(coord, dims))
            hit = self._owner_cache[key] = (o.slot, o.lane, o.warp)
        return hit

    def storage_of(self, coord: tuple, dims: tuple):
        """`locate(coord, dims)[0]` for int coordinates (cached), without copying the axis offsets."""
        key = (coord, dims)
        hit = self._static_cache.get(key)
        if hit is None:
            hit = self._static_cache[key] = self._locate_int(coord, dims)
        return hit[0]

    def storages_int(self, coords, dims: tuple) -> list:
        """`[locate(c, dims)[0] for c in coords]` for int coordinates: only the storage factors are evaluated, on
        Python ints, from a per-shape plan (the contiguity proofs ask for tens of thousands of distinct rows)."""
        plan = self._storage_plans.get(dims)
        if plan is None:
            groups = self.factors(dims)
            period = 1 << sum(self.swizzle) if self.swizzle else 0
            plan = self._storage_plans[dims] = tuple(
                tuple((f.inner, f.extent if k > 0 else 0, f.stride, bool(period and f.stride % period == 0))
                      for k, f in enumerate(facs) if f.axis == STORAGE)
                for facs in groups)
        sw = self.swizzle
        if sw:
            period = 1 << sum(sw)
            bits, base, shift = sw
            mask = (1 << bits) - 1
            lo = base + shift
        n = len(dims)
        out = []
        for coord in coords:
            if len(coord) != n:
                raise LayoutError(f"coordinate has {len(coord)} indices for a {len(dims)}-d view")
            storage = high = 0
            for c, facs in zip(coord, plan):
                for inner, wrap, stride, is_high in facs:
                    digit = c // inner
                    if wrap:
                        digit %= wrap
                    if is_high:
                        high += digit * stride
                    else:
                        storage += digit * stride
            if sw:
                if storage and storage % period == 0:
                    storage, high = 0, high + storage
                if bits:                         # swizzled(), inline
                    storage ^= ((storage >> lo) & mask) << base
                storage += high
            out.append(storage)
        return out

    def storages_array(self, coords, dims: tuple):
        """`storages_int` of an (n, len(dims)) int64 numpy array of coordinates, as an int64 array; None when a
        value could leave the range where int64 arithmetic equals Python's (then the caller uses storages_int).
        numpy's // % >> & ^ on int64 follow Python's floor semantics, so the answers are the same ints."""
        import numpy as np
        plan = self._storage_plans.get(dims)
        if plan is None:
            self.storages_int([], dims)              # builds the plan
            plan = self._storage_plans[dims]
        if coords.shape[1] != len(dims):
            return None
        # every digit is at most |coordinate| (or below its wrap) and every stride below 2^24: each term stays
        # under 2^48 and a sum of them far from 2^63
        if coords.size and int(np.abs(coords).max()) >= 1 << 24:
            return None
        if any(abs(st) >= 1 << 24 for facs in plan for _, _, st, _ in facs):
            return None
        storage = np.zeros(coords.shape[0], np.int64)
        high = np.zeros(coords.shape[0], np.int64)
        for d, facs in enumerate(plan):
            c = coords[:, d]
            for inner, wrap, stride, is_high in facs:
                digit = c // inner
                if wrap:
                    digit = digit % wrap
                if is_high:
                    high += digit * stride
                else:
                    storage += digit * stride
        return _swizzled_array(self.swizzle, storage, high)

    def owners_array(self, coords, dims: tuple):
        """(slot, lane, warp) int64 arrays of an (n, len(dims)) int64 array of coordinates: `owner_static` of every
        row at once, with owner_of's split of thread-index axes; None outside the range where int64 arithmetic
        equals Python's."""
        import numpy as np
        if coords.shape[1] != len(dims):
            return None
        plan = self._int_plans.get(dims)
        if plan is None:
            self._locate_int((0,) * len(dims), dims)     # builds the plan
            plan = self._int_plans[dims]
        if coords.size and int(np.abs(coords).max()) >= 1 << 24:
            return None
        if any(abs(st) >= 1 << 24 for facs in plan for _, _, st, _, _ in facs):
            return None
        n = coords.shape[0]
        offs = {}
        high = np.zeros(n, np.int64)
        for d, facs in enumerate(plan):
            c = coords[:, d]
            for inner, wrap, stride, axis, is_high in facs:
                digit = c // inner
                if wrap:
                    digit = digit % wrap
                if is_high:
                    high += digit * stride
                elif axis in offs:
                    offs[axis] = offs[axis] + digit * stride
                else:
                    offs[axis] = digit * stride
        storage = offs.pop(STORAGE, np.zeros(n, np.int64))
        storage = _swizzled_array(self.swizzle, storage, high)
        zero = np.zeros(n, np.int64)
        lane = offs.get("laneid", zero) + sum((offs.get(a, zero) % 32 for a in _LANE_AXES[1:]), zero)
        warp = sum((offs.get(a, zero) for a in _WARP_AXES), zero) + \
            sum((offs.get(a, zero) // 32 for a in _LANE_AXES[1:]), zero)
        return storage, lane, warp

    def _locate_int(self, coord, dims):
        """`_locate` for int coordinates: the same arithmetic on Python ints (what the ir builders fold to), read
        from a per-shape plan of the factors instead of regrouping them and building each term."""
        plan = self._int_plans.get(dims)
        if plan is None:
            groups = self.factors(dims)
            period = 1 << sum(self.swizzle) if self.swizzle else 0
            plan = self._int_plans[dims] = tuple(
                tuple((f.inner, f.extent if k > 0 else 0, f.stride, f.axis,
                       bool(period and f.axis == STORAGE and f.stride % period == 0)) for k, f in enumerate(facs))
                for facs in groups)
        if len(coord) != len(dims):
            raise LayoutError(f"coordinate has {len(coord)} indices for a {len(dims)}-d view")
        offs = {STORAGE: 0}
        high = 0
        for c, facs in zip(coord, plan):
            for inner, wrap, stride, axis, is_high in facs:
                digit = c // inner
                if wrap:
                    digit %= wrap
                if is_high:
                    high += digit * stride
                else:
                    offs[axis] = offs.get(axis, 0) + digit * stride
        storage = offs.pop(STORAGE)
        if self.swizzle:
            period = 1 << sum(self.swizzle)
            if storage and storage % period == 0:
                storage, high = 0, high + storage
            storage = high + swizzled(storage, *self.swizzle)
        return storage, offs

    def _locate(self, coord, dims):
        groups = self.factors(dims)
        if len(coord) != len(dims):
            raise LayoutError(f"coordinate has {len(coord)} indices for a {len(dims)}-d view")
        offs = {STORAGE: 0}
        # With a swizzle, terms whose stride is a multiple of its period (2^(bits+base+shift)) pass through the
        # XOR unchanged: keep them outside it so a run-time stage or warp offset stays a plain add.
        period = 1 << sum(self.swizzle) if self.swizzle else 0
        high = 0
        for c, facs in zip(coord, groups):
            for k, f in enumerate(facs):
                digit = ir.floordiv(c, f.inner)
                if k > 0:                        # the most significant factor needs no wrap
                    digit = ir.mod(digit, f.extent)
                if period and f.axis == STORAGE and f.stride % period == 0:
                    high = ir.add(high, ir.mul(digit, f.stride))
                else:
                    offs[f.axis] = ir.add(offs.get(f.axis, 0), ir.mul(digit, f.stride))
        storage = offs.pop(STORAGE)
        if self.swizzle:
            # so does a constant addend of the rest that is a multiple of the period (an unrolled copy's row
            # offset, say): it stays visible as the [reg+imm] displacement of the access
            rest, c = ir.split_const(storage)
            if c and c % period == 0:
                storage, high = rest, ir.add(high, c)
            storage = ir.add(high, swizzled(storage, *self.swizzle))
        return storage, offs

    def storage_span(self, dims) -> int:
        """One more than the largest storage offset the view reaches (negative strides are refused)."""
        top = 0
        for facs in self.factors(dims):
            for f in facs:
                if f.axis == STORAGE:
                    if f.stride < 0:
                        raise LayoutError("negative storage strides are not supported")
                    top += (f.extent - 1) * f.stride
        if self.swizzle:                          # the xor stays inside aligned blocks of 2^(base+bits)
            block = 1 << (self.swizzle[0] + self.swizzle[1])
            return (top + block) // block * block
        return top + 1

    def exec_axes(self, dims) -> set:
        return {f.axis for facs in self.factors(dims) for f in facs if f.axis != STORAGE and f.extent > 1}

    def owners(self, dims) -> list:
        """Every coordinate of the view with where it lives: [(coord, storage, {axis: offset})]."""
        out = []
        for coord in product(*(range(d) for d in dims)):
            s, ax = self.locate(coord, dims)
            out.append((coord, s, ax))
        return out

    def owner(self, coord, dims) -> Owner:
        """Which lane and warp hold `coord` of a view of shape `dims`, and in which storage slot (the register
        slot of a register tensor). The ownership proofs of the patterns and the pictures both ask this."""
        return owner_of(*self.locate(coord, dims))

    def to_svg(self, shape, title=None) -> str:
        """A picture of lane/register ownership over a view of `shape`, as SVG text (tiledsl.tools.pictures)."""
        from .tools import pictures
        return pictures.svg(self, shape, title)

    def to_png(self, shape, path: str | None = None) -> bytes:
        """The same picture as PNG bytes, also written to `path` when given (tiledsl.tools.pictures)."""
        from .tools import pictures
        return pictures.png(self, shape, path)


# execution axes and how they count threads: lanes within a warp, and warps (a thread index spans both)
_LANE_AXES = ("laneid", "tx", "tid_in_wg")
_WARP_AXES = ("warpid", "wid_in_wg")
_PLAIN_AXES = ("laneid", "warpid", "wid_in_wg")


@dataclass(frozen=True)
class Owner:
    """Where one element of a view lives: the lane and warp that hold it and its storage slot."""
    lane: int
    warp: int
    slot: int

    @property
    def thread(self) -> int:
        """The thread index within the block (a warp counts as 32 threads)."""
        return 32 * self.warp + self.lane


def owner_of(storage, axes: dict) -> Owner:
    """The owner from a `locate` answer `(storage offset, {axis: offset})` with static values: thread-index axes
    (tx, tid_in_wg) split into a lane (mod 32) and a warp (div 32). LayoutError when a value is not static."""
    if not isinstance(storage, int):
        raise LayoutError("the storage offset is not static")
    if len(axes) <= 2 and all(k in _PLAIN_AXES and type(v) is int for k, v in axes.items()):
        # the common case (lane and warp axes only, static): no thread-index axes to split
        return Owner(axes.get("laneid", 0), axes.get("warpid", 0) + axes.get("wid_in_wg", 0), storage)
    for name in _LANE_AXES + _WARP_AXES:
        if not isinstance(axes.get(name, 0), int):
            raise LayoutError(f"the offset on axis {name} is not static")
    lane = axes.get("laneid", 0) + sum(axes.get(a, 0) % 32 for a in _LANE_AXES[1:])
    warp = sum(axes.get(a, 0) for a in _WARP_AXES) + sum(axes.get(a, 0) // 32 for a in _LANE_AXES[1:])
    return Owner(lane, warp, storage)


def _dims(dims) -> tuple:
    """A view's shape as a tuple of ints (what the cached grouping is keyed on), or a LayoutError."""
    if isinstance(dims, (str, bytes)) or not hasattr(dims, "__iter__"):
        dims = (dims,)
    out = []
    for d in dims:
        if isinstance(d, bool) or not hasattr(type(d), "__index__"):
            raise LayoutError(f"a view with a layout needs static int extents, got {shown(d)}")
        if operator.index(d) <= 0:
            raise LayoutError(f"a view's extents must be positive, got {operator.index(d)}")
        out.append(operator.index(d))
    return tuple(out)


@lru_cache(maxsize=4096)
def _group(extents: tuple, stride_reprs: tuple, dims: tuple):
    strides = [_parse_stride(r) for r in stride_reprs]
    groups, i = [], 0
    for d in dims:
        if not isinstance(d, int):
            raise LayoutError("a view with a layout needs static extents")
        start, prod = i, 1
        while i < len(extents) and (i == start or prod < d):
            if prod * extents[i] > d:
                break
            prod *= extents[i]
            i += 1
        if prod != d or i == start:
            raise LayoutError(f"layout factors {extents} do not multiply out to the view's shape {dims}")
        groups.append(list(range(start, i)))
    while i < len(extents):                      # trailing unit factors fold into the last dimension
        if extents[i] != 1 or not groups:
            raise LayoutError(f"layout factors {extents} do not multiply out to the view's shape {dims}")
        groups[-1].append(i)
        i += 1
    out = []
    for idxs in groups:
        facs, inner = [], 1
        for k in reversed(idxs):
            val, axis = strides[k]
            facs.append(Factor(extents[k], val, axis, inner))
            inner *= extents[k]
        out.append(tuple(reversed(facs)))
    return tuple(out)


def _parse_stride(r: str):
    if "@" in r:
        v, a = r.split("@")
        return int(v), a
    return int(r), STORAGE


def swizzled(offset, bits: int, base: int, shift: int):
    """offset ^ (((offset >> (base + shift)) & (2^bits - 1)) << base): the XOR swizzle of a storage offset.

    With base = log2(elements per 16 bytes) it permutes 16-byte chunks, so vector and ldmatrix accesses stay
    whole while rows that would share banks land in different ones.
    """
    if not bits:
        return offset
    if isinstance(offset, int):
        return offset ^ (((offset >> (base + shift)) & ((1 << bits) - 1)) << base)
    return ir.bitop("xor", offset, ir.bitop("shl", ir.bitop("and", ir.bitop("shr", offset, base + shift),
                                                            (1 << bits) - 1), base))


def row_major_strides(shape) -> tuple:
    out, acc = [], 1
    for d in reversed(shape):
        out.append(acc)
        acc = ir.mul(acc, d)
    return tuple(reversed(out))
