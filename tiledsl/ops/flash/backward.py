"""attention_backward(q, k, v, o, lse, do) -> (dq, dk, dv): the FlashAttention backward on the kernels that serve the
tensors (fa3_backward.py's on an sm_90 GPU where it supports D, else fa2_backward.py's; numpy arrays run on the
interpreter), `flash_attention`, the differentiable forward (a torch.autograd.Function of attention and
attention_backward, built on first use: importing this module does not import torch), and `reference_backward`.
"""
import math

import numpy as np

import tiledsl

from ..device import sm_count
from .common import check_qkv, host_launcher
from .fa2_backward import QTILE, make_attention_backward, make_cast, make_delta
from .forward import attention

def _check_grads(q, k, v, o, lse, do):
    dt, shape, D = check_qkv(q, k, v)
    B, H, HK, N, NK = shape
    if tuple(o.shape) != tuple(q.shape) or tuple(do.shape) != tuple(q.shape):
        raise tiledsl.LaunchError(f"o {tuple(o.shape)} and do {tuple(do.shape)} must have q's shape {tuple(q.shape)}")
    if o.dtype != q.dtype or do.dtype != q.dtype:
        raise tiledsl.LaunchError(f"o and do must have q's dtype {q.dtype}; got {o.dtype}, {do.dtype}")
    if tuple(lse.shape) != (B, H, N) or "float32" not in str(lse.dtype):
        raise tiledsl.LaunchError(f"lse must be float32 (B, H, N) = {(B, H, N)}; got {lse.dtype} "
                                  f"{tuple(lse.shape)}")
    if D not in (64, 128, 256):
        raise tiledsl.LaunchError(f"attention_backward supports head dims 64, 128 and 256, got {D}")
    return dt, shape, D


def _fa3_backward_fits(q, D) -> bool:
    """Whether path=None takes the FA3 backward: CUDA tensors on an sm_90 device and a head dim it supports."""
    if isinstance(q, np.ndarray) or not getattr(q, "is_cuda", False):
        return False
    import torch
    from .fa3_backward import SUPPORTED_D
    return torch.cuda.get_device_capability(q.device) == (9, 0) and D in SUPPORTED_D


def attention_backward(q, k, v, o, lse, do, causal=False, scale=None, warps=None, path=None, tail_split=None,
                       sms=None, tma_kv=None, dq_overlap=None, score_split=None, dq_combine=None):
    """(dq, dk, dv) of attention(q, k, v, causal, scale) = (o, lse) for the output gradient do.

    torch CUDA tensors run on the GPU; numpy float16 arrays and CPU torch tensors (float16, bfloat16) run the same
    kernels on the CPU interpreter. dq has
    q's shape, dk and dv k's (GQA: the gradients of a k/v head summed over its query heads), all in q's dtype.
    path: "fa2" (fa2_backward.py's mma.sync kernel), "fa3" (fa3_backward.py's: TMA + wgmma, sm_90a,
    D = 64, 128 or 256) or None: fa3 for CUDA tensors on an sm_90 device with a head dim it supports (and for D = 256
    everywhere: fa2 has no D = 256), else fa2.
    warps: the fa2 kernel's warps a block, 4 or 8 (default WARPS). tail_split (fa3): spread the query tiles of the
    items past the whole waves of `sms` blocks (default: the device's SMs; 132 on the interpreter) over every
    block (make_attention_backward_hopper); None: where fa3_backward.TAIL_SPLIT (off: measured
    slower) and tail_split_helps say so. tma_kv (fa3, without grouped-query heads or the tail split): dK and dV
    leave through shared memory and the TMA store; None: fa3_backward.TMA_KV (off: not yet
    measured). dq_overlap (fa3 at D = 256): the second dQ block issued while the first runs; None:
    fa3_backward.DQ_OVERLAP (off: not yet run on a GPU). score_split (fa3 at D = 256): each consumer computes the
    scores of half the tile's queries (5 units of tensor work a tile instead of 7; "own": dV's and dK's products
    over the consumer's own half from its registers); None: fa3_backward.SCORE_SPLIT (off: not yet run on a GPU).
    dq_combine (fa3 at D = 64): consumer 1 adds consumer 0's partial dQ in shared memory, one reduction a tile;
    None: fa3_backward.DQ_COMBINE (off: not yet run on a GPU)."""
    dt, shape, D = _check_grads(q, k, v, o, lse, do)
    scale = 1.0 / math.sqrt(D) if scale is None else float(scale)
    if not scale > 0 or math.isinf(scale):
        raise tiledsl.LaunchError(f"attention_backward needs a positive finite scale, got {scale}")
    if path is None:
        # D = 256 has the fa3 kernel only (fa2's dK and dV would need 256 registers a thread): on an sm_90 GPU or
        # on the interpreter
        path = "fa3" if warps is None and (_fa3_backward_fits(q, D) or D not in QTILE) else "fa2"
    if path == "fa2" and D not in QTILE:
        raise tiledsl.LaunchError(f"the fa2 backward supports head dims {', '.join(map(str, QTILE))}; D = {D} "
                                  f"runs on the fa3 backward only (an sm_90 GPU, or the interpreter)")
    if path not in ("fa2", "fa3"):
        raise tiledsl.LaunchError(f"path must be 'fa2', 'fa3' or None, got {path!r}")
    if path == "fa3" and warps is not None:
        raise tiledsl.LaunchError("warps= configures the fa2 backward; the fa3 backward has none")
    if path == "fa2" and (tail_split or sms is not None or tma_kv or dq_overlap or score_split or dq_combine):
        raise tiledsl.LaunchError("tail_split=, sms=, tma_kv=, dq_overlap=, score_split= and dq_combine= configure "
                                  "the fa3 backward; the fa2 backward has none")
    B, H, HK, N, NK = shape
    if path == "fa3":
        from . import fa3_backward as ABH
        if sms is None:
            sms = sm_count(q)
        if tail_split is None:
            tail_split = ABH.TAIL_SPLIT and D not in ABH.COLUMN_SPLIT_D and not dq_combine and \
                ABH.tail_split_helps(causal, shape, sms)
        if tma_kv is None:
            tma_kv = ABH.TMA_KV and not tail_split and H == HK and D not in ABH.COLUMN_SPLIT_D
        main = ABH.make_attention_backward_hopper(dt, D, causal, shape, scale, tail_split=tail_split, sms=sms,
                                                  tma_kv=tma_kv, dq_overlap=dq_overlap, score_split=score_split,
                                                  dq_combine=dq_combine)
        NP = -(-N // ABH.BM) * ABH.BM
        # the fa3 kernel's dQ accumulator is tiled (B * H, NP query rows: one block per tile and consumer), which
        # its own cast reads; fa2's is (B * H * N, D) row-major
        dq_rows = B * H * NP
        cast_q = ABH.make_cast_dq(dt, B * H, N, D)
    else:
        main = make_attention_backward(dt, D, causal, shape, scale, warps)
        NP = -(-N // QTILE[D]) * QTILE[D]
        dq_rows = B * H * N
        cast_q = make_cast(dt, B * H * N * D // 8)
    def operands(q, k, v, do):
        # the fa3 kernel reads Q, K, V and dO through 3-d tensor maps, (B * H, N, D) views; the fa2 kernel takes
        # the 4-d tensors and N at run time (after the accumulators)
        if path == "fa3":
            return tuple(x.reshape(x.shape[0] * x.shape[1], x.shape[2], x.shape[3]) for x in (q, k, v, do)), ()
        return (q, k, v, do), (N,)
    delta_k = make_delta(dt, D, B * H, N, NP)
    cast_kv = make_cast(dt, B * HK * NK * D // 8)
    gqa = H != HK
    if isinstance(q, np.ndarray):
        run = lambda kern, *a: tiledsl.jit(kern.fn, interpret=True)(*a)  # noqa: E731
        q, k, v, o, do = (np.ascontiguousarray(x) for x in (q, k, v, o, do))
        lse = np.ascontiguousarray(lse, np.float32)
        delta, lse2 = (np.zeros((B * H, NP), np.float32) for _ in range(2))
        run(delta_k, o.reshape(-1, D), do.reshape(-1, D), lse.reshape(-1), delta.reshape(-1), lse2.reshape(-1))
        dqa = np.zeros((dq_rows, D), np.float32)
        if gqa:
            dka, dva = (np.zeros((B * HK * NK, D), np.float32) for _ in range(2))
        else:
            dka, dva = np.zeros_like(k), np.zeros_like(k)
        ins, tail = operands(q, k, v, do)
        if getattr(main, "slots", None):
            # the tail split's workspace: slots that every piece writes before any reads, counters at zero
            tail = (np.full(main.slots, np.nan, np.float32), np.zeros(main.counters, np.int32))
        run(main, *ins, lse2, delta, dqa, *kv_args(main, dka, dva), *tail)
        dq = np.zeros_like(q)
        run(cast_q, dqa.reshape(-1, 8), dq.reshape(-1, 8))
        if not gqa:
            return dq, dka, dva
        dk, dv = np.zeros_like(k), np.zeros_like(k)
        run(cast_kv, dka.reshape(-1, 8), dk.reshape(-1, 8))
        run(cast_kv, dva.reshape(-1, 8), dv.reshape(-1, 8))
        return dq, dk, dv
    import torch
    q, k, v, o, do, lse = (x.contiguous() for x in (q, k, v, o, do, lse))
    run = lambda kern, *a: host_launcher(kern, q)(*a)  # noqa: E731  (CPU tensors: the interpreter)
    delta, lse2 = (torch.empty((B * H, NP), dtype=torch.float32, device=q.device) for _ in range(2))
    run(delta_k, o.view(-1, D), do.view(-1, D), lse.view(-1), delta.view(-1), lse2.view(-1))
    dqa = torch.zeros((dq_rows, D), dtype=torch.float32, device=q.device)
    if gqa:
        dka, dva = (torch.zeros((B * HK * NK, D), dtype=torch.float32, device=q.device) for _ in range(2))
    else:
        dka, dva = torch.empty_like(k), torch.empty_like(k)
    ins, tail = operands(q, k, v, do)
    if getattr(main, "slots", None):
        tail = ABH.workspace(main, q)
    run(main, *ins, lse2, delta, dqa, *kv_args(main, dka, dva), *tail)
    dq = torch.empty_like(q)
    run(cast_q, dqa.view(-1, 8), dq.view(-1, 8))
    if not gqa:
        return dq, dka, dva
    dk, dv = torch.empty_like(k), torch.empty_like(k)
    run(cast_kv, dka.view(-1, 8), dk.view(-1, 8))
    run(cast_kv, dva.view(-1, 8), dv.view(-1, 8))
    return dq, dk, dv


def kv_args(main, dka, dva):
    """dK's and dV's outputs as the main kernel takes them (the fa3 kernel with tma_kv: (B * H_kv, N_kv, D) views)."""
    if getattr(main, "tma_kv", False):
        from .fa3_backward import kv_arg
        return kv_arg(dka, main), kv_arg(dva, main)
    return dka, dva


def reference_backward(q, k, v, do, causal=False, scale=None):
    """float64 numpy (dq, dk, dv) of softmax(scale q k^T [causal]) v for numpy inputs (GQA summed per k/v head)."""
    q, k, v, do = (np.asarray(x, np.float64) for x in (q, k, v, do))
    D = q.shape[-1]
    scale = 1.0 / math.sqrt(D) if scale is None else scale
    HK = k.shape[1]
    g = q.shape[1] // HK
    ke, ve = np.repeat(k, g, axis=1), np.repeat(v, g, axis=1)
    s = np.einsum("bhnd,bhmd->bhnm", q, ke) * scale
    if causal:
        n, mm = s.shape[-2:]
        s = np.where(np.arange(mm)[None, :] > np.arange(n)[:, None], -np.inf, s)
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    dv = np.einsum("bhnm,bhnd->bhmd", p, do)
    dp = np.einsum("bhnd,bhmd->bhnm", do, ve)
    ds = p * (dp - (dp * p).sum(-1, keepdims=True)) * scale
    dq = np.einsum("bhnm,bhmd->bhnd", ds, ke)
    dk = np.einsum("bhnm,bhnd->bhmd", ds, q)
    B, H, N, _ = q.shape
    fold = lambda x: x.reshape(B, HK, g, *x.shape[2:]).sum(2)  # noqa: E731
    return dq, fold(dk), fold(dv)


def _function():
    import torch

    class FlashAttention(torch.autograd.Function):
        """O = softmax(scale q k^T [causal]) v with forward.py's attention (saving O and LSE) and
        attention_backward as its backward."""

        @staticmethod
        def forward(ctx, q, k, v, causal=False, scale=None):
            o, lse = attention(q, k, v, causal=causal, scale=scale)
            ctx.save_for_backward(q, k, v, o, lse)
            ctx.causal, ctx.scale = causal, scale
            return o

        @staticmethod
        def backward(ctx, do):
            q, k, v, o, lse = ctx.saved_tensors
            dq, dk, dv = attention_backward(q, k, v, o, lse, do.contiguous(), causal=ctx.causal, scale=ctx.scale)
            return dq, dk, dv, None, None

    return FlashAttention


def __getattr__(name):
    # the autograd Function is built on first use: importing this module does not import torch
    if name == "FlashAttention":
        fn = _function()
        globals()["FlashAttention"] = fn
        return fn
    raise AttributeError(name)


def flash_attention(q, k, v, causal=False, scale=None):
    """softmax(scale q k^T [causal mask]) v for torch CUDA tensors, differentiable in q, k and v (FlashAttention)."""
    fn = globals().get("FlashAttention") or __getattr__("FlashAttention")
    return fn.apply(q, k, v, causal, scale)
