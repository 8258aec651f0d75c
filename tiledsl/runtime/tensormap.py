"""Encoding the CUtensorMap of a T.TensorMap argument at launch (cuTensorMapEncodeTiled), cached.

`encode_args` is the pure part: the driver call's arguments for one checked array, in the driver's order
(dimensions innermost first, strides in bytes of dimensions 1.., element strides all 1, no interleave). `encoded`
returns the map's 128 bytes, encoding once per (device, data pointer, shape, strides, dtype, box, swizzle, fill,
L2 promotion): a launch with the same tensor reuses them, so the steady launch costs one dict lookup per map.
"""
from __future__ import annotations

import ctypes
import threading

from ..core.errors import LaunchError
from . import driver

DTYPES = {"uint8": "UINT8", "int8": "UINT8", "uint16": "UINT16", "int16": "UINT16", "uint32": "UINT32",
          "int32": "INT32", "uint64": "UINT64", "int64": "INT64", "float16": "FLOAT16", "bfloat16": "BFLOAT16",
          "float32": "FLOAT32", "float64": "FLOAT64"}
SWIZZLE = {None: "NONE", 32: "32B", 64: "64B", 128: "128B"}
L2 = {None: "NONE", 64: "L2_64B", 128: "L2_128B", 256: "L2_256B"}
FILL = {"zero": "NONE", "nan": "NAN_REQUEST_ZERO_FMA"}
MAP_BYTES = 128
# a process-wide cache; bounded, since every distinct tensor (data pointer) gets an entry
_cache: dict = {}
_lock = threading.Lock()
MAX_CACHED = 4096


def encode_args(tmap, ptr: int, shape: tuple) -> dict:
    """The arguments of cuTensorMapEncodeTiled for a contiguous tensor at `ptr` of `shape` (outer-to-inner) and the
    map annotation `tmap` (a TensorMapType), as plain Python values named like the driver's parameters."""
    esize = tmap.dtype.nbytes
    strides, acc = [], esize
    for s in reversed(shape[1:]):
        acc *= s
        strides.append(acc)
    return {"tensorDataType": DTYPES[tmap.dtype.name], "tensorRank": len(shape), "globalAddress": ptr,
            "globalDim": [int(s) for s in reversed(shape)], "globalStrides": strides,
            "boxDim": list(reversed(tmap.box)), "elementStrides": [1] * len(shape), "interleave": "NONE",
            "swizzle": SWIZZLE[tmap.swizzle], "l2Promotion": L2[tmap.l2_promotion], "oobFill": FILL[tmap.oob_fill]}


def encode(tmap, ptr: int, shape: tuple) -> bytes:
    """The 128 bytes of the CUtensorMap (one driver call)."""
    drv = driver._drv()
    a = encode_args(tmap, ptr, shape)
    # cuda-bindings takes the arrays as lists of its own word types, never plain ints
    u64, u32 = drv.cuuint64_t, drv.cuuint32_t
    err, tm = drv.cuTensorMapEncodeTiled(
        getattr(drv.CUtensorMapDataType, f"CU_TENSOR_MAP_DATA_TYPE_{a['tensorDataType']}"), a["tensorRank"],
        a["globalAddress"], [u64(x) for x in a["globalDim"]], [u64(x) for x in _strides_arg(a, tmap)],
        [u32(x) for x in a["boxDim"]], [u32(x) for x in a["elementStrides"]],
        drv.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE,
        getattr(drv.CUtensorMapSwizzle, f"CU_TENSOR_MAP_SWIZZLE_{a['swizzle']}"),
        getattr(drv.CUtensorMapL2promotion, f"CU_TENSOR_MAP_L2_PROMOTION_{a['l2Promotion']}"),
        getattr(drv.CUtensorMapFloatOOBfill, f"CU_TENSOR_MAP_FLOAT_OOB_FILL_{a['oobFill']}"))
    if int(err) != 0:
        try:
            driver.check((err,), "cuTensorMapEncodeTiled")
        except Exception as e:       # the driver's own words, as a LaunchError (the checker's rules passed)
            raise LaunchError(f"the tensor map could not be encoded: {e}") from None
    return ctypes.string_at(tm.getPtr(), MAP_BYTES)


def _strides_arg(a: dict, tmap) -> list:
    """The strides array as the driver is given it: a rank-1 map has none, but an empty list reaches the driver
    as a null pointer, which it refuses (CUDA_ERROR_INVALID_VALUE on the H200); one ignored word, a multiple of
    16 like a real stride, stands in."""
    if a["globalStrides"]:
        return a["globalStrides"]
    return [max(16, -(-a["globalDim"][0] * tmap.dtype.nbytes // 16) * 16)]


def encoded(tmap, device: int, ptr: int, shape: tuple) -> bytes:
    """The map's bytes for a checked contiguous array, from the cache or freshly encoded."""
    key = (device, ptr, tuple(shape), tmap.key())
    b = _cache.get(key)
    if b is None:
        b = encode(tmap, ptr, tuple(shape))
        with _lock:
            if len(_cache) >= MAX_CACHED:
                _cache.clear()
            _cache[key] = b
    return b


def cached(tmap, device: int):
    """A lookup for one parameter of one launcher: (ptr, shape) -> the map's bytes, or None when not encoded yet
    (the steady launcher then defers to the reference path, which checks and encodes)."""
    tail = tmap.key()
    get = _cache.get
    return lambda ptr, shape: get((device, ptr, shape, tail))


def clear() -> None:
    """Forget every encoded map (tests; a freed and reused address gets the same bytes anyway)."""
    _cache.clear()
