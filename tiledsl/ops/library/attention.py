"""`scaled_dot_product_attention` with `F.scaled_dot_product_attention`'s signature and semantics, on the FlashAttention
kernels of tiledsl.ops.flash, as two torch custom ops with fake implementations and autograd:

- `tiledsl::scaled_dot_product_attention_forward(query, key, value, is_causal=False, scale=None) -> (out, lse)`: (B, H, L, E)
  query, (B, H_kv, S, E) key and value (H_kv dividing H: grouped-query heads), out like query, lse float32 (B, H, L),
  the natural-log log-sum-exp of each row's scaled scores (not differentiable, as torch's flash backend's);
- `tiledsl::scaled_dot_product_attention_backward(grad_out, query, key, value, out, lse, is_causal=False, scale=None)
  -> (grad_query, grad_key, grad_value)`, the forward's autograd formula (it saves query, key, value, out, lse).

The public `scaled_dot_product_attention` takes torch's (..., L, E) layouts, broadcast batch dims and `enable_gqa`,
reshapes to (B, H, L, E) and calls the forward op, returning out only. It is also the op
`tiledsl::scaled_dot_product_attention` with F.scaled_dot_product_attention's schema (API.md: every public op is
torch.ops.tiledsl.<name>), a CompositeImplicitAutograd kernel: autograd, fake tensors and torch.compile see the
forward and backward ops it calls. CUDA tensors run forward.attention's and
backward.attention_backward's kernels (FA3 on an sm_90 GPU where they support the head dim, else FA2); CPU tensors
run the same kernels on the interpreter (small sizes), so CI checks the op end to end. The inputs need not be
contiguous (the kernels read contiguous copies); a zero-size dimension gives torch's result without a launch (no
keys: out zeros, lse -inf). What the kernels do not do is refused, naming the argument: attn_mask, dropout_p > 0,
dtypes other than float16 / bfloat16, head dims other than HEAD_DIMS (nested jagged inputs with a gradient:
VARLEN_GRAD_HEAD_DIMS), value's head dim differing from query's, a scale that is not positive and finite.
is_causal is top-left aligned (key j masked for query i when j > i) in torch and in every kernel here alike, so
L != S is served as torch serves it.
"""
import math
from typing import Optional

import torch

from .common import (DIRECT, DISPATCH, NAMESPACE, UnsupportedArgument, call, eager_autograd, no_double_backward,
                     on_cpu, qualified, refuse, route)

OP = "scaled_dot_product_attention"
DTYPES = (torch.float16, torch.bfloat16)
HEAD_DIMS = (64, 128, 256)          # the forward and the backward kernels' (256: fa3_backward's column split)
VARLEN_GRAD_HEAD_DIMS = (64, 128)   # the variable-length backward's (nested jagged inputs with a gradient)
_DEVICES = ("cpu", "cuda")


def _supported_dims(grad_dims=HEAD_DIMS):
    free = [d for d in HEAD_DIMS if d not in grad_dims]
    return (f"supported head dims: {', '.join(map(str, grad_dims))}" +
            (f" (and {', '.join(map(str, free))} where no gradient is wanted)" if free else ""))


def _resolve_scale(scale, E):
    """torch's default 1/sqrt(E), or `scale`, which the kernels need positive and finite (they mask scores to -inf
    before scaling)."""
    if scale is None:
        return 1.0 / math.sqrt(E)
    if not (float(scale) > 0 and math.isfinite(float(scale))):
        refuse(OP, "scale", scale, "a positive finite scale, or None (1/sqrt(E), torch's default)")
    return float(scale)


def _check(query, key, value, scale):
    """The ops' checks of (B, H, L, E) query and (B, H_kv, S, E) key and value; the resolved scale."""
    for name, t in (("query", query), ("key", key), ("value", value)):
        if t.dim() != 4:
            raise UnsupportedArgument(f"tiledsl.ops.{OP}: the torch op takes 4-d (B, H, L, E) tensors; {name} has "
                                      f"shape {tuple(t.shape)} (tiledsl.ops.{OP} takes any leading dims)")
    if query.dtype not in DTYPES:
        refuse(OP, "query.dtype", query.dtype, "supported dtypes: torch.float16, torch.bfloat16")
    for name, t in (("key", key), ("value", value)):
        if t.dtype != query.dtype:
            refuse(OP, f"{name}.dtype", t.dtype, f"query, key and value must share one dtype (query's is "
                                                  f"{query.dtype})")
    if query.device.type not in _DEVICES and query.device.type != "meta":
        refuse(OP, "query.device", str(query.device), "CUDA tensors (the GPU kernels) or CPU tensors (the "
                                                      "interpreter)")
    on_cpu(query, key, value)
    B, H, L, E = query.shape
    if E not in HEAD_DIMS:
        refuse(OP, "query.size(-1)", int(E), f"supported head dims with a gradient: {', '.join(map(str, HEAD_DIMS))}")
    if value.shape[-1] != E:
        refuse(OP, "value.size(-1)", int(value.shape[-1]), f"value's head dim must equal query's ({E})")
    if key.shape[-1] != E:
        raise UnsupportedArgument(f"tiledsl.ops.{OP}: key's head dim {key.shape[-1]} must equal query's {E}")
    if key.shape[:3] != value.shape[:3] or key.shape[0] != B:
        raise UnsupportedArgument(f"tiledsl.ops.{OP}: key {tuple(key.shape)} and value {tuple(value.shape)} must be "
                                  f"(B, H_kv, S, E) with query's B = {B}")
    HK = key.shape[1]
    if (HK == 0 and H != 0) or (HK != 0 and H % HK):
        raise UnsupportedArgument(f"tiledsl.ops.{OP}: key/value heads ({HK}) must divide query's heads ({H})")
    return _resolve_scale(scale, E)


def _empty(query, key, value):
    """A zero-size case: no query row, or no key (torch: out zeros, the softmax over nothing)."""
    return query.numel() == 0 or key.shape[2] == 0


# ---------------------------------------------------------------------------------------------------------------
# the forward op
def _forward_impl(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, is_causal: bool = False,
                  scale: Optional[float] = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(out, lse) of softmax(scale query keyᵀ [causal]) value for (B, H, L, E) query and (B, H_kv, S, E) key and
    value; lse float32 (B, H, L), natural log."""
    scale = _check(query, key, value, scale)
    B, H, L, E = query.shape
    if _empty(query, key, value):
        return (query.new_zeros((B, H, L, E)),
                torch.full((B, H, L), -math.inf, dtype=torch.float32, device=query.device))
    from ..flash.forward import attention
    # contiguous first: the FA3 kernel's choice (forward._fa3_fits) looks at the bases the kernel will read
    q, k, v = (t.contiguous() for t in (query, key, value))
    return attention(q, k, v, causal=is_causal, scale=scale)


sdpa_forward = torch.library.custom_op(qualified(OP + "_forward"), _forward_impl, mutates_args=())


@sdpa_forward.register_fake
def _(query, key, value, is_causal=False, scale=None):
    _check(query, key, value, scale)
    B, H, L, E = query.shape
    return query.new_empty((B, H, L, E)), query.new_empty((B, H, L), dtype=torch.float32)


# ---------------------------------------------------------------------------------------------------------------
# the backward op
def _backward_impl(grad_out: torch.Tensor, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                  out: torch.Tensor, lse: torch.Tensor, is_causal: bool = False,
                  scale: Optional[float] = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(grad_query, grad_key, grad_value) of the forward op's out for the gradient grad_out (grouped-query heads:
    a key/value head's gradients summed over its query heads), in query's dtype."""
    scale = _check(query, key, value, scale)
    _check_saved(grad_out, query, out, lse)
    if _empty(query, key, value):
        return (torch.zeros_like(query, memory_format=torch.contiguous_format),
                torch.zeros_like(key, memory_format=torch.contiguous_format),
                torch.zeros_like(value, memory_format=torch.contiguous_format))
    from ..flash.backward import attention_backward
    return attention_backward(query, key, value, out, lse, grad_out, causal=is_causal, scale=scale)


sdpa_backward = torch.library.custom_op(qualified(OP + "_backward"), _backward_impl, mutates_args=())
no_double_backward(sdpa_backward, OP)


def _check_saved(grad_out, query, out, lse):
    B, H, L, E = query.shape
    for name, t in (("grad_out", grad_out), ("out", out)):
        if t.shape != query.shape or t.dtype != query.dtype:
            raise UnsupportedArgument(f"tiledsl.ops.{OP}_backward: {name} must have query's shape {tuple(query.shape)} "
                                      f"and dtype {query.dtype}; got {tuple(t.shape)} {t.dtype}")
    if lse.shape != (B, H, L) or lse.dtype != torch.float32:
        raise UnsupportedArgument(f"tiledsl.ops.{OP}_backward: lse must be float32 {(B, H, L)}; got "
                                  f"{tuple(lse.shape)} {lse.dtype}")


@sdpa_backward.register_fake
def _(grad_out, query, key, value, out, lse, is_causal=False, scale=None):
    _check(query, key, value, scale)
    _check_saved(grad_out, query, out, lse)
    return (query.new_empty(query.shape), key.new_empty(key.shape), value.new_empty(value.shape))


# ---------------------------------------------------------------------------------------------------------------
# autograd: the backward op, on what the forward saved
def _setup_context(ctx, inputs, output):
    query, key, value, is_causal, scale = inputs
    out, lse = output
    ctx.save_for_backward(query, key, value, out, lse)
    ctx.is_causal, ctx.scale = is_causal, scale
    ctx.mark_non_differentiable(lse)


def _backward(ctx, grad_out, grad_lse):
    query, key, value, out, lse = ctx.saved_tensors
    dq, dk, dv = call(sdpa_backward, _backward_impl, grad_out, query, key, value, out, lse, ctx.is_causal, ctx.scale)
    return dq, dk, dv, None, None


sdpa_forward.register_autograd(_backward, setup_context=_setup_context)
# an eager call autograd records: the implementation in a torch.autograd.Function with the formulas above
# (common.route: the custom op's generated autograd redispatches through Python, a training step's largest host cost)
_SDPA_FN = eager_autograd(_forward_impl, _setup_context, _backward, "ScaledDotProductAttention")


# ---------------------------------------------------------------------------------------------------------------
# the public function: F.scaled_dot_product_attention's signature and layouts
def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
                                 enable_gqa=False):
    """F.scaled_dot_product_attention(query, key, value, ...) on tiledsl's FlashAttention kernels, differentiable.

    query (..., H, L, E), key and value (..., H_kv, S, E) (2-d and 3-d inputs too; batch dims broadcast as torch's);
    H_kv != H takes enable_gqa=True (H_kv dividing H), as torch. is_causal: key j masked for query i when j > i
    (top-left aligned, torch's). scale: None is 1/sqrt(E). float16 / bfloat16; E in HEAD_DIMS; value's head dim
    E. attn_mask and dropout_p > 0 are refused
    (UnsupportedArgument). Returns out, (..., H, L, E) in query's dtype."""
    if attn_mask is not None:
        raise UnsupportedArgument(
            f"tiledsl.ops.{OP}: attn_mask is not supported (got a {getattr(attn_mask, 'dtype', type(attn_mask))} "
            f"mask of shape {tuple(getattr(attn_mask, 'shape', ()))}); only attn_mask=None: for a causal mask pass "
            f"is_causal=True (top-left aligned, as torch's)")
    if dropout_p != 0.0:
        refuse(OP, "dropout_p", dropout_p, "only dropout_p=0.0 (no dropout)")
    for name, t in (("query", query), ("key", key), ("value", value)):
        if not isinstance(t, torch.Tensor):
            raise UnsupportedArgument(f"tiledsl.ops.{OP}: {name} must be a torch.Tensor, got {type(t).__name__}")
    if any(t.is_nested for t in (query, key, value)):
        return _jagged(query, key, value, is_causal, scale, enable_gqa)
    if query.dim() == key.dim() == value.dim() == 4 and query.shape[0] == key.shape[0] == value.shape[0] and \
            key.shape[1] == value.shape[1] and (query.shape[1] == key.shape[1] or
                                                enable_gqa and key.shape[1] and query.shape[1] % key.shape[1] == 0):
        # the common (B, H, L, E) call: nothing to broadcast (torch.broadcast_shapes alone costs more host time than
        # the rest of the call, and an eager caller waits on it)
        return _forward(query, key, value, is_causal, scale)
    for name, t in (("query", query), ("key", key), ("value", value)):
        if t.dim() < 2:
            raise UnsupportedArgument(f"tiledsl.ops.{OP}: {name} must be (..., L, E) with at least 2 dims; got shape "
                                      f"{tuple(t.shape)}")
    q, k, v = (t if t.dim() >= 3 else t.unsqueeze(0) for t in (query, key, value))
    H, HK = q.shape[-3], k.shape[-3]
    if v.shape[-3] != HK:
        raise UnsupportedArgument(f"tiledsl.ops.{OP}: key has {HK} heads and value {v.shape[-3]}: they must agree")
    if not enable_gqa:
        # as torch (no enable_gqa): the heads broadcast with the batch dims; a single k/v head serves every query
        # head as the kernels' grouped-query heads do (no copy), a single query head is expanded
        if HK != H and HK != 1 and H != 1:
            raise UnsupportedArgument(f"tiledsl.ops.{OP}: query has {q.shape[-3]} heads and key/value {HK}: "
                                      f"grouped-query attention needs enable_gqa=True (as torch's)")
        H = HK if H == 1 else H
    elif (HK == 0 and H != 0) or (HK != 0 and H % HK):
        raise UnsupportedArgument(f"tiledsl.ops.{OP}: enable_gqa=True needs key/value's heads ({HK}) to divide "
                                  f"query's ({H})")
    out_shape = _out_shape(query, key, value, enable_gqa)
    batch = torch.broadcast_shapes(q.shape[:-3], k.shape[:-3], v.shape[:-3])
    nb = math.prod(batch)
    q4 = q.expand(*batch, H, *q.shape[-2:]).reshape(nb, H, *q.shape[-2:])
    k4 = k.expand(*batch, HK, *k.shape[-2:]).reshape(nb, HK, *k.shape[-2:])
    v4 = v.expand(*batch, HK, *v.shape[-2:]).reshape(nb, HK, *v.shape[-2:])
    return _forward(q4, k4, v4, is_causal, scale).reshape(out_shape)


def _forward(q, k, v, is_causal, scale):
    """The forward op's output for (B, H, L, E) q and (B, H_kv, S, E) k, v (E already checked)."""
    scale = None if scale is None else float(scale)
    r = route(q, k, v)          # eager calls: the implementation without the dispatcher (common.route)
    if r == DISPATCH:
        return sdpa_forward(q, k, v, bool(is_causal), scale)[0]
    return (_forward_impl if r == DIRECT else _SDPA_FN)(q, k, v, bool(is_causal), scale)[0]


def _jagged(query, key, value, is_causal, scale, enable_gqa):
    """torch nested tensors of layout torch.jagged, as SDPA takes them ((B, H, j, D), or (B, j, H, D)): packed by
    their values() and offsets() and run by the variable-length kernels (flash.varlen; differentiable through
    flash_attention_varlen), out a nested tensor of query's layout. is_causal is bottom-right aligned per sequence
    (as torch's flash backend and FlashAttention's varlen take it for jagged tensors), which is top-left where a
    sequence's query and key lengths agree (self-attention)."""
    import torch as _torch
    for name, t in (("query", query), ("key", key), ("value", value)):
        if not getattr(t, "is_nested", False) or t.layout != _torch.jagged or t.dim() != 4:
            raise UnsupportedArgument(f"tiledsl.ops.{OP}: nested inputs must all be 4-d nested tensors of layout "
                                      f"torch.jagged ((B, H, j, E) as SDPA takes them); {name} is "
                                      f"{'a nested tensor of layout ' + str(t.layout) if t.is_nested else 'dense'}")
    from ..flash.varlen import jagged_to_packed, packed_to_jagged
    from ..flash.varlen_backward import flash_attention_varlen
    pq, oq, mq = jagged_to_packed(query)
    pk, ok, mk = jagged_to_packed(key)
    pv, ov, _ = jagged_to_packed(value)
    if query.dtype not in DTYPES:
        refuse(OP, "query.dtype", query.dtype, "supported dtypes: torch.float16, torch.bfloat16")
    if key.dtype != query.dtype or value.dtype != query.dtype:
        refuse(OP, "key.dtype", key.dtype, f"query, key and value must share one dtype (query's is {query.dtype})")
    E = pq.shape[-1]
    grad = _torch.is_grad_enabled() and any(t.requires_grad for t in (query, key, value))
    if E not in (VARLEN_GRAD_HEAD_DIMS if grad else HEAD_DIMS):
        refuse(OP, "query.size(-1)", int(E), _supported_dims(VARLEN_GRAD_HEAD_DIMS if grad else HEAD_DIMS))
    if pk.shape[-1] != E or pv.shape != pk.shape:
        raise UnsupportedArgument(f"tiledsl.ops.{OP}: key and value must share the packed shape (tokens, H_kv, "
                                  f"{E}); got {tuple(pk.shape)} and {tuple(pv.shape)}")
    H, HK = pq.shape[1], pk.shape[1]
    if HK != H and not (enable_gqa and HK and H % HK == 0):
        raise UnsupportedArgument(f"tiledsl.ops.{OP}: query has {H} heads and key/value {HK}: grouped-query "
                                  f"attention needs enable_gqa=True and key/value's heads dividing query's")
    if oq.shape != ok.shape or ov.shape != ok.shape:
        raise UnsupportedArgument(f"tiledsl.ops.{OP}: query, key and value must hold the same number of sequences; "
                                  f"got {oq.numel() - 1}, {ok.numel() - 1}, {ov.numel() - 1}")
    out = flash_attention_varlen(pq, pk, pv, oq, ok, mq, mk, bool(is_causal), _resolve_scale(scale, E))
    return packed_to_jagged(out, query)


def _out_shape(query, key, value, enable_gqa):
    """The shape torch's F.scaled_dot_product_attention gives its output."""
    L, Ev = query.shape[-2], value.shape[-1]
    if enable_gqa and query.dim() >= 3:
        lead = torch.broadcast_shapes(query.shape[:-3], key.shape[:-3], value.shape[:-3]) + (query.shape[-3],)
    else:
        lead = torch.broadcast_shapes(query.shape[:-2], key.shape[:-2], value.shape[:-2])
    return (*lead, L, Ev)


# the public function as torch.ops.tiledsl.scaled_dot_product_attention, F.scaled_dot_product_attention's schema
_LIB = torch.library.Library(NAMESPACE, "FRAGMENT")
_LIB.define(f"{OP}(Tensor query, Tensor key, Tensor value, Tensor? attn_mask=None, float dropout_p=0.0, "
            "bool is_causal=False, float? scale=None, bool enable_gqa=False) -> Tensor")
_LIB.impl(OP, scaled_dot_product_attention, "CompositeImplicitAutograd")
