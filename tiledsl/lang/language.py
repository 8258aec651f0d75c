"""`T`: the names a kernel is written with.

Inside a `@tiledsl.jit` function the front end reads these objects and turns each use into tile IR; it never
runs them. Annotation helpers (`T.Tensor`, `T.constexpr`, the dtypes) also work as ordinary Python values so that
annotations evaluate at definition time.
"""
from __future__ import annotations

import builtins
import keyword
import operator
from dataclasses import dataclass

from ..core import dtypes as _dt
from ..core.errors import TiledslError, shown, too_big
from .builtin import Builtin


@dataclass(frozen=True)
class TensorType:
    """The annotation of a tensor parameter: its shape (ints, or names of sizes bound at call time) and dtype."""
    shape: tuple
    dtype: _dt.DType

    def __repr__(self) -> str:
        return f"T.Tensor({self.shape}, {self.dtype.name!r})"


_MISSING = object()


def Tensor(shape: tuple | list | int | str = _MISSING, dtype: str | _dt.DType = _MISSING, *extra,
           **unknown) -> TensorType:
    """`T.Tensor((M, "N"), "float16")`: a tensor parameter's annotation. Shape entries are positive ints or strings
    naming sizes that are read from the argument at call time (and passed to the kernel as int32).

    Anything else (a third argument, an unknown keyword such as `align=`, a shape that is not a tuple of those,
    an unknown dtype) raises a TiledslError where the annotation is written."""
    if extra:
        raise TiledslError(f"T.Tensor(shape, dtype) takes 2 arguments, got {2 + len(extra)}")
    if unknown:
        name = sorted(unknown)[0]
        raise TiledslError(f"T.Tensor got an unknown keyword argument '{name}'; it takes only shape and dtype")
    if shape is _MISSING or dtype is _MISSING:
        raise TiledslError(f"T.Tensor(shape, dtype) is missing its {'shape' if shape is _MISSING else 'dtype'}")
    if isinstance(shape, (tuple, list)):
        shape = tuple(shape)
    elif isinstance(shape, str) or (isinstance(shape, int) and not isinstance(shape, builtins.bool)):
        shape = (shape,)
    else:
        raise TiledslError(f"the shape of T.Tensor must be a tuple of positive ints and size names, got "
                           f"{type(shape).__name__} {shown(shape)}")
    d = _dt.lookup(dtype)
    if d is None:
        raise TiledslError(_dt.unknown_message(dtype))
    out = []
    for s in shape:
        if isinstance(s, str):
            if not s.isidentifier() or keyword.iskeyword(s):
                raise TiledslError(f"size name {shown(s)} is not a valid name (a Python identifier)")
            out.append(s)
        elif isinstance(s, builtins.bool) or not hasattr(type(s), "__index__") or operator.index(s) <= 0 \
                or too_big(operator.index(s)):
            raise TiledslError(f"tensor shape entries are positive ints or size names, got {shown(s)}")
        else:
            out.append(operator.index(s))
    return TensorType(tuple(out), d)


class _Constexpr:
    """`x: T.constexpr`: a compile-time parameter; each distinct value compiles its own specialisation."""

    def __call__(self, *args, **kwargs):
        raise TiledslError("T.constexpr is an annotation written without arguments (x: T.constexpr); the value is "
                           "given at the call")

    def __repr__(self) -> str:
        return "T.constexpr"


constexpr = _Constexpr()


@dataclass(frozen=True)
class Opcode:
    """A PTX opcode named in a kernel (`T.ptx["mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"]`)."""
    text: str

    def __repr__(self) -> str:
        return f"T.ptx[{self.text!r}]"


class _Ptx:
    """`T.ptx[opcode]`: the instruction a `T.cuda.tile.apply` expands to."""

    def __getitem__(self, text) -> Opcode:
        if not isinstance(text, str):
            raise TiledslError("T.ptx[...] takes the opcode as a string")
        return Opcode(text)


ptx = _Ptx()

int8, uint8, int16, uint16 = _dt.int8, _dt.uint8, _dt.int16, _dt.uint16
int32, uint32, int64, uint64 = _dt.int32, _dt.uint32, _dt.int64, _dt.uint64
float16, bfloat16, float32, float64 = _dt.float16, _dt.bfloat16, _dt.float32, _dt.float64
bool = _dt.bool_  # noqa: A001 - the kernel language spells it T.bool

device_entry = Builtin("device_entry", "T.device_entry(launch=T.cuda.LaunchConfig(...)): the kernel's launch "
                       "configuration, as the first statement of its body.")
alloc_local = Builtin("alloc_local", 'T.alloc_local(shape, dtype, layout="default"): a per-thread buffer (registers '
                      "once its indices are constant); a TileLayout spreads it over lanes and register slots.")
alloc_shared = Builtin("alloc_shared", 'T.alloc_shared(shape, dtype, layout="default"): a buffer in the block\'s '
                       "shared memory (bounded by the target's shared memory per block).")
grid = Builtin("grid", "T.grid(m, n, ...): nested loops over a rectangle (for i, j in T.grid(m, n)).")
unroll = Builtin("unroll", "T.unroll(n): a loop unrolled at compile time (for i in T.unroll(n): i is a "
                            "compile-time int). At most 4096 iterations per loop, and at most 1,000,000 statements "
                            "produced by compile-time loops nested in one another (trip counts multiplied by the "
                            "statements of the body, checked before expanding); use range(...) beyond that.")
static_range = unroll
min = Builtin("min", "T.min(a, b, ...): the smallest of two or more values, after the usual promotion: "  # noqa: A001
              "min.s32 / min.u32 for integers (64-bit alike), min.f32 / min.f64 for floats, where a NaN operand "
              "gives the other operand (both NaN: NaN).")
max = Builtin("max", "T.max(a, b, ...): the largest of two or more values, after the usual promotion: "  # noqa: A001
              "max.s32 / max.u32 for integers (64-bit alike), max.f32 / max.f64 for floats, where a NaN operand "
              "gives the other operand (both NaN: NaN).")
cast = Builtin("cast", "T.cast(x, dtype): convert a value; floats round to nearest even, float -> int truncates and "
                       "saturates (NaN -> 0), like PTX cvt.")
device_print = Builtin("device_print", 'T.device_print(fmt, *values): printf from the device, e.g. '
                       'T.device_print("i=%d x=%f\\n", i, x). `fmt` is a literal string; its C conversions (%d %i '
                       '%u %x %X %o %c for integers, %ld/%lld for 64-bit ones, %f %e %g for floats, %% for a '
                       'percent sign) are checked against the values at compile time. On the GPU it calls vprintf '
                       '(floats are passed as double, narrower ints as 32-bit) and the order of lines from '
                       'different threads is unspecified; the interpreter prints in flat thread order (block by '
                       'block, then linear thread id), each thread\'s text prefixed with "(block x,y,z thread '
                       'x,y,z) ".')
from .tensormap import TensorMap, tma_layout  # noqa: E402,F401 - T.TensorMap, T.tma_layout
from .scalar_math import abs, cos, exp, exp2, fma, log, log2, rsqrt, sin, sqrt, tanh  # noqa: E402,F401,A004
static_assert = Builtin("static_assert", "T.static_assert(cond, msg=''): a CompilationError at this line when the "
                                         "compile-time condition is false.")


class _Tile:
    """`T.cuda.tile`: tile patterns."""
    apply = Builtin("tile.apply", 'T.cuda.tile.apply(T.ptx[opcode], *operands, scope="thread", **params): expand a '
                                  "PTX instruction family over tile operands, proving lane ownership and legality "
                                  "at compile time.")


class _Cuda:
    """`T.cuda`: launch configuration, thread and block ids, barriers, tile patterns."""
    LaunchConfig = Builtin("LaunchConfig", "T.cuda.LaunchConfig(grid, block, max_registers=None, "
                                           "min_blocks_per_sm=None, cluster=None): the launch, checked against the "
                                           "target's limits; cluster=(x, y, z) groups blocks into clusters (sm_90).")
    lane_id = Builtin("lane_id", "T.cuda.lane_id(): the thread's lane in its warp (0..31).")
    warp_id = Builtin("warp_id", "T.cuda.warp_id(): the thread's warp in its block.")
    thread_id = Builtin("thread_id", "T.cuda.thread_id(axis=0): threadIdx along an axis.")
    block_id = Builtin("block_id", "T.cuda.block_id(axis=0): blockIdx along an axis.")
    block_dim = Builtin("block_dim", "T.cuda.block_dim(axis=0): blockDim along an axis.")
    grid_dim = Builtin("grid_dim", "T.cuda.grid_dim(axis=0): gridDim along an axis.")
    cluster_ctarank = Builtin("cluster_ctarank", "T.cuda.cluster_ctarank(): the block's rank in its cluster "
                                                 "(%cluster_ctarank, sm_90).")
    cluster_nctarank = Builtin("cluster_nctarank", "T.cuda.cluster_nctarank(): the blocks of a cluster "
                                                   "(%cluster_nctarank, sm_90).")
    cluster_id = Builtin("cluster_id", "T.cuda.cluster_id(axis=0): the cluster's index in the grid (%clusterid, sm_90).")
    cluster_ctaid = Builtin("cluster_ctaid", "T.cuda.cluster_ctaid(axis=0): the block's index in its cluster "
                                             "(%cluster_ctaid, sm_90).")
    syncthreads = Builtin("syncthreads", "T.cuda.syncthreads(): a barrier for every thread of the block.")
    tile = _Tile()


cuda = _Cuda()


def _is_public(name: str, v) -> bool:
    """Whether a global of this module is a name of the kernel language (T.name): the builtins, dtypes, annotation
    helpers and namespaces defined here; not the imports, classes or private helpers."""
    if name.startswith("_") or name == "T" or isinstance(v, type) or type(v).__name__ == "module":
        return False
    if isinstance(v, (Builtin, _dt.DType)):
        return True
    return getattr(v, "__module__", None) == __name__ or type(v).__module__ == __name__


def _public_names() -> list:
    """The public T names, sorted (what dir(T) lists and docs/language.md documents)."""
    return sorted(n for n, v in globals().items() if _is_public(n, v))


class _Namespace:
    """`from tiledsl import T` gives this module's names under one object."""

    def __getattr__(self, name):
        g = globals()
        if name.startswith("_") or name not in g:
            raise AttributeError(f"T has no attribute {name!r}")
        return g[name]

    def __dir__(self):
        return _public_names()

    def __repr__(self) -> str:
        return "tiledsl.T"


T = _Namespace()
