"""The reference launch: the checker (abi/check.py), then pack the parameter block and cuLaunchKernel.

Slow and always right; every other launcher defers here (through the JITFunction) when in doubt. `Plan` is a
compiled kernel loaded on one device with its parameter block, shared by the launchers of that specialization.
"""
from __future__ import annotations

import ctypes
import threading

from ...abi.arrays import current_stream, stream_handle
from ...abi.check import check_call, launch_dims
from ...core.errors import KernelFault, LaunchError
from ...passes.bounds_checks import INDEX_TAIL
from .. import driver, tensormap
from .base import Launcher

CTYPES = {"bool": ctypes.c_uint8, "int8": ctypes.c_int8, "uint8": ctypes.c_uint8, "int16": ctypes.c_int16,
          "uint16": ctypes.c_uint16, "int32": ctypes.c_int32, "uint32": ctypes.c_uint32, "int64": ctypes.c_int64,
          "uint64": ctypes.c_uint64, "float16": ctypes.c_uint16, "bfloat16": ctypes.c_uint16,
          "float32": ctypes.c_float, "float64": ctypes.c_double}


class TensorMapSlot(ctypes.Structure):
    """A parameter slot of 128 bytes holding a CUtensorMap by value (the kernel's `.param .align 64 .b8 [128]`);
    `value = bytes` copies the encoded map in, like `.value` fills the scalar slots."""
    _fields_ = [("words", ctypes.c_uint64 * 16)]

    @property
    def value(self) -> bytes:
        return bytes(self)

    @value.setter
    def value(self, b: bytes) -> None:
        ctypes.memmove(ctypes.addressof(self), b, 128)


def module_image(ck, device: int) -> bytes:
    """What the driver loads for `ck` on `device`: the cubin where its machine code runs there (the same major
    SM, no newer minor), else the PTX, which the driver compiles for the device (an sm_80 kernel on an H200, as
    a fat binary's PTX would be). A kernel for a newer SM than the device's cannot run there at all."""
    sm = driver.compute_capability(device)
    if ck.sm > sm:
        raise LaunchError(f"kernel '{ck.name}' was compiled for sm_{ck.sm}, but device {device} is sm_{sm}: "
                          f"compile it for sm_{sm} or an older target")
    if ck.cubin is not None and ck.sm // 10 == sm // 10:
        return ck.cubin
    return ck.asm["ptx"].encode() + b"\0"


class Plan:
    """A compiled kernel bound to a device: its parameter block (one ctypes slot per signature slot), packed in
    place under `lock` on every call."""

    def __init__(self, ck, device: int):
        self.ck = ck
        self.sig = ck.signature
        self.device = device
        image = module_image(ck, device)
        self.fn = driver.LoadedFunction(device, image, ck.name, ck.metadata.get("dynamic_shared", 0))
        self.slots = []
        self.debug_buf = None
        for s in self.sig.slots:
            if s.kind == "debugbuf":
                drv = driver._drv()
                self.debug_buf = driver.check(drv.cuMemAlloc(16), "cuMemAlloc")
                driver.check(drv.cuMemsetD8(self.debug_buf, 0, 16), "cuMemsetD8")
                self.slots.append(ctypes.c_uint64(int(self.debug_buf)))
            elif s.kind == "tensormap":
                self.slots.append(TensorMapSlot())
            else:
                self.slots.append(CTYPES[s.ctype](0))
        self.ptrs = (ctypes.c_void_p * max(1, len(self.slots)))(*[ctypes.addressof(s) for s in self.slots])
        self.params_addr = ctypes.addressof(self.ptrs)
        self.shared = ck.metadata.get("dynamic_shared", 0)
        self.lock = threading.Lock()


class ReferenceLauncher(Launcher):
    """Checks every argument against the signature, then launches; raises the LaunchError of a bad call."""

    def __call__(self, values, stream=None):
        sig = self.sig
        checked = check_call(sig, values, gpu=True)
        g, b = launch_dims(sig, checked, self.grid, [p.name for p in sig.params], values)
        dev = self.plan.device
        s = stream_handle(stream) if stream is not None else current_stream(checked.framework, dev)
        launch(self.plan, encode_maps(sig, checked, dev) + checked.size_values(sig), g, b, s)


def encode_maps(sig, checked, device: int) -> list:
    """The packed slot values with each tensor map's pointer replaced by its encoded 128 bytes."""
    packed = checked.packed
    if any(p.kind == "tensormap" for _, p in sig.passed):
        packed = list(packed)
        for k, (_, p) in enumerate(sig.passed):
            if p.kind == "tensormap":
                info = checked.arrays[p.name][1]
                packed[k] = tensormap.encoded(p.tensormap, device, info.ptr, tuple(info.shape))
    return packed


def launch(plan: Plan, values: list, grid, block, stream: int) -> None:
    with plan.lock:
        for slot, v in zip(plan.slots, values):
            slot.value = v
        driver.launch(plan.fn, grid, block, plan.shared, stream, plan.params_addr, plan.sig.cluster)
        if plan.debug_buf is not None:
            check_debug(plan, stream)


def check_debug(plan: Plan, stream: int) -> None:
    """debug=True: wait for the kernel, then turn a recorded bounds violation into a KernelFault."""
    drv = driver._drv()
    driver.check(drv.cuStreamSynchronize(stream), "cuStreamSynchronize")
    rec = (ctypes.c_int32 * 4)()
    driver.check(drv.cuMemcpyDtoH(ctypes.addressof(rec), plan.debug_buf, 16), "cuMemcpyDtoH")
    if rec[0]:
        driver.check(drv.cuMemsetD8(plan.debug_buf, 0, 16), "cuMemsetD8")
        site = plan.ck.metadata["debug_sites"][rec[0] - 1]
        if site.endswith(INDEX_TAIL):                 # a per-dimension check: the index value the trap recorded
            site = f"{site} {rec[3]}"
        raise KernelFault(f"{site} (block {rec[1]}, thread {rec[2]})")
