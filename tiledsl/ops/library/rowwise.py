"""The row-wise torch ops: `tiledsl::softmax`, `tiledsl::layer_norm`, `tiledsl::rms_norm` and the fused
`tiledsl::add_rms_norm`, each with a fake implementation and autograd, on the kernels of tiledsl.ops.rowwise
(softmax_rows.py, norms.py; long_rows.py for rows longer than registers hold): float16 and bfloat16 in and out,
float32 statistics, rows of any length.

How the ops are built:
- `softmax` is a custom op (its backward needs only its output, y).
- `layer_norm`, `rms_norm` and `add_rms_norm` have torch's signatures and return what torch's do; each is a
  CompositeImplicitAutograd op over a custom op that also returns the float32 per-row statistics (mean and rstd, or
  rstd) which autograd saves for the backward, as aten's layer_norm is over native_layer_norm. Their backward
  kernels are custom ops too (`_layer_norm_backward`, `_rms_norm_backward`), so a compiled graph's backward is
  made of them.
- The wrappers flatten the normalized (or softmax) axes into rows of n elements, make the rows contiguous with a
  16-byte aligned base (the kernels' vector loads), and skip the launch where there is nothing to compute.
- CUDA tensors launch the GPU kernels on the current stream with no host synchronisation; CPU tensors run the
  same kernels on the interpreter (tiledsl.jit(..., interpret=True)), for tests at small sizes.
"""
import math
from typing import Optional, Sequence

import torch

from .common import (DIRECT, DISPATCH, NAMESPACE, UnsupportedArgument, call, eager_autograd, no_double_backward,
                     on_cpu, qualified, refuse, route)

DTYPES = {torch.float16: "float16", torch.bfloat16: "bfloat16"}
SUPPORTED_DTYPES = "supported: torch.float16, torch.bfloat16"
CPU_PARTIAL_BLOCKS = 4           # blocks of a backward kernel on the interpreter (each walks rows, keeps partials)
GPU_THREADS_PER_SM = 1024        # a backward kernel's blocks per SM: enough threads to keep loads in flight, few
                                 # enough that the float32 partials (blocks x n, twice) stay small next to the rows

_INTERPRETED = {}


def _launchable(kernel, cpu):
    """The kernel itself for CUDA tensors; its interpreted twin (made once) for CPU tensors."""
    if not cpu:
        return kernel
    twin = _INTERPRETED.get(kernel)
    if twin is None:
        import tiledsl
        twin = _INTERPRETED[kernel] = tiledsl.jit(kernel.fn, interpret=True)
    return twin


def _rows(t, n):
    """t as contiguous rows of n elements, 16-byte aligned (a copy only where t is not already so)."""
    t = t.reshape(-1, n)
    if not t.is_contiguous() or t.data_ptr() % 16:
        t = t.clone(memory_format=torch.contiguous_format)
    return t


def _vector(t, n):
    t = t.reshape(n)
    if not t.is_contiguous() or t.data_ptr() % 16:
        t = t.clone(memory_format=torch.contiguous_format)
    return t


def _check_dtype(op, arg, t, like=None):
    if not isinstance(t, torch.Tensor):
        raise UnsupportedArgument(f"tiledsl.ops.{op}: {arg} must be a torch.Tensor, got {type(t).__name__}")
    if t.dtype not in DTYPES:
        refuse(op, f"{arg}.dtype", t.dtype, SUPPORTED_DTYPES)
    if like is not None and t.dtype != like.dtype:
        refuse(op, f"{arg}.dtype", t.dtype, f"supported: the input's dtype ({like.dtype})")


# rows longer than these take long_rows.py's kernels: beyond them a register-held row spills at 1024 threads a
# block (ptxas -v for sm_90: the forward kernels are spill-free to 32768 elements, the backward ones to 8192 and
# spill a little at 16384); to be tuned on the H200 with benchmarks/rowwise_ops.py
FORWARD_REGISTER_ROW = 32768
BACKWARD_REGISTER_ROW = 16384
LONG_ROW = None          # tests set it to send short rows to the long kernels on the interpreter
CPU_LONG_THREADS = 32    # the long kernels' block on the interpreter (1024 on the GPU)


def long_row(n, backward=False):
    """Whether rows of n elements take the kernels of long_rows.py (re-reading the row) rather than holding it."""
    if LONG_ROW is not None:
        return n > LONG_ROW
    return n > (BACKWARD_REGISTER_ROW if backward else FORWARD_REGISTER_ROW)


def _kernel(name, n, dtype, cpu, **flags):
    """The kernel `name` (softmax_forward, softmax_backward, layer_norm_forward, layer_norm_backward,
    rms_norm_forward, rms_norm_backward) for rows of n `dtype`, as launched for CPU or CUDA tensors."""
    if long_row(n, backward=name.endswith("backward")):
        from ..rowwise import long_rows as m
        kw = dict(flags, threads=CPU_LONG_THREADS) if cpu else flags
        make = {"softmax_forward": lambda **k: m.make_long_softmax(n, dtype, **k),
                "softmax_backward": lambda **k: m.make_long_softmax(n, dtype, backward=True, **k),
                "layer_norm_forward": lambda **k: m.make_long_layer_norm_forward(n, dtype, **k),
                "layer_norm_backward": lambda **k: m.make_long_layer_norm_backward(n, dtype, **k),
                "rms_norm_forward": lambda **k: m.make_long_rms_norm_forward(n, dtype, **k),
                "rms_norm_backward": lambda **k: m.make_long_rms_norm_backward(n, dtype, **k)}[name]
        return _launchable(make(**kw), cpu)
    from ..rowwise import norms, softmax_rows
    make = {"softmax_forward": softmax_rows.make_softmax_forward,
            "softmax_backward": softmax_rows.make_softmax_backward,
            "layer_norm_forward": norms.make_layer_norm_forward, "layer_norm_backward": norms.make_layer_norm_backward,
            "rms_norm_forward": norms.make_rms_norm_forward, "rms_norm_backward": norms.make_rms_norm_backward}[name]
    return _launchable(make(n, dtype, **flags), cpu)


def _partials(x, rows, n, count):
    """`count` float32 (G, n) buffers for a backward kernel's per-block weight-gradient partials, G its blocks.
    Register-held rows: about GPU_THREADS_PER_SM threads per SM, every partial written by the kernel. Long rows:
    a block per SM, the partials zeroed (the kernel adds into them)."""
    cpu = x.device.type == "cpu"
    if cpu:
        g = min(rows, CPU_PARTIAL_BLOCKS)
    else:
        from ..device import sm_count
        if long_row(n, backward=True):
            g = min(rows, sm_count(x))
        else:
            from ..rowwise.norms import BACKWARD_PER_THREAD
            from ..rowwise.rows import plan
            threads = plan(n, per_thread=BACKWARD_PER_THREAD).threads
            g = min(rows, max(2, GPU_THREADS_PER_SM // threads) * sm_count(x))
    new = torch.zeros if long_row(n, backward=True) else torch.empty
    return [new((g, n), dtype=torch.float32, device=x.device) for _ in range(count)]


def _normalized(op, x, normalized_shape):
    """n, the size of the trailing normalized dims, after checking them as torch does."""
    shape = tuple(int(s) for s in normalized_shape)
    k = len(shape)
    if k == 0 or x.dim() < k or tuple(x.shape[x.dim() - k:]) != shape:
        raise RuntimeError(f"tiledsl.ops.{op}: normalized_shape={list(shape)} must be the trailing dims of the "
                           f"input, of shape {list(x.shape)}")
    return math.prod(shape)


# ---------------------------------------------------------------------------------------------------------------
# softmax

def _softmax_impl(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    _check_dtype("softmax", "x", x)
    if isinstance(dim, bool) or not isinstance(dim, int):
        refuse("softmax", "dim", dim, "one int dimension, as torch.softmax takes it")
    if not -max(x.dim(), 1) <= dim < max(x.dim(), 1):          # (a 0-d input has dims -1 and 0, as in torch)
        raise IndexError(f"tiledsl.ops.softmax: dim={dim} is out of range for a {x.dim()}-D input")
    if x.dim() == 0:
        return torch.ones_like(x)
    d = dim % x.dim()
    xt = x.movedim(d, -1)
    n = xt.shape[-1]
    y = torch.empty(xt.shape, dtype=x.dtype, device=x.device)
    if y.numel():
        k = _kernel("softmax_forward", n, DTYPES[x.dtype], on_cpu(x))
        k(_rows(xt, n), y.view(-1, n))
    return y.movedim(-1, d).contiguous()


_softmax = torch.library.custom_op(qualified("softmax"), _softmax_impl, mutates_args=())


@_softmax.register_fake
def _(x, dim=-1):
    _check_dtype("softmax", "x", x)
    return torch.empty_like(x, memory_format=torch.contiguous_format)


def _softmax_backward_impl(y: torch.Tensor, dy: torch.Tensor, dim: int) -> torch.Tensor:
    if y.dim() == 0:
        return torch.zeros_like(y)
    d = dim % y.dim()
    yt, gt = y.movedim(d, -1), dy.to(y.dtype).movedim(d, -1)
    n = yt.shape[-1]
    dx = torch.empty(yt.shape, dtype=y.dtype, device=y.device)
    if dx.numel():
        k = _kernel("softmax_backward", n, DTYPES[y.dtype], on_cpu(y, dy))
        k(_rows(yt, n), _rows(gt, n), dx.view(-1, n))
    return dx.movedim(-1, d).contiguous()


_softmax_backward = torch.library.custom_op(qualified("_softmax_backward"), _softmax_backward_impl,
                                            mutates_args=())
no_double_backward(_softmax_backward, "softmax")


@_softmax_backward.register_fake
def _(y, dy, dim):
    return torch.empty_like(y, memory_format=torch.contiguous_format)


def _softmax_setup(ctx, inputs, output):
    ctx.dim = inputs[1]
    ctx.save_for_backward(output)


def _softmax_grad(ctx, dy):
    (y,) = ctx.saved_tensors
    return call(_softmax_backward, _softmax_backward_impl, y, dy, ctx.dim), None


_softmax.register_autograd(_softmax_grad, setup_context=_softmax_setup)


# ---------------------------------------------------------------------------------------------------------------
# layer norm

def _ln_args(x, normalized_shape, weight, bias):
    _check_dtype("layer_norm", "x", x)
    n = _normalized("layer_norm", x, normalized_shape)
    for name, t in (("weight", weight), ("bias", bias)):
        if t is not None:
            _check_dtype("layer_norm", name, t, like=x)
            if tuple(t.shape) != tuple(normalized_shape):
                raise RuntimeError(f"tiledsl.ops.layer_norm: {name} of shape {list(t.shape)} must have the "
                                   f"normalized_shape {list(normalized_shape)}")
    return n, x.shape[:x.dim() - len(normalized_shape)]


def _layer_norm_forward_impl(x: torch.Tensor, normalized_shape: Sequence[int], weight: Optional[torch.Tensor],
                        bias: Optional[torch.Tensor], eps: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    n, lead = _ln_args(x, normalized_shape, weight, bias)
    y = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    mean = torch.empty(lead, dtype=torch.float32, device=x.device)      # every row's written by the kernel
    rstd = torch.empty(lead, dtype=torch.float32, device=x.device)
    if y.numel():
        w = _vector(weight, n) if weight is not None else torch.ones(n, dtype=x.dtype, device=x.device)
        b = _vector(bias, n) if bias is not None else torch.zeros(n, dtype=x.dtype, device=x.device)
        k = _kernel("layer_norm_forward", n, DTYPES[x.dtype], on_cpu(x, weight, bias))
        k(_rows(x, n), w, b, y.view(-1, n), mean.view(-1), rstd.view(-1), float(eps))
    return y, mean, rstd


_layer_norm_forward = torch.library.custom_op(qualified("_layer_norm_forward"), _layer_norm_forward_impl,
                                              mutates_args=())


@_layer_norm_forward.register_fake
def _(x, normalized_shape, weight, bias, eps):
    _, lead = _ln_args(x, normalized_shape, weight, bias)
    return (torch.empty_like(x, memory_format=torch.contiguous_format), x.new_empty(lead, dtype=torch.float32),
            x.new_empty(lead, dtype=torch.float32))


def _layer_norm_backward_impl(dy: torch.Tensor, x: torch.Tensor, normalized_shape: Sequence[int],
                         weight: Optional[torch.Tensor], mean: torch.Tensor, rstd: torch.Tensor
                         ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(dx, dweight, dbias); dweight and dbias in the input's dtype, of the normalized shape."""
    n = math.prod(normalized_shape)
    dx = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    rows = x.numel() // n if n else 0
    if dx.numel() == 0:
        z = torch.zeros(tuple(normalized_shape), dtype=x.dtype, device=x.device)
        return dx, z, z.clone()
    w = _vector(weight, n) if weight is not None else torch.ones(n, dtype=x.dtype, device=x.device)
    dwp, dbp = _partials(x, rows, n, 2)
    k = _kernel("layer_norm_backward", n, DTYPES[x.dtype], on_cpu(dy, x, weight))
    k(_rows(x, n), w, _rows(dy.to(x.dtype), n), _vector(mean, rows), _vector(rstd, rows), dx.view(-1, n), dwp, dbp)
    shape = tuple(normalized_shape)
    return dx, dwp.sum(0).to(x.dtype).reshape(shape), dbp.sum(0).to(x.dtype).reshape(shape)


_layer_norm_backward = torch.library.custom_op(qualified("_layer_norm_backward"), _layer_norm_backward_impl,
                                               mutates_args=())
no_double_backward(_layer_norm_backward, "layer_norm")


@_layer_norm_backward.register_fake
def _(dy, x, normalized_shape, weight, mean, rstd):
    shape = tuple(normalized_shape)
    return (torch.empty_like(x, memory_format=torch.contiguous_format), x.new_empty(shape), x.new_empty(shape))


def _ln_setup(ctx, inputs, output):
    x, normalized_shape, weight, bias, _eps = inputs
    _, mean, rstd = output
    ctx.normalized_shape = tuple(normalized_shape)
    ctx.has = (weight is not None, bias is not None)
    ctx.save_for_backward(x, weight, mean, rstd)


def _ln_grad(ctx, dy, _dmean, _drstd):
    x, weight, mean, rstd = ctx.saved_tensors
    if dy is None:
        return None, None, None, None, None
    dx, dw, db = call(_layer_norm_backward, _layer_norm_backward_impl, dy, x, ctx.normalized_shape, weight, mean,
                      rstd)
    return dx, None, dw if ctx.has[0] else None, db if ctx.has[1] else None, None


_layer_norm_forward.register_autograd(_ln_grad, setup_context=_ln_setup)


# ---------------------------------------------------------------------------------------------------------------
# RMS norm, and the fused add + RMS norm

_NO_RESIDUAL = object()       # rms_norm's calls: no residual argument (add_rms_norm's may not be None)


def _rms_args(op, x, weight, residual=_NO_RESIDUAL):
    _check_dtype(op, "x", x)
    if residual is not _NO_RESIDUAL:
        _check_dtype(op, "residual", residual, like=x)
        if residual.shape != x.shape:
            raise RuntimeError(f"tiledsl.ops.{op}: residual of shape {list(residual.shape)} must have the input's "
                               f"shape {list(x.shape)}")
    if weight is not None:
        _check_dtype(op, "weight", weight, like=x)
        shape = tuple(weight.shape)
    else:
        if x.dim() == 0:
            raise RuntimeError(f"tiledsl.ops.{op}: the input must have at least one dim")
        shape = tuple(x.shape[-1:])
    n = _normalized(op, x, shape)
    return n, shape, x.shape[:x.dim() - len(shape)]


def _eps(x, eps):
    """eps None: torch's default, the machine epsilon of the type it computes in (float32 for float16 and bfloat16
    inputs: ATen's opmath type; its docs' "finfo(x.dtype)" would be 2^-10 / 2^-7 and change small rows' results)."""
    if eps is not None:
        return float(eps)
    return float(torch.finfo(torch.float64 if x.dtype == torch.float64 else torch.float32).eps)


def _rms_norm_forward_impl(x: torch.Tensor, weight: Optional[torch.Tensor], eps: Optional[float]
                      ) -> tuple[torch.Tensor, torch.Tensor]:
    n, _, lead = _rms_args("rms_norm", x, weight)
    y = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    rstd = torch.empty(lead, dtype=torch.float32, device=x.device)     # every row's written by the kernel
    if y.numel():
        w = _vector(weight, n) if weight is not None else torch.ones(n, dtype=x.dtype, device=x.device)
        k = _kernel("rms_norm_forward", n, DTYPES[x.dtype], on_cpu(x, weight))
        k(_rows(x, n), w, y.view(-1, n), rstd.view(-1), _eps(x, eps))
    return y, rstd


_rms_norm_forward = torch.library.custom_op(qualified("_rms_norm_forward"), _rms_norm_forward_impl,
                                            mutates_args=())


@_rms_norm_forward.register_fake
def _(x, weight, eps):
    _, _, lead = _rms_args("rms_norm", x, weight)
    return torch.empty_like(x, memory_format=torch.contiguous_format), x.new_empty(lead, dtype=torch.float32)


def _add_rms_norm_forward_impl(x: torch.Tensor, residual: torch.Tensor, weight: Optional[torch.Tensor],
                          eps: Optional[float]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(y, s, rstd): s = x + residual, y = rms_norm(s)."""
    n, _, lead = _rms_args("add_rms_norm", x, weight, residual)
    y = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    s = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    rstd = torch.empty(lead, dtype=torch.float32, device=x.device)     # every row's written by the kernel
    if y.numel():
        w = _vector(weight, n) if weight is not None else torch.ones(n, dtype=x.dtype, device=x.device)
        k = _kernel("rms_norm_forward", n, DTYPES[x.dtype], on_cpu(x, residual, weight), fused_add=True)
        k(_rows(x, n), _rows(residual, n), w, y.view(-1, n), s.view(-1, n), rstd.view(-1), _eps(x, eps))
    return y, s, rstd


_add_rms_norm_forward = torch.library.custom_op(qualified("_add_rms_norm_forward"), _add_rms_norm_forward_impl,
                                                mutates_args=())


@_add_rms_norm_forward.register_fake
def _(x, residual, weight, eps):
    _, _, lead = _rms_args("add_rms_norm", x, weight, residual)
    return (torch.empty_like(x, memory_format=torch.contiguous_format),
            torch.empty_like(x, memory_format=torch.contiguous_format), x.new_empty(lead, dtype=torch.float32))


def _rms_norm_backward_impl(dy: torch.Tensor, x: torch.Tensor, weight: Optional[torch.Tensor], rstd: torch.Tensor,
                       ds: Optional[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """(dx, dweight): dx = the RMS norm's input gradient (+ ds, the fused op's sum-output gradient, where given);
    dweight in the input's dtype, of the weight's shape (the last dim's where there is no weight)."""
    shape = tuple(weight.shape) if weight is not None else tuple(x.shape[-1:])
    n = math.prod(shape)
    dx = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    if dx.numel() == 0:
        return dx, torch.zeros(shape, dtype=x.dtype, device=x.device)
    rows = x.numel() // n
    w = _vector(weight, n) if weight is not None else torch.ones(n, dtype=x.dtype, device=x.device)
    (dwp,) = _partials(x, rows, n, 1)
    k = _kernel("rms_norm_backward", n, DTYPES[x.dtype], on_cpu(dy, x, weight, ds), add_grad=ds is not None)
    extra = (_rows(ds.to(x.dtype), n),) if ds is not None else ()
    k(_rows(x, n), w, _rows(dy.to(x.dtype), n), _vector(rstd, rows), *extra, dx.view(-1, n), dwp)
    return dx, dwp.sum(0).to(x.dtype).reshape(shape)


_rms_norm_backward = torch.library.custom_op(qualified("_rms_norm_backward"), _rms_norm_backward_impl,
                                             mutates_args=())
no_double_backward(_rms_norm_backward, "rms_norm (and add_rms_norm)")


@_rms_norm_backward.register_fake
def _(dy, x, weight, rstd, ds):
    shape = tuple(weight.shape) if weight is not None else tuple(x.shape[-1:])
    return torch.empty_like(x, memory_format=torch.contiguous_format), x.new_empty(shape)


def _rms_setup(ctx, inputs, output):
    x, weight, _eps = inputs
    ctx.has_weight = weight is not None
    ctx.save_for_backward(x, weight, output[1])


def _rms_grad(ctx, dy, _drstd):
    x, weight, rstd = ctx.saved_tensors
    if dy is None:
        return None, None, None
    dx, dw = call(_rms_norm_backward, _rms_norm_backward_impl, dy, x, weight, rstd, None)
    return dx, dw if ctx.has_weight else None, None


_rms_norm_forward.register_autograd(_rms_grad, setup_context=_rms_setup)


def _add_rms_setup(ctx, inputs, output):
    _x, _residual, weight, _eps = inputs
    ctx.has_weight = weight is not None
    ctx.save_for_backward(output[1], weight, output[2])        # the norm's input is the sum s


def _add_rms_grad(ctx, dy, ds, _drstd):
    s, weight, rstd = ctx.saved_tensors
    if dy is None:
        if ds is None:
            return None, None, None, None
        return ds, ds, None, None
    dx, dw = call(_rms_norm_backward, _rms_norm_backward_impl, dy, s, weight, rstd, ds)
    return dx, dx, dw if ctx.has_weight else None, None


_add_rms_norm_forward.register_autograd(_add_rms_grad, setup_context=_add_rms_setup)


# ---------------------------------------------------------------------------------------------------------------
# the public ops: torch's signatures, composites over the custom ops above

_LIB = torch.library.Library(NAMESPACE, "FRAGMENT")
_LIB.define("layer_norm(Tensor x, SymInt[] normalized_shape, Tensor? weight=None, Tensor? bias=None, "
            "float eps=1e-05) -> Tensor")
_LIB.define("rms_norm(Tensor x, Tensor? weight=None, float? eps=None) -> Tensor")
_LIB.define("add_rms_norm(Tensor x, Tensor residual, Tensor? weight=None, float? eps=None) -> (Tensor, Tensor)")


def _layer_norm_composite(x, normalized_shape, weight=None, bias=None, eps=1e-5):
    return torch.ops.tiledsl._layer_norm_forward(x, normalized_shape, weight, bias, eps)[0]


def _rms_norm_composite(x, weight=None, eps=None):
    return torch.ops.tiledsl._rms_norm_forward(x, weight, eps)[0]


def _add_rms_norm_composite(x, residual, weight=None, eps=None):
    y, s, _ = torch.ops.tiledsl._add_rms_norm_forward(x, residual, weight, eps)
    return y, s


_LIB.impl("layer_norm", _layer_norm_composite, "CompositeImplicitAutograd")
_LIB.impl("rms_norm", _rms_norm_composite, "CompositeImplicitAutograd")
_LIB.impl("add_rms_norm", _add_rms_norm_composite, "CompositeImplicitAutograd")


# an eager call runs the implementation (no autograd to record) or the implementation inside a torch.autograd.Function
# with the op's own formulas (common.route): the custom ops' dispatch costs more host time than these kernels take
_SOFTMAX = eager_autograd(_softmax_impl, _softmax_setup, _softmax_grad, "Softmax")
_LAYER_NORM = eager_autograd(_layer_norm_forward_impl, _ln_setup, _ln_grad, "LayerNorm")
_RMS_NORM = eager_autograd(_rms_norm_forward_impl, _rms_setup, _rms_grad, "RMSNorm")
_ADD_RMS_NORM = eager_autograd(_add_rms_norm_forward_impl, _add_rms_setup, _add_rms_grad, "AddRMSNorm")


def softmax(x, dim=-1):
    """softmax over `dim` (torch.softmax's semantics), float16/bfloat16; any shape, strides and sizes."""
    r = route(x)
    if r == DISPATCH:
        return torch.ops.tiledsl.softmax(x, dim)
    return (_softmax_impl if r == DIRECT else _SOFTMAX)(x, dim)


def layer_norm(x, normalized_shape, weight=None, bias=None, eps=1e-5):
    """F.layer_norm(x, normalized_shape, weight, bias, eps), float16/bfloat16 (weight and bias of x's dtype)."""
    if isinstance(normalized_shape, int):
        normalized_shape = (normalized_shape,)
    r = route(x, weight, bias)
    if r == DISPATCH:
        return torch.ops.tiledsl.layer_norm(x, list(normalized_shape), weight, bias, eps)
    return (_layer_norm_forward_impl if r == DIRECT else _LAYER_NORM)(x, tuple(normalized_shape), weight, bias,
                                                                      float(eps))[0]


def rms_norm(x, weight=None, eps=None):
    """F.rms_norm(x, weight.shape (or x's last dim), weight, eps); eps None is torch's default (float32's machine
    epsilon for float16 / bfloat16 inputs: the type it computes in)."""
    r = route(x, weight)
    if r == DISPATCH:
        return torch.ops.tiledsl.rms_norm(x, weight, eps)
    return (_rms_norm_forward_impl if r == DIRECT else _RMS_NORM)(x, weight, eps)[0]


def add_rms_norm(x, residual, weight=None, eps=None):
    """(rms_norm(x + residual, weight, eps), x + residual) in one pass over the rows."""
    r = route(x, residual, weight)
    if r == DISPATCH:
        return torch.ops.tiledsl.add_rms_norm(x, residual, weight, eps)
    y, s, _ = (_add_rms_norm_forward_impl if r == DIRECT else _ADD_RMS_NORM)(x, residual, weight, eps)
    return y, s


__all__ = ["softmax", "layer_norm", "rms_norm", "add_rms_norm", "UnsupportedArgument"]
