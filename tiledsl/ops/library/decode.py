"""`tiledsl::attention_decode`: tiledsl.ops.attention_decode (flash/decode.py: new queries against a contiguous or
paged KV cache, split-KV) as a torch custom op with a fake implementation, so a decode step built on it traces
under torch.compile(fullgraph=True) and captures in a CUDA graph (the host function chooses its splits from shapes
only and never synchronises).

    out = torch.ops.tiledsl.attention_decode(q, k_cache, v_cache, cache_seqlens, block_table, causal, scale)

q (B, Lq, H, D) float16 / bfloat16 (Lq 1..16), k_cache and v_cache (num_pages, page, H_kv, D) with block_table int32
(B, max_pages), or contiguous (B, S_max, H_kv, D) with block_table None; cache_seqlens int32 (B,): the keys of each
sequence, the Lq new ones included (already in the cache). Returns out (B, Lq, H, D). No autograd (inference): a
gradient through it raises. The FP8 cache form of the host function is not exposed here.
"""
from typing import Optional

import torch

from .common import UnsupportedArgument, on_cpu, qualified, refuse

OP = "attention_decode"
DTYPES = (torch.float16, torch.bfloat16)


def _check(q, k_cache, v_cache, cache_seqlens, block_table, scale):
    if q.dtype not in DTYPES:
        refuse(OP, "q.dtype", q.dtype, "supported: torch.float16, torch.bfloat16")
    for name, t in (("k_cache", k_cache), ("v_cache", v_cache)):
        if t.dtype != q.dtype:
            refuse(OP, f"{name}.dtype", t.dtype, f"the cache's dtype must be q's ({q.dtype})")
    if q.dim() != 4 or not 1 <= q.shape[1] <= 16:
        raise UnsupportedArgument(f"tiledsl.ops.{OP}: q must be (B, Lq, H, D) with Lq in 1..16; got {tuple(q.shape)}")
    if k_cache.dim() != 4 or k_cache.shape != v_cache.shape or k_cache.shape[3] != q.shape[3]:
        raise UnsupportedArgument(f"tiledsl.ops.{OP}: k_cache {tuple(k_cache.shape)} and v_cache "
                                  f"{tuple(v_cache.shape)} must share a 4-D shape ending in q's D={q.shape[3]}")
    if q.shape[2] % k_cache.shape[2]:
        raise UnsupportedArgument(f"tiledsl.ops.{OP}: the cache's heads ({k_cache.shape[2]}) must divide q's "
                                  f"({q.shape[2]})")
    if cache_seqlens.dtype != torch.int32 or tuple(cache_seqlens.shape) != (q.shape[0],):
        raise UnsupportedArgument(f"tiledsl.ops.{OP}: cache_seqlens must be int32 ({q.shape[0]},); got "
                                  f"{cache_seqlens.dtype} {tuple(cache_seqlens.shape)}")
    if block_table is not None and (block_table.dtype != torch.int32 or block_table.dim() != 2 or
                                    block_table.shape[0] != q.shape[0]):
        raise UnsupportedArgument(f"tiledsl.ops.{OP}: block_table must be int32 (B={q.shape[0]}, max_pages); got "
                                  f"{block_table.dtype} {tuple(block_table.shape)}")
    if scale is not None and not scale > 0:
        refuse(OP, "scale", scale, "a positive scale, or None (1/sqrt(D))")


@torch.library.custom_op(qualified(OP), mutates_args=())
def attention_decode(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, cache_seqlens: torch.Tensor,
                     block_table: Optional[torch.Tensor] = None, causal: bool = False,
                     scale: Optional[float] = None) -> torch.Tensor:
    _check(q, k_cache, v_cache, cache_seqlens, block_table, scale)
    on_cpu(q, k_cache, v_cache, cache_seqlens, block_table)
    from ..flash.decode import attention_decode as host
    return host(q, k_cache, v_cache, cache_seqlens, block_table, scale=scale, causal=causal)


@attention_decode.register_fake
def _(q, k_cache, v_cache, cache_seqlens, block_table=None, causal=False, scale=None):
    _check(q, k_cache, v_cache, cache_seqlens, block_table, scale)
    return torch.empty_like(q, memory_format=torch.contiguous_format)


__all__ = ["attention_decode"]
