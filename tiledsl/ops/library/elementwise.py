"""The elementwise torch ops of a Llama-style block, on the kernels of tiledsl.ops.elementwise:

- `tiledsl::silu_mul(gate_up) -> y`: y = silu(gate) * up for gate_up (*, 2n) = [gate | up] (the output of one GEMM
  over the concatenated [W_gate; W_up] weight), y (*, n); differentiable (`tiledsl::_silu_mul_backward`).
- `tiledsl::qkv_rope(qkv, cos, sin, positions, n_heads, n_kv_heads) -> (q, k, v)`: the fused QKV projection's
  output (B, L, (H + 2 H_kv) D) split into q (B, H, L, D), k and v (B, H_kv, L, D) (the attention op's layout),
  q and k rotated by RoPE at `positions` (int32 (B, L)); differentiable in qkv (`tiledsl::_qkv_rope_backward`).
- `tiledsl::qkv_rope_paged(qkv, cos, sin, cache_seqlens, k_cache, v_cache, block_table, n_heads, n_kv_heads) -> q`:
  the decode step's form: the L new tokens of sequence b at positions cache_seqlens[b] + l (cache_seqlens: int32
  (B,), the tokens cached before them); q (B, L, H, D) (attention_decode's layout) returned, the rotated k and v
  written into the paged cache (num_pages, page, H_kv, D) at their positions (mutates k_cache and v_cache; not
  differentiable).

cos and sin are float32 (P, D/2) tables (`rope_tables`); positions past P - 1 read row P - 1 (the kernels clamp:
no host synchronisation to check them). float16 / bfloat16. CUDA tensors run the GPU kernels on the current
stream; CPU tensors run the same kernels on the interpreter (small sizes).
"""
import math

import torch

from .common import NAMESPACE, UnsupportedArgument, direct, no_double_backward, on_cpu, qualified, refuse
from .rowwise import _launchable

DTYPES = {torch.float16: "float16", torch.bfloat16: "bfloat16"}
SUPPORTED = "supported: torch.float16, torch.bfloat16"
MAX_ELEMENTS = 2 ** 31 - 1      # the kernels' element offsets are 32-bit (the paged caches' rows are 64-bit)
_TOO_BIG = f"at most {MAX_ELEMENTS} elements (32-bit offsets): split the batch"


def _aligned(t):
    """t contiguous with a 16-byte aligned base (the kernels' vector loads), copied only where it is not."""
    if not t.is_contiguous() or t.data_ptr() % 16:
        t = t.clone(memory_format=torch.contiguous_format)
    return t


# ---------------------------------------------------------------------------------------------------------------
# silu_mul

def _check_silu_mul(x):
    if x.dtype not in DTYPES:
        refuse("silu_mul", "gate_up.dtype", x.dtype, SUPPORTED)
    if x.dim() < 1 or x.shape[-1] % 2:
        raise ValueError(f"tiledsl.ops.silu_mul: gate_up is {tuple(x.shape)}: need (*, 2n), gate then up")
    if x.numel() > MAX_ELEMENTS:
        refuse("silu_mul", "gate_up.numel()", x.numel(), _TOO_BIG)
    return x.shape[-1] // 2


def _silu_mul_kernel(n, x, backward, cpu):
    from ..elementwise.swiglu import grid, make_silu_mul, THREADS
    rows = math.prod(x.shape[:-1])
    return _launchable(make_silu_mul(n, DTYPES[x.dtype], backward), cpu)[grid(n, rows), THREADS], rows


def _silu_mul_impl(gate_up: torch.Tensor) -> torch.Tensor:
    n = _check_silu_mul(gate_up)
    y = gate_up.new_empty((*gate_up.shape[:-1], n))
    if y.numel():
        launch, rows = _silu_mul_kernel(n, gate_up, False, on_cpu(gate_up))
        launch(_aligned(gate_up).view(2 * rows, n), y.view(rows, n))
    return y


_silu_mul = torch.library.custom_op(qualified("silu_mul"), _silu_mul_impl, mutates_args=())


@_silu_mul.register_fake
def _(gate_up):
    n = _check_silu_mul(gate_up)
    return gate_up.new_empty((*gate_up.shape[:-1], n))


@torch.library.custom_op(qualified("_silu_mul_backward"), mutates_args=())
def _silu_mul_backward(gate_up: torch.Tensor, dy: torch.Tensor) -> torch.Tensor:
    n = _check_silu_mul(gate_up)
    dx = torch.empty(gate_up.shape, dtype=gate_up.dtype, device=gate_up.device)
    if dx.numel():
        launch, rows = _silu_mul_kernel(n, gate_up, True, on_cpu(gate_up, dy))
        launch(_aligned(gate_up).view(2 * rows, n), _aligned(dy.to(gate_up.dtype)).view(rows, n),
               dx.view(2 * rows, n))
    return dx


no_double_backward(_silu_mul_backward, "silu_mul")


@_silu_mul_backward.register_fake
def _(gate_up, dy):
    return torch.empty_like(gate_up, memory_format=torch.contiguous_format)


def _silu_mul_setup(ctx, inputs, output):
    ctx.save_for_backward(inputs[0])


def _silu_mul_grad(ctx, dy):
    (gate_up,) = ctx.saved_tensors
    return _silu_mul_backward(gate_up, dy)


_silu_mul.register_autograd(_silu_mul_grad, setup_context=_silu_mul_setup)


# ---------------------------------------------------------------------------------------------------------------
# qkv_rope

def _check_rope(op, qkv, cos, sin, positions, n_heads, n_kv_heads, per_token=True):
    """(B, L, H, H_kv, D) after refusing what the kernels do not take (positions: int32 (B, L) per token, or the
    paged form's (B,) cache lengths)."""
    if qkv.dtype not in DTYPES:
        refuse(op, "qkv.dtype", qkv.dtype, SUPPORTED)
    if qkv.dim() != 3:
        raise ValueError(f"tiledsl.ops.{op}: qkv is {tuple(qkv.shape)}: need (B, L, (n_heads + 2 n_kv_heads) D)")
    H, HK = int(n_heads), int(n_kv_heads)
    if H < 1 or HK < 1 or H % HK:
        raise ValueError(f"tiledsl.ops.{op}: n_kv_heads={HK} must be >= 1 and divide n_heads={H}")
    B, L, width = qkv.shape
    if width % (H + 2 * HK):
        raise ValueError(f"tiledsl.ops.{op}: qkv's last dim {width} is not (n_heads + 2 n_kv_heads) * D = "
                         f"{H + 2 * HK} * D")
    if qkv.numel() > MAX_ELEMENTS:
        refuse(op, "qkv.numel()", qkv.numel(), _TOO_BIG)
    D = width // (H + 2 * HK)
    if D % 2 or not 2 <= D <= 2048:
        refuse(op, "head_dim", D, "an even head dim, 2 to 2048 (a thread per rotated pair)")
    for name, t in (("cos", cos), ("sin", sin)):
        if t.dtype != torch.float32 or t.dim() != 2 or t.shape[1] != D // 2 or t.shape[0] < 1:
            raise UnsupportedArgument(f"tiledsl.ops.{op}: {name} must be a float32 (max_positions, D/2 = {D // 2}) "
                                      f"table; got {t.dtype} {tuple(t.shape)}")
    want, name = ((B, L), "positions") if per_token else ((B,), "cache_seqlens")
    if positions.dtype != torch.int32 or tuple(positions.shape) != want:
        raise UnsupportedArgument(f"tiledsl.ops.{op}: {name} must be int32 {want}; got {positions.dtype} "
                                  f"{tuple(positions.shape)}")
    return B, L, H, HK, D


def _rope_kernel(H, HK, D, dtype, layout, backward, cpu, B, L):
    """The kernel, launch-ready for B x L tokens."""
    from ..elementwise.rope import launch, make_qkv_rope
    return _launchable(make_qkv_rope(H, HK, D, DTYPES[dtype], layout, backward), cpu)[launch(B, L, H, HK, D)]


def _qkv_rope_impl(qkv: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, positions: torch.Tensor,
                   n_heads: int, n_kv_heads: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    B, L, H, HK, D = _check_rope("qkv_rope", qkv, cos, sin, positions, n_heads, n_kv_heads)
    q = qkv.new_empty((B, H, L, D))
    k = qkv.new_empty((B, HK, L, D))
    v = qkv.new_empty((B, HK, L, D))
    if B * L:
        kern = _rope_kernel(H, HK, D, qkv.dtype, "bhld", False, on_cpu(qkv, cos, sin, positions), B, L)
        kern(qkv.contiguous(), positions.contiguous(), cos.contiguous(), sin.contiguous(), q, k, v)
    return q, k, v


_qkv_rope = torch.library.custom_op(qualified("qkv_rope"), _qkv_rope_impl, mutates_args=())


@_qkv_rope.register_fake
def _(qkv, cos, sin, positions, n_heads, n_kv_heads):
    B, L, H, HK, D = _check_rope("qkv_rope", qkv, cos, sin, positions, n_heads, n_kv_heads)
    return qkv.new_empty((B, H, L, D)), qkv.new_empty((B, HK, L, D)), qkv.new_empty((B, HK, L, D))


@torch.library.custom_op(qualified("_qkv_rope_backward"), mutates_args=())
def _qkv_rope_backward(dq: torch.Tensor, dk: torch.Tensor, dv: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                       positions: torch.Tensor) -> torch.Tensor:
    B, H, L, D = dq.shape
    HK = dk.shape[1]
    dqkv = dq.new_empty((B, L, (H + 2 * HK) * D))
    if B * L:
        kern = _rope_kernel(H, HK, D, dq.dtype, "bhld", True, on_cpu(dq, dk, dv, cos, sin, positions), B, L)
        kern(dq.contiguous(), dk.contiguous(), dv.contiguous(), positions.contiguous(), cos.contiguous(),
             sin.contiguous(), dqkv)
    return dqkv


no_double_backward(_qkv_rope_backward, "qkv_rope")


@_qkv_rope_backward.register_fake
def _(dq, dk, dv, cos, sin, positions):
    B, H, L, D = dq.shape
    return dq.new_empty((B, L, (H + 2 * dk.shape[1]) * D))


def _rope_setup(ctx, inputs, output):
    _qkv, cos, sin, positions, _h, _hk = inputs
    ctx.save_for_backward(cos, sin, positions)
    ctx.outputs = [(o.shape, o.dtype, o.device) for o in output]   # for zero gradients of unused outputs


def _rope_grad(ctx, dq, dk, dv):
    cos, sin, positions = ctx.saved_tensors
    # an output autograd did not reach (v unused, say) has no gradient: zeros keep to the one backward kernel
    dq, dk, dv = (torch.zeros(shape, dtype=dtype, device=dev) if g is None else g
                  for g, (shape, dtype, dev) in zip((dq, dk, dv), ctx.outputs))
    return _qkv_rope_backward(dq, dk, dv, cos, sin, positions), None, None, None, None, None


_qkv_rope.register_autograd(_rope_grad, setup_context=_rope_setup)


def _qkv_rope_paged_impl(qkv: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, cache_seqlens: torch.Tensor,
                         k_cache: torch.Tensor, v_cache: torch.Tensor, block_table: torch.Tensor, n_heads: int,
                         n_kv_heads: int) -> torch.Tensor:
    positions = cache_seqlens
    B, L, H, HK, D = _check_paged(qkv, cos, sin, positions, k_cache, v_cache, block_table, n_heads, n_kv_heads)
    q = qkv.new_empty((B, L, H, D))
    if B * L:
        kern = _rope_kernel(H, HK, D, qkv.dtype, "paged", False,
                            on_cpu(qkv, cos, sin, positions, k_cache, v_cache, block_table), B, L)
        kern(qkv.contiguous(), positions.contiguous(), cos.contiguous(), sin.contiguous(), q, k_cache, v_cache,
             block_table.contiguous())
    return q


def _check_paged(qkv, cos, sin, positions, k_cache, v_cache, block_table, n_heads, n_kv_heads):
    op = "qkv_rope_paged"
    B, L, H, HK, D = _check_rope(op, qkv, cos, sin, positions, n_heads, n_kv_heads, per_token=False)
    for name, t in (("k_cache", k_cache), ("v_cache", v_cache)):
        if t.dim() != 4 or t.shape[2] != HK or t.shape[3] != D or t.dtype != qkv.dtype:
            raise UnsupportedArgument(f"tiledsl.ops.{op}: {name} must be (num_pages, page, n_kv_heads={HK}, D={D}) "
                                      f"of qkv's dtype {qkv.dtype}; got {t.dtype} {tuple(t.shape)}")
        if not t.is_contiguous():
            raise UnsupportedArgument(f"tiledsl.ops.{op}: {name} must be contiguous (it is written in place)")
    if k_cache.shape != v_cache.shape:
        raise UnsupportedArgument(f"tiledsl.ops.{op}: k_cache {tuple(k_cache.shape)} and v_cache "
                                  f"{tuple(v_cache.shape)} must share a shape")
    if block_table.dtype != torch.int32 or block_table.dim() != 2 or block_table.shape[0] != B:
        raise UnsupportedArgument(f"tiledsl.ops.{op}: block_table must be int32 (B={B}, max_pages); got "
                                  f"{block_table.dtype} {tuple(block_table.shape)}")
    return B, L, H, HK, D


_qkv_rope_paged = torch.library.custom_op(qualified("qkv_rope_paged"), _qkv_rope_paged_impl,
                                          mutates_args=("k_cache", "v_cache"))


@_qkv_rope_paged.register_fake
def _(qkv, cos, sin, cache_seqlens, k_cache, v_cache, block_table, n_heads, n_kv_heads):
    B, L, H, HK, D = _check_paged(qkv, cos, sin, cache_seqlens, k_cache, v_cache, block_table, n_heads, n_kv_heads)
    return qkv.new_empty((B, L, H, D))


# ---------------------------------------------------------------------------------------------------------------
# the public functions

def rope_tables(max_positions, head_dim, theta, device=None):
    """(cos, sin): float32 (max_positions, head_dim / 2) tables of angle pos * theta^(-2i / head_dim)."""
    from ..elementwise.rope import rope_tables as tables
    if head_dim % 2:
        refuse("rope_tables", "head_dim", head_dim, "an even head dim")
    c, s = tables(int(max_positions), int(head_dim), float(theta))
    return torch.from_numpy(c).to(device), torch.from_numpy(s).to(device)


def silu_mul(gate_up):
    """silu(gate) * up for gate_up (*, 2n) = [gate | up] -> (*, n), float16 / bfloat16, differentiable."""
    if direct(gate_up):
        return _silu_mul_impl(gate_up)
    return _silu_mul(gate_up)


def qkv_rope(qkv, cos, sin, positions, n_heads, n_kv_heads):
    """q (B, H, L, D), k, v (B, H_kv, L, D) from qkv (B, L, (H + 2 H_kv) D), q and k rotated (RoPE, rotate-half
    convention) at positions int32 (B, L) by the float32 (P, D/2) cos and sin tables; differentiable in qkv."""
    if direct(qkv):
        return _qkv_rope_impl(qkv, cos, sin, positions, n_heads, n_kv_heads)
    return _qkv_rope(qkv, cos, sin, positions, n_heads, n_kv_heads)


def qkv_rope_paged(qkv, cos, sin, cache_seqlens, k_cache, v_cache, block_table, n_heads, n_kv_heads):
    """q (B, L, H, D) from qkv (B, L, (H + 2 H_kv) D), token l of sequence b rotated at position
    pos = cache_seqlens[b] + l (int32 (B,): the tokens cached before these); the rotated k and v written into the
    paged cache (num_pages, page, H_kv, D) at row pos % page of page block_table[b, pos // page]. In place on the
    caches; not differentiable."""
    return torch.ops.tiledsl.qkv_rope_paged(qkv, cos, sin, cache_seqlens, k_cache, v_cache, block_table, n_heads,
                                            n_kv_heads)


__all__ = ["silu_mul", "qkv_rope", "qkv_rope_paged", "rope_tables", "NAMESPACE"]
