"""The one reference checker of a launch: every path (the reference launcher, the interpreter, `compile()`, and
the steady launchers when they meet anything unexpected) gets its LaunchError from here.

`bind` matches a call to the parameters; `check_call` validates the bound values against a `KernelSignature`
(array-ness, dtype, device, contiguity, shape, named sizes and their int32 range, scalar type and range) and
packs them; `launch_dims` resolves and validates the grid and block against the limits of `Target`. The steady
launchers decide the same things faster and, when in doubt, defer here.
"""
from __future__ import annotations

import inspect
import math
import numbers
from dataclasses import dataclass, field

from ..core import dtypes as dt
from ..core.errors import CompilationError, LaunchError
from ..core.target import Target
from .arrays import ArrayInfo, array_info
from .signature import KernelSignature, Param

MISSING = object()        # an argument not given (bind fills defaults)
INT_RANGE = {"int8": (-2**7, 2**7), "uint8": (0, 2**8), "int16": (-2**15, 2**15), "uint16": (0, 2**16),
             "int32": (-2**31, 2**31), "uint32": (0, 2**32), "int64": (-2**63, 2**63), "uint64": (0, 2**64)}


def bind(fname: str, params, defaults, args: tuple, kwargs: dict) -> list:
    """The call's values in parameter order (`params`: names; `defaults`: inspect's default per parameter)."""
    n = len(params)
    if not kwargs and len(args) == n:
        return list(args)
    if len(args) > n:
        raise LaunchError(f"{fname}() takes {n} arguments, got {len(args)}")
    values = list(args) + [MISSING] * (n - len(args))
    for k, v in kwargs.items():
        if k not in params:
            raise LaunchError(f"{fname}() got an unexpected argument '{k}'")
        i = params.index(k)
        if values[i] is not MISSING:
            raise LaunchError(f"{fname}() got two values for argument '{k}'")
        values[i] = v
    for i, name in enumerate(params):
        if values[i] is MISSING:
            if defaults[i] is inspect.Parameter.empty:
                raise LaunchError(f"{fname}() is missing argument '{name}' (takes {n} arguments, got "
                                  f"{len(args) + len(kwargs)})")
            values[i] = defaults[i]
    return values


def dims(v) -> tuple:
    """A grid or block as written (an int or a tuple of up to 3 ints) as three positive ints."""
    vals = tuple(v) if isinstance(v, (tuple, list)) else (v,)
    if not 1 <= len(vals) <= 3 or not all(isinstance(x, numbers.Integral) and not _is_bool(x) for x in vals):
        raise LaunchError(f"grid and block take an int or a tuple of up to 3 ints, got {short_repr(v, 80)}")
    vals = tuple(int(x) for x in vals)             # (numpy ints too)
    if any(x <= 0 for x in vals):
        raise LaunchError(f"grid and block dimensions must be positive, got {v!r}")
    return vals + (1,) * (3 - len(vals))


def check_grid(grid) -> tuple:
    problem = Target.grid_problem(grid)
    if problem is not None:
        raise LaunchError(problem)
    return tuple(grid)


def grid_of(spec_grid, env) -> tuple:
    """The kernel's own grid (ints and host-expression trees) for the values in `env`."""
    out = []
    for g in spec_grid:
        if not isinstance(g, int):
            from ..ir.eval import evaluate        # (the IR modules load only where a grid is an expression)
            v = evaluate(g, env)
        else:
            v = g
        if v is None:
            raise LaunchError(f"grid dimension {len(out)} is undefined for these arguments (it divides by zero or "
                              f"shifts by a negative amount)")
        if v <= 0:
            raise LaunchError(f"grid dimension evaluates to {v}; it must be positive")
        out.append(v)
    return check_grid(out)


def check_block(block) -> None:
    problem = Target.block_problem(block)
    if problem is not None:
        raise LaunchError(problem)


def check_tensor(name, info, want_dtype, want_shape, sizes: dict, gpu: bool):
    """Validate one array argument against its annotation; bind named sizes. Raises LaunchError."""
    if info is None:
        raise LaunchError(f"argument '{name}' must be an array for T.Tensor({tuple(want_shape)}, "
                          f"'{want_dtype.name}')")
    if gpu and info.device is None:
        raise LaunchError(f"argument '{name}' is in host memory ({info.framework}); launching on the GPU needs a "
                          f"CUDA array (move it with .cuda() / cupy.asarray, or use interpret=True)")
    if info.problem is not None:
        raise LaunchError(f"argument '{name}' {info.problem}")
    if info.dtype != want_dtype and not (not gpu and want_dtype.name == "bfloat16" and info.dtype == dt.uint16):
        # (numpy has no bfloat16: on the host paths a uint16 array carries bfloat16 bits)
        got = info.dtype.name if info.dtype else f"{info.dtype_text or 'unknown'} (an unsupported dtype)"
        raise LaunchError(f"argument '{name}' has dtype {got}, but the kernel declares {want_dtype.name}")
    if len(info.shape) != len(want_shape):
        raise LaunchError(f"argument '{name}' has shape {info.shape}, but the kernel declares "
                          f"{tuple(want_shape)} ({len(want_shape)} dimensions)")
    for k, (got, want) in enumerate(zip(info.shape, want_shape)):
        if isinstance(want, str):
            prev = sizes.get(want)
            if prev is None:
                if got > Target.max_named_size:
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


# cuTensorMapEncodeTiled's limits on the tensor itself (the box's are checked where the annotation is written)
MAP_MAX_DIM = 2**32
MAP_MAX_STRIDE = 2**40


def check_tensor_map(p: Param, info, sizes: dict, gpu: bool) -> None:
    """Validate an argument for a T.TensorMap parameter: everything check_tensor checks, then what the TMA unit
    needs of the tensor (each dimension at most 2^32 elements, each stride a multiple of 16 bytes below 2^40, the
    base address 16-byte aligned). Raises LaunchError naming the argument."""
    m = p.tensormap
    if info is None:
        raise LaunchError(f"argument '{p.name}' must be an array for {m!r} (the tensor the map describes)")
    check_tensor(p.name, info, p.dtype, p.shape, sizes, gpu=gpu)
    esize = p.dtype.nbytes
    stride = esize
    for k in range(len(info.shape) - 1, -1, -1):
        if info.shape[k] > MAP_MAX_DIM:
            raise LaunchError(f"argument '{p.name}' has {info.shape[k]} elements in dimension {k}; a tensor map "
                              f"allows at most 2^32")
        if k < len(info.shape) - 1 and (stride % 16 or stride >= MAP_MAX_STRIDE):
            raise LaunchError(f"argument '{p.name}' (shape {info.shape}, {p.dtype.name}) has a stride of {stride} "
                              f"bytes in dimension {k}; a tensor map needs strides that are multiples of 16 bytes "
                              f"(below 2^40): pad the inner dimension")
        stride *= info.shape[k]
    # the interpreter refuses what the GPU's encoder would (a host array's address stands for the device one)
    if info.ptr % 16:
        raise LaunchError(f"argument '{p.name}' starts at address {info.ptr:#x}, which is not 16-byte aligned; a "
                          f"tensor map needs a 16-byte aligned base (pass a fresh or contiguous copy)")


def type_name(value) -> str:
    """A value's type as a user would write it: `numpy.bool` for a numpy bool, not a bare `bool`."""
    t = type(value)
    mod = t.__module__
    if mod == "builtins":
        return t.__qualname__
    return f"{mod.split('.')[0]}.{t.__qualname__}"


def short_repr(value, most: int = 40) -> str:
    """repr of a value for a message: a huge int is neither printed whole nor allowed to hit Python's digit
    limit (int -> str refuses over 4300 digits)."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 128:
        return f"an int of {value.bit_length()} bits"
    try:
        text = repr(value)
    except Exception:           # noqa: BLE001 - a broken __repr__ must not hide the real error
        text = f"<{type_name(value)}>"
    return text if len(text) <= most else text[:most - 3] + "..."


def _is_bool(value) -> bool:
    """Python's bool and numpy's (np.bool_, which is not a numbers.Integral)."""
    return isinstance(value, bool) or (type(value).__module__ == "numpy" and type(value).__name__ in ("bool", "bool_"))


# the magnitude from which a finite value rounds to infinity (round to nearest even): halfway between the largest
# finite value and the next power of two
FLOAT_OVERFLOW = {"float16": 65520.0, "bfloat16": float(2**128 - 2**119), "float32": float(2**128 - 2**103)}
FLOAT_MAX = {"float16": 65504.0, "bfloat16": float(2**128 - 2**120), "float32": float(2**128 - 2**104),
             "float64": 1.7976931348623157e308}


def check_scalar(name, value, d: dt.DType):
    """The scalar's value as its parameter slot holds it (f16/bf16 as their bits). Raises LaunchError."""
    if _is_bool(value) and d.kind != "bool":
        raise LaunchError(f"argument '{name}' is a bool ({type_name(value)}), but the kernel declares {d.name}")
    if d.kind == "bool":
        if not (_is_bool(value) or isinstance(value, numbers.Integral)):
            raise LaunchError(f"argument '{name}' must be a bool, got {type_name(value)}")
        return int(bool(value))
    if d.is_int:
        if not isinstance(value, numbers.Integral):
            raise LaunchError(f"argument '{name}' must be an integer ({d.name}), got {type_name(value)} "
                              f"{short_repr(value)}")
        lo, hi = INT_RANGE.get(d.name, (-2**63, 2**64))
        if not lo <= int(value) < hi:
            raise LaunchError(f"argument '{name}' = {short_repr(value)} does not fit in {d.name}")
        return int(value)
    if not isinstance(value, numbers.Real):
        raise LaunchError(f"argument '{name}' must be a number ({d.name}), got {type_name(value)}")
    try:
        f = float(value)
    except (OverflowError, ValueError, TypeError):
        f = None
    # a finite value that the parameter's type cannot hold would silently become inf: refuse it
    if f is None or (math.isfinite(f) and abs(f) >= FLOAT_OVERFLOW.get(d.name, math.inf)):
        raise LaunchError(f"argument '{name}' = {short_repr(value)} is out of range for {d.name} (largest finite value "
                          f"{FLOAT_MAX[d.name]!r})")
    if d.bits == 16:
        import numpy as np
        if d.name == "float16":
            return int(np.array([f], dtype=np.float16).view(np.uint16)[0])
        return dt.bf16_bits(f)                  # the one rounder (NaN -> 0x7FFF, as cvt.rn.bf16.f32 gives)
    return f


def missing_annotation(name: str) -> CompilationError:
    return CompilationError(f"parameter '{name}' needs an annotation: T.Tensor(shape, dtype), a scalar "
                            f"type such as T.int32, or T.constexpr")


@dataclass
class Checked:
    """A call that passed the checks: what the launchers need."""
    packed: list                      # slot values of the tensors and scalars, in slot order
    sizes: dict                       # named size -> int
    env: dict                         # scalars, constexprs and sizes by name (grid expressions read them)
    device: int | None = None         # the arrays' CUDA device (None: host arrays)
    framework: str | None = None      # the framework of the first array
    arrays: dict = field(default_factory=dict)      # tensor name -> (value, ArrayInfo)

    def size_values(self, sig: KernelSignature) -> list:
        return [self.sizes[s] for s in sig.sizes]


def check_call(sig: KernelSignature, values: list, gpu: bool) -> Checked:
    """Validate bound `values` (parameter order) against `sig`, for the GPU (`gpu`) or the host interpreter."""
    if len(values) != len(sig.params):
        raise LaunchError(f"{sig.name}() takes {len(sig.params)} arguments, got {len(values)}")
    out = Checked([], {}, {})
    for p, v in zip(sig.params, values):
        if p.kind == "tensor":
            info = _array(p, v, gpu)
            check_tensor(p.name, info, p.dtype, p.shape, out.sizes, gpu=gpu)
            if out.framework is None:
                out.device, out.framework = info.device, info.framework
            elif gpu and info.device != out.device:
                raise LaunchError(f"argument '{p.name}' is on device {info.device} but earlier arguments are "
                                  f"on device {out.device}; all arrays must be on one device")
            if info.readonly and p.written:
                raise LaunchError(f"argument '{p.name}' is read-only ({info.framework} array with its writeable flag "
                                  f"off), but the kernel stores to it; pass a writable array (e.g. a copy)")
            out.packed.append(info.ptr)
            out.arrays[p.name] = (v, info)
        elif p.kind == "tensormap":
            info = _array(p, v, gpu)
            check_tensor_map(p, info, out.sizes, gpu)
            if out.framework is None:
                out.device, out.framework = info.device, info.framework
            elif gpu and info.device != out.device:
                raise LaunchError(f"argument '{p.name}' is on device {info.device} but earlier arguments are "
                                  f"on device {out.device}; all arrays must be on one device")
            if info.readonly and p.written:
                raise LaunchError(f"argument '{p.name}' is read-only ({info.framework} array with its writeable flag "
                                  f"off), but the kernel stores to it through its tensor map; pass a writable array")
            out.packed.append(info.ptr)       # the launcher encodes the map (runtime/tensormap.py) in its slot
            out.arrays[p.name] = (v, info)
        elif p.kind == "scalar":
            out.packed.append(check_scalar(p.name, v, p.dtype))
            out.env[p.name] = v
        elif p.kind == "constexpr":
            out.env[p.name] = v
        else:
            raise missing_annotation(p.name)
    out.env.update(out.sizes)
    return out


def _array(p: Param, v, gpu: bool) -> ArrayInfo | None:
    info = array_info(v)
    if not gpu and info is not None:
        if info.device is not None:
            raise LaunchError(f"argument '{p.name}' is a CUDA array; the interpreter runs on host memory "
                              f"(numpy arrays or CPU torch tensors)")
        if info.dtype is None and p.dtype.name == "bfloat16" and \
                getattr(getattr(v, "dtype", None), "name", "") == "bfloat16":
            info.dtype = dt.bfloat16                       # an ml_dtypes bfloat16 numpy array
    return info


def launch_dims(sig: KernelSignature, checked: Checked, grid, names, values) -> tuple[tuple, tuple]:
    """(grid, block) of a launch: `grid` as given to kernel[grid, block] (three ints, a callable taking the
    bound arguments by name, or None for the kernel's own), validated against the device limits."""
    if callable(grid):
        g = check_grid(dims(grid(dict(zip(names, values)))))
    elif grid is not None:
        g = check_grid(grid)
    else:
        if not sig.launch_given:
            raise no_launch(sig.name)
        g = grid_of(sig.grid, checked.env)
    check_block(sig.block)
    if sig.clustered:
        check_cluster(sig, g)
    return g, tuple(sig.block)


def check_cluster(sig: KernelSignature, grid) -> None:
    """A clustered kernel's grid must be a whole number of clusters in every dimension."""
    for k, (g, c) in enumerate(zip(grid, sig.cluster)):
        if g % c:
            raise LaunchError(f"grid {tuple(grid)} is not a whole number of clusters {tuple(sig.cluster)} of kernel "
                              f"'{sig.name}': dimension {'xyz'[k]} is {g}, not a multiple of {c}")


def no_launch(name: str) -> LaunchError:
    """A call of a kernel that says nowhere how to launch it (there is no default launch)."""
    return LaunchError(f"kernel '{name}' has no launch configuration: give one with kernel[grid, block](...) at the "
                       f"call, or T.device_entry(launch=T.cuda.LaunchConfig(grid=..., block=...)) as the first "
                       f"statement of its body")
