"""A GPU-less stand-in for the launch paths: a stub CUDA driver (cuda-bindings' calls, and native entry points for
the native launcher) and a fake `cupy` whose arrays look like device arrays. With them the reference, generated
and native launchers run end to end on the CPU and record what they would have launched."""
from __future__ import annotations

import ctypes
import sys
import types

import numpy as np

LAUNCH_T = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, *[ctypes.c_uint] * 7, ctypes.c_void_p, ctypes.c_void_p,
                            ctypes.c_void_p)
CTX_T = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p)
CTX = 0xC0


class StubDriver:
    """cuda.bindings.driver's calls that tiledsl makes, answering like one sm_90 device; launches are recorded
    (by the Python calls and by the native entry points alike)."""

    class CUresult(int):
        pass

    CUdevice_attribute = types.SimpleNamespace(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR="major",
                                               CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR="minor")
    CUfunction_attribute = types.SimpleNamespace(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES="dyn")

    def __init__(self, devices: int = 1):
        self.devices, self.cur, self.launches = devices, None, []
        self._l = LAUNCH_T(lambda f, gx, gy, gz, bx, by, bz, sh, st, p, x: self._record(
            "native", (gx, gy, gz), (bx, by, bz), st) or 0)
        self._g = CTX_T(lambda p: 0)
        self._s = CTX_T(lambda c: 0)
        self.addrs = {n: ctypes.cast(f, ctypes.c_void_p).value for n, f in
                      (("cuLaunchKernel", self._l), ("cuCtxGetCurrent", self._g), ("cuCtxSetCurrent", self._s))}

    def _record(self, how, grid, block, stream):
        self.launches.append((how, tuple(grid), tuple(block), stream or 0))

    def cuInit(self, flags):
        return (0,)

    def cuDeviceGetCount(self):
        return (0, self.devices)

    def cuDeviceGet(self, i):
        return (0, i)

    def cuDevicePrimaryCtxRetain(self, dev):
        return (0, CTX + dev)

    def cuCtxGetCurrent(self):
        return (0, self.cur)

    def cuCtxSetCurrent(self, ctx):
        self.cur = ctx
        return (0,)

    def cuDeviceGetAttribute(self, attr, dev):
        return (0, 9 if attr == "major" else 0)

    def cuModuleLoadData(self, image):
        return (0, 1)

    def cuModuleGetFunction(self, module, name):
        return (0, 0xF00)

    def cuFuncSetAttribute(self, *a):
        return (0,)

    def cuLaunchKernel(self, f, gx, gy, gz, bx, by, bz, shared, stream, params, extra):
        self._record("python", (gx, gy, gz), (bx, by, bz), stream)
        return (0,)

    def cuGetErrorName(self, err):
        return (0, b"CUDA_ERROR_STUB")

    def cuGetErrorString(self, err):
        return (0, b"stub")


class _Dev:
    def __init__(self, i):
        self.id = i


class ndarray:
    """A fake cupy.ndarray: a device array with the attributes tiledsl's launchers read (no memory behind it)."""
    _c_contiguous = True

    def __init__(self, shape, dtype="float32", device=0, strides=None, ptr=0x7F0000000000):
        self.shape = tuple(shape)
        self.dtype = np.dtype(dtype)
        self.device = _Dev(device)
        self._c_contiguous = strides is None
        self.flags = types.SimpleNamespace(c_contiguous=strides is None)
        self.data = types.SimpleNamespace(ptr=ptr, device_id=device)
        self.__cuda_array_interface__ = {"shape": self.shape, "typestr": self.dtype.str, "data": (ptr, False),
                                         "strides": strides, "version": 3}


ndarray.__module__ = "cupy"


def fake_cupy() -> types.ModuleType:
    mod = types.ModuleType("cupy")
    mod.ndarray = ndarray
    stream = types.SimpleNamespace(ptr=0)
    mod.cuda = types.SimpleNamespace(get_current_stream=lambda: stream,
                                     stream=types.SimpleNamespace(get_current_stream_ptr=lambda: 0))
    return mod


def install(monkeypatch, devices: int = 1) -> StubDriver:
    """Route tiledsl's driver calls to a StubDriver and make `cupy` the fake one, for one test."""
    from tiledsl.runtime import driver
    drv = StubDriver(devices)
    monkeypatch.setattr(driver, "_drv", lambda: drv)
    monkeypatch.setattr(driver, "_state", {"init": None, "ctx": {}, "sm": {}, "count": None})
    monkeypatch.setitem(sys.modules, "cupy", fake_cupy())
    try:
        from tiledsl.runtime.launchers import native
    except ImportError:                      # (before the launchers moved)
        from tiledsl.runtime import native
    monkeypatch.setattr(native, "driver_addresses", lambda: drv.addrs)
    return drv
