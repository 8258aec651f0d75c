"""Views: how the kernel sees storage. A view has a dtype and a shape and can `locate` any coordinate.

`locate(coord)` returns the element offset into storage (in units of the view's dtype) and the offsets on
execution axes (`laneid`, ...), as ints where static and IR expressions where not.
"""
from __future__ import annotations

from ..ir import nodes as ir
from ..ir.eval import PINS, evaluate_pinned
from ..core.dtypes import DType
from ..layout import TileLayout, row_major_strides


class View:
    storage: ir.Storage
    dtype: DType
    shape: tuple

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def locate(self, coord):
        raise NotImplementedError

    def has_exec_axes(self) -> bool:
        return False

    def owner_static(self, coord):
        """(slot, lane, warp) of the int coordinates `coord`, i.e. `layout.owner_of(*self.locate(coord))`, for the
        views that answer it without building expressions; None for the others (the caller then locates)."""
        return None

    def owners_array(self, coords):
        """`owner_static` of every row of an (n, ndim) int64 numpy array: (slot, lane, warp) int64 arrays, or None
        where this view has no array path (the caller then asks owner_static per coordinate)."""
        return None

    def static_key(self):
        """A hashable key that decides `locate` of every int coordinate (equal keys: equal answers, same storage
        and dtype), or None when a part of the view is a run-time value. Proofs made on int coordinates may be
        remembered under it (isa/operands.py)."""
        return None

    def pinned_key(self):
        """Like `static_key`, but deciding `storage_pinned` for every pin in ir.eval.PINS: run-time parts enter as
        their pinned values. None when a part cannot be evaluated."""
        return None

    def storage_pinned(self, coord, pin: int, memo: dict):
        """The storage offset of the int coordinates `coord` as an int, with every run-time value inside the view
        (a sub-view's origin, a run-time stride) pinned to `pin` as `ir.eval.evaluate_pinned` does; None when a
        part cannot be evaluated (the caller then evaluates `locate`'s expression tree, which may fold it away).
        Equal to `evaluate_pinned(self.locate(coord)[0], pin)` whenever it is not None: the same integer
        arithmetic, only evaluated as it goes instead of building the tree first."""
        return None

    def storages_array(self, coords, pin: int, memo: dict):
        """`storages_pinned` of an (n, ndim) int64 numpy array, as an int64 array; None where this view (or the
        size of the values) has no array path: the caller then asks `storages_pinned`."""
        return None

    def storages_pinned(self, coords, pin: int, memo: dict):
        """`[storage_pinned(c, pin, memo) for c in coords]`, or None when one of them is None."""
        out = []
        for c in coords:
            o = self.storage_pinned(c, pin, memo)
            if o is None:
                return None
            out.append(o)
        return out

    def describe(self) -> str:
        return f"{self.storage.name}{list(self.shape)}:{self.dtype.name}"

    def fingerprint(self) -> str:
        return self.describe()


class RootView(View):
    """A buffer, or `buffer.view(*shape, layout=...)`: a whole-storage view with an optional TileLayout."""

    def __init__(self, storage, dtype, shape, layout: TileLayout | None = None, name=None):
        self.storage, self.dtype, self.shape, self.layout = storage, dtype, tuple(shape), layout
        self.name = name or storage.name
        self._strides = None if layout else row_major_strides(self.shape)
        # the whole storage, row-major: an index past the first dimension's extent leaves the storage itself, so
        # the whole-buffer bounds check covers that dimension (frontend/dim_checks.py). Tensor parameters' own
        # views are marked by the front end; a local or shared buffer's views are when they span all its bytes.
        n = 1
        for e in self.shape:
            n = n * e if isinstance(e, int) and isinstance(n, int) else None
        self.whole = layout is None and storage.size is not None and n is not None and \
            n * dtype.nbytes == storage.size * storage.dtype.nbytes

    def locate(self, coord):
        if self.layout is not None:
            return self.layout.locate(tuple(coord), self.shape)
        off = 0
        for c, s in zip(coord, self._strides):
            off = ir.add(off, ir.mul(c, s))
        return off, {}

    def owners_array(self, coords):
        if self.layout is not None:
            return self.layout.owners_array(coords, self.shape)
        return None

    def owner_static(self, coord):
        if self.layout is not None:
            return self.layout.owner_static(tuple(coord), self.shape)
        off = 0
        for c, s in zip(coord, self._strides):
            if type(s) is not int:
                return None
            off += c * s
        return off, 0, 0

    def static_key(self):
        if self.layout is None and not all(type(x) is int for x in self._strides):
            return None
        return ("root", self.storage, self.dtype, self.shape, self.layout)

    def pinned_key(self):
        k = self.__dict__.get("_pinned_key", False)
        if k is False:
            k = self.static_key()
            if k is None:
                strides = tuple(tuple(x if type(x) is int else evaluate_pinned(x, pin) for x in self._strides)
                                for pin in PINS)
                k = None if any(None in st for st in strides) else \
                    ("root", self.storage, self.dtype, self.shape, strides)
            self._pinned_key = k
        return k

    def storages_array(self, coords, pin: int, memo: dict):
        if self.layout is not None:
            return self.layout.storages_array(coords, self.shape)
        return None

    def storages_pinned(self, coords, pin: int, memo: dict):
        if self.layout is not None:
            return self.layout.storages_int(coords, self.shape)
        return View.storages_pinned(self, coords, pin, memo)

    def storage_pinned(self, coord, pin: int, memo: dict):
        if self.layout is not None:
            return self.layout.storage_of(tuple(coord), self.shape)   # int coordinates: an int
        off = 0
        for c, s in zip(coord, self._strides):
            if type(s) is not int:
                if c == 0:                       # ir.mul folds 0 * stride away
                    continue
                s = evaluate_pinned(s, pin, memo)
                if s is None:
                    return None
            off += c * s
        return off

    def has_exec_axes(self) -> bool:
        return self.layout is not None and bool(self.layout.exec_axes(self.shape))

    def describe(self) -> str:
        lay = f" @ {self.layout!r}" if self.layout is not None else ""
        return f"{self.name}{list(self.shape)}:{self.dtype.name}{lay}"


class SubView(View):
    """`v[i, a:b, ...]`: fixed indices drop dimensions, ranges keep them with an origin."""

    def __init__(self, parent: View, picks):
        # picks: one per parent dim: ("fix", index) or ("range", start, extent)
        self.parent, self.picks = parent, picks
        self.storage, self.dtype = parent.storage, parent.dtype
        self.shape = tuple(p[2] for p in picks if p[0] == "range")
        self.name = getattr(parent, "name", parent.storage.name)
        self._pinned = {}                        # pin -> the picks' origins evaluated (storage_pinned)

    def locate(self, coord):
        it = iter(coord)
        pc = []
        for p in self.picks:
            pc.append(p[1] if p[0] == "fix" else ir.add(p[1], next(it)))
        return self.parent.locate(pc)

    def owners_array(self, coords):
        import numpy as np
        if coords.shape[1] != len(self.shape) or not all(type(p[1]) is int and abs(p[1]) < 1 << 24
                                                         for p in self.picks):
            return None
        pcs = np.empty((coords.shape[0], len(self.picks)), np.int64)
        j = 0
        for k, p in enumerate(self.picks):
            if p[0] == "fix":
                pcs[:, k] = p[1]
            else:
                pcs[:, k] = coords[:, j] + p[1]
                j += 1
        return self.parent.owners_array(pcs)

    def owner_static(self, coord):
        it = iter(coord)
        pc = []
        for p in self.picks:
            o = p[1]
            if type(o) is not int:
                return None
            pc.append(o if p[0] == "fix" else o + next(it))
        return self.parent.owner_static(pc)

    def static_key(self):
        if not all(type(p[1]) is int for p in self.picks):
            return None
        parent = self.parent.static_key()
        return None if parent is None else ("sub", parent, tuple(self.picks))

    def pinned_key(self):
        parent = self.parent.pinned_key()
        if parent is None:
            return None
        pinned = []
        for pin in PINS:
            origins = self._origins(pin, {})
            if None in origins:
                return None
            pinned.append(tuple(origins))
        return ("sub", parent, tuple((p[0], p[2] if p[0] == "range" else None) for p in self.picks),
                tuple(pinned))

    def _origins(self, pin: int, memo: dict) -> list:
        origins = self._pinned.get(pin)
        if origins is None:
            # the picks are immutable expressions: their pinned values are computed once per pin
            origins = [p[1] if type(p[1]) is int else evaluate_pinned(p[1], pin, memo) for p in self.picks]
            self._pinned[pin] = origins
        return origins

    def storages_array(self, coords, pin: int, memo: dict):
        import numpy as np
        origins = self._origins(pin, memo)
        if None in origins or any(abs(o) >= 1 << 24 for o in origins) or coords.shape[1] != len(self.shape):
            return None
        pcs = np.empty((coords.shape[0], len(self.picks)), np.int64)
        j = 0
        for k, (p, o) in enumerate(zip(self.picks, origins)):
            if p[0] == "fix":
                pcs[:, k] = o
            else:
                pcs[:, k] = coords[:, j] + o
                j += 1
        return self.parent.storages_array(pcs, pin, memo)

    def storages_pinned(self, coords, pin: int, memo: dict):
        origins = self._origins(pin, memo)
        if None in origins:
            return None
        fixed = [p[0] == "fix" for p in self.picks]
        pcs = []
        for coord in coords:
            it = iter(coord)
            pcs.append([o if f else o + next(it) for f, o in zip(fixed, origins)])
        return self.parent.storages_pinned(pcs, pin, memo)

    def storage_pinned(self, coord, pin: int, memo: dict):
        origins = self._origins(pin, memo)
        if None in origins:
            return None
        it = iter(coord)
        pc = [o if p[0] == "fix" else o + next(it) for p, o in zip(self.picks, origins)]
        return self.parent.storage_pinned(pc, pin, memo)

    def has_exec_axes(self) -> bool:
        return self.parent.has_exec_axes()

    def describe(self) -> str:
        parts = []
        for p in self.picks:
            if p[0] == "fix":
                parts.append(_show(p[1]))
            else:
                parts.append(f"{_show(p[1])}:+{p[2]}")
        return f"{self.parent.describe()}[{', '.join(parts)}]"


class BitView(View):
    """`v.view(dtype=...)`: the same bits as another element type; the last axis scales with the width ratio."""

    def __init__(self, parent: View, dtype: DType):
        self.parent, self.storage, self.dtype = parent, parent.storage, dtype
        pb, nb = parent.dtype.bits, dtype.bits
        last = parent.shape[-1] if parent.shape else 1
        if nb <= pb:
            self.ratio_down, self.ratio_up = pb // nb, 1
            new_last = ir.mul(last, pb // nb)
        else:
            self.ratio_down, self.ratio_up = 1, nb // pb
            new_last = ir.floordiv(last, nb // pb)
        self.shape = tuple(parent.shape[:-1]) + (new_last,)
        self.name = getattr(parent, "name", parent.storage.name)

    def locate(self, coord):
        coord = list(coord)
        last = coord[-1]
        if self.ratio_down > 1:
            off, ax = self.parent.locate(coord[:-1] + [ir.floordiv(last, self.ratio_down)])
            return ir.add(ir.mul(off, self.ratio_down), ir.mod(last, self.ratio_down)), ax
        off, ax = self.parent.locate(coord[:-1] + [ir.mul(last, self.ratio_up)])
        return ir.floordiv(off, self.ratio_up), ax

    def static_key(self):
        parent = self.parent.static_key()
        return None if parent is None else ("bits", parent, self.dtype)

    def pinned_key(self):
        parent = self.parent.pinned_key()
        return None if parent is None else ("bits", parent, self.dtype)

    def storages_array(self, coords, pin: int, memo: dict):
        if not coords.shape[1]:
            return None
        pcs = coords.copy()
        last = coords[:, -1]
        if self.ratio_down > 1:
            pcs[:, -1] = last // self.ratio_down
            off = self.parent.storages_array(pcs, pin, memo)
            return None if off is None else off * self.ratio_down + last % self.ratio_down
        pcs[:, -1] = last * self.ratio_up
        off = self.parent.storages_array(pcs, pin, memo)
        return None if off is None else off // self.ratio_up

    def storage_pinned(self, coord, pin: int, memo: dict):
        coord = list(coord)
        last = coord[-1]
        if self.ratio_down > 1:
            off = self.parent.storage_pinned(coord[:-1] + [last // self.ratio_down], pin, memo)
            return None if off is None else off * self.ratio_down + last % self.ratio_down
        off = self.parent.storage_pinned(coord[:-1] + [last * self.ratio_up], pin, memo)
        return None if off is None else off // self.ratio_up

    def has_exec_axes(self) -> bool:
        return self.parent.has_exec_axes()

    def describe(self) -> str:
        return f"{self.parent.describe()}.view({self.dtype.name})"


def _show(x) -> str:
    if isinstance(x, int):
        return str(x)
    from ..ir.printer import expr_str
    return expr_str(x)


class ViewMembers:
    """What a buffer or view answers inside a kernel: a tensor parameter, `T.alloc_local`, `T.alloc_shared`, and every
    view cut from them. The front end implements these (frontend/parser.py `expr_Attribute`, `indices`;
    frontend/builtins.py `m_view`); this class only documents them, for help() and docs/language.md (the doc test
    compiles a kernel using each, and checks that no other attribute is accepted). docs/views.md has the whole story."""

    @property
    def shape(self):
        """`v.shape`: the view's extents as a tuple, known while compiling (a named size of a tensor parameter is its
        run-time int32 value). Example: `n = A.shape[0]`"""

    @property
    def dtype(self):
        """`v.dtype`: the element type (also `x.dtype` of a scalar value), e.g. to allocate a buffer of the same
        type. Example: `acc = T.alloc_local((4,), A.dtype)`"""

    @property
    def ndim(self):
        """`v.ndim`: the number of dimensions, `len(v.shape)`. Example: `T.static_assert(A.ndim == 2)`"""

    def view(self, *shape, layout=None, dtype=None):
        """`v.view(*shape, layout=None, dtype=None)`: the same storage seen another way, nothing copied. `shape`
        (compile-time ints, or one tuple) reshapes a whole buffer, row-major unless `layout=` gives a TileLayout
        (the storage it reaches must fit; execution axes only on local buffers); `dtype=` reinterprets the bits as
        a type of another width, the last extent scaling by the ratio (`(M, K)` float16 as uint32 is `(M, K/2)`,
        even element in the low half). Shape and layout apply to a whole buffer without a layout, not to a
        sub-view; layouts are built outside the kernel. Example: `av = ar.view(MI, 1, 16, 8, layout=A_FRAG)   # A_FRAG = tiledsl.layouts.mma_a(MI, 1)`"""

    def __getitem__(self, index):
        """`v[i, j, ...]`: with one integer index per dimension, the element (a value to read; `v[i, j] = x` writes
        it); with fewer indices or slices (`v[i]`, `v[:, j]`, `v[a:b]`, `v[s : s + n]` with a run-time start and a
        compile-time length; no step) a sub-view of the same storage. Indices are int32; a compile-time index out
        of range is refused, a run-time one is checked on the interpreter and with debug=True. Elements of a view
        spread over lanes (an `@laneid` layout) are not read one at a time: index the local buffer. Example:
        `row = X[r, :]; x = row[j]; X[r, j] = x * 2`"""
