"""The CUDA driver, through cuda-bindings: primary contexts, modules per device, launches.

Everything here is lazy: `import tiledsl` never touches the driver, and a machine without a GPU only learns it
has none when a launch is attempted (`gpu_available()` says so without raising).
"""
from __future__ import annotations

import threading

from ..core.errors import LaunchError, TiledslError
from ..core.target import Target

# what a machine without a GPU can do instead, appended to every "no usable GPU" error
NO_GPU_HINT = ("\n(without a GPU, run kernels on the CPU interpreter with numpy arrays: @tiledsl.jit(interpret=True), "
               "or TILEDSL_INTERPRET=1 in the environment; kernel.compile(..., target=\"sm_90\") still compiles)")
_lock = threading.RLock()
_state = {"init": None, "ctx": {}, "sm": {}, "count": None}


def _drv():
    from cuda.bindings import driver
    return driver


def check(result, what="CUDA call"):
    """Unpack a cuda-bindings (err, *values) tuple, raising a TiledslError that names the failing call."""
    err = result[0]
    if int(err) != 0:
        drv = _drv()
        try:
            _, name = drv.cuGetErrorName(err)
            _, text = drv.cuGetErrorString(err)
            msg = f"{name.decode()}: {text.decode()}"
        except Exception:
            msg = str(err)
        raise TiledslError(f"{what} failed: {msg}")
    if len(result) == 1:
        return None
    return result[1] if len(result) == 2 else result[1:]


def init() -> None:
    with _lock:
        if _state["init"] is True:
            return
        if isinstance(_state["init"], Exception):
            raise _state["init"]
        try:
            drv = _drv()
            check(drv.cuInit(0), "cuInit")
            _state["count"] = check(drv.cuDeviceGetCount(), "cuDeviceGetCount")
            if _state["count"] == 0:
                raise TiledslError("no CUDA device found")
            _state["init"] = True
        except TiledslError as e:
            _state["init"] = LaunchError(f"no usable GPU: {e}{NO_GPU_HINT}")
            raise _state["init"] from None
        except Exception as e:  # driver library missing, bindings missing, ...
            _state["init"] = LaunchError(f"no usable GPU: {type(e).__name__}: {e}{NO_GPU_HINT}")
            raise _state["init"] from None


def gpu_available() -> bool:
    try:
        init()
        return True
    except TiledslError:
        return False


def device_count() -> int:
    init()
    return _state["count"]


def context(device: int):
    """The device's primary context (the one torch and cupy use), made current on this thread."""
    ctx = _state["ctx"].get(device)
    if ctx is None:
        with _lock:
            init()                      # first: without the driver (or its bindings) it raises the no-GPU error
            drv = _drv()
            if not 0 <= device < _state["count"]:
                raise LaunchError(f"device {device} does not exist ({_state['count']} devices)")
            dev = check(drv.cuDeviceGet(device), "cuDeviceGet")
            ctx = check(drv.cuDevicePrimaryCtxRetain(dev), "cuDevicePrimaryCtxRetain")
            _state["ctx"][device] = ctx
    drv = _drv()
    cur = check(drv.cuCtxGetCurrent(), "cuCtxGetCurrent")
    if cur is None or int(cur) != int(ctx):
        check(drv.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
    return ctx


def compute_capability(device: int) -> int:
    sm = _state["sm"].get(device)
    if sm is None:
        init()
        drv = _drv()
        dev = check(drv.cuDeviceGet(device), "cuDeviceGet")
        A = drv.CUdevice_attribute
        major = check(drv.cuDeviceGetAttribute(A.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev), "attribute")
        minor = check(drv.cuDeviceGetAttribute(A.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev), "attribute")
        sm = major * 10 + minor
        _state["sm"][device] = sm
    return sm


def device_attribute(device: int, name: str) -> int:
    drv = _drv()
    dev = check(drv.cuDeviceGet(device), "cuDeviceGet")
    return check(drv.cuDeviceGetAttribute(getattr(drv.CUdevice_attribute, name), dev), name)


class LoadedFunction:
    """A kernel loaded on one device."""

    def __init__(self, device: int, image: bytes, name: str, shared_bytes: int = 0):
        drv = _drv()
        context(device)
        self.device = device
        self.module = check(drv.cuModuleLoadData(image), "cuModuleLoadData")
        self.handle = check(drv.cuModuleGetFunction(self.module, name.encode()), "cuModuleGetFunction")
        self.handle_int = int(self.handle)
        if shared_bytes > Target.static_shared_limit:
            A = drv.CUfunction_attribute
            check(drv.cuFuncSetAttribute(self.handle, A.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                         shared_bytes), "cuFuncSetAttribute")


def launch(fn: LoadedFunction, grid, block, shared: int, stream: int, params_addr: int, cluster=None) -> None:
    """Launch `fn`; a `cluster` other than None or (1, 1, 1) goes through cuLaunchKernelEx with the cluster
    dimension attribute (the kernel's PTX says .explicitcluster: it must be launched with its cluster)."""
    drv = _drv()
    if cluster is not None and tuple(cluster) != (1, 1, 1):
        err = launch_clustered(fn.handle, grid, block, cluster, shared, stream, params_addr)
        if int(err[0]) != 0:
            check(err, "cuLaunchKernelEx")
        return
    err = drv.cuLaunchKernel(fn.handle, grid[0], grid[1], grid[2], block[0], block[1], block[2], shared, stream,
                             params_addr, 0)
    if int(err[0]) != 0:
        check(err, "cuLaunchKernel")


def launch_clustered(handle, grid, block, cluster, shared: int, stream: int, params_addr: int):
    """cuLaunchKernelEx with CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION; returns the driver's result tuple."""
    drv = _drv()
    cfg = drv.CUlaunchConfig()
    cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ = (int(g) for g in grid)
    cfg.blockDimX, cfg.blockDimY, cfg.blockDimZ = (int(b) for b in block)
    cfg.sharedMemBytes = int(shared)
    cfg.hStream = drv.CUstream(int(stream))
    attr = drv.CUlaunchAttribute()
    attr.id = drv.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
    attr.value.clusterDim.x, attr.value.clusterDim.y, attr.value.clusterDim.z = (int(c) for c in cluster)
    cfg.attrs = [attr]
    cfg.numAttrs = 1
    return drv.cuLaunchKernelEx(cfg, handle, params_addr, 0)


def synchronize(device: int = 0) -> None:
    context(device)
    check(_drv().cuCtxSynchronize(), "cuCtxSynchronize")
