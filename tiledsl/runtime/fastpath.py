"""The steady-state launch: one specialization, one device, one framework, decided once.

Per call it only reads each tensor's pointer, dtype, device, contiguity and shape, the scalars, the stream,
and launches. Anything unexpected (another dtype, device, framework, a bad shape) returns False so the
general path runs and raises the precise LaunchError.
"""
from __future__ import annotations

import sys

from ..ir.eval import evaluate
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


def make_fast(plan, params, framework, device, grid, block):
    """The steady-state launcher: generated straight-line Python for torch tensors, FastLaunch otherwise."""
    if framework in ("torch", "cupy") and framework in sys.modules:
        try:
            return _generate(plan, params, framework, device, grid, block)
        except _Unsupported:
            pass
    return FastLaunch(plan, params, framework, device, grid, block)


class _Unsupported(Exception):
    pass


def _py_expr(tree, names: dict) -> str:
    """A host grid expression tree (hosteval) as Python source over the generated function's locals."""
    if isinstance(tree, int):
        return str(tree)
    if tree[0] == "var":
        if tree[1] not in names:
            raise _Unsupported
        return names[tree[1]]
    ops = {"add": "+", "sub": "-", "mul": "*", "floordiv": "//", "mod": "%", "shl": "<<", "shr": ">>"}
    a, b = _py_expr(tree[1], names), _py_expr(tree[2], names)
    if tree[0] in ("min", "max"):
        return f"{tree[0]}({a}, {b})"
    return f"({a} {ops[tree[0]]} {b})"


def _generate(plan, params, framework, device, grid, block):
    """Specialised launcher source: every check unrolled per argument, every constant bound as a global."""
    env = {"DEV": device, "LAUNCH": driver._drv().cuLaunchKernel, "H": plan.fn.handle,
           "PA": plan.params_addr, "SH": plan.shared, "LOCK": plan.lock, "CTX": driver.context,
           "CHECK": driver.check}
    if framework == "torch":
        torch = sys.modules["torch"]
        env["TT"] = torch.Tensor
        env["TP"] = getattr(getattr(torch, "nn", None), "Parameter", torch.Tensor)   # weights are Parameters
        env["RAW"] = getattr(torch._C, "_cuda_getCurrentRawStream", None)
        if env["RAW"] is None:
            raise _Unsupported
        stream_src = "RAW(DEV)"
    else:
        import numpy as np
        cupy = sys.modules["cupy"]
        env["TT"] = cupy.ndarray
        env["CUR"] = cupy.cuda.get_current_stream
        stream_src = "CUR().ptr"
    src = ["def launch(args, stream):", f"    if len(args) != {len(params)}:", "        return False"]
    fills, names, slot = [], {}, 0
    for i, (name, kind, ann, _) in enumerate(params):
        if kind == "tensor":
            if framework == "torch":
                tdt = getattr(torch, ann.dtype.name, None)
                if tdt is None:
                    raise _Unsupported
                env[f"D{i}"] = tdt
                src += [f"    x = args[{i}]",
                        f"    if (type(x) is not TT and type(x) is not TP) or x.dtype is not D{i} or "
                        f"x.get_device() != DEV or not x.is_contiguous():", "        return False"]
                ptr = "x.data_ptr()"
            else:
                if ann.dtype.name == "bfloat16":
                    raise _Unsupported
                env[f"D{i}"] = np.dtype(ann.dtype.np)
                src += [f"    x = args[{i}]",
                        f"    if type(x) is not TT or x.dtype != D{i} or x.device.id != DEV or "
                        f"not x.flags.c_contiguous:", "        return False"]
                ptr = "x.data.ptr"
            shape = tuple(ann.shape)
            if all(isinstance(s, int) for s in shape):
                env[f"S{i}"] = torch.Size(shape) if framework == "torch" else shape
                src += [f"    if x.shape != S{i}:", "        return False"]
            else:
                src += ["    s = x.shape", f"    if len(s) != {len(shape)}:", "        return False"]
                for k, want in enumerate(shape):
                    if isinstance(want, int):
                        src += [f"    if s[{k}] != {want}:", "        return False"]
                    elif want in names:
                        src += [f"    if s[{k}] != {names[want]}:", "        return False"]
                    else:
                        names[want] = f"n_{want}"
                        src += [f"    n_{want} = s[{k}]"]
            src.append(f"    p{slot} = {ptr}")
            env[f"P{slot}"] = plan.slots[slot]
            fills.append(f"P{slot}.value = p{slot}")
            slot += 1
        elif kind == "scalar":
            src.append(f"    p{slot} = args[{i}]")
            if ann.is_float and ann.bits >= 32:
                src += [f"    if p{slot}.__class__ is not float and p{slot}.__class__ is not int:", "        return False"]
            elif ann.is_int:
                lo, hi = INT_RANGE.get(ann.name, (-2**63, 2**64))
                src += [f"    if p{slot}.__class__ is not int or not {lo} <= p{slot} < {hi}:", "        return False"]
            else:
                raise _Unsupported
            names[name] = f"p{slot}"
            env[f"P{slot}"] = plan.slots[slot]
            fills.append(f"P{slot}.value = p{slot}")
            slot += 1
    for p in plan.ck.signature:
        if p["kind"] == "size":
            local = names.get(p["name"])
            if local is None:
                raise _Unsupported
            src += [f"    if {local} >= 2147483648:", "        return False"]
            env[f"P{slot}"] = plan.slots[slot]
            fills.append(f"P{slot}.value = {local}")
            slot += 1
        elif p["kind"] == "debugbuf":
            raise _Unsupported
    g = grid if grid is not None else plan.ck.launch_spec["grid"]
    gx = [_py_expr(x, names) for x in g]
    src += [f"    g0, g1, g2 = {gx[0]}, {gx[1]}, {gx[2]}", "    if g0 <= 0 or g1 <= 0 or g2 <= 0:", "        return False"]
    src += ["    if stream is None:", f"        stream = {stream_src}", "    with LOCK:"]
    if driver.device_count() > 1:
        src.append("        CTX(DEV)")
    src += [f"        {f}" for f in fills]
    b = tuple(block)
    src += [f"        err = LAUNCH(H, g0, g1, g2, {b[0]}, {b[1]}, {b[2]}, SH, stream, PA, 0)",
            "        if err[0]:",
            "            if int(err[0]) == 201:",
            "                CTX(DEV)",
            f"                err = LAUNCH(H, g0, g1, g2, {b[0]}, {b[1]}, {b[2]}, SH, stream, PA, 0)",
            "            CHECK(err, 'cuLaunchKernel')",
            "    return True"]
    code = "\n".join(src)
    exec(compile(code, f"<tiledsl launcher {plan.ck.name}>", "exec"), env)  # noqa: S102 - our own generated code
    fn = env["launch"]
    fn.source = code
    fn.native_args = (plan, params, framework, device, grid, block)   # what runtime/native.py compiles
    return fn
