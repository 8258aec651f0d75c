"""attention_varlen: FlashAttention over packed variable-length sequences (ragged.py's kernel in mode "varlen"),
and `reference_varlen`, its float64 numpy twin.

q (Tq, H, D), k and v (Tk, H_kv, D): the tokens of B sequences packed one after another; sequence b owns the query
rows cu_seqlens_q[b] .. cu_seqlens_q[b + 1] and the key rows cu_seqlens_k[b] .. cu_seqlens_k[b + 1] (int32 (B + 1,)
tensors on q's device, read by the kernel: no host synchronisation). max_seqlen_q sizes the grid; a larger value
only launches blocks that return at once, a smaller one leaves rows unwritten (as FlashAttention).
"""
import math

import numpy as np

import tiledsl

from .common import DTYPES, host_launcher, softmax_scale
from .ragged import make_ragged

_INTERPRETED = {}        # kernel -> its interpreter twin
# the configuration (fa2.py's (warps, mi, qreg)) on an sm_90+ GPU where it differs from fa2.CONFIGS: fa2.py's
# WHOLE_TILES choice at D = 128 (350 against 273 TFLOP/s dense on the H200, fa2.py's note), which ptxas -v assembles
# without spills for the ragged kernel at sm_90 (tests/test_attention_varlen.py); sm_80 keeps CONFIGS (fa2.py saw
# 8-12 spilled bytes there on ragged tails). Not yet measured on varlen batches: benchmarks/attention.py --varlen
# --configs all times fa2.CANDIDATES beside it.
SM90_CONFIGS = {128: (4, 2, 0)}


def interpreted(kern):
    """The interpreter's jit of a kernel (one per kernel, so its compiled form is reused)."""
    got = _INTERPRETED.get(kern)
    if got is None:
        got = _INTERPRETED[kern] = tiledsl.jit(kern.fn, interpret=True)
    return got


def _dtype_of(q, k, v):
    if q.dtype != k.dtype or q.dtype != v.dtype:
        raise tiledsl.LaunchError(f"q, k, v must share one dtype; got {q.dtype}, {k.dtype}, {v.dtype}")
    dt = DTYPES.get(str(q.dtype))
    if dt is None:
        raise tiledsl.LaunchError(f"attention supports float16 and bfloat16, got {q.dtype}")
    return dt


def _host_ints(x):
    """An int32 index tensor's values on the host (numpy inputs; validate=True on torch ones: a synchronisation)."""
    if isinstance(x, np.ndarray):
        return x
    return x.detach().cpu().numpy()


def default_config(D, q):
    """The varlen kernel's configuration for torch tensor q's device: SM90_CONFIGS[D] on sm_90+, else None
    (fa2.CONFIGS[D])."""
    if D not in SM90_CONFIGS or not getattr(q, "is_cuda", False):
        return None
    import torch
    return SM90_CONFIGS[D] if torch.cuda.get_device_capability(q.device)[0] >= 9 else None


def check_cu_seqlens(cu, total, name):
    """cu_seqlens (host values): starts at 0, never decreases, ends at the packed total."""
    cu = np.asarray(cu, np.int64)
    if cu[0] != 0 or (np.diff(cu) < 0).any() or cu[-1] != total:
        raise tiledsl.LaunchError(f"{name} must start at 0, never decrease and end at the total {total} tokens; "
                                  f"got {cu.tolist()[:8]}{' ...' if len(cu) > 8 else ''}")
    return np.diff(cu)


def attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, causal=False, scale=None,
                     config=None, lazy=None, validate=None):
    """(out, lse) of softmax(scale * q k^T [causal]) v per packed sequence.

    q (Tq, H, D), k and v (Tk, H_kv, D) (H_kv dividing H: grouped-query attention), f16 or bf16, D in {64, 128, 256};
    cu_seqlens_q / cu_seqlens_k int32 (B + 1,) offsets (on the device for torch CUDA tensors, read by the kernel);
    max_seqlen_q sizes the grid (max_seqlen_k is accepted for FlashAttention's signature and checked only by
    validate). causal: bottom-right aligned as FlashAttention's varlen, query i of a sequence of len_q queries and
    len_k keys sees key j <= i + len_k - len_q (top-left when len_q == len_k). scale: 1/sqrt(D) by default.

    out has q's shape and dtype; lse is float32 (H, Tq) (FlashAttention's varlen softmax_lse layout), natural log;
    a query row that sees no key gets out = 0 and lse = -inf. validate: check cu_seqlens (monotone, from 0 to the
    totals) and the max_seqlens on the host: always for numpy inputs, for torch tensors only when True (it reads the
    offsets back: a synchronisation). numpy float16 arrays run the kernel on the CPU interpreter."""
    if q.ndim != 3 or k.ndim != 3 or v.ndim != 3:
        raise tiledsl.LaunchError(f"q, k, v must be packed (tokens, heads, D); got {tuple(q.shape)}, "
                                  f"{tuple(k.shape)}, {tuple(v.shape)}")
    Tq, H, D = q.shape
    Tk, HK = k.shape[0], k.shape[1]
    if tuple(k.shape) != tuple(v.shape) or k.shape[2] != D:
        raise tiledsl.LaunchError(f"k {tuple(k.shape)} and v {tuple(v.shape)} must be (Tk, H_kv, D) with q's D={D}")
    if H % HK:
        raise tiledsl.LaunchError(f"k/v heads ({HK}) must divide q's heads ({H})")
    dt = _dtype_of(q, k, v)
    scale = softmax_scale(scale, D)
    for name, cu in (("cu_seqlens_q", cu_seqlens_q), ("cu_seqlens_k", cu_seqlens_k)):
        if cu.ndim != 1 or cu.shape[0] < 1 or str(cu.dtype) not in ("int32", "torch.int32"):
            raise tiledsl.LaunchError(f"{name} must be a 1-D int32 tensor of B + 1 offsets, got "
                                      f"{tuple(cu.shape)} {cu.dtype}")
    if cu_seqlens_q.shape[0] != cu_seqlens_k.shape[0]:
        raise tiledsl.LaunchError(f"cu_seqlens_q ({cu_seqlens_q.shape[0]}) and cu_seqlens_k "
                                  f"({cu_seqlens_k.shape[0]}) must hold the same B + 1 offsets")
    for name, mx in (("max_seqlen_q", max_seqlen_q), ("max_seqlen_k", max_seqlen_k)):
        if isinstance(mx, bool) or not isinstance(mx, (int, np.integer)) or mx < 0:
            raise tiledsl.LaunchError(f"{name} must be a non-negative int, got {mx!r}")
    numpy = isinstance(q, np.ndarray)
    if validate or (validate is None and numpy):
        lq = check_cu_seqlens(_host_ints(cu_seqlens_q), Tq, "cu_seqlens_q")
        lk = check_cu_seqlens(_host_ints(cu_seqlens_k), Tk, "cu_seqlens_k")
        if len(lq) and (lq.max() > max_seqlen_q or lk.max() > max_seqlen_k):
            raise tiledsl.LaunchError(f"max_seqlen_q / max_seqlen_k ({max_seqlen_q}, {max_seqlen_k}) are below the "
                                      f"longest sequences ({lq.max()}, {lk.max()})")
    if config is None and not numpy:
        config = default_config(D, q)
    kern = make_ragged("varlen", dt, D, causal, H, HK, scale, config, lazy=lazy)
    B = cu_seqlens_q.shape[0] - 1
    grid = (max(1, -(-int(max_seqlen_q) // kern.bm)), H, B)
    if numpy:
        q, k, v = (np.ascontiguousarray(x) for x in (q, k, v))
        out = np.zeros_like(q)
        lse = np.full((H, Tq), -np.inf, np.float32)
        if B and Tq:
            interpreted(kern)[grid, kern.threads](q, k, v, out, lse, np.ascontiguousarray(cu_seqlens_q),
                                                  np.ascontiguousarray(cu_seqlens_k))
        return out, lse
    import torch
    q, k, v = (x.contiguous() for x in (q, k, v))
    out = torch.empty_like(q)
    lse = torch.empty((H, Tq), dtype=torch.float32, device=q.device)
    if B and Tq:
        if Tk == 0:          # no key row to point a tensor at: every row sees no key
            out.zero_()
            lse.fill_(-math.inf)
            return out, lse
        host_launcher(kern, q)[grid, kern.threads](q, k, v, out, lse, cu_seqlens_q.contiguous(),
                                                   cu_seqlens_k.contiguous())
    return out, lse


def reference_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, causal=False, scale=None):
    """float64 numpy (out, lse (H, Tq)) for numpy inputs, one sequence at a time (bottom-right causal; rows that
    see no key: 0 and -inf)."""
    q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
    Tq, H, D = q.shape
    g = H // k.shape[1]
    scale = 1.0 / math.sqrt(D) if scale is None else scale
    out = np.zeros_like(q)
    lse = np.full((H, Tq), -np.inf)
    for b in range(len(cu_seqlens_q) - 1):
        q0, q1, k0, k1 = int(cu_seqlens_q[b]), int(cu_seqlens_q[b + 1]), int(cu_seqlens_k[b]), int(cu_seqlens_k[b + 1])
        o, l = attend_reference(q[q0:q1], k[k0:k1], v[k0:k1], g, causal, scale)
        out[q0:q1], lse[:, q0:q1] = o, l.T
    return out, lse


def attend_reference(q, k, v, g, causal, scale):
    """float64 (O (n, H, D), LSE (n, H)) of one sequence: q (n, H, D), k, v (m, H_kv, D); causal bottom-right."""
    n, m = q.shape[0], k.shape[0]
    k, v = np.repeat(k, g, axis=1), np.repeat(v, g, axis=1)
    s = np.einsum("nhd,mhd->hnm", q, k) * scale
    if causal:
        s = np.where(np.arange(m)[None, :] > np.arange(n)[:, None] + (m - n), -np.inf, s)
    mx = s.max(-1, keepdims=True) if m else np.full(s.shape[:-1] + (1,), -np.inf)
    live = np.isfinite(mx)
    e = np.exp(s - np.where(live, mx, 0))
    l = e.sum(-1, keepdims=True)
    o = np.einsum("hnm,mhd->nhd", e / np.where(l > 0, l, 1), v)
    lse = np.where(l > 0, mx + np.log(np.where(l > 0, l, 1)), -np.inf)[..., 0]
    return o, lse.T


def jagged_to_packed(nt):
    """(packed (T, H, D) contiguous, offsets int32 (B + 1,), max length) of a torch nested tensor of jagged layout,
    (B, j, H, D) or SDPA's (B, H, j, D) (its transpose(1, 2)). The max length is the tensor's cached one where torch
    kept it, else read from the offsets (a synchronisation)."""
    import torch
    if not getattr(nt, "is_nested", False) or getattr(nt, "layout", None) != torch.jagged or nt.dim() != 4:
        raise tiledsl.LaunchError("expected a 4-D torch nested tensor of layout torch.jagged, (B, j, H, D) or "
                                  "(B, H, j, D)")
    ragged = nt._ragged_idx
    if ragged not in (1, 2):
        raise tiledsl.LaunchError(f"the ragged dimension must be 1 or 2, got {ragged}")
    values = nt.values()
    packed = (values.transpose(0, 1) if ragged == 2 else values).contiguous()
    off = nt.offsets()
    longest = getattr(nt, "_maybe_max_seqlen", None)
    if longest is None:
        longest = int((off[1:] - off[:-1]).max()) if off.numel() > 1 else 0
    return packed, off.to(torch.int32), int(longest)


def packed_to_jagged(packed, like):
    """A nested tensor of `like`'s layout ((B, j, H, D) or (B, H, j, D)) and offsets holding packed (T, H, D)."""
    import torch
    nt = torch.nested.nested_tensor_from_jagged(packed, like.offsets())
    return nt.transpose(1, 2) if like._ragged_idx == 2 else nt


def attention_jagged(q, k, v, causal=False, scale=None):
    """attention_varlen over torch nested (jagged) tensors as SDPA takes them: q (B, H, j, D), k and v
    (B, H_kv, j_kv, D) (or each (B, j, H, D)); returns out as a nested tensor of q's layout (LSE dropped, as SDPA).
    causal is bottom-right aligned (attention_varlen's; top-left, as SDPA's is_causal, where the lengths agree)."""
    pq, oq, mq = jagged_to_packed(q)
    pk, ok, mk = jagged_to_packed(k)
    pv, ov, _ = jagged_to_packed(v)
    if oq.shape != ok.shape or ov.shape != ok.shape:
        raise tiledsl.LaunchError(f"q, k, v must hold the same number of sequences; got {oq.numel() - 1}, "
                                  f"{ok.numel() - 1}, {ov.numel() - 1}")
    out, _ = attention_varlen(pq, pk, pv, oq, ok, mq, mk, causal=causal, scale=scale)
    return packed_to_jagged(out, q)
