"""`T.TensorMap(shape, dtype, box=..., swizzle=..., oob_fill=..., l2_promotion=...)`: a tensor parameter that the
kernel reads and writes through the TMA unit only.

At launch the argument is an ordinary CUDA tensor; the launcher encodes a CUtensorMap for it
(cuTensorMapEncodeTiled) and passes the 128 bytes by value (`.param .align 64 .b8 name[128]`). Inside the kernel
the parameter is a `TensorMapArg`: an operand of the `cp.async.bulk.tensor` family (isa/tma/), never indexed.

The rules of cuTensorMapEncodeTiled that do not depend on the argument are checked here, where the annotation is
written: rank 1..5, one box extent per dimension, each 1..256, the box's inner row a multiple of 16 bytes and, with
a swizzle, exactly the swizzle's span (narrower rows: see TensorMap); NaN fill only for floating-point elements.
"""
from __future__ import annotations

import builtins
import keyword
import operator
from dataclasses import dataclass

from ..core import dtypes as _dt
from ..core.errors import TiledslError, shown, too_big

SWIZZLES = (None, 32, 64, 128)
OOB_FILLS = ("zero", "nan")
L2_PROMOTIONS = (None, 64, 128, 256)
MAX_RANK = 5
MAX_BOX = 256
# the element types a tensor map can describe (signed 8/16-bit integers travel as their unsigned bits: the copy
# moves bytes, and the zero fill is the same)
TMA_DTYPES = ("uint8", "int8", "uint16", "int16", "uint32", "int32", "uint64", "int64", "float16", "bfloat16",
              "float32", "float64")


@dataclass(frozen=True)
class TensorMapType:
    """The annotation of a tensor-map parameter: the tensor's shape (ints or size names) and dtype, and the box
    every copy moves (outer-to-inner, like the shape), the shared-memory swizzle in bytes (None, 32, 64, 128), the
    out-of-bounds fill ("zero" or "nan") and the L2 promotion in bytes (None, 64, 128, 256)."""
    shape: tuple
    dtype: _dt.DType
    box: tuple
    swizzle: int | None = None
    oob_fill: str = "zero"
    l2_promotion: int | None = None

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def box_bytes(self) -> int:
        n = self.dtype.nbytes
        for b in self.box:
            n *= b
        return n

    def key(self) -> tuple:
        """What the encoded map depends on besides the tensor (a part of the host cache key)."""
        return (self.dtype.name, self.box, self.swizzle, self.oob_fill, self.l2_promotion)

    def __tiledsl_fingerprint__(self, depth, fingerprint_value):
        # every field: a kernel reading this annotation from a closure or global compiles per annotation (a
        # "nan"-fill map once shared the "zero"-fill kernel's disk entry and signature)
        return f"TensorMap:{self.shape!r}:{self.key()!r}"

    def __repr__(self) -> str:
        extra = "".join(f", {k}={v!r}" for k, v in (("swizzle", self.swizzle), ("oob_fill", self.oob_fill),
                                                     ("l2_promotion", self.l2_promotion))
                        if v != {"oob_fill": "zero"}.get(k))
        return f"T.TensorMap({self.shape}, {self.dtype.name!r}, box={self.box}{extra})"


_MISSING = object()


def TensorMap(shape=_MISSING, dtype=_MISSING, *extra, box=_MISSING, swizzle=None, oob_fill="zero",
              l2_promotion=None, **unknown) -> TensorMapType:
    """`T.TensorMap((M, "N"), "float16", box=(64, 64), swizzle=128)`: a tensor parameter passed as a TMA tensor
    map (a CUtensorMap encoded at launch from the CUDA tensor given, passed by value). `box` is the block one
    `cp.async.bulk.tensor` copy moves, outer-to-inner; `swizzle` the shared-memory swizzle in bytes (None, 32,
    64, 128); `oob_fill` what a load reads outside the tensor ("zero", or "nan" for float types); `l2_promotion`
    the L2 fetch granularity in bytes (None, 64, 128, 256). The kernel uses it only as the tensor operand of the
    cp.async.bulk.tensor family (docs/patterns/tma.md)."""
    if extra:
        raise TiledslError(f"T.TensorMap(shape, dtype, box=...) takes 2 positional arguments, got {2 + len(extra)}")
    if unknown:
        name = sorted(unknown)[0]
        raise TiledslError(f"T.TensorMap got an unknown keyword argument '{name}'; it takes shape, dtype, box, "
                           f"swizzle, oob_fill and l2_promotion")
    if shape is _MISSING or dtype is _MISSING or box is _MISSING:
        what = "shape" if shape is _MISSING else "dtype" if dtype is _MISSING else "box="
        raise TiledslError(f"T.TensorMap(shape, dtype, box=...) is missing its {what}")
    shape = tuple(shape) if isinstance(shape, (tuple, list)) else (shape,)
    d = _dt.lookup(dtype)
    if d is None:
        raise TiledslError(_dt.unknown_message(dtype))
    if d.name not in TMA_DTYPES:
        raise TiledslError(f"T.TensorMap: a tensor map cannot describe {d.name} elements (supported: "
                           f"{', '.join(TMA_DTYPES)})")
    if not 1 <= len(shape) <= MAX_RANK:
        raise TiledslError(f"T.TensorMap: a tensor map has 1 to {MAX_RANK} dimensions, got {len(shape)}")
    dims = []
    for s in shape:
        if isinstance(s, str):
            if not s.isidentifier() or keyword.iskeyword(s):
                raise TiledslError(f"size name {shown(s)} is not a valid name (a Python identifier)")
            dims.append(s)
        elif isinstance(s, builtins.bool) or not hasattr(type(s), "__index__") or operator.index(s) <= 0 \
                or too_big(operator.index(s)) or operator.index(s) > 2**32:
            raise TiledslError(f"T.TensorMap shape entries are positive ints up to 2^32 or size names, got "
                               f"{shown(s)}")
        else:
            dims.append(operator.index(s))
    box = tuple(box) if isinstance(box, (tuple, list)) else (box,)
    if len(box) != len(dims):
        raise TiledslError(f"T.TensorMap: box={box} has {len(box)} extents for a {len(dims)}-d tensor (one per "
                           f"dimension, outer-to-inner)")
    for b in box:
        if isinstance(b, builtins.bool) or not isinstance(b, int) or not 1 <= b <= MAX_BOX:
            raise TiledslError(f"T.TensorMap: box extents are ints 1..{MAX_BOX}, got {shown(b)}")
    inner = box[-1] * d.nbytes
    if inner % 16:
        raise TiledslError(f"T.TensorMap: the box's inner row is {box[-1]} x {d.nbytes} = {inner} bytes; it must be "
                           f"a multiple of 16 bytes")
    if swizzle not in SWIZZLES or isinstance(swizzle, builtins.bool):
        raise TiledslError(f"T.TensorMap: swizzle must be None, 32, 64 or 128 (bytes), got {shown(swizzle)}")
    if swizzle is not None and inner > swizzle:
        raise TiledslError(f"T.TensorMap: with swizzle={swizzle} the box's inner row may span at most {swizzle} "
                           f"bytes, but it spans {inner} ({box[-1]} x {d.name})")
    if swizzle is not None and inner < swizzle:
        # cuTensorMapEncodeTiled takes such a box, but the GPU does not lay its rows out as the PTX ISA's
        # address-based swizzle (which the interpreter and T.tma_layout follow) says: session 34 on an H100, every
        # one of the 18 narrower combinations of tests/test_gpu_tma_swizzle_agreement.py disagreed, every row
        # spanning the swizzle agreed. Refused until a layout is proven for them.
        raise TiledslError(f"T.TensorMap: with swizzle={swizzle} the box's inner row must span exactly {swizzle} "
                           f"bytes, but it spans {inner} ({box[-1]} x {d.name}): the GPU's layout of narrower rows "
                           f"differs from the one the interpreter and T.tma_layout model; use box[-1] = "
                           f"{swizzle // d.nbytes}, or swizzle={inner if inner in (32, 64) else None}")
    if oob_fill not in OOB_FILLS:
        raise TiledslError(f"T.TensorMap: oob_fill must be 'zero' or 'nan', got {shown(oob_fill)}")
    if oob_fill == "nan" and not d.is_float:
        raise TiledslError(f"T.TensorMap: oob_fill='nan' needs floating-point elements, not {d.name}")
    if l2_promotion not in L2_PROMOTIONS or isinstance(l2_promotion, builtins.bool):
        raise TiledslError(f"T.TensorMap: l2_promotion must be None, 64, 128 or 256 (bytes), got "
                           f"{shown(l2_promotion)}")
    for k in range(len(dims) - 1):
        row = d.nbytes
        if all(isinstance(x, int) for x in dims[k + 1:]):
            for x in dims[k + 1:]:
                row *= x
            if row % 16:
                raise TiledslError(f"T.TensorMap: dimension {k}'s stride is {row} bytes; a tensor map's strides "
                                   f"must be multiples of 16 bytes")
    return TensorMapType(tuple(dims), d, box, swizzle, oob_fill, l2_promotion)


def swizzle_of(swizzle: int | None, dtype: _dt.DType) -> tuple | None:
    """The TileLayout swizzle `(bits, base, shift)` (in elements) that reproduces the TMA unit's `swizzle`-byte
    pattern: 16-byte chunk c of 128-byte row r lands at chunk c ^ (r mod 2^bits), bits = 1, 2, 3 for 32, 64, 128."""
    if swizzle is None:
        return None
    bits = {32: 1, 64: 2, 128: 3}[swizzle]
    base = (16 // dtype.nbytes).bit_length() - 1
    return (bits, base, 3)


def tma_layout(box, dtype, swizzle=None):
    """`T.tma_layout(box, dtype, swizzle=None)`: the shared-memory TileLayout a TMA box lands in (row-major over
    the box, XOR-swizzled as the TMA unit swizzles); allocate the destination with it
    (`T.alloc_shared(box, dtype, layout=L)`, built outside the kernel) so indexing reads the swizzled bytes."""
    from ..layout import S, TileLayout
    d = _dt.lookup(dtype)
    if d is None:
        raise TiledslError(_dt.unknown_message(dtype))
    if not isinstance(box, (tuple, list)) or not box or not all(
            isinstance(b, int) and not isinstance(b, bool) and 1 <= b <= 256 for b in box):
        raise TiledslError(f"T.tma_layout: box is a tuple of 1 to 5 ints in 1..256 (the TMA box), got {shown(box)}")
    if swizzle not in (None, 32, 64, 128) or isinstance(swizzle, bool):
        raise TiledslError(f"T.tma_layout: swizzle is None, 32, 64 or 128 (bytes), got {shown(swizzle)}")
    box = tuple(box)
    strides, acc = [], 1
    for b in reversed(box):
        strides.append(acc)
        acc *= b
    return TileLayout(S[box: tuple(reversed(strides))], swizzle=swizzle_of(swizzle, d))


class TensorMapArg:
    """A tensor-map parameter inside a kernel: its global storage (the tensor's memory, for the interpreter), its
    annotation, and its dimensions (ints, or the Vars of named sizes)."""

    def __init__(self, name: str, storage, ann: TensorMapType, dims: tuple):
        self.name, self.storage, self.ann, self.dims = name, storage, ann, tuple(dims)
        self.dtype = ann.dtype

    def describe(self) -> str:
        return f"tensor map {self.name} {self.ann!r}"

    def __repr__(self) -> str:
        return self.describe()
