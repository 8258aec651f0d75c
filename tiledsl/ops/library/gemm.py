"""The GEMM ops: `tiledsl::matmul`, `tiledsl::linear`, `tiledsl::matmul_fp8` (torch.library custom ops), and the
public `linear`, `matmul`, `matmul_fp8` of tiledsl.ops.

    import tiledsl.ops as ops
    y = ops.linear(x, w, b, activation="gelu")       # F.linear's semantics (+ a fused activation), differentiable
    c = ops.matmul(a, b)                             # a (M, K) @ b (N, K).T
    c = ops.matmul_fp8(a8, b8, scale_a, scale_b)     # (a8 @ b8.T) * scales, torch._scaled_mm's scale forms

Each op's real implementation is the host code of tiledsl.ops.gemm (matmul.py, fp8.py): CUDA tensors run the tuned
GPU kernels (the per-shape plan, tuned at the first real call of a shape and kept on disk); CPU tensors run the same
kernels on the interpreter (the mma.sync kernel on zero-padded operands for f16/bf16, the Hopper FP8 kernel in a
small configuration for fp8): small sizes only. The fake implementations give shape and dtype alone, so
torch.compile traces the ops as opaque nodes: tracing never reaches the autotuner or tiledsl.runtime.

Autograd (matmul, linear): dA and dB run on the same GEMM kernels (the `matmul` op), with the operand layouts they
need (module note below); the activation's derivative is computed by torch from the saved output (relu) or from
the pre-activation recomputed by one more GEMM (gelu, silu: nothing extra is kept from the forward). matmul_fp8 has
no autograd: a gradient through it raises (it is marked non-differentiable, as torch._scaled_mm is in practice).

Operand layouts in the backward. The kernels compute X @ Y.T with both operands K-major (row-major (rows, K)).
For Z = A @ B.T (A (M, K), B (N, K)) and dZ (M, N):
  dA = dZ @ B       = matmul(dZ, B.T)    : Y = B.T, (K, N), a transpose copy of B;
  dB = dZ.T @ A     = matmul(dZ.T, A.T)  : X = dZ.T (N, M) and Y = A.T (K, M), transpose copies of both.
The copies (`.t().contiguous()`) are one pass over each operand (at 4096^3 bf16, ~0.37 of the step's 0.98 ms).
The Hopper kernel reads an operand MN-major as stored (hopper_kernel.py: wgmma's transposed shared-memory
operands), so the backward passes the transposed views themselves (B.t(), dZ.t(), A.t()) and matmul decides: on
CUDA tensors with the gated path "gemm_mn_major" enabled (tiledsl.ops.gates) it reads them without a copy
(matmul.py: the strides decide); elsewhere it makes the copies above.
"""
import math
from typing import Optional

import torch
from torch import Tensor

from .common import DIRECT, DISPATCH, UnsupportedArgument, call, direct, eager_autograd, qualified, refuse, route

HALF = (torch.float16, torch.bfloat16)
OUTS = (torch.float16, torch.bfloat16, torch.float32)
FP8 = (torch.float8_e4m3fn, torch.float8_e5m2)
ACTIVATIONS = (None, "relu", "gelu", "silu")


# ------------------------------------------------------------------ checks (shared by the real and fake impls)

def _check_gemm(op, a, b, bias, activation, out_dtype, a_name="a", b_name="b"):
    """Refuse what the GEMM ops do not take, naming the argument; returns the output dtype. Kept to a few
    attribute reads: it runs on every eager call."""
    if a.dtype not in HALF:
        refuse(op, f"{a_name}.dtype", a.dtype, "supported: torch.float16, torch.bfloat16")
    if b.dtype != a.dtype:
        refuse(op, f"{b_name}.dtype", b.dtype, f"it must equal {a_name}.dtype ({a.dtype})")
    if b.dim() != 2:
        raise ValueError(f"tiledsl.ops.{op}: {b_name} is {tuple(b.shape)}: need a 2-D (N, K) tensor")
    if a.shape[-1] != b.shape[1]:
        raise ValueError(f"tiledsl.ops.{op}: {a_name} is {tuple(a.shape)} and {b_name} {tuple(b.shape)}: "
                         f"{a_name}'s last dimension must equal {b_name}'s K ({b_name} is (N, K))")
    if bias is not None:
        if bias.dtype not in OUTS:
            refuse(op, "bias.dtype", bias.dtype, "supported: torch.float16, torch.bfloat16, torch.float32")
        if bias.dim() != 1 or bias.shape[0] != b.shape[0]:
            raise ValueError(f"tiledsl.ops.{op}: bias is {tuple(bias.shape)}: need ({b.shape[0]},), one value per "
                             f"output column")
    if activation not in ACTIVATIONS:
        refuse(op, "activation", activation, "supported: None, 'relu', 'gelu', 'silu'")
    out = a.dtype
    if out_dtype is not None:
        if out_dtype not in OUTS:
            refuse(op, "out_dtype", out_dtype, "supported: None (the inputs' dtype), torch.float16, torch.bfloat16, "
                                               "torch.float32")
        out = out_dtype
    if bias is not None and bias.dtype not in (a.dtype, out, torch.float32):
        # (float16 against bfloat16: torch refuses it, and a silent conversion would round the bias in another type)
        refuse(op, "bias.dtype", bias.dtype, f"the bias is {a_name}'s dtype ({a.dtype}), the output's, or "
                                             f"torch.float32")
    return out


def _same_device(op, a, b, bias):
    dev = a.device
    if b.device != dev or bias is not None and bias.device != dev:
        other = b.device if b.device != dev else bias.device
        raise UnsupportedArgument(f"tiledsl.ops.{op}: tensors on different devices ({dev} and {other})")


_HOST = {}


def _host(name):
    """The host function `name` of tiledsl.ops.gemm (imported at the op's first real call, never while tracing)."""
    fn = _HOST.get(name)
    if fn is None:
        if name == "matmul":
            from ..gemm.matmul import matmul as fn
        elif name == "major_of":
            from ..gemm.hopper import major_of as fn
        else:
            from ..gemm.fp8 import matmul_fp8 as fn
        _HOST[name] = fn
    return fn


def _epilogue_only(out, bias, activation):
    """A product with K = 0 (all zeros) or nothing to compute: the bias and activation by torch, no launch."""
    if bias is not None:
        out += bias
    if activation == "relu":
        out.relu_()
    elif activation == "gelu":
        out.copy_(torch.nn.functional.gelu(out))
    elif activation == "silu":
        out.copy_(torch.nn.functional.silu(out))
    return out


def _gemm(a, b, bias, activation, out_dtype):
    """act(a @ b.T + bias) of 2-D a (M, K), b (N, K) on the tiledsl kernels (after _check_gemm)."""
    M, K = a.shape
    N = b.shape[0]
    if M == 0 or N == 0 or K == 0:
        return _epilogue_only(a.new_zeros((M, N), dtype=out_dtype), bias, activation)
    return _host("matmul")(_as_read(a), _as_read(b), bias, activation, out_dtype)


def _as_read(x):
    """x where the host matmul takes it as it is: contiguous, or a transposed view it may read MN-major (matmul
    copies it where it does not: the gate off, another path); else x.contiguous()."""
    if x.is_contiguous() or _host("major_of")(x) == "mn":
        return x
    return x.contiguous()


# ------------------------------------------------------------------ tiledsl::matmul

def _matmul_impl(a: Tensor, b: Tensor, bias: Optional[Tensor] = None, activation: Optional[str] = None,
                 out_dtype: Optional[torch.dtype] = None) -> Tensor:
    if a.dim() != 2:
        raise ValueError(f"tiledsl.ops.matmul: a is {tuple(a.shape)}: need a 2-D (M, K) tensor")
    od = _check_gemm("matmul", a, b, bias, activation, out_dtype)
    _same_device("matmul", a, b, bias)
    return _gemm(a, b, bias, activation, od)


_matmul_op = torch.library.custom_op(qualified("matmul"), _matmul_impl, mutates_args=())


@_matmul_op.register_fake
def _(a, b, bias=None, activation=None, out_dtype=None):
    if a.dim() != 2:
        raise ValueError(f"tiledsl.ops.matmul: a is {tuple(a.shape)}: need a 2-D (M, K) tensor")
    od = _check_gemm("matmul", a, b, bias, activation, out_dtype)
    return a.new_empty((a.shape[0], b.shape[0]), dtype=od)


# ------------------------------------------------------------------ tiledsl::linear

def _linear_impl(x: Tensor, weight: Tensor, bias: Optional[Tensor] = None,
                 activation: Optional[str] = None) -> Tensor:
    if x.dim() < 1:
        raise ValueError("tiledsl.ops.linear: x is a 0-d tensor: need (*, K)")
    od = _check_gemm("linear", x, weight, bias, activation, None, "x", "weight")
    _same_device("linear", x, weight, bias)
    if x.dim() == 2:                 # the common case, without a reshape and a view (each costs on every call)
        return _gemm(x, weight, bias, activation, od)
    N, K = weight.shape
    y = _gemm(x.reshape(_rows(x), K), weight, bias, activation, od)
    return y.view(*x.shape[:-1], N)


_linear_op = torch.library.custom_op(qualified("linear"), _linear_impl, mutates_args=())


@_linear_op.register_fake
def _(x, weight, bias=None, activation=None):
    if x.dim() < 1:
        raise ValueError("tiledsl.ops.linear: x is a 0-d tensor: need (*, K)")
    od = _check_gemm("linear", x, weight, bias, activation, None, "x", "weight")
    return x.new_empty((*x.shape[:-1], weight.shape[0]), dtype=od)


# ------------------------------------------------------------------ autograd (matmul and linear)

def _activation_grad(activation, g, y, z):
    """dL/dz from dL/dy = g for y = act(z): relu from the output y, gelu (erf form) and silu from z (float32)."""
    if activation is None:
        return g
    if activation == "relu":
        return g * (y > 0)
    g, z = g.float(), z.float()
    if activation == "gelu":
        cdf = 0.5 * (1.0 + torch.erf(z * 0.7071067811865476))
        pdf = torch.exp(-0.5 * z * z) * 0.3989422804014327
        return g * (cdf + z * pdf)
    s = torch.sigmoid(z)                        # silu
    return g * (s * (1.0 + z * (1.0 - s)))


def _gemm_backward(ctx, g2, a2, b, y2, bias):
    """(dA, dB, dbias) of y = act(a2 @ b.T + bias) for 2-D a2 (M, K), b (N, K), g2 = dL/dy (M, N), each on the
    tiledsl matmul op (None where not needed)."""
    z = None
    if ctx.activation in ("gelu", "silu"):         # the pre-activation, recomputed in float32
        z = call(_MATMUL, _matmul_impl, a2, b, bias, None, torch.float32)
    gz = _activation_grad(ctx.activation, g2, y2, z)
    gh = gz.to(a2.dtype)                           # the kernels' operands are f16/bf16 (f32 dY: rounded here)
    da = db = dbias = None
    need = ctx.needs_input_grad + (False,) * 3      # (it leaves out trailing arguments the call did not pass)
    # the transposed operands as views: matmul reads them as stored where its plan may (the Hopper kernel's MN-major
    # form, gated: matmul.mn_choice) and copies them K-major everywhere else
    if need[0]:
        da = call(_MATMUL, _matmul_impl, gh, b.t())                   # dZ @ B: B.T as (K, N)
    if need[1]:
        db = call(_MATMUL, _matmul_impl, gh.t(), a2.t())              # dZ.T @ A: (N, M), (K, M)
    if need[2]:
        dbias = gz.sum(0, dtype=torch.float32).to(ctx.bias_dtype)
    return da, db, dbias


def _setup(ctx, a, b, bias, activation, output):
    ctx.activation = activation
    ctx.bias_dtype = None if bias is None else bias.dtype
    ctx.save_for_backward(a, b, output if activation == "relu" else None,
                          bias if activation in ("gelu", "silu") else None)     # the recompute needs the bias


def _matmul_setup(ctx, inputs, output):
    a, b, bias, activation, _ = inputs
    _setup(ctx, a, b, bias, activation, output)


def _matmul_backward(ctx, g):
    a, b, y, bias = ctx.saved_tensors
    da, db, dbias = _gemm_backward(ctx, g, a, b, y, bias)
    return da, db, dbias, None, None


def _linear_setup(ctx, inputs, output):
    x, w, bias, activation = inputs
    _setup(ctx, x, w, bias, activation, output)


def _linear_backward(ctx, g):
    x, w, y, bias = ctx.saved_tensors
    K, N = x.shape[-1], w.shape[0]
    M = _rows(x)
    da, dw, dbias = _gemm_backward(ctx, g.reshape(M, N), x.reshape(M, K), w, None if y is None else y.reshape(M, N),
                                   bias)
    return None if da is None else da.view(x.shape), dw, dbias, None


_matmul_op.register_autograd(_matmul_backward, setup_context=_matmul_setup)
_linear_op.register_autograd(_linear_backward, setup_context=_linear_setup)
# an eager call autograd records: the implementation in a torch.autograd.Function with the formulas above
# (common.route: the custom op's generated autograd redispatches through Python, the largest host cost of a step)
_MATMUL_FN = eager_autograd(_matmul_impl, _matmul_setup, _matmul_backward, "Matmul")
_LINEAR_FN = eager_autograd(_linear_impl, _linear_setup, _linear_backward, "Linear")


# ------------------------------------------------------------------ tiledsl::matmul_fp8

def _rows(x):
    """The rows of x (*, K) as a 2-D operand: the product of its leading dimensions (reshape(-1, K) cannot infer
    them when K is 0)."""
    return math.prod(x.shape[:-1])


def _check_fp8(a, b, scale_a, scale_b, out_dtype, bias):
    op = "matmul_fp8"
    for name, t in (("a", a), ("b", b)):
        if t.dtype not in FP8:
            refuse(op, f"{name}.dtype", t.dtype, "supported: torch.float8_e4m3fn, torch.float8_e5m2")
        if t.dim() != 2:
            raise ValueError(f"tiledsl.ops.{op}: {name} is {tuple(t.shape)}: need 2-D")
    M, K = a.shape
    N = b.shape[0]
    if b.shape[1] != K:
        raise ValueError(f"tiledsl.ops.{op}: a is {tuple(a.shape)} and b {tuple(b.shape)}: need (M, K) and (N, K)")
    kinds = []
    for name, s, row in (("scale_a", scale_a, (M, 1)), ("scale_b", scale_b, (1, N))):
        if s.dtype != torch.float32:
            refuse(op, f"{name}.dtype", s.dtype, "supported: torch.float32")
        shape = tuple(s.shape)
        # what the scale can be: a (1, 1) scale with M == 1 (N == 1) is per-tensor and per-row alike
        kind = {k for k, ok in (("tensor", s.numel() == 1 and len(shape) <= 2), ("row", shape == row)) if ok}
        if not kind:
            refuse(op, f"{name}.shape", shape, f"supported: per-tensor (one element) or per-row {row}, as "
                                               f"torch._scaled_mm takes them")
        kinds.append(kind)
    if not kinds[0] & kinds[1]:
        refuse(op, "scale_b.shape", tuple(scale_b.shape), f"scale_a and scale_b are both per-tensor or both "
                                                          f"per-row (scale_a is {tuple(scale_a.shape)})")
    rowwise = "tensor" not in kinds[0] & kinds[1]
    if out_dtype not in OUTS:
        refuse(op, "out_dtype", out_dtype, "supported: torch.bfloat16, torch.float16, torch.float32")
    if bias is not None:
        if bias.dtype not in OUTS:
            refuse(op, "bias.dtype", bias.dtype, "supported: torch.float16, torch.bfloat16, torch.float32")
        if tuple(bias.shape) != (N,):
            raise ValueError(f"tiledsl.ops.{op}: bias is {tuple(bias.shape)}: need ({N},)")
    if K % 16:
        refuse(op, "a.shape", tuple(a.shape), "K must be a multiple of 16 (the TMA unit reads rows of 16-byte "
                                              "multiples)")
    return rowwise


def _matmul_fp8_impl(a: Tensor, b: Tensor, scale_a: Tensor, scale_b: Tensor,
                     out_dtype: torch.dtype = torch.bfloat16, bias: Optional[Tensor] = None) -> Tensor:
    rowwise = _check_fp8(a, b, scale_a, scale_b, out_dtype, bias)
    _same_device("matmul_fp8", a, b, bias)
    _same_device("matmul_fp8", a, scale_a, scale_b)
    M, K = a.shape
    N = b.shape[0]
    if M == 0 or N == 0 or K == 0:
        return _epilogue_only(a.new_zeros((M, N), dtype=out_dtype), bias, None)
    fp8 = _host("matmul_fp8")
    a, b = a.contiguous(), b.contiguous()
    if not rowwise:
        return fp8(a, b, scale_a.reshape(1), scale_b.reshape(1), out_dtype, bias)
    # per-row scales: the kernel's epilogue scales by two scalars only, so the product is computed in float32 with
    # unit scales and torch applies the row and column scales, the bias and the rounding (unfused: one more pass)
    one = torch.ones(1, dtype=torch.float32, device=a.device)
    c = fp8(a, b, one, one, torch.float32, None)
    c = c.mul_(scale_a).mul_(scale_b)
    if bias is not None:
        c += bias
    return c.to(out_dtype)


_matmul_fp8_op = torch.library.custom_op(qualified("matmul_fp8"), _matmul_fp8_impl, mutates_args=())


@_matmul_fp8_op.register_fake
def _(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
    _check_fp8(a, b, scale_a, scale_b, out_dtype, bias)
    return a.new_empty((a.shape[0], b.shape[0]), dtype=out_dtype)


def _no_fp8_grad(ctx, g):
    raise RuntimeError("tiledsl.ops.matmul_fp8 is not differentiable (no backward: FP8 training needs its own "
                       "scaling recipe); detach its inputs")


def _fp8_setup(ctx, inputs, output):
    pass


_matmul_fp8_op.register_autograd(_no_fp8_grad, setup_context=_fp8_setup)


# ------------------------------------------------------------------ the public functions

_LINEAR = torch.ops.tiledsl.linear.default
_MATMUL = torch.ops.tiledsl.matmul.default
_MATMUL_FP8 = torch.ops.tiledsl.matmul_fp8.default


def linear(x, weight, bias=None, activation=None):
    """act(x @ weight.T + bias): F.linear's semantics for x (*, K) (any leading dimensions, zero-size included),
    weight (N, K), bias (N,) or None, float16 or bfloat16 (bias also float32); activation None, "relu", "gelu"
    (erf form) or "silu", fused into the GEMM's epilogue where the kernel has one. Differentiable in x, weight
    and bias. The op `torch.ops.tiledsl.linear`: traceable by torch.compile (fullgraph), capturable in CUDA
    graphs once a shape has run (its first call tunes). A plain eager call runs the op's implementation without
    the dispatcher (common.route): itself, or where autograd records the call, in a torch.autograd.Function."""
    r = route(x, weight, bias)
    if r == DISPATCH:
        return _LINEAR(x, weight, bias, activation)
    return (_linear_impl if r == DIRECT else _LINEAR_FN)(x, weight, bias, activation)


def matmul(a, b, bias=None, activation=None, out_dtype=None, *, out=None, config=None, static=True, tune=True):
    """act(a @ b.T + bias) for a (M, K), b (N, K) float16 / bfloat16, bias (N,), out_dtype None (a's dtype),
    float16, bfloat16 or float32. With the default keywords this is the op `torch.ops.tiledsl.matmul`
    (differentiable, traceable by torch.compile). out=, config=, static=False or tune=False call the host function
    (tiledsl.ops.gemm.matmul.matmul) directly: eager only (not an op: torch.compile would trace into the
    autotuner), no autograd, activation may also be a callable there."""
    if out is None and config is None and static and tune:
        r = route(a, b, bias)
        if r == DISPATCH:
            return _MATMUL(a, b, bias, activation, out_dtype)
        return (_matmul_impl if r == DIRECT else _MATMUL_FN)(a, b, bias, activation, out_dtype)
    return _host("matmul")(a, b, bias, activation, out_dtype, out=out, config=config, static=static, tune=tune)


def matmul_fp8(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None, *, out=None, config=None, tune=True):
    """(a @ b.T) * scales (+ bias) for FP8 a (M, K), b (N, K) (float8_e4m3fn / float8_e5m2, mixed allowed; K a
    multiple of 16), scales as torch._scaled_mm takes them: both per-tensor (float32, one element) or both per-row
    (scale_a (M, 1), scale_b (1, N), float32); out_dtype bfloat16 (default), float16 or float32; bias (N,) or None.
    Per-tensor scales are fused into the kernel's epilogue; per-row ones are applied by torch to the kernel's
    float32 product. With the default keywords this is the op `torch.ops.tiledsl.matmul_fp8` (traceable, not
    differentiable); out=, config= or tune=False call the host function (tiledsl.ops.gemm.fp8.matmul_fp8) directly,
    eager only, per-tensor scales only."""
    if out is None and config is None and tune:
        if direct(a, b, bias) and direct(scale_a, scale_b, None):
            return _matmul_fp8_impl(a, b, scale_a, scale_b, out_dtype, bias)
        return _MATMUL_FP8(a, b, scale_a, scale_b, out_dtype, bias)
    return _host("matmul_fp8")(a, b, scale_a, scale_b, out_dtype, bias, out=out, config=config, tune=tune)
