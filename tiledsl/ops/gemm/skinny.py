"""The skinny GEMM's host side: which configuration serves an M x N x K product (from the shape and the SM count),
the kernels made once per configuration, the split-K workspace, and `skinny_matmul` (skinny_kernel.py has the
kernel and why it is built so).

A configuration is (mp, consumers, stages, splits): A's rows padded to mp (the smallest multiple of 8 covering M:
wgmma's N), BM = 64 x consumers rows of B a block, a ring of `stages`, the K loop split `splits` ways. The split
count is chosen by a cost in units of one 64-row K step's bytes of B per SM (`skinny_cost`): the blocks an SM runs
one after another (ceil(blocks / SMs)) times each block's bytes (its K tiles of B, its partial sums written and,
for the last arriver, S partials read), plus a pipeline fill for each round of resident blocks. It is a model of
the weight read, not a table of benchmarked shapes.
"""
import tiledsl

from ..device import NUM_SMS, sm_count, stream_buffers
from .epilogue import ACTIVATIONS
from .hopper_kernel import FP8, ROW_BYTES, SMEM_LIMIT, k_tile
from .skinny_kernel import build, ring_bytes

MAX_M = 64              # matmul chooses the skinny kernel up to this M (the product is a read of the weight)
TUNE_MAX_M = 256        # and times it against the Hopper configurations up to this M (hopper_plan's tuning)
# On a GPU, only where the weight is at least this many bytes: the skinny kernel has a floor of ~20 us (its deep
# ring and split-K walk), so where the weight's read is short the launch's fixed cost decides and the Hopper path
# serves. Session 34, H100, benchmarks/skinny_host.py (GPU us a call, queued, weight in L2): 16x256x256 skinny 20.7
# / Hopper 14.1, 16x1024x1024 20.3 / 14.1, 16x4096x4096 20.7 / 19.4, 64x4096x4096 20.3 / 21.6; with L2 flushed
# (benchmarks/gemm_skinny.py) 1..16 x 4096 x 4096 skinny 20.6-20.8 against cuBLAS 22.0, where the Hopper path was
# 0.85x cuBLAS (session 30). The boundary between 2 MiB (Hopper ahead) and 32 MiB (skinny ahead) is not measured:
# 8 MiB (a 4096 x 1024 weight) is a guess between them. The eager test of tests/test_gpu_ops_gemm.py (ops.linear
# 16 x 256 x 256, at most 1.5x F.linear's host time) failed on the skinny kernel (24.9 against 15.7 us).
MIN_WEIGHT_BYTES = 8 << 20
RING_BYTES = 96 * 1024  # the ring's target size: B's bytes in flight per block (two blocks an SM where they fit)
MAX_STAGES = 16
FILL = 4                # a block's pipeline fill (the first TMA round trip), in 64-row K steps of B
SM_SHARED = 233472      # shared memory of one SM (228 KB), which the resident blocks share
OUTS = ("float16", "bfloat16", "float32")

_KERNELS = {}


def serves(M: int, N: int, K: int, ab: str, out: str, max_m: int = MAX_M) -> bool:
    """Whether the skinny kernel takes this product: f16/bf16 in, f16/bf16/f32 out, 1 <= M <= max_m, K a multiple
    of 8 (the TMA unit's 16-byte rows)."""
    return ab in ("float16", "bfloat16") and out in OUTS and 1 <= M <= max_m and N >= 1 and K >= 8 and K % 8 == 0


def worth_it(N: int, K: int, ab: str, a) -> bool:
    """Whether the skinny kernel is worth its launch for a weight of N x K `ab` on tensor a's device: always on the
    interpreter (CPU tensors), on a GPU from MIN_WEIGHT_BYTES of weight."""
    return not getattr(a, "is_cuda", False) or N * K * (1 if ab in FP8 else 2) >= MIN_WEIGHT_BYTES


def padded_m(M: int) -> int:
    """wgmma's N for M rows of A: the smallest multiple of 8 covering M."""
    return -(-M // 8) * 8


def skinny_cost(N: int, K: int, mp: int, consumers: int, stages: int, splits: int, sms: int, ab: str) -> float:
    """The model the split count is chosen by (see the module): larger is slower; inf where a split would have no
    K tile."""
    bm = 64 * consumers
    tiles, ktiles = -(-N // bm), -(-K // k_tile(ab))
    kh = -(-ktiles // splits)
    if (splits - 1) * kh >= ktiles and splits > 1:
        return float("inf")
    blocks = tiles * splits
    resident = max(1, min(2, SM_SHARED // (ring_bytes(bm, mp, stages) + 2048)))
    # a block's bytes in 64-row K steps of B (8 KB): its K tiles of B and of A (mp rows, from L2), and with split-K
    # its partial sums written (64 x consumers x mp floats) and, for the one block in S that arrives last, S read
    per_block = kh * (consumers + mp / 64) + (consumers * mp / 16 if splits > 1 else 0.0)
    return -(-blocks // sms) * per_block + FILL * -(-blocks // (sms * resident))


def choose_skinny(M: int, N: int, K: int, sms: int = NUM_SMS, ab: str = "float16") -> tuple:
    """The configuration (mp, consumers, stages, splits) for an M x N x K product on `sms` SMs: mp covers M; one
    consumer warpgroup (64-row tiles: the most blocks to split over; two are a given configuration's choice); the
    ring about RING_BYTES (at least 4 stages); the split count of least skinny_cost (ties: fewer)."""
    mp = padded_m(M)
    consumers = 1
    stages = max(4, min(MAX_STAGES, RING_BYTES // ((64 * consumers + mp) * ROW_BYTES)))
    ktiles = -(-K // k_tile(ab))
    best = min(range(1, min(ktiles, 64) + 1),
               key=lambda s: (skinny_cost(N, K, mp, consumers, stages, s, sms, ab), s))
    return (mp, consumers, stages, best)


def make_skinny_gemm(ab: str = "float16", out: str | None = None, mp: int = 16, consumers: int = 1,
                     stages: int = 8, splits: int = 1, *, bias: str | None = None, activation: str | None = None):
    """The skinny kernel for this configuration (made once): kernel(A, B, C[, bias]), or with splits > 1
    kernel(A, B, C[, bias], W, F) (the workspace of `workspace`). bias: None or the dtype of a (N,) bias (C's or
    float32); activation: None, "relu", "gelu", "silu" (fused where C is written)."""
    out = out or ab
    if ab in FP8 or ab not in ("float16", "bfloat16") or out not in OUTS:
        raise tiledsl.LaunchError(f"skinny gemm supports float16/bfloat16 inputs and float16/bfloat16/float32 "
                                  f"outputs, not {ab} -> {out}")
    _check(mp, consumers, stages, splits)
    if activation not in ACTIVATIONS or bias not in (None, out, "float32"):
        raise tiledsl.LaunchError(f"skinny gemm: activation={activation!r} (None, relu, gelu, silu) and a bias of "
                                  f"{bias} (None, C's dtype {out} or float32)")
    key = (ab, out, mp, consumers, stages, splits, bias, activation)
    if key not in _KERNELS:
        _KERNELS[key] = build(ab, out, mp, consumers, stages, splits, bias=bias, activation=activation)
    return _KERNELS[key]


def _check(mp, consumers, stages, splits):
    if mp % 8 or not 8 <= mp <= 256 or consumers not in (1, 2) or (mp > 128 and consumers > 1):
        raise tiledsl.LaunchError(f"skinny gemm: mp={mp} (a multiple of 8 up to 256) with {consumers} consumer "
                                  f"warpgroup(s) (1 or 2; 1 above mp=128: the accumulators' registers)")
    if stages < 2 or ring_bytes(64 * consumers, mp, stages) + 1024 > SMEM_LIMIT:
        raise tiledsl.LaunchError(f"skinny gemm: {stages} stages of {64 * consumers} + {mp} rows do not fit in "
                                  f"{SMEM_LIMIT} bytes of shared memory (at least 2 stages)")
    if not isinstance(splits, int) or not 1 <= splits <= 64:
        raise tiledsl.LaunchError(f"skinny gemm: splits={splits!r}: an int, 1 to 64")


def make_skinny_gemm_fp8(a_type: str = "e4m3", b_type: str | None = None, out: str = "bfloat16", mp: int = 16,
                         consumers: int = 1, stages: int = 8, splits: int = 1):
    """The skinny kernel's FP8 form (made once): A of a_type and B of b_type (e4m3/e5m2, as uint8 bytes), C of
    `out`; kernel(A, B, C, scale_a, scale_b), with splits > 1 kernel(A, B, C, scale_a, scale_b, W, F). K tiles
    of 128 bytes (128 elements): choose_skinny(..., ab=a_type) counts them so."""
    b_type = b_type or a_type
    if a_type not in FP8 or b_type not in FP8 or out not in OUTS:
        raise tiledsl.LaunchError(f"skinny fp8 gemm supports e4m3/e5m2 inputs and float16/bfloat16/float32 "
                                  f"outputs, not {a_type} x {b_type} -> {out}")
    _check(mp, consumers, stages, splits)
    key = (a_type, b_type, out, mp, consumers, stages, splits)
    if key not in _KERNELS:
        _KERNELS[key] = build(a_type, out, mp, consumers, stages, splits, bt=b_type)
    return _KERNELS[key]


def workspace(kernel, a, N: int):
    """The split kernel's workspace for launches on torch tensor a's device and current stream: W (the f32 partial
    sums, a slot per block) and F (a counter per tile, int32 zeros; every launch leaves them at zero, so they are
    made once, and a CUDA graph replays with no memset). Kept per (device, stream, sizes)."""
    slots, tiles = kernel.slots(N), kernel.counters(N)
    return stream_buffers(a, ("skinny", slots, tiles), lambda torch, device: (
        torch.empty(slots, dtype=torch.float32, device=device),
        torch.zeros(tiles, dtype=torch.int32, device=device)))


def describe_skinny(config) -> str:
    mp, consumers, stages, splits = config
    return f"skinny swap-AB {64 * consumers}x{mp} tiles (m64n{mp}), {stages} stages, split-K over {splits}"


_INTERPRETED = {}


def launcher(kernel, a):
    """kernel for CUDA tensors; its twin on the interpreter for CPU tensors (made once)."""
    if a.is_cuda:
        return kernel
    if kernel not in _INTERPRETED:
        _INTERPRETED[kernel] = tiledsl.jit(kernel.fn, interpret=True)
    return _INTERPRETED[kernel]


def buffers(kernel, a, N: int) -> tuple:
    """The launch's workspace arguments: none with one split; the kept ones of `workspace` on a CUDA device; fresh
    ones for the interpreter (CPU tensors)."""
    if kernel.splits == 1:
        return ()
    if a.is_cuda:
        return workspace(kernel, a, N)
    import torch
    return torch.empty(kernel.slots(N), dtype=torch.float32), torch.zeros(kernel.counters(N), dtype=torch.int32)


def skinny_plan(a, b, out, config, how: str):
    """matmul's Plan on the skinny kernel of `config` for these operands, or (None, why) where the schedule model
    refuses its walk over this shape (nothing it refuses is launched). A bias ((N,) of C's dtype or float32;
    another of f16/bf16 converted to float32) and relu/gelu/silu run fused, in a kernel made on the first call of
    that epilogue; a callable activation (or a bias of another shape) is applied by torch after the kernel."""
    from . import schedule_model
    from .plan import DTYPES, Plan, host_epilogue
    M, K = a.shape
    N = b.shape[0]
    ab, od = (DTYPES.get(str(t), str(t)) for t in (a.dtype, out.dtype))
    kernel = make_skinny_gemm(ab, od, *config)
    why = schedule_model.check(kernel, M, N, K)
    if why is not None:
        return None, why
    launch = launcher(kernel, a)
    fused = {}          # (bias dtype, activation) -> that kernel's launcher

    def run(a, b, out, bias, activation):
        if bias is None and activation is None:
            launch(a.contiguous(), b.contiguous(), out, *buffers(kernel, a, N))
            return
        if activation in ACTIVATIONS and (bias is None or bias.dim() == 1 and bias.shape[0] == N and
                                          bias.device == a.device):
            if bias is not None and bias.dtype != out.dtype and str(bias.dtype) != "torch.float32":
                bias = bias.float()
            key = (None if bias is None else DTYPES[str(bias.dtype)], activation)
            if key not in fused:
                fused[key] = launcher(make_skinny_gemm(ab, od, *config, bias=key[0], activation=activation), a)
            extra = () if bias is None else (bias.contiguous(),)
            fused[key](a.contiguous(), b.contiguous(), out, *extra, *buffers(kernel, a, N))
            return
        launch(a.contiguous(), b.contiguous(), out, *buffers(kernel, a, N))
        host_epilogue(out, bias, activation)
    return Plan(run, f"{describe_skinny(config)} ({how})", "skinny", tuple(config)), None


def skinny_matmul(a, b, out_dtype=None, *, out=None, config=None):
    """C = a @ b.T for torch tensors a (M, K) and b (N, K), both float16 or both bfloat16, M <= 256, K a multiple
    of 8, on the skinny kernel (CUDA: sm_90a; CPU tensors: the interpreter). config: (mp, consumers, stages,
    splits), default choose_skinny's. Returns C (M, N) of out_dtype (default a's), or writes out. The schedule
    model checks the walk first (a LaunchError where it refuses)."""
    import torch
    from .plan import DTYPES
    if a.dim() != 2 or b.dim() != 2 or a.shape[1] != b.shape[1] or a.dtype != b.dtype:
        raise tiledsl.LaunchError(f"a is {tuple(a.shape)} {a.dtype}, b is {tuple(b.shape)} {b.dtype}: need (M, K) "
                                  f"and (N, K) of one dtype")
    M, K = a.shape
    N = b.shape[0]
    if out is None:
        out = torch.empty((M, N), dtype=out_dtype or a.dtype, device=a.device)
    ab, od = (DTYPES.get(str(x.dtype), str(x.dtype)) for x in (a, out))
    if not serves(M, N, K, ab, od, TUNE_MAX_M):
        raise tiledsl.LaunchError(f"skinny gemm takes f16/bf16 inputs, M from 1 to {TUNE_MAX_M} and K a multiple "
                                  f"of 8; got {M}x{N}x{K} {ab} -> {od}")
    config = tuple(config or choose_skinny(M, N, K, sm_count(a), ab))
    if config[0] < M:
        raise tiledsl.LaunchError(f"skinny gemm: mp={config[0]} does not cover M={M}")
    kernel = make_skinny_gemm(ab, od, *config)
    _checked(kernel, M, N, K)
    launcher(kernel, a)(a.contiguous(), b.contiguous(), out, *buffers(kernel, a, N))
    return out


_VERDICTS = {}      # the schedule model's verdict per (kernel, M, N, K): a steady call pays one dict lookup


def _checked(kernel, M: int, N: int, K: int):
    from . import schedule_model
    key = (kernel, M, N, K)
    if key not in _VERDICTS:
        _VERDICTS[key] = schedule_model.check(kernel, M, N, K)
    if _VERDICTS[key] is not None:
        raise tiledsl.LaunchError(f"skinny gemm {M}x{N}x{K}: the schedule model refuses it ({_VERDICTS[key]})")


def skinny_matmul_fp8(a, b, scale_a, scale_b, out_dtype=None, *, out=None, config=None):
    """C = (scale_a * scale_b) * (a @ b.T) for FP8 torch tensors a (M, K) and b (N, K) (e4m3/e5m2), M <= 256, K a
    multiple of 16, per-tensor scales as one-element float32 tensors on a's device; C of out_dtype (default
    bfloat16), or written to out. config: (mp, consumers, stages, splits), default choose_skinny's (K tiles of
    128 elements). CUDA: sm_90a; CPU tensors: the interpreter. No bias (matmul_fp8 takes the Hopper kernel then)."""
    import torch
    from .hopper import DTYPES
    at, bt = DTYPES.get(str(a.dtype)), DTYPES.get(str(b.dtype))
    if a.dim() != 2 or b.dim() != 2 or a.shape[1] != b.shape[1] or at not in FP8 or bt not in FP8:
        raise tiledsl.LaunchError(f"a is {tuple(a.shape)} {a.dtype}, b is {tuple(b.shape)} {b.dtype}: need FP8 "
                                  f"(M, K) and (N, K)")
    M, K = a.shape
    N = b.shape[0]
    if not 1 <= M <= TUNE_MAX_M or K % 16:
        raise tiledsl.LaunchError(f"skinny fp8 gemm takes M from 1 to {TUNE_MAX_M} and K a multiple of 16; got "
                                  f"{M}x{N}x{K}")
    for name, sc in (("scale_a", scale_a), ("scale_b", scale_b)):
        if not isinstance(sc, torch.Tensor) or sc.numel() != 1 or sc.dtype != torch.float32 or \
                sc.device != a.device:
            raise tiledsl.LaunchError(f"{name} must be a float32 tensor of one element on {a.device}")
    if out is None:
        out = torch.empty((M, N), dtype=out_dtype or torch.bfloat16, device=a.device)
    od = DTYPES.get(str(out.dtype))
    config = tuple(config or choose_skinny(M, N, K, sm_count(a), at))
    kernel = make_skinny_gemm_fp8(at, bt, od, *config)
    _checked(kernel, M, N, K)
    launcher(kernel, a)(a.contiguous().view(torch.uint8), b.contiguous().view(torch.uint8), out,
                        scale_a.reshape(1), scale_b.reshape(1), *buffers(kernel, a, N))
    return out
