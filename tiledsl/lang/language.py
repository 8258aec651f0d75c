"""`T`: the names a kernel is written with.

Inside a `@tiledsl.jit` function the front end reads these objects and turns each use into tile IR; it never
runs them. Annotation helpers (`T.Tensor`, `T.constexpr`, the dtypes) also work as ordinary Python values so that
annotations evaluate at definition time.
"""
from __future__ import annotations

import builtins
from dataclasses import dataclass

from ..core import dtypes as _dt
from ..core.errors import TiledslError


class Builtin:
    """A kernel-language function; `name` selects its front-end handler."""

    def __init__(self, name: str):
        self.name = name

    def __call__(self, *args, **kwargs):
        raise TiledslError(f"T.{self.name} can only be used inside a @tiledsl.jit kernel")

    def __repr__(self) -> str:
        return f"<tiledsl builtin {self.name}>"


@dataclass(frozen=True)
class TensorType:
    shape: tuple
    dtype: _dt.DType

    def __repr__(self) -> str:
        return f"T.Tensor({self.shape}, {self.dtype.name!r})"


def Tensor(shape, dtype) -> TensorType:
    shape = tuple(shape) if isinstance(shape, (tuple, list)) else (shape,)
    d = _dt.lookup(dtype)
    if d is None:
        raise TiledslError(f"unknown dtype {dtype!r}")
    for s in shape:
        if not (isinstance(s, str) or (isinstance(s, int) and not isinstance(s, builtins.bool) and s > 0)):
            raise TiledslError(f"tensor shape entries are positive ints or size names, got {s!r}")
    return TensorType(shape, d)


class _Constexpr:
    def __repr__(self) -> str:
        return "T.constexpr"


constexpr = _Constexpr()


@dataclass(frozen=True)
class Opcode:
    text: str

    def __repr__(self) -> str:
        return f"T.ptx[{self.text!r}]"


class _Ptx:
    def __getitem__(self, text) -> Opcode:
        if not isinstance(text, str):
            raise TiledslError("T.ptx[...] takes the opcode as a string")
        return Opcode(text)


ptx = _Ptx()

int8, uint8, int16, uint16 = _dt.int8, _dt.uint8, _dt.int16, _dt.uint16
int32, uint32, int64, uint64 = _dt.int32, _dt.uint32, _dt.int64, _dt.uint64
float16, bfloat16, float32, float64 = _dt.float16, _dt.bfloat16, _dt.float32, _dt.float64
bool = _dt.bool_  # noqa: A001 - the kernel language spells it T.bool

device_entry = Builtin("device_entry")
alloc_local = Builtin("alloc_local")
alloc_shared = Builtin("alloc_shared")
grid = Builtin("grid")
unroll = Builtin("unroll")
static_range = unroll
min = Builtin("min")  # noqa: A001
max = Builtin("max")  # noqa: A001
cast = Builtin("cast")
static_assert = Builtin("static_assert")


class _Tile:
    apply = Builtin("tile.apply")


class _Cuda:
    LaunchConfig = Builtin("LaunchConfig")
    lane_id = Builtin("lane_id")
    warp_id = Builtin("warp_id")
    thread_id = Builtin("thread_id")
    block_id = Builtin("block_id")
    block_dim = Builtin("block_dim")
    grid_dim = Builtin("grid_dim")
    syncthreads = Builtin("syncthreads")
    tile = _Tile()


cuda = _Cuda()


class _Namespace:
    """`from tiledsl import T` gives this module's names under one object."""

    def __getattr__(self, name):
        g = globals()
        if name.startswith("_") or name not in g:
            raise AttributeError(f"T has no attribute {name!r}")
        return g[name]

    def __repr__(self) -> str:
        return "tiledsl.T"


T = _Namespace()
