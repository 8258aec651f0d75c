"""Reading array arguments (torch, cupy, anything with __cuda_array_interface__ or __dlpack__) without importing
torch or cupy ourselves, and finding the framework's current stream."""
from __future__ import annotations

import re
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
    problem: str | None = None   # why the memory is not what its shape and dtype say (refused by the checker)
    readonly: bool = False       # the producer marks the memory read-only (a kernel must not write it)
    dtype_text: str | None = None   # the framework's own name of a dtype tiledsl has no name for


def is_torch(x) -> bool:
    return type(x).__module__.startswith("torch") and hasattr(x, "data_ptr")


def array_info(x) -> ArrayInfo | None:
    """Describe an array argument, or None if `x` is not an array."""
    if is_torch(x):
        dev = x.device
        cuda = dev.type == "cuda"
        d = TORCH_DTYPES.get(str(x.dtype))
        problem = _torch_problem(x)
        if problem is not None:            # (a sparse tensor has no data pointer to read)
            return ArrayInfo(0, tuple(x.shape), None, d, dev.index if cuda else None, "torch", x, problem=problem)
        return ArrayInfo(x.data_ptr(), tuple(x.shape), None if x.is_contiguous() else tuple(x.stride()),
                         d, dev.index if cuda else None, "torch", x, dtype_text=None if d else str(x.dtype))
    cai = getattr(x, "__cuda_array_interface__", None)
    if cai is not None:
        dev = getattr(getattr(x, "device", None), "id", None)
        if dev is None:
            dev = _pointer_device(cai["data"][0])
        fw = "cupy" if type(x).__module__.startswith("cupy") else "cai"
        return _interface_info(x, cai, dev, fw)
    ai = getattr(x, "__array_interface__", None)
    if ai is not None:
        return _interface_info(x, ai, None, "numpy")
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


def _torch_problem(x) -> str | None:
    """Why a torch tensor's memory is not its values (refused by the checker), or None: a sparse or other non-strided
    layout, or a lazy negation / conjugation view (torch applies the sign when reading it; a kernel would not)."""
    layout = str(x.layout)
    if layout != "torch.strided":
        return f"has layout {layout}; kernels take dense (strided) tensors: pass x.to_dense()"
    if x.is_neg() or x.is_conj():
        return "is a lazy negated or conjugated view; pass x.resolve_neg() / x.resolve_conj() (its actual values)"
    return None


_TYPESTR = re.compile(r"([<>|=])([a-zA-Z])(\d+)")
_NATIVE_ORDER = "<" if sys.byteorder == "little" else ">"


def _interface_info(x, iface: dict, device, framework: str) -> ArrayInfo:
    """ArrayInfo of an (__cuda_)array_interface__ dict: its typestr and byte strides are checked here, since a
    numpy view can look like a plain float32 array while it is not one (another byte order, a field of a
    structured array)."""
    shape = tuple(iface["shape"])
    typestr = str(iface.get("typestr", ""))
    own = getattr(x, "dtype", None)
    text = str(own) if own is not None else typestr
    m = _TYPESTR.fullmatch(typestr)
    d, problem = None, None
    if m is not None and m.group(2) in "fiub":
        d = dt.from_array_typestr(typestr)
    if d is None and getattr(own, "name", None) == "bfloat16":       # ml_dtypes.bfloat16 (typestr '<V2')
        d = dt.bfloat16
    descr = iface.get("descr")
    if isinstance(descr, list) and len(descr) > 1 or getattr(own, "names", None):
        d, problem = None, f"has a structured dtype {text}; pass one field as a contiguous array, e.g. " \
                           f"np.ascontiguousarray(x['name'])"
    elif d is not None and m is not None and m.group(1) not in ("|", "=", _NATIVE_ORDER) and d.nbytes > 1:
        problem = f"has non-native byte order (dtype {text}); convert it first, e.g. " \
                  f"x.astype(x.dtype.newbyteorder('='))"
    strides = iface.get("strides")
    if strides is not None and d is not None:
        strides = tuple(strides)
        if problem is None and any(s % d.nbytes for s in strides):
            problem = f"has byte strides {strides} that are not multiples of its {d.nbytes}-byte element (a " \
                      f"field of a structured array?); pass a contiguous copy, e.g. np.ascontiguousarray(x)"
        strides = tuple(s // d.nbytes for s in strides)
        if strides == _contig(shape):
            strides = None
    data = iface["data"]
    readonly = bool(data[1]) if isinstance(data, (tuple, list)) and len(data) > 1 else False
    ptr = data[0] if isinstance(data, (tuple, list)) else 0
    return ArrayInfo(ptr, shape, strides, d, device, framework, x, problem, readonly,
                     None if d is not None else text)


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
        if not 0 <= s < 1 << 64:
            raise LaunchError(f"stream= must be a CUDA stream handle (an int in [0, 2**64)), got {s}")
        return s
    for attr in ("cuda_stream", "ptr", "handle"):
        v = getattr(s, attr, None)
        if isinstance(v, int):
            return v
    if hasattr(s, "__cuda_stream__"):
        return int(s.__cuda_stream__()[1])
    raise LaunchError(f"stream= must be an int handle or a torch/cupy stream, got {type(s).__name__}")
