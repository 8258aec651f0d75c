"""attention(q, k, v) -> (O, LSE): the FlashAttention forward on the kernel that serves the tensors (fa3.py's FA3-style
kernel on an sm_90 GPU where it supports D, else fa2.py's FA2-style one; numpy arrays run on the interpreter), and
`reference`, its float64 numpy twin.
"""
import math

import numpy as np

import tiledsl

from .common import check_qkv, host_launcher, softmax_scale
from .fa2 import make_attention

_TARGETED = {}       # (kernel, target) -> the same kernel compiled for another target (attention(target=...))


def attention(q, k, v, causal=False, scale=None, config=None, path=None, target=None, lazy=None):
    """(O, LSE) of softmax(scale * q k^T [causal mask]) v for q (B, H, N, D) and k, v (B, H_kv, N_kv, D).

    torch CUDA tensors run on the GPU; numpy float16 arrays and CPU torch tensors (float16, bfloat16) run the same
    kernel on the CPU interpreter. scale defaults to 1/sqrt(D); causal masks key j > query i (top-left aligned, as torch's is_causal).
    O has q's dtype and shape, LSE is float32 (B, H, N) in natural log.

    path: "fa2" (fa2.py's kernel), "fa3" (fa3.py's: TMA + wgmma, sm_90a) or None: fa3
    for CUDA tensors on an sm_90 device with D in its supported set, or where config is an fa3 configuration
    (4 to 12 entries: fa3.FIELDS), else fa2. target: the fa2 kernel compiled for this target instead of
    the device's (on a GPU of a newer architecture the driver compiles its PTX for the device: target="sm_80"
    runs the sm_80 kernel on an H200). lazy (fa2): the lazy rescale (make_attention's; None: fa2.LAZY; fa3 takes it as
    config[8])."""
    if path is None:
        if config is not None:
            path = "fa3" if isinstance(config, (tuple, list)) and 4 <= len(config) <= 12 else "fa2"
        else:
            path = "fa3" if _fa3_fits(q, k, v) else "fa2"
    if path == "fa3":
        if lazy:
            raise tiledsl.LaunchError("lazy= configures the fa2 kernel; the fa3 kernel takes it as config[8] "
                                      "(fa3.FIELDS)")
        from .fa3 import attention_hopper
        return attention_hopper(q, k, v, causal=causal, scale=scale, config=config)
    if path != "fa2":
        raise tiledsl.LaunchError(f"path must be 'fa2', 'fa3' or None, got {path!r}")
    dt, shape, D = check_qkv(q, k, v)
    scale = softmax_scale(scale, D)
    kern = make_attention(dt, D, causal, shape, scale, config, lazy)
    B, H, _, N, _ = shape
    if isinstance(q, np.ndarray):
        q, k, v = (np.ascontiguousarray(x) for x in (q, k, v))
        o = np.zeros_like(q)
        lse = np.zeros((B, H, N), np.float32)
        tiledsl.jit(kern.fn, interpret=True)(q, k, v, o, lse)
        return o, lse
    import torch
    if target is not None:
        kern = _TARGETED.get((kern, target)) or _TARGETED.setdefault((kern, target), tiledsl.jit(kern.fn, target=target))
    q, k, v = (x.contiguous() for x in (q, k, v))
    o = torch.empty_like(q)
    lse = torch.empty((B, H, N), dtype=torch.float32, device=q.device)
    host_launcher(kern, q)(q, k, v, o, lse)
    return o, lse


def _fa3_fits(q, k, v) -> bool:
    """Whether path=None takes the FA3 kernel: CUDA tensors on an sm_90 device, a head dim it supports, 16-byte
    aligned bases (the TMA unit's tensor maps need them)."""
    if isinstance(q, np.ndarray) or not getattr(q, "is_cuda", False) or getattr(q, "ndim", 0) != 4:
        return False
    import torch
    from .fa3 import SUPPORTED_D
    return (torch.cuda.get_device_capability(q.device) == (9, 0) and q.shape[-1] in SUPPORTED_D
            and all(x.data_ptr() % 16 == 0 for x in (q, k, v)))


def reference(q, k, v, causal=False, scale=None):
    """float64 numpy (O, LSE) for numpy inputs (GQA: each k/v head serves H / H_kv query heads)."""
    q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
    D = q.shape[-1]
    scale = 1.0 / math.sqrt(D) if scale is None else scale
    g = q.shape[1] // k.shape[1]
    k, v = np.repeat(k, g, axis=1), np.repeat(v, g, axis=1)
    s = np.einsum("bhnd,bhmd->bhnm", q, k) * scale
    if causal:
        n, mm = s.shape[-2:]
        s = np.where(np.arange(mm)[None, :] > np.arange(n)[:, None], -np.inf, s)
    mx = s.max(-1, keepdims=True)
    e = np.exp(s - mx)
    l = e.sum(-1, keepdims=True)
    return np.einsum("bhnm,bhmd->bhnd", e / l, v), (mx + np.log(l))[..., 0]
