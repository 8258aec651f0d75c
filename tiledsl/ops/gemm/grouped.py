"""Mixture-of-experts GEMMs on Hopper: `grouped_mm` (and its backward), and the block-scaled FP8 GEMM
`matmul_fp8_blockwise`, both on the grouped kernel (grouped_kernel.py); the quantiser that makes their FP8 operands
is quantize.py's `quantize_fp8_blockwise`.

    out = grouped_mm(x, w, offsets)     # x (T, K) sorted by expert, w (E, N, K), offsets (E,) int32 on x's device
    # out[s_e:o_e] = x[s_e:o_e] @ w[e].T with s_e = offsets[e - 1] (0 for e = 0), o_e = offsets[e]

`offsets` are cumulative end rows, as torch._grouped_mm takes them (an expert of 0 tokens repeats the previous
end); they are read by the kernel, never by the host, so the call does not synchronise. Rows past offsets[-1] (if
it is below T) are left as they are in `out` (an `out=` buffer) or uninitialised.
"""
import tiledsl

from .. import gates
from ..device import sm_count
from . import grouped_kernel as GK
from .hopper import DTYPES
from .plan import device_capability

STAGES = 4
HALF_OUT = ("torch.float16", "torch.bfloat16")
_KERNELS = {}


def max_groups(E: int) -> int:
    """The shared buffer the kernel stages offsets in: a power of two >= E, at least 16 (few kernels per E)."""
    return max(16, 1 << (max(E, 1) - 1).bit_length())


def _kernel(ab, out, stages, consumers, bn, num_sms, group_m, grouped, scaled, kgrouped=False, E=0, masked=False,
            trans_w=False, pipelined=False, halves=False, tma_store=False):
    gmax = max_groups(E) if grouped else 0
    key = (ab, out, stages, consumers, bn, num_sms, group_m, grouped, scaled, kgrouped, gmax, masked, trans_w,
           pipelined, halves, tma_store)
    if key not in _KERNELS:
        _KERNELS[key] = GK.build(ab, out, stages, consumers, bn, num_sms, group_m, grouped, scaled, kgrouped, gmax,
                                 masked, trans_w, pipelined, halves, tma_store)
    return _KERNELS[key]


PIPELINED = "gemm_fp8_blockwise_pipelined"      # the gated path (gates.py): the software-pipelined FP8 promotion
PIPELINED_BN = 128                             # at BN = 256 its three 128-register accumulators spill


def pipelined_promotion(t, bn) -> bool:
    """Whether the blockwise FP8 kernel for tensor t promotes its K blocks software-pipelined (grouped_kernel's
    `pipelined`): always on CPU tensors (the interpreter), on CUDA tensors only where its gate is on (it has not yet
    run on a GPU), and only at BN = 128 (wider tiles spill with a second temporary accumulator)."""
    return bn == PIPELINED_BN and gates.allows(PIPELINED, t)


HALVES = "gemm_fp8_blockwise_halves"            # the gated path: 128 x 256 FP8 tiles promoted a half at a time


def halves_promotion(t, bn) -> bool:
    """Whether the blockwise FP8 kernel for tensor t at this BN runs grouped_kernel's `halves` form (BN = 256 as two
    m64n128 products, each promoted into its half: no spills, where one 256-column temporary would spill): on CPU
    tensors wherever BN = 256, on CUDA tensors unless its gate is closed (TILEDSL_DISABLE; verified on an H200 in
    session 36: 1018-1020 TFLOP/s at 4096^3 / 8192^3 against the pipelined 128 x 128's 940-951)."""
    return bn == 2 * GK.SCALE_BLOCK and gates.allows(HALVES, t)


DW_TMA_STORE = "grouped_dw_tma_store"         # the gated path: the weight gradient's TMA-store epilogue
ROW_TMA_STORE = "grouped_tma_store"           # the gated path: the row-grouped forms' (forward, dx) TMA store
BLOCKWISE_TMA_STORE = "blockwise_tma_store"   # the gated path: the dense blockwise FP8 GEMM's TMA store


def row_tma_store(x, out, N: int, cfg: dict, gate: str = ROW_TMA_STORE) -> bool:
    """Whether grouped_mm stores its tiles through the TMA store (grouped_kernel's `tma_store`: a consumer's rows
    wholly inside their group through the TMA unit, the part crossing a group's end through masked register
    stores): a 16-bit out whose rows are 16-byte multiples (N % 8 == 0) from a 16-byte-aligned address, BN a
    multiple of 64, and config's `tma_store` (default: the gated path `gate` open for x; the dense blockwise FP8
    GEMM asks BLOCKWISE_TMA_STORE). config tma_store=True where one of these fails is a LaunchError naming it
    (an explicit request is never dropped silently)."""
    why = ("a float16/bfloat16 out" if str(out.dtype) not in HALF_OUT else
           "N a multiple of 8 (16-byte rows)" if N % 8 else
           "BN a multiple of 64" if cfg["bn"] % 64 else
           "out at a 16-byte-aligned address" if out.data_ptr() % 16 else None)
    return _tma_request(cfg, why, out, gates.allows(gate, x))


def _tma_request(cfg: dict, why, out, default: bool) -> bool:
    """config's tma_store (else `default`) where nothing stands in the way (why is None); an explicit
    tma_store=True that `why` refuses is a LaunchError."""
    if cfg.get("tma_store") and why:
        raise tiledsl.LaunchError(f"config tma_store=True needs {why}; out is {out.dtype} {tuple(out.shape)}, "
                                  f"BN = {cfg['bn']}")
    return bool(why is None and cfg.get("tma_store", default))


def weight_grad_config(t, out_dtype, tokens: int, experts: int, config) -> dict:
    """The weight gradient's configuration for tensor t (the token-major kernel) and `tokens` routed rows over
    `experts`: the TMA-store epilogue (grouped_kernel's `tma_store`) for a 16-bit dW where its gate is open, on
    128 x 256 tiles where the experts average 512 tokens or more (a long reduction per tile: the wider tile reads
    less per product), else 128 x 128 (a few K tiles per tile: the output's stores dominate, and more tiles keep
    the SMs even), 4 stages; config= over it (keys stages, consumers, bn, group_m, tma_store). The choice reads the
    average only (the counts stay on the device). H100, bf16 dW, TFLOP/s against the faster of torch._grouped_mm
    and the per-expert loop (benchmarks/moe_sweep.py, session 37): 8 experts x 2048 tokens 4096 <-> 14336 at
    128 x 256 688-720 (1.04-1.05x; 128 x 128: 613-636); 256 x 128 tokens 7168 <-> 2048 at 128 x 128 290-296
    (1.08-1.13x; 128 x 256: 253-268); 64 x 128 tokens 2048 -> 1408: 271 (1.30x). The register-store epilogue:
    98-106 at 128 tokens an expert, 517-538 at 2048."""
    tma = str(out_dtype) in HALF_OUT and gates.allows(DW_TMA_STORE, t)
    wide = tma and tokens >= 512 * max(experts, 1)
    cfg = dict(stages=STAGES, consumers=2, bn=256 if wide else 128, group_m=GK.GROUP_M, tma_store=tma)
    return dict(cfg, **(config or {}))


def blockwise_config(t, N: int, config) -> dict:
    """The blockwise FP8 kernel's configuration for tensor t and N columns: default_config's (128 x 128 tiles),
    but 128 x 256 where the halved promotion's gate is open for a CUDA tensor and N is wide (the f16 rule of
    default_config), then config= over it. (CPU tensors keep 128 x 128 unless config= asks: the interpreter's
    tests of the pipelined form stay as they were.)"""
    cfg = default_config(N, True)
    if getattr(t, "is_cuda", False) and gates.enabled(HALVES) and default_config(N, False)["bn"] == 256:
        cfg["bn"] = 2 * GK.SCALE_BLOCK
    return dict(cfg, **(config or {}))


def default_config(N: int, scaled: bool) -> dict:
    """The tile: 128 x 256 for wide N (f16/bf16) unless 128-wide tiles waste fewer columns (N = 1408: 6 x 256 would
    compute 1536 columns, 11 x 128 computes 1408), 128 x 128 for narrow N and for the blockwise FP8 form (its
    temporary accumulator doubles the registers a column takes)."""
    bn = 256
    if scaled or N <= 1024 or -(-N // 128) * 128 < -(-N // 256) * 256:
        bn = 128
    return dict(stages=STAGES, consumers=2, bn=bn, group_m=GK.GROUP_M)


def _need_sm90(t, what, name="x"):
    cap = device_capability(t)
    if cap != (9, 0):
        where = f"sm_{cap[0]}{cap[1]}" if cap else "the host"
        raise tiledsl.LaunchError(f"{what} needs an sm_90 GPU (H100/H200: TMA and wgmma); {name} is on {where}")


def _check_offsets(offsets, E, x, validate):
    import torch
    if not isinstance(offsets, torch.Tensor) or offsets.dtype != torch.int32 or offsets.dim() != 1:
        raise tiledsl.LaunchError(f"offsets must be a 1-D torch.int32 tensor (cumulative end rows), got "
                                  f"{getattr(offsets, 'dtype', type(offsets).__name__)} "
                                  f"{tuple(getattr(offsets, 'shape', ()))}")
    if offsets.shape[0] != E:
        raise tiledsl.LaunchError(f"offsets has {offsets.shape[0]} entries: need one per expert ({E}, w's first "
                                  f"dimension)")
    if offsets.device != x.device:
        raise tiledsl.LaunchError(f"offsets is on {offsets.device}, x on {x.device}: the kernel reads offsets on "
                                  f"the device (no host synchronisation), so they must live there")
    if validate:
        # (a synchronisation: only on request)
        o = offsets.cpu()
        if E and (bool((o[1:] < o[:-1]).any()) or int(o[0]) < 0):
            raise tiledsl.LaunchError(f"offsets are not monotone non-decreasing: {o.tolist()[:16]}")
        if E and int(o[-1]) != x.shape[0]:
            raise tiledsl.LaunchError(f"offsets end at {int(o[-1])}, not at x's {x.shape[0]} rows")


def grouped_mm(x, w, offsets, out=None, *, out_dtype=None, config=None, validate=False, w_kn=False):
    """out[s_e:o_e] = x[s_e:o_e] @ w[e].T for every expert e (the module's note): x (T, K) and w (E, N, K) torch
    CUDA tensors of float16 or bfloat16 (one dtype), offsets (E,) int32 on x's device; out (T, N) of out_dtype
    (default x's dtype; float32 too) or the given `out`. One persistent launch on an sm_90 GPU; K a multiple of 8.
    The kernel clamps offsets into 0 .. T, so bad offsets write nothing outside out; validate=True checks them on
    the host first (monotone, ending at T: a synchronisation). config: dict(stages, consumers, bn, group_m,
    tma_store).

    w_kn=True: w is (E, K, N) (torch._grouped_mm's mat_b layout; the backward's dx = dy @ w[e]) and out_e = x_e @
    w[e], read as stored (wgmma's transposed B) where K is a multiple of 64 and N of 8, else through a transposed
    copy of w."""
    import torch
    if not isinstance(x, torch.Tensor) or not isinstance(w, torch.Tensor):
        raise tiledsl.LaunchError("grouped_mm takes torch tensors x (T, K) and w (E, N, K)")
    if x.dim() != 2 or w.dim() != 3 or x.shape[1] != w.shape[1 if w_kn else 2]:
        raise tiledsl.LaunchError(f"x is {tuple(x.shape)}, w is {tuple(w.shape)}: need x (T, K) and w "
                                  f"{'(E, K, N)' if w_kn else '(E, N, K)'} with one K")
    if x.dtype != w.dtype or x.dtype not in (torch.float16, torch.bfloat16):
        raise tiledsl.LaunchError(f"x is {x.dtype}, w is {w.dtype}: need both float16 or both bfloat16")
    if w.device != x.device:
        raise tiledsl.LaunchError(f"w is on {w.device}, x on {x.device}")
    Tn, K = x.shape
    E = w.shape[0]
    N = w.shape[2] if w_kn else w.shape[1]
    _check_offsets(offsets, E, x, validate)
    _need_sm90(x, "grouped_mm")
    if K % 8 or K == 0:
        raise tiledsl.LaunchError(f"grouped_mm needs K a positive multiple of 8 (the TMA unit reads rows of 16-byte "
                                  f"multiples); got K={K}")
    od = out_dtype or (out.dtype if out is not None else x.dtype)
    if out is None:
        out = torch.empty((Tn, N), dtype=od, device=x.device)
    elif tuple(out.shape) != (Tn, N) or not out.is_contiguous() or out.device != x.device:
        raise tiledsl.LaunchError(f"out is {tuple(out.shape)} on {out.device}: need a contiguous ({Tn}, {N}) on "
                                  f"{x.device}")
    if Tn == 0 or N == 0 or E == 0:
        return out
    cfg = dict(default_config(N, False), **(config or {}))
    trans_w = w_kn and K % 64 == 0 and N % 8 == 0 and cfg["bn"] % 64 == 0
    if w_kn and not trans_w:
        w = w.transpose(1, 2)           # (E, N, K): the copy below makes it K-major
    tma = row_tma_store(x, out, N, cfg)
    k = _kernel(DTYPES[str(x.dtype)], DTYPES[str(out.dtype)], cfg["stages"], cfg["consumers"], cfg["bn"],
                sm_count(x), cfg["group_m"], True, False, E=E, trans_w=trans_w, tma_store=tma)
    wv = w.contiguous().view(E * K, N) if trans_w else w.contiguous().view(E * N, K)
    k(x.contiguous(), wv, out, offsets, *((out,) if tma else ()))
    return out


def grouped_mm_masked(x, w, counts, out=None, *, out_dtype=None, config=None):
    """The masked (decode) form: x (E, C, K) with counts (E,) int32 on x's device, expert e's tokens the first
    counts[e] rows of x[e] (clamped to 0 .. C); out[e, :counts[e]] = x[e, :counts[e]] @ w[e].T, out (E, C, N), its
    rows past each count left as they are (uninitialised without `out`). One persistent launch, no host
    synchronisation; f16/bf16, K a multiple of 8."""
    import torch
    if not isinstance(x, torch.Tensor) or x.dim() != 3 or not isinstance(w, torch.Tensor) or w.dim() != 3 or \
            x.shape[0] != w.shape[0] or x.shape[2] != w.shape[2]:
        raise tiledsl.LaunchError(f"x is {tuple(getattr(x, 'shape', ()))}, w is {tuple(getattr(w, 'shape', ()))}: "
                                  f"need x (E, C, K) and w (E, N, K)")
    if x.dtype != w.dtype or x.dtype not in (torch.float16, torch.bfloat16) or w.device != x.device:
        raise tiledsl.LaunchError(f"x is {x.dtype} on {x.device}, w is {w.dtype} on {w.device}: need both float16 "
                                  f"or both bfloat16 on one device")
    E, C, K = x.shape
    N = w.shape[1]
    _check_offsets(counts, E, x, False)
    _need_sm90(x, "grouped_mm_masked")
    if K % 8 or K == 0:
        raise tiledsl.LaunchError(f"grouped_mm_masked needs K a positive multiple of 8; got K={K}")
    od = out_dtype or (out.dtype if out is not None else x.dtype)
    if out is None:
        out = torch.empty((E, C, N), dtype=od, device=x.device)
    elif tuple(out.shape) != (E, C, N) or not out.is_contiguous() or out.device != x.device:
        raise tiledsl.LaunchError(f"out is {tuple(out.shape)}: need a contiguous ({E}, {C}, {N}) on {x.device}")
    if E == 0 or C == 0 or N == 0:
        return out
    cfg = dict(default_config(N, False), **(config or {}))
    k = _kernel(DTYPES[str(x.dtype)], DTYPES[str(out.dtype)], cfg["stages"], cfg["consumers"], cfg["bn"],
                sm_count(x), cfg["group_m"], True, False, E=E, masked=True)
    k(x.contiguous().view(E * C, K), w.contiguous().view(E * N, K), out.view(E * C, N), counts)
    return out


def grouped_mm_weight_grad(grad_out, x, offsets, out=None, *, config=None):
    """dw[e] = grad_out[s_e:o_e]ᵀ @ x[s_e:o_e] for every expert (the K-grouped GEMM: each expert's tokens are the
    reduction), (E, N, K) of x's dtype (or a float32 `out`), one persistent launch of the grouped kernel's
    K-grouped form. Where N and K are multiples of 8, grad_out and x are read as stored (token-major: wgmma's
    transposed A and B; tiles and epilogue as weight_grad_config chooses them, a 16-bit dW through the TMA store);
    else they are transposed first (copies, their token
    dimension padded to a multiple of 8 with zeros; the kernel's K tiles then start at each expert's first token
    rounded down to a multiple of 8, the TMA unit's 16-byte alignment of an innermost coordinate). An expert of 0
    tokens gets zeros."""
    import torch
    if grad_out.dim() != 2 or x.dim() != 2 or grad_out.shape[0] != x.shape[0] or grad_out.dtype != x.dtype or \
            x.dtype not in (torch.float16, torch.bfloat16):
        raise tiledsl.LaunchError(f"grad_out is {tuple(grad_out.shape)} {grad_out.dtype}, x is {tuple(x.shape)} "
                                  f"{x.dtype}: need (T, N) and (T, K) of one dtype, float16 or bfloat16")
    Tn, N = grad_out.shape
    K = x.shape[1]
    E = offsets.shape[0] if isinstance(offsets, torch.Tensor) and offsets.dim() == 1 else -1
    _check_offsets(offsets, E, x, False)
    _need_sm90(x, "grouped_mm_weight_grad")
    if out is None:
        out = torch.empty((E, N, K), dtype=x.dtype, device=x.device)
    elif tuple(out.shape) != (E, N, K) or not out.is_contiguous() or out.dtype not in (x.dtype, torch.float32):
        raise tiledsl.LaunchError(f"out is {tuple(out.shape)} {out.dtype}: need a contiguous ({E}, {N}, {K}) of "
                                  f"{x.dtype} or float32")
    if E == 0 or N == 0 or K == 0:
        return out
    if N % 8 == 0 and K % 8 == 0 and Tn > 0:
        cfg = weight_grad_config(x, out.dtype, Tn, E, config)
        tma = _tma_request(cfg, None if str(out.dtype) in HALF_OUT else "a float16/bfloat16 dW", out, False)
        k = _kernel(DTYPES[str(x.dtype)], DTYPES[str(out.dtype)], cfg["stages"], cfg["consumers"], cfg["bn"],
                    sm_count(x), cfg["group_m"], True, False, True, E=E, trans_w=True, tma_store=tma)
        k(grad_out.contiguous(), x.contiguous(), out if tma else out.view(E * N, K), offsets)
        return out
    Tp = max(-(-Tn // 8) * 8, 8)
    gt = torch.zeros((N, Tp), dtype=x.dtype, device=x.device)
    xt = torch.zeros((K, Tp), dtype=x.dtype, device=x.device)
    gt[:, :Tn] = grad_out.t()
    xt[:, :Tn] = x.t()
    cfg = dict(default_config(K, False), **(config or {}))
    k = _kernel(DTYPES[str(x.dtype)], DTYPES[str(out.dtype)], cfg["stages"], cfg["consumers"], cfg["bn"],
                sm_count(x), cfg["group_m"], True, False, True, E=E)
    k(gt, xt, out.view(E * N, K), offsets)
    return out


def grouped_mm_backward(grad_out, x, w, offsets, *, need_dx=True, need_dw=True):
    """(dx, dw) of out = grouped_mm(x, w, offsets): dx_e = grad_out_e @ w[e] on the grouped kernel, w read as stored
    (grouped_mm's w_kn: N a multiple of 64, else a transposed copy of w); dw = grouped_mm_weight_grad(grad_out, x,
    offsets), the K-grouped form (the sum runs over each expert's tokens)."""
    dx = dw = None
    if need_dx:
        dx = grouped_mm(grad_out, w, offsets, w_kn=True)
    if need_dw:
        dw = grouped_mm_weight_grad(grad_out, x, offsets)
    return dx, dw


def _autograd():
    import torch

    class _GroupedMM(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, w, offsets):
            ctx.save_for_backward(x, w, offsets)
            return grouped_mm(x, w, offsets)

        @staticmethod
        def backward(ctx, g):
            x, w, offsets = ctx.saved_tensors
            dx, dw = grouped_mm_backward(g.contiguous(), x, w, offsets, need_dx=ctx.needs_input_grad[0],
                                         need_dw=ctx.needs_input_grad[1])
            return dx, dw, None
    return _GroupedMM


_FN = []


def grouped_linear(x, w, offsets):
    """grouped_mm with autograd (the backward of grouped_mm_backward)."""
    if not _FN:
        _FN.append(_autograd())
    return _FN[0].apply(x, w, offsets)


def matmul_fp8_blockwise(a, b, scale_a, scale_b, out_dtype=None, *, out=None, config=None):
    """C = a @ b.T with DeepSeek-V3's block scales, accumulated in f32 per 128-wide K block: a (M, K) and b (N, K)
    torch.float8_e4m3fn on an sm_90 GPU, scale_a (M, ceil(K / 128)) float32 (1 x 128 blocks of a, as
    quantize_fp8_blockwise makes them), scale_b (ceil(N / 128), ceil(K / 128)) float32 (128 x 128 blocks of b):
    C[m, n] = sum_kb scale_a[m, kb] * scale_b[n // 128, kb] * (a[m, kb-block] · b[n, kb-block]). C (M, N) of
    out_dtype (default torch.bfloat16; float16, float32) or `out`. K a multiple of 16."""
    import torch
    out_dtype = out_dtype or (out.dtype if out is not None else torch.bfloat16)
    for name, t in (("a", a), ("b", b)):
        if not isinstance(t, torch.Tensor) or t.dim() != 2 or t.dtype != torch.float8_e4m3fn:
            raise tiledsl.LaunchError(f"{name} must be a 2-D torch.float8_e4m3fn tensor, got "
                                      f"{getattr(t, 'dtype', type(t).__name__)} {tuple(getattr(t, 'shape', ()))}")
    if a.shape[1] != b.shape[1]:
        raise tiledsl.LaunchError(f"a is {tuple(a.shape)}, b is {tuple(b.shape)}: need (M, K) and (N, K)")
    M, K = a.shape
    N = b.shape[0]
    KB, NB = -(-K // GK.SCALE_BLOCK), -(-N // GK.SCALE_BLOCK)
    for name, t, shape in (("scale_a", scale_a, (M, KB)), ("scale_b", scale_b, (NB, KB))):
        if not isinstance(t, torch.Tensor) or tuple(t.shape) != shape or t.dtype != torch.float32:
            raise tiledsl.LaunchError(f"{name} must be a float32 tensor of shape {shape} (one scale per "
                                      f"{'1 x 128' if name == 'scale_a' else '128 x 128'} block), got "
                                      f"{getattr(t, 'dtype', type(t).__name__)} {tuple(getattr(t, 'shape', ()))}")
        if t.device != a.device:
            raise tiledsl.LaunchError(f"{name} is on {t.device}, a on {a.device}: the kernel reads it there")
    if b.device != a.device:
        raise tiledsl.LaunchError(f"b is on {b.device}, a on {a.device}")
    _need_sm90(a, "matmul_fp8_blockwise", "a")
    if K % 16 or K == 0:
        raise tiledsl.LaunchError(f"matmul_fp8_blockwise needs K a positive multiple of 16 (16-byte TMA rows); "
                                  f"got K={K}")
    if out is None:
        out = torch.empty((M, N), dtype=out_dtype, device=a.device)
    elif tuple(out.shape) != (M, N) or not out.is_contiguous():
        raise tiledsl.LaunchError(f"out is {tuple(out.shape)}: need a contiguous ({M}, {N})")
    if M == 0 or N == 0:
        return out
    cfg = blockwise_config(a, N, config)
    tma = row_tma_store(a, out, N, cfg, BLOCKWISE_TMA_STORE)
    k = _kernel("e4m3", DTYPES[str(out.dtype)], cfg["stages"], cfg["consumers"], cfg["bn"], sm_count(a),
                cfg["group_m"], False, True, pipelined=pipelined_promotion(a, cfg["bn"]),
                halves=halves_promotion(a, cfg["bn"]), tma_store=tma)
    u8 = torch.uint8
    k(a.contiguous().view(u8), b.contiguous().view(u8), out, scale_a.contiguous(),
      scale_b.contiguous().view(1, NB, KB), *((out,) if tma else ()))
    return out


def grouped_mm_fp8_blockwise(x, w, offsets, scale_x, scale_w, out_dtype=None, *, out=None, config=None):
    """The grouped form of matmul_fp8_blockwise (FP8 MoE): x (T, K) e4m3 sorted by expert with scale_x (T,
    ceil(K / 128)), w (E, N, K) e4m3 with scale_w (E, ceil(N / 128), ceil(K / 128)), offsets as grouped_mm's."""
    import torch
    out_dtype = out_dtype or (out.dtype if out is not None else torch.bfloat16)
    if x.dim() != 2 or w.dim() != 3 or x.shape[1] != w.shape[2] or x.dtype != torch.float8_e4m3fn or \
            w.dtype != torch.float8_e4m3fn:
        raise tiledsl.LaunchError(f"x is {tuple(x.shape)} {x.dtype}, w is {tuple(w.shape)} {w.dtype}: need e4m3 "
                                  f"x (T, K) and w (E, N, K)")
    Tn, K = x.shape
    E, N, _ = w.shape
    KB, NB = -(-K // GK.SCALE_BLOCK), -(-N // GK.SCALE_BLOCK)
    for name, t, shape in (("scale_x", scale_x, (Tn, KB)), ("scale_w", scale_w, (E, NB, KB))):
        if not isinstance(t, torch.Tensor) or tuple(t.shape) != shape or t.dtype != torch.float32 or \
                t.device != x.device:
            raise tiledsl.LaunchError(f"{name} must be a float32 tensor of shape {shape} on {x.device}, got "
                                      f"{getattr(t, 'dtype', None)} {tuple(getattr(t, 'shape', ()))}")
    _check_offsets(offsets, E, x, False)
    _need_sm90(x, "grouped_mm_fp8_blockwise")
    if K % 16 or K == 0:
        raise tiledsl.LaunchError(f"grouped_mm_fp8_blockwise needs K a positive multiple of 16; got K={K}")
    if out is None:
        out = torch.empty((Tn, N), dtype=out_dtype, device=x.device)
    if Tn == 0 or N == 0 or E == 0:
        return out
    cfg = blockwise_config(x, N, config)
    k = _kernel("e4m3", DTYPES[str(out.dtype)], cfg["stages"], cfg["consumers"], cfg["bn"], sm_count(x),
                cfg["group_m"], True, True, E=E, pipelined=pipelined_promotion(x, cfg["bn"]),
                halves=halves_promotion(x, cfg["bn"]))
    u8 = torch.uint8
    k(x.contiguous().view(u8), w.contiguous().view(u8).view(E * N, K), out, offsets, scale_x.contiguous(),
      scale_w.contiguous())
    return out
