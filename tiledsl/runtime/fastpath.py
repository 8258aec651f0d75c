"""The steady-state launch: one specialization, one device, one framework, decided once.

Per call it only reads each tensor's pointer, dtype, device, contiguity and shape, the scalars, the stream,
and launches. Anything unexpected (another dtype, device, framework, a bad shape) returns False so the
general path runs and raises the precise LaunchError.
"""
from __future__ import annotations

import sys

from ..hosteval import evaluate
from .launch import CTYPES, INT_RANGE
from . import driver


class FastLaunch:
    def __init__(self, plan, params, framework, device, grid, block):
        self.plan = plan
        self.device = device
        self.block = block
        self.handle = plan.fn.handle
        self.params_addr = plan.params_addr
        self.shared = plan.shared
        self.drv = driver._drv()
        torch = sys.modules.get("torch") if framework == "torch" else None
        self.torch_type = torch.Tensor if torch is not None else None
        self.raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None) if torch is not None else None
        self.cupy = sys.modules.get("cupy") if framework == "cupy" else None
        self.framework = framework
        self.tensors, self.scalars = [], []
        slot = 0
        for i, (name, kind, ann, _) in enumerate(params):
            if kind == "tensor":
                tdt = None
                if torch is not None:
                    tdt = getattr(torch, ann.dtype.name if ann.dtype.name != "bool" else "bool", None)
                shape = tuple(ann.shape)
                if any(isinstance(x, str) for x in shape):
                    shape = [shape]                    # a list marks "has named sizes"
                self.tensors.append((i, plan.slots[slot], tdt, shape, _typestr(ann.dtype)))
                slot += 1
            elif kind == "scalar":
                self.scalars.append((i, plan.slots[slot], ann))
                slot += 1
        self.size_slots = [(p["name"], plan.slots[k]) for k, p in
                           enumerate([q for q in plan.ck.signature if q["kind"] != "constexpr"])
                           if p["kind"] == "size"]
        self.grid_static = all(isinstance(g, int) for g in plan.ck.launch_spec["grid"])
        self.grid_spec = plan.ck.launch_spec["grid"]
        self.grid = grid
        self.names = [p[0] for p in params]
        self.lock = plan.lock
        self.multi = driver.device_count() > 1

    def __call__(self, values, stream) -> bool:
        # The parameter block is shared: fill and launch under the plan's lock so threads never mix arguments.
        with self.lock:
            if self.multi:
                driver.context(self.device)
            return self._call(values, stream)

    def _call(self, values, stream) -> bool:
        sizes = {}
        if self.torch_type is not None:
            tt, dev = self.torch_type, self.device
            for i, slot, tdt, shape, _ in self.tensors:
                x = values[i]
                if type(x) is not tt or x.dtype is not tdt or x.get_device() != dev or not x.is_contiguous():
                    return False
                shp = x.shape
                if shape.__class__ is tuple:          # all extents static: one comparison
                    if shp != shape:
                        return False
                else:
                    if len(shp) != len(shape[0]):
                        return False
                    for got, want in zip(shp, shape[0]):
                        if want.__class__ is int:
                            if got != want:
                                return False
                        elif sizes.setdefault(want, got) != got:
                            return False
                slot.value = x.data_ptr()
        else:
            for i, slot, _, shape, ts in self.tensors:
                x = values[i]
                cai = getattr(x, "__cuda_array_interface__", None)
                if cai is None or cai.get("strides") is not None or getattr(getattr(x, "device", None), "id",
                                                                             None) != self.device:
                    return False
                if cai["typestr"][1:] != ts:
                    return False
                shape = shape if shape.__class__ is tuple else shape[0]
                shp = cai["shape"]
                if len(shp) != len(shape):
                    return False
                for got, want in zip(shp, shape):
                    if want.__class__ is int:
                        if got != want:
                            return False
                    elif sizes.setdefault(want, got) != got:
                        return False
                slot.value = cai["data"][0]
        env = None
        for i, slot, d in self.scalars:
            v = values[i]
            if d.is_float and d.bits >= 32 and v.__class__ in (float, int):
                slot.value = v
            elif d.is_int and v.__class__ is int:
                lo, hi = INT_RANGE.get(d.name, (-2**63, 2**64))
                if not lo <= v < hi:
                    return False
                slot.value = v
            else:
                return False
        for name, slot in self.size_slots:
            v = sizes[name]
            if v >= 2**31:
                return False
            slot.value = v
        if self.grid is not None:
            g = self.grid
        elif self.grid_static:
            g = self.grid_spec
        else:
            env = dict(sizes)
            for i, _, _ in self.scalars:
                env[self.names[i]] = values[i]
            g = [evaluate(x, env) for x in self.grid_spec]
            if min(g) <= 0:
                return False
        if stream is None:
            if self.raw_stream is not None:
                stream = self.raw_stream(self.device)
            elif self.cupy is not None:
                stream = self.cupy.cuda.get_current_stream().ptr
            else:
                stream = 0
        b = self.block
        err = self.drv.cuLaunchKernel(self.handle, g[0], g[1], g[2], b[0], b[1], b[2], self.shared, stream,
                                      self.params_addr, 0)
        if int(err[0]) != 0:
            if int(err[0]) == 201:                 # no current context on this thread: set it, launch again
                driver.context(self.device)
                err = self.drv.cuLaunchKernel(self.handle, g[0], g[1], g[2], b[0], b[1], b[2], self.shared,
                                              stream, self.params_addr, 0)
            driver.check(err, "cuLaunchKernel")
        return True


def _typestr(d) -> str:
    return {"float16": "f2", "float32": "f4", "float64": "f8", "int8": "i1", "int16": "i2", "int32": "i4",
            "int64": "i8", "uint8": "u1", "uint16": "u2", "uint32": "u4", "uint64": "u8", "bool": "b1",
            "bfloat16": "V2"}.get(d.name, "?")


__all__ = ["FastLaunch", "CTYPES"]
