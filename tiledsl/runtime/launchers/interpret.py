"""The interpreter as a launch path: host arrays (numpy, CPU torch) checked by the same checker as the GPU's
(abi/check.py, host rules), then the CPU interpreter runs the expanded kernel on them, in place.

The expanded kernel of a specialization is made here (front end + pattern expansion for the kernel's target:
jit(target=...), else core.target.DEFAULT_SM) and kept by the caller, the JITFunction, per specialization.
"""
from __future__ import annotations

import numpy as np

from ... import interpreter
from ...abi.check import check_call, launch_dims
from ...abi.signature import KernelSignature
from ...core import dtypes as dt
from ...core.errors import LaunchError
from ...core.target import Target
from .base import Launcher


def expand(fn, constexprs: dict, block, target: Target):
    """(interpreter Program, KernelSignature) of one specialization."""
    from ...compiler import front
    from ...passes.expand import expand_kernel
    k, _parser = front(fn, constexprs, block, None, target)
    ek = expand_kernel(k, target)
    return interpreter.Program(ek), KernelSignature.from_kernel(ek)


class InterpretLauncher(Launcher):
    """`plan` is the interpreter's Program of the specialization."""

    def __call__(self, values, stream=None):
        sig = self.sig
        checked = check_call(sig, values, gpu=False)
        arrays = {name: _host_array(name, v, info, sig) for name, (v, info) in checked.arrays.items()}
        packed = dict(zip((q.name for _, q in sig.passed), checked.packed))
        scalars = {p.name: _scalar_value(packed[p.name], p.dtype) for p in sig.params if p.kind == "scalar"}
        for name in sig.sizes:
            scalars[name] = np.int32(checked.sizes[name])
        g, b = launch_dims(sig, checked, self.grid, [p.name for p in sig.params], values)
        interpreter.run(self.plan, arrays, scalars, g, b)


def _host_array(name, v, info, sig):
    """A writable numpy array sharing memory with the argument."""
    want = next(p.dtype for p in sig.params if p.name == name)
    if info.framework == "torch":
        if v.device.type != "cpu":
            raise LaunchError(f"argument '{name}' is on the {v.device.type} device; the interpreter runs on CPU "
                              f"tensors (pass x.cpu(), or launch on the GPU without interpret=True)")
        t = v.detach()
        if want.name == "bfloat16":
            import torch
            arr = t.view(torch.int16).numpy().view(np.uint16)
        else:
            arr = t.numpy()
    elif isinstance(v, np.ndarray):
        arr = v
    else:
        arr = np.asarray(v)
    if not arr.flags.c_contiguous:
        raise LaunchError(f"argument '{name}' is not contiguous; pass a contiguous array")
    return arr


def _scalar_value(packed, d: dt.DType):
    if d.kind == "bool":
        return np.bool_(bool(packed))
    if d.name == "bfloat16":
        return np.uint16(packed)
    if d.name == "float16":
        return np.uint16(packed).view(np.float16)
    return np.asarray(packed).astype(dt.numpy_types()[d.name])[()]
