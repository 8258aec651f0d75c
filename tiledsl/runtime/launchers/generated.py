"""The steady-state launcher in Python: straight-line code generated for one specialization, one device and one
framework (torch or cupy), with every check unrolled per argument and every constant bound as a global.

Per call it reads each tensor's type, dtype, device, contiguity, shape and pointer, the scalars and the stream,
and launches. Anything unexpected (another dtype, device, framework, a bad shape or scalar) makes `try_launch`
return False, so the reference path runs and raises the precise LaunchError. It decides nothing the checker does
not: it is the checker's decisions for the one case that was seen, compiled to Python.
"""
from __future__ import annotations

import sys

from ...abi.check import FLOAT_MAX, FLOAT_OVERFLOW, INT_RANGE
from ...core.target import Target
from .. import driver, tensormap
from .base import Launcher


class Unsupported(Exception):
    """This specialization gets no generated launcher (every call takes the reference path)."""


class GeneratedLauncher(Launcher):
    def __init__(self, sig, plan, grid, block, framework, device, reference=None):
        super().__init__(sig, plan, grid, block, framework, device, reference)
        self.try_launch, self.source = _generate(sig, plan, framework, device, grid, self.block)


def _py_expr(tree, names: dict) -> str:
    """A host grid expression tree (ir/eval.py) as Python source over the generated function's locals."""
    if isinstance(tree, int):
        return str(tree)
    if tree[0] == "var":
        if tree[1] not in names:
            raise Unsupported(f"grid uses {tree[1]}")
        return names[tree[1]]
    ops = {"add": "+", "sub": "-", "mul": "*", "floordiv": "//", "mod": "%", "shl": "<<", "shr": ">>"}
    a, b = _py_expr(tree[1], names), _py_expr(tree[2], names)
    if tree[0] in ("min", "max"):
        return f"{tree[0]}({a}, {b})"
    return f"({a} {ops[tree[0]]} {b})"


def _generate(sig, plan, framework, device, grid, block):
    env = {"DEV": device, "LAUNCH": driver._drv().cuLaunchKernel, "H": plan.fn.handle,
           "PA": plan.params_addr, "SH": plan.shared, "LOCK": plan.lock, "CTX": driver.context,
           "CHECK": driver.check}
    if framework == "torch" and "torch" in sys.modules:
        torch = sys.modules["torch"]
        env["TT"] = torch.Tensor
        env["TP"] = getattr(getattr(torch, "nn", None), "Parameter", torch.Tensor)   # weights are Parameters
        env["RAW"] = getattr(torch._C, "_cuda_getCurrentRawStream", None)
        if env["RAW"] is None:
            raise Unsupported("this torch has no raw current-stream accessor")
        stream_src = "RAW(DEV)"
    elif framework == "cupy" and "cupy" in sys.modules:
        import numpy as np
        cupy = sys.modules["cupy"]
        env["TT"] = cupy.ndarray
        env["CUR"] = cupy.cuda.get_current_stream
        stream_src = "CUR().ptr"
    else:
        raise Unsupported(f"framework {framework}")
    if sig.debug_buffer:
        raise Unsupported("debug=True checks the kernel's record after every launch")
    src = ["def launch(args, stream):", f"    if len(args) != {len(sig.params)}:", "        return False"]
    fills, names = [], {}
    for slot, (i, p) in enumerate(sig.passed):
        if p.kind in ("tensor", "tensormap"):
            if framework == "torch":
                tdt = getattr(torch, p.dtype.name, None)
                if tdt is None:
                    raise Unsupported(f"dtype {p.dtype.name}")
                env[f"D{i}"] = tdt
                src += [f"    x = args[{i}]",
                        f"    if (type(x) is not TT and type(x) is not TP) or x.dtype is not D{i} or "
                        f"x.get_device() != DEV or not x.is_contiguous():", "        return False"]
                ptr = "x.data_ptr()"
            else:
                if p.dtype.name == "bfloat16":
                    raise Unsupported("bfloat16 cupy arrays")
                env[f"D{i}"] = np.dtype(p.dtype.np)
                src += [f"    x = args[{i}]",
                        f"    if type(x) is not TT or x.dtype != D{i} or x.device.id != DEV or "
                        f"not x.flags.c_contiguous:", "        return False"]
                ptr = "x.data.ptr"
            shape = p.shape
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
            if p.kind == "tensormap":
                # the map encoded by the reference path for this tensor (None: not yet, or another tensor)
                env[f"M{i}"] = tensormap.cached(p.tensormap, device)
                src += [f"    p{slot} = M{i}({ptr}, x.shape)", f"    if p{slot} is None:", "        return False"]
            else:
                src.append(f"    p{slot} = {ptr}")
        else:
            src.append(f"    p{slot} = args[{i}]")
            if p.dtype.is_float and p.dtype.bits >= 32:
                # a value the slot cannot hold (1e300 for float32, an int beyond float64) goes to the checker;
                # so do inf and NaN, which it accepts
                most = FLOAT_OVERFLOW.get(p.dtype.name)
                rng = f"-{most!r} < p{slot} < {most!r}" if most else f"-{FLOAT_MAX[p.dtype.name]!r} <= p{slot} <= " \
                                                                    f"{FLOAT_MAX[p.dtype.name]!r}"
                src += [f"    if (p{slot}.__class__ is not float and p{slot}.__class__ is not int) or not {rng}:",
                        "        return False"]
            elif p.dtype.is_int:
                lo, hi = INT_RANGE[p.dtype.name]
                src += [f"    if p{slot}.__class__ is not int or not {lo} <= p{slot} < {hi}:", "        return False"]
            else:
                raise Unsupported(f"scalar {p.dtype.name}")
            names[p.name] = f"p{slot}"
        env[f"P{slot}"] = plan.slots[slot]
        fills.append(f"P{slot}.value = p{slot}")
    for k, size in enumerate(sig.sizes):
        slot = len(sig.passed) + k
        src += [f"    if {names[size]} > {Target.max_named_size}:", "        return False"]
        env[f"P{slot}"] = plan.slots[slot]
        fills.append(f"P{slot}.value = {names[size]}")
    g = grid if grid is not None else sig.grid
    gx = [_py_expr(x, names) for x in g]
    # an undefined grid (x // 0, a negative shift) goes to the reference path, which names it
    src += ["    try:", f"        g0, g1, g2 = {gx[0]}, {gx[1]}, {gx[2]}", "    except (ZeroDivisionError, ValueError):",
            "        return False", "    if g0 <= 0 or g1 <= 0 or g2 <= 0:", "        return False"]
    if not all(isinstance(x, int) for x in g):
        mx = Target.max_grid
        src += [f"    if g0 > {mx[0]} or g1 > {mx[1]} or g2 > {mx[2]}:", "        return False"]
    if sig.clustered:       # a grid that is not a whole number of clusters goes to the reference path, which names it
        c = tuple(sig.cluster)
        src += [f"    if g0 % {c[0]} or g1 % {c[1]} or g2 % {c[2]}:", "        return False"]
    src += ["    if stream is None:", f"        stream = {stream_src}", "    with LOCK:"]
    if driver.device_count() > 1:
        src.append("        CTX(DEV)")
    src += [f"        {f}" for f in fills]
    b = tuple(block)
    call, what = f"LAUNCH(H, g0, g1, g2, {b[0]}, {b[1]}, {b[2]}, SH, stream, PA, 0)", "cuLaunchKernel"
    if sig.clustered:
        c = tuple(sig.cluster)
        env["LAUNCH_EX"], env["CL"] = driver.launch_clustered, c
        call, what = f"LAUNCH_EX(H, (g0, g1, g2), {b}, CL, SH, stream, PA)", "cuLaunchKernelEx"
    src += [f"        err = {call}",
            "        if err[0]:",
            "            if int(err[0]) == 201:",
            "                CTX(DEV)",
            f"                err = {call}",
            f"            CHECK(err, '{what}')",
            "    return True"]
    code = "\n".join(src)
    exec(compile(code, f"<tiledsl launcher {sig.name}>", "exec"), env)  # noqa: S102 - our own generated code
    return env["launch"], code
