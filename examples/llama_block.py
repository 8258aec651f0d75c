"""A Llama-3-style decoder layer on tiledsl.ops (`LlamaBlock`) beside the same layer in plain torch
(`TorchLlamaBlock`): one parameter layout, so `LlamaBlock.from_torch(ref)` (or load_state_dict) makes the two
compute the same function.

    cfg = LlamaConfig()                                   # Llama-3-8B's layer: 4096 hidden, 32/8 heads, 14336 MLP
    ref = TorchLlamaBlock(cfg, device="cuda")
    blk = LlamaBlock.from_torch(ref)
    out, residual = blk(x)                                # training / prefill: causal attention over x's tokens
    out, residual = blk.decode(x_new, k_cache, v_cache, block_table, cache_seqlens)   # a decode step, paged cache

The residual stream is carried beside the layer's output (as serving engines do): forward(x, residual) returns
(out, residual) and the layer's hidden state is out + residual. The first layer passes residual=None (the input is
the residual); later layers pass both, and the add is fused into the next RMS norm.

What runs where (LlamaBlock):
- RMS norm: `ops.rms_norm`, or `ops.add_rms_norm` (residual add + norm in one pass) when a residual is given, and
  between the attention and the MLP (the attention's residual add fused into the MLP's norm);
- QKV: one GEMM over the fused [W_q; W_k; W_v] weight (`ops.linear`), then `ops.qkv_rope`: the split into q, k, v
  and RoPE on q and k in one pass, written in the (B, heads, L, D) layout the attention kernels read;
- attention: `ops.scaled_dot_product_attention` (causal, grouped-query heads);
- MLP: one GEMM over the fused [W_gate; W_up] weight, `ops.silu_mul` (silu(gate) * up in one pass), the down GEMM;
- decode: `ops.qkv_rope_paged` (q rotated; k and v rotated and written into the paged cache: the cache update is
  in the same pass) and `torch.ops.tiledsl.attention_decode` (split-KV over the pages).
Every piece is a torch custom op with a fake implementation, so the block traces under torch.compile(fullgraph=True)
and captures in CUDA graphs; the backward runs the ops' own backward kernels.
"""
from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F

import tiledsl.ops as ops
import tiledsl.ops.library  # noqa: F401  (registers torch.ops.tiledsl.*, attention_decode among them)


@dataclass(frozen=True)
class LlamaConfig:
    hidden: int = 4096
    heads: int = 32
    kv_heads: int = 8
    head_dim: int = 128
    mlp: int = 14336
    eps: float = 1e-5
    rope_theta: float = 500000.0
    max_positions: int = 40960       # the RoPE tables' rows: the benchmark's 32k contexts plus new tokens
    dtype: torch.dtype = torch.bfloat16

    def __post_init__(self):
        if self.heads % self.kv_heads:
            raise ValueError(f"kv_heads={self.kv_heads} must divide heads={self.heads}")
        if self.head_dim % 2:
            raise ValueError(f"head_dim={self.head_dim} must be even (RoPE rotates pairs)")

    @property
    def qkv_width(self):
        return (self.heads + 2 * self.kv_heads) * self.head_dim


# a layer small enough for the interpreter (CPU tests); the head dim is the attention kernels' smallest
TINY = LlamaConfig(hidden=128, heads=2, kv_heads=1, head_dim=64, mlp=256, max_positions=64)


def rope_tables(cfg, device=None):
    """float32 (max_positions, head_dim / 2) cos and sin of pos * theta^(-2i / head_dim), computed in float64."""
    inv = cfg.rope_theta ** (-torch.arange(0, cfg.head_dim, 2, dtype=torch.float64) / cfg.head_dim)
    ang = torch.arange(cfg.max_positions, dtype=torch.float64)[:, None] * inv[None, :]
    return ang.cos().float().to(device), ang.sin().float().to(device)


class _LlamaWeights(torch.nn.Module):
    """The layer's parameters, shared by both implementations: the two RMS norm weights, the fused QKV weight
    ((H + 2 H_kv) D, hidden: q rows, then k, then v), the output projection (hidden, H D), the fused gate/up weight
    (2 mlp, hidden: gate rows, then up) and the down projection (hidden, mlp); the RoPE tables as float32 buffers
    (not in the state dict)."""

    def __init__(self, cfg=LlamaConfig(), device=None, dtype=None, seed=0):
        super().__init__()
        self.config = cfg if dtype is None else replace(cfg, dtype=dtype)
        c = self.config
        g = torch.Generator().manual_seed(seed)

        def p(*shape, std=None, around=None):
            t = torch.randn(*shape, generator=g, dtype=torch.float32)
            t = around + 0.1 * t if around is not None else t * std
            return torch.nn.Parameter(t.to(device=device, dtype=c.dtype))
        self.attn_norm = p(c.hidden, around=1.0)
        self.qkv = p(c.qkv_width, c.hidden, std=c.hidden ** -0.5)
        self.o = p(c.hidden, c.heads * c.head_dim, std=(c.heads * c.head_dim) ** -0.5)
        self.mlp_norm = p(c.hidden, around=1.0)
        self.gate_up = p(2 * c.mlp, c.hidden, std=c.hidden ** -0.5)
        self.down = p(c.hidden, c.mlp, std=c.mlp ** -0.5)
        cos, sin = rope_tables(c, device)
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)

    def new_cache(self, batch, max_tokens, page_size=64, device=None):
        """An empty paged KV cache for `batch` sequences of up to max_tokens: (k_cache, v_cache, block_table,
        cache_seqlens): pages (num_pages, page_size, H_kv, D) handed out in order, lengths 0."""
        c = self.config
        device = device or self.qkv.device
        per = -(-max_tokens // page_size)
        k = torch.zeros(batch * per, page_size, c.kv_heads, c.head_dim, dtype=c.dtype, device=device)
        table = torch.arange(batch * per, dtype=torch.int32, device=device).view(batch, per)
        return k, torch.zeros_like(k), table, torch.zeros(batch, dtype=torch.int32, device=device)


class LlamaBlock(_LlamaWeights):
    """The layer on tiledsl.ops (module docstring)."""

    @classmethod
    def from_torch(cls, ref, dtype=None):
        """A LlamaBlock computing ref's function (its weights, in `dtype` or ref's)."""
        blk = cls(ref.config, device=ref.qkv.device, dtype=dtype or ref.config.dtype)
        blk.load_state_dict({k: v.to(blk.config.dtype) for k, v in ref.state_dict().items()})
        return blk

    def _attn_in(self, x, residual):
        c = self.config
        if residual is None:
            return ops.rms_norm(x, self.attn_norm, c.eps), x
        return ops.add_rms_norm(x, residual, self.attn_norm, c.eps)

    def _mlp(self, a, residual):
        c = self.config
        h, residual = ops.add_rms_norm(ops.linear(a, self.o), residual, self.mlp_norm, c.eps)
        return ops.linear(ops.silu_mul(ops.linear(h, self.gate_up)), self.down), residual

    def forward(self, x, residual=None):
        """(out, residual) for x (B, L, hidden): causal self-attention over the L tokens at positions 0..L-1."""
        c = self.config
        B, L, _ = x.shape
        if L > c.max_positions:
            raise ValueError(f"{L} tokens: the RoPE tables hold {c.max_positions} positions (config.max_positions)")
        h, residual = self._attn_in(x, residual)
        pos = torch.arange(L, dtype=torch.int32, device=x.device).expand(B, L)
        q, k, v = ops.qkv_rope(ops.linear(h, self.qkv), self.rope_cos, self.rope_sin, pos, c.heads, c.kv_heads)
        a = ops.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        return self._mlp(a.transpose(1, 2).reshape(B, L, c.heads * c.head_dim), residual)

    @torch.no_grad()                  # inference only: the cache write and the decode attention have no gradient
    def decode(self, x, k_cache, v_cache, block_table, cache_seqlens, residual=None):
        """(out, residual) for x (B, Lq, hidden), Lq new tokens per sequence (1..16) at positions cache_seqlens[b] ..
        cache_seqlens[b] + Lq - 1: their k and v are written into the paged cache and they attend (causally among
        themselves) to everything cached. cache_seqlens (int32 (B,)): the tokens cached before this step; the
        caller advances it by Lq after the step (after every layer of a model)."""
        c = self.config
        B, Lq, _ = x.shape
        if not 1 <= Lq <= 16:
            raise ValueError(f"a decode step takes 1 to 16 new tokens a sequence (attention_decode's), got {Lq}")
        h, residual = self._attn_in(x, residual)
        q = ops.qkv_rope_paged(ops.linear(h, self.qkv), self.rope_cos, self.rope_sin, cache_seqlens, k_cache,
                               v_cache, block_table, c.heads, c.kv_heads)
        a = torch.ops.tiledsl.attention_decode(q, k_cache, v_cache, cache_seqlens + Lq, block_table, Lq > 1, None)
        return self._mlp(a.view(B, Lq, c.heads * c.head_dim), residual)


def _rotate(x, cos, sin):
    """RoPE (rotate-half) on x (B, L, heads, D) with cos, sin (B, L, D/2) in x's dtype, as HF's Llama."""
    cos = torch.cat([cos, cos], -1)[:, :, None]
    sin = torch.cat([sin, sin], -1)[:, :, None]
    x1, x2 = x.chunk(2, -1)
    return x * cos + torch.cat([-x2, x1], -1) * sin


def _sdpa(q, k, v, **kw):
    """SDPA with grouped-query heads. float16 / bfloat16: enable_gqa (the flash and cuDNN backends read the shared
    heads). float32 (the reference run): the k/v heads repeated, so the memory-efficient backend serves it: with
    enable_gqa only the math backend takes float32, and it materialises the L x L scores (137 GB at 32k tokens)."""
    if q.dtype == torch.float32 and k.shape[1] != q.shape[1]:
        g = q.shape[1] // k.shape[1]
        return F.scaled_dot_product_attention(q, k.repeat_interleave(g, 1), v.repeat_interleave(g, 1), **kw)
    return F.scaled_dot_product_attention(q, k, v, enable_gqa=True, **kw)


class TorchLlamaBlock(_LlamaWeights):
    """The same layer in plain torch: F.rms_norm, F.linear (cuBLAS), RoPE by torch ops, SDPA (its best backend)
    with grouped-query heads, F.silu(gate) * up."""

    def _qkv(self, x, residual, pos):
        c = self.config
        B, L, _ = x.shape
        residual = x if residual is None else x + residual
        h = F.rms_norm(residual, (c.hidden,), self.attn_norm, c.eps)
        qkv = F.linear(h, self.qkv).view(B, L, c.heads + 2 * c.kv_heads, c.head_dim)
        q, k, v = qkv.split([c.heads, c.kv_heads, c.kv_heads], dim=2)
        cos, sin = self.rope_cos[pos].to(x.dtype), self.rope_sin[pos].to(x.dtype)
        return _rotate(q, cos, sin), _rotate(k, cos, sin), v, residual

    def _mlp(self, a, residual):
        c = self.config
        residual = F.linear(a, self.o) + residual
        gate, up = F.linear(F.rms_norm(residual, (c.hidden,), self.mlp_norm, c.eps), self.gate_up).chunk(2, -1)
        return F.linear(F.silu(gate) * up, self.down), residual

    def forward(self, x, residual=None):
        c = self.config
        B, L, _ = x.shape
        pos = torch.arange(L, device=x.device).expand(B, L)
        q, k, v, residual = self._qkv(x, residual, pos)
        a = _sdpa(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True)
        return self._mlp(a.transpose(1, 2).reshape(B, L, c.heads * c.head_dim), residual)

    @torch.no_grad()
    def decode(self, x, k_cache, v_cache, block_table, cache_seqlens, residual=None):
        """LlamaBlock.decode's contract in torch: the new k, v scattered into the pages, every sequence's pages
        gathered into a (B, S, H_kv, D) view of its table, and SDPA under a mask of each query's visible keys."""
        c = self.config
        B, Lq, _ = x.shape
        page = k_cache.shape[1]
        pos = cache_seqlens[:, None].long() + torch.arange(Lq, device=x.device)
        q, k, v, residual = self._qkv(x, residual, pos)
        pages = block_table.long().gather(1, pos // page)
        k_cache[pages, pos % page] = k
        v_cache[pages, pos % page] = v
        keys = k_cache[block_table.long()].flatten(1, 2).transpose(1, 2)        # (B, H_kv, S, D)
        values = v_cache[block_table.long()].flatten(1, 2).transpose(1, 2)
        seen = torch.arange(keys.shape[2], device=x.device)[None, None, :] <= pos[:, :, None]    # (B, Lq, S)
        a = _sdpa(q.transpose(1, 2), keys, values, attn_mask=seen[:, None])
        return self._mlp(a.transpose(1, 2).reshape(B, Lq, c.heads * c.head_dim), residual)


def relative_error(got, want):
    """||got - want|| / ||want|| in float32 (Frobenius): the benchmark's and the tests' error measure."""
    got, want = got.detach().float(), want.detach().float()
    return ((got - want).norm() / want.norm().clamp_min(1e-30)).item()


def main():
    """A tiny layer on the CPU (the interpreter): the tiledsl block against torch's in float32."""
    torch.manual_seed(0)
    ref = TorchLlamaBlock(TINY, dtype=torch.float32)
    blk = LlamaBlock.from_torch(ref, dtype=torch.bfloat16)
    x = torch.randn(1, 8, TINY.hidden)
    out, res = blk(x.bfloat16())
    want, want_res = ref(x)
    print(f"tiny layer: output error {relative_error(out, want):.2e}, residual {relative_error(res, want_res):.2e}")


if __name__ == "__main__":
    main()
