"""Reading array arguments (torch, cupy, anything with __cuda_array_interface__ or __dlpack__) without importing
torch or cupy ourselves, and finding the framework's current stream."""
from __future__ import annotations

import sys
from dataclasses import dataclass

from ..core import dtypes as dt
from ..core.errors import LaunchError

TORCH_DTYPES = {
    "torch.float16": dt.float16, "torch.bfloat16": dt.bfloat16, "torch.float32": dt.float32,
    "torch.float64": dt.float64, "torch.int8": dt.int8, "torch.uint8": dt.uint8, "torch.int16": dt.int16,
    "torch.int32": dt.int32, "torch.int64": dt.int64, "torch.bool": dt.bool_, "torch.uint16": dt.uint16,
    "torch.uint32": dt.uint32, "torch.uint64": dt.uint64,
}


@dataclass
class ArrayInfo:
    ptr: int
    shape: tuple
    strides: tuple | None        # in elements; None when contiguous
    dtype: dt.DType | None
    device: int | None           # CUDA ordinal, None for host memory
    framework: str               # torch | cupy | numpy | cai
    obj: object = None


def is_torch(x) -> bool:
    return type(x).__module__.startswith("torch") and hasattr(x, "data_ptr")


def array_info(x) -> ArrayInfo | None:
    """Describe an array argument, or None if `x` is not an array."""
    if is_torch(x):
        dev = x.device
        cuda = dev.type == "cuda"
        return ArrayInfo(x.data_ptr(), tuple(x.shape), None if x.is_contiguous() else tuple(x.stride()),
                         TORCH_DTYPES.get(str(x.dtype)), dev.index if cuda else None, "torch", x)
    cai = getattr(x, "__cuda_array_interface__", None)
    if cai is not None:
        shape = tuple(cai["shape"])
        d = dt.from_array_typestr(cai["typestr"])
        strides = cai.get("strides")
        if strides is not None and d is not None:
            strides = tuple(s // d.nbytes for s in strides)
            if strides == _contig(shape):
                strides = None
        dev = getattr(getattr(x, "device", None), "id", None)
        if dev is None:
            dev = _pointer_device(cai["data"][0])
        fw = "cupy" if type(x).__module__.startswith("cupy") else "cai"
        return ArrayInfo(cai["data"][0], shape, strides, d, dev, fw, x)
    ai = getattr(x, "__array_interface__", None)
    if ai is not None:
        shape = tuple(ai["shape"])
        d = dt.from_array_typestr(ai["typestr"])
        if d is None and getattr(getattr(x, "dtype", None), "name", None) == "bfloat16":   # ml_dtypes.bfloat16
            d = dt.bfloat16
        strides = ai.get("strides")
        if strides is not None and d is not None:
            strides = tuple(s // d.nbytes for s in strides)
            if strides == _contig(shape):
                strides = None
        return ArrayInfo(ai["data"][0], shape, strides, d, None, "numpy", x)
    if hasattr(x, "__dlpack__") and hasattr(x, "__dlpack_device__"):
        kind, index = x.__dlpack_device__()
        if int(kind) != 2:
            return ArrayInfo(0, tuple(getattr(x, "shape", ())), None, None, None, "dlpack", x)
        torch = sys.modules.get("torch")
        if torch is None:
            raise LaunchError("a __dlpack__-only CUDA array needs torch installed to be read; pass a torch or "
                              "cupy array, or an object with __cuda_array_interface__")
        return array_info(torch.utils.dlpack.from_dlpack(x))
    return None


def _contig(shape):
    out, acc = [], 1
    for s in reversed(shape):
        out.append(acc)
        acc *= s
    return tuple(reversed(out))


def _pointer_device(ptr: int):
    try:
        from cuda.bindings import driver as drv
        A = drv.CUpointer_attribute
        err, dev = drv.cuPointerGetAttribute(A.CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, ptr)
        return int(dev) if int(err) == 0 else None
    except Exception:
        return None


def current_stream(framework: str, device: int) -> int:
    """The stream the framework owning the arguments would use now (0, the legacy stream, otherwise)."""
    if framework == "torch":
        torch = sys.modules["torch"]
        raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
        if raw is not None:
            return raw(device)
        return torch.cuda.current_stream(device).cuda_stream
    if framework == "cupy":
        cupy = sys.modules["cupy"]
        return cupy.cuda.get_current_stream().ptr
    return 0


def stream_handle(s) -> int:
    if s is None:
        return 0
    if isinstance(s, int):
        return s
    for attr in ("cuda_stream", "ptr", "handle"):
        v = getattr(s, attr, None)
        if isinstance(v, int):
            return v
    if hasattr(s, "__cuda_stream__"):
        return int(s.__cuda_stream__()[1])
    raise LaunchError(f"stream= must be an int handle or a torch/cupy stream, got {type(s).__name__}")
