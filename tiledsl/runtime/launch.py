"""Per-call work of a launch, kept flat: everything decidable once per specialization is decided in `Plan`."""
from __future__ import annotations

import ctypes
import threading

from ..core import dtypes as dt
from ..core.errors import LaunchError
from ..ir.eval import evaluate
from . import driver

CTYPES = {"bool": ctypes.c_uint8, "int8": ctypes.c_int8, "uint8": ctypes.c_uint8, "int16": ctypes.c_int16,
          "uint16": ctypes.c_uint16, "int32": ctypes.c_int32, "uint32": ctypes.c_uint32, "int64": ctypes.c_int64,
          "uint64": ctypes.c_uint64, "float16": ctypes.c_uint16, "bfloat16": ctypes.c_uint16,
          "float32": ctypes.c_float, "float64": ctypes.c_double}
INT_RANGE = {"int8": (-2**7, 2**7), "uint8": (0, 2**8), "int16": (-2**15, 2**15), "uint16": (0, 2**16),
             "int32": (-2**31, 2**31), "uint32": (0, 2**32), "int64": (-2**63, 2**63), "uint64": (0, 2**64)}


def check_tensor(name, info, want_dtype, want_shape, sizes: dict, gpu: bool):
    """Validate one array argument against its annotation; bind named sizes. Raises LaunchError."""
    if info is None:
        raise LaunchError(f"argument '{name}' must be an array for T.Tensor({tuple(want_shape)}, "
                          f"'{want_dtype.name}')")
    if gpu and info.device is None:
        raise LaunchError(f"argument '{name}' is in host memory ({info.framework}); launching on the GPU needs a "
                          f"CUDA array (move it with .cuda() / cupy.asarray, or use interpret=True)")
    if info.dtype != want_dtype and not (not gpu and want_dtype.name == "bfloat16" and info.dtype == dt.uint16):
        # (numpy has no bfloat16: on the host paths a uint16 array carries bfloat16 bits)
        got = info.dtype.name if info.dtype else "an unsupported dtype"
        raise LaunchError(f"argument '{name}' has dtype {got}, but the kernel declares {want_dtype.name}")
    if len(info.shape) != len(want_shape):
        raise LaunchError(f"argument '{name}' has shape {info.shape}, but the kernel declares "
                          f"{tuple(want_shape)} ({len(want_shape)} dimensions)")
    for k, (got, want) in enumerate(zip(info.shape, want_shape)):
        if isinstance(want, str):
            prev = sizes.get(want)
            if prev is None:
                if got >= 2**31:
                    raise LaunchError(f"size '{want}' = {got} of argument '{name}' does not fit in int32")
                sizes[want] = got
            elif prev != got:
                raise LaunchError(f"size '{want}' is {prev} from an earlier argument but {got} in dimension {k} "
                                  f"of argument '{name}' (shape {info.shape})")
        elif got != want:
            raise LaunchError(f"argument '{name}' has shape {info.shape}, but the kernel declares "
                              f"{tuple(want_shape)} (dimension {k}: {got} != {want})")
    if info.strides is not None:
        raise LaunchError(f"argument '{name}' is not contiguous (strides {info.strides}); pass a contiguous "
                          f"array, e.g. x.contiguous()")


def check_scalar(name, value, d: dt.DType):
    import numbers
    if isinstance(value, bool) and d.kind != "bool":
        raise LaunchError(f"argument '{name}' is a bool, but the kernel declares {d.name}")
    if d.kind == "bool":
        if not isinstance(value, (bool, numbers.Integral)):
            raise LaunchError(f"argument '{name}' must be a bool, got {type(value).__name__}")
        return int(bool(value))
    if d.is_int:
        if not isinstance(value, numbers.Integral):
            raise LaunchError(f"argument '{name}' must be an integer ({d.name}), got {type(value).__name__} "
                              f"{value!r}")
        lo, hi = INT_RANGE.get(d.name, (-2**63, 2**64))
        if not lo <= int(value) < hi:
            raise LaunchError(f"argument '{name}' = {value} does not fit in {d.name}")
        return int(value)
    if not isinstance(value, numbers.Real):
        raise LaunchError(f"argument '{name}' must be a number ({d.name}), got {type(value).__name__}")
    if d.bits == 16:
        import numpy as np
        if d.name == "float16":
            return int(np.array([value], dtype=np.float16).view(np.uint16)[0])
        f = np.array([value], dtype=np.float32).view(np.uint32)[0]
        return int((int(f) + 0x7FFF + ((int(f) >> 16) & 1)) >> 16) & 0xFFFF
    return float(value)


class Plan:
    """A compiled kernel bound to a device: its parameter block, packed in place on every call."""

    def __init__(self, ck, device: int):
        self.ck = ck
        self.device = device
        image = ck.cubin if ck.cubin is not None else ck.asm["ptx"].encode() + b"\0"
        self.fn = driver.LoadedFunction(device, image, ck.name, ck.metadata.get("dynamic_shared", 0))
        self.slots = []
        self.debug_buf = None
        for p in ck.signature:
            if p["kind"] == "debugbuf":
                drv = driver._drv()
                self.debug_buf = driver.check(drv.cuMemAlloc(16), "cuMemAlloc")
                driver.check(drv.cuMemsetD8(self.debug_buf, 0, 16), "cuMemsetD8")
                self.slots.append(ctypes.c_uint64(int(self.debug_buf)))
            elif p["kind"] == "tensor":
                self.slots.append(ctypes.c_uint64(0))
            elif p["kind"] in ("scalar", "size"):
                self.slots.append(CTYPES[p["dtype"]](0))
        self.ptrs = (ctypes.c_void_p * max(1, len(self.slots)))(*[ctypes.addressof(s) for s in self.slots])
        self.params_addr = ctypes.addressof(self.ptrs)
        self.shared = ck.metadata.get("dynamic_shared", 0)
        self.lock = threading.Lock()


def grid_of(spec_grid, env) -> tuple:
    out = []
    for g in spec_grid:
        v = evaluate(g, env) if not isinstance(g, int) else g
        if v <= 0:
            raise LaunchError(f"grid dimension evaluates to {v}; it must be positive")
        out.append(v)
    if out[0] >= 2**31 or out[1] >= 65536 or out[2] >= 65536:
        raise LaunchError(f"grid {tuple(out)} exceeds the device's limits (2^31-1, 65535, 65535)")
    return tuple(out)


def check_block(block) -> None:
    n = block[0] * block[1] * block[2]
    if n > 1024 or block[2] > 64:
        raise LaunchError(f"block {tuple(block)} has {n} threads; CUDA allows at most 1024 (and z <= 64)")


def launch(plan: Plan, values: list, grid, block, stream: int) -> None:
    with plan.lock:
        for slot, v in zip(plan.slots, values):
            slot.value = v
        driver.launch(plan.fn, grid, block, plan.shared, stream, plan.params_addr)
        if plan.debug_buf is not None:
            check_debug(plan, stream)


def check_debug(plan: Plan, stream: int) -> None:
    """debug=True: wait for the kernel, then turn a recorded bounds violation into a KernelFault."""
    from ..core.errors import KernelFault
    drv = driver._drv()
    driver.check(drv.cuStreamSynchronize(stream), "cuStreamSynchronize")
    rec = (ctypes.c_int32 * 4)()
    driver.check(drv.cuMemcpyDtoH(ctypes.addressof(rec), plan.debug_buf, 12), "cuMemcpyDtoH")
    if rec[0]:
        driver.check(drv.cuMemsetD8(plan.debug_buf, 0, 16), "cuMemsetD8")
        site = plan.ck.metadata["debug_sites"][rec[0] - 1]
        raise KernelFault(f"{site} (block {rec[1]}, thread {rec[2]})")
