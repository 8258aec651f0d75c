"""C = A · Bᵀ on Hopper (sm_90a) with TMA, wgmma and warp specialisation, written only in the kernel language.

The seed of issue 17's Hopper path: a small, clear, correct kernel, not yet tuned. A is M×K and B is N×K, both
row-major f16 or bf16; accumulation in f32; C is M×N in the input type (or another of f16/bf16/f32). One block
computes a BM×BN tile (BM = 64 × CONSUMERS) with 1 + CONSUMERS warpgroups:

  * warpgroup 0 is the producer: it gives registers back (`setmaxnreg.dec`), and one thread of its first warp,
    chosen by `elect.sync`, issues the TMA loads of A's and B's K tiles (boxes BM×BK and BN×BK, the 128-byte
    swizzle, K-major) into a STAGES-deep shared ring. Each stage has a "full" mbarrier (the producer arrives with
    `expect_tx` of the stage's bytes; the TMA unit pays them) and an "empty" mbarrier (every consumer thread
    arrives once it is done with the stage; the producer waits on it before refilling the stage);
  * warpgroups 1..CONSUMERS are consumers: they take registers (`setmaxnreg.inc`), wait for a stage's "full"
    phase, run BK/16 `wgmma.mma_async m64nBNk16` on their 64 rows of A and all BN rows of B straight from shared
    memory (the matrix descriptors come from the views' layouts) and commit them as one group; with that group in
    flight they wait for the previous K tile's group (`wait_group 1`) and release its stage;
  * the epilogue converts the f32 accumulators and either stores them with plain stores, or (tma_store) writes
    each consumer's tile to shared memory, meets at an mbarrier, and one thread stores it with a TMA tensor store;
  * optionally (multicast) the blocks run in 2-CTA clusters along M that load half of their common B tile each
    and multicast it to both (the stage's release then crosses the cluster: remote mbarrier arrives).

Every variant is one builder (hopper_kernel.py): one tile per block is the persistent walk with a
grid of one block per tile. The persistent variant (persistent=True) launches min(SMs, tiles) blocks that walk
their tiles in grouped order; its producer's ring runs on across tiles, so the next tile's loads overlap this
tile's epilogue, and its consumers restart the accumulators with scale_d = 0 and release a stage with one arrive
per warp; with multicast, 2-CTA clusters walk tile pairs and share B. A TMA-store epilogue whose staging buffer
does not fit beside the ring (BN = 256 with 4 stages: 192 KB of ring) stages C in parts of BN / 2
(epilogue_columns).

Split-K (split_k=2..8, one tile per block): the blocks of a cluster compute one tile together, each over its share
of the K tiles; then each stages the other blocks' columns of its f32 accumulators in its own ring and finishes
BN / split_k columns, adding the partial sums it reads from its peers' shared memory (ld.shared::cluster) before
the epilogue. No atomics and no second launch: deterministic. It serves shapes with too few tiles to fill the GPU
(1024^3: 64 tiles of 128 x 128, 128 blocks with split_k=2).

Fused epilogues (epilogue.py): the consumers add a bias per column and apply relu, gelu
(erf form) or silu to the f32 accumulators before either store. FP8 (hopper_matmul_fp8): e4m3/e5m2 operands
(mixed too) through wgmma m64nNk32 with BK = 128 bytes (the ring's bytes per stage unchanged), the accumulators
scaled by scale_a * scale_b read on the device.

MN-major operands (a_major / b_major = "mn"): A given as (K, M) or B as (K, N) row-major, the transposes the
backward of a linear layer needs, read as stored instead of copied: each stage's tile of an MN-major operand is
loaded as 64-column TMA boxes (128 bytes, the swizzle's span) and read by wgmma as a transposed shared-memory
operand (trans_a / trans_b); f16/bf16 only (fp8 wgmma has no transpose). `major_of` tells such a view from its
strides; matmul() uses it behind the gate "gemm_mn_major" (tiledsl.ops.gates).

Ragged shapes are handled, not refused: the TMA unit fills the parts of a box outside A or B with zeros (they add
nothing to the products) and the epilogue stores only the elements inside C. K must be a multiple of 8 (16 for
fp8: the TMA unit needs 16-byte row strides; else a LaunchError names K).

On the interpreter the producer's and the consumers' branches run as fibers that hand over at their mbarrier waits
(interpreter/fibers.py), so the ring turns there as on the GPU; an interpreter without fibers runs the producer's
branch to its end first, and a kernel with more K tiles than STAGES faults there at the producer's first wait for
a released stage.
"""
import tiledsl

from ..device import sm_count, stream_buffers
from .epilogue import ACTIVATIONS
from .hopper_kernel import (BK, BN, CONSUMER_REGS, CONSUMERS, FP8, FULL_MASK, GROUP_M, NUM_SMS,  # noqa: F401
                            PRODUCER_REGS, SMEM_LIMIT, STAGES, SW128, build, epilogue_columns, layouts)

_KERNELS = {}
OUTS = ("float16", "bfloat16", "float32")


def _check_config(stages, consumers, bn, persistent, num_sms, group_m, out, bias, activation, multicast, split_k):
    # at least two stages: a consumer releases a stage only after it issued the next K tile's wgmma (one group
    # stays in flight), so with one stage the producer and the consumers would wait for each other forever
    if bn % 8 or not 8 <= bn <= 256 or consumers < 1 or 64 * consumers > 256 or stages < 2:
        raise tiledsl.LaunchError(f"hopper gemm: BN={bn} (a multiple of 8 up to 256), {consumers} consumer "
                                  f"warpgroup(s) (BM = 64 each, at most 256) and {stages} stage(s) (at least 2) "
                                  f"do not tile")
    if persistent and (int(num_sms) < 1 or int(group_m) < 1):
        raise tiledsl.LaunchError(f"hopper gemm: num_sms={num_sms} and group_m={group_m} must be positive")
    if not isinstance(split_k, int) or not 1 <= split_k <= 8:
        raise tiledsl.LaunchError(f"hopper gemm: split_k={split_k!r}: the blocks of one cluster (an int, 1 to 8)")
    if split_k > 1 and (persistent or multicast):
        raise tiledsl.LaunchError(f"hopper gemm: split_k={split_k} runs one tile per block in clusters of its own; "
                                  f"it does not combine with {'persistent' if persistent else 'multicast'}=True")
    if activation not in ACTIVATIONS:
        raise tiledsl.LaunchError(f"hopper gemm: activation={activation!r} is not one of None, 'relu', 'gelu', "
                                  f"'silu'")
    if bias is not None and bias not in (out, "float32"):
        raise tiledsl.LaunchError(f"hopper gemm: a bias of {bias} with a {out} output: the bias is the output's "
                                  f"dtype or float32")


def _get(ab, bt, out, stages, consumers, bn, tma_store, multicast, persistent, num_sms, group_m, bias, activation,
         split_k=1, stream_k=False, defer_epilogue=False, a_major="k", b_major="k"):
    key = (ab, bt, out, stages, consumers, bn, bool(tma_store), bool(multicast), bias, activation, split_k)
    if persistent:
        key += ("persistent", int(num_sms), int(group_m))
    if stream_k:
        key += ("stream_k",) if int(stream_k) == 1 else ("stream_k", int(stream_k))
    if defer_epilogue:
        key += ("defer_epilogue",)
    if (a_major, b_major) != ("k", "k"):
        key += ("majors", a_major, b_major)
    if key not in _KERNELS:
        _check_config(stages, consumers, bn, persistent, num_sms, group_m, out, bias, activation, multicast,
                      split_k)                  # (build refuses what stream_k does not combine with)
        _KERNELS[key] = build(ab, bt, out, stages, consumers, bn, tma_store, persistent, num_sms, group_m,
                              multicast, bias, activation, split_k, stream_k, defer_epilogue, a_major, b_major)
    return _KERNELS[key]


def workspace(kernel, a):
    """The stream-K kernel's workspace for launches on torch tensor a's device and current stream: W (grid width,
    BM * BN) float32, a row of partial sums per block, and F (grid width + 1,) int32 zeros: a flag a block (raised
    by the block that publishes its row, lowered again by the block that adds it) and the blocks' ticket counter
    (back to 0 when a launch's last block has taken its ticket). One pair per (device, stream, shape)
    (stream_buffers). For a host tensor (the interpreter) a fresh pair: a host has no streams to keep them by."""
    if not getattr(a, "is_cuda", False):
        import torch
        return (torch.empty(kernel.slots, dtype=torch.float32), torch.zeros(kernel.flags, dtype=torch.int32))
    return stream_buffers(a, ("stream-k", kernel.slots), lambda torch, device: (
        torch.empty(kernel.slots, dtype=torch.float32, device=device),
        torch.zeros(kernel.flags, dtype=torch.int32, device=device)))


def make_hopper_gemm(ab: str = "float16", out: str | None = None, stages: int = STAGES,
                     consumers: int = CONSUMERS, bn: int = BN, tma_store: bool = False, multicast: bool = False,
                     persistent: bool = False, num_sms: int = NUM_SMS, group_m: int = GROUP_M, *,
                     bias: str | None = None, activation: str | None = None, split_k: int = 1,
                     stream_k: bool = False, defer_epilogue: bool = False, a_major: str = "k", b_major: str = "k"):
    """The warp-specialised GEMM kernel for input dtype `ab` (float16/bfloat16) and output dtype `out`
    (float16/bfloat16/float32; default: `ab`); called as kernel(A, B, C) with A (M, K), B (N, K), C (M, N), or
    kernel(A, B, C, bias) with a bias dtype.

    tma_store: the epilogue writes each consumer's tile to shared memory and one thread stores it with a TMA
    tensor store (C a tensor map: its rows must be multiples of 16 bytes; the unit drops the ragged edge), instead
    of every thread storing its elements.

    multicast: blocks run in 2-CTA clusters (along the grid's x) walking pairs of tile rows; the two blocks of a
    cluster need the same B tile, so each loads half of it and multicasts the half to both (cta_mask 0b11). A
    stage is then written into both blocks' shared memory, so every consumer releases it in both blocks (a remote
    mbarrier arrive, by lane 0 of each consumer warp) and each producer waits for both blocks' consumers before
    refilling it.

    persistent: a grid of min(num_sms, tiles) blocks, each walking its tiles in grouped order (group_m tile rows
    at a time) with the ring running on across tiles, so the next tile's loads overlap this tile's epilogue; not
    persistent: one block per tile (the same walk, once). Where the TMA-store epilogue's staging buffer does not
    fit beside the ring (BN = 256 with 4 stages), it stages C in parts of BN / 2 (epilogue_columns).

    bias: None, or the dtype of a (N,) bias added per column (`out` or float32); activation: None, "relu",
    "gelu" (erf form) or "silu", applied after the bias (epilogue.py).

    split_k: 1, or the blocks of a cluster (along x) that compute one tile together, each over its share of the K
    tiles; then each block finishes BN / split_k columns of the tile, adding the f32 partial sums the others staged
    in their rings once their K loops were done (read through distributed shared memory), and stores them. For
    shapes with too few tiles to fill the GPU (1024^3 has 64 tiles of 128 x 128: split_k=2 runs 128 blocks). One
    tile per block, no multicast.

    stream_k (persistent only; no multicast, split_k, bias or activation): the tiles that do not fill a whole
    wave of num_sms blocks are not left to a few blocks: their K steps are split evenly over up to all of them
    (shares of at least MIN_SHARE K steps), a split tile's partial sums added up by the block that runs its last K
    step, which waits only for blocks that took their tickets before it (schedule.py). stream_k=2 shares the last
    whole wave's K steps too (each share one to two tiles: a split tile has at most two contributors, where a partial
    wave of a few tiles would cut them into many short shares). Called
    as kernel(A, B, C, W, F) with the workspace of `workspace`: W (num_sms, BM * BN) float32, F (num_sms + 1,) int32
    zeros (kernel.slots is W's shape, kernel.flags F's length).

    defer_epilogue: a half C's epilogue of one tile runs during the next tile's first K steps (stmatrix and TMA
    store between a wgmma's commit and its wait): +0.3-0.7% on the H200 at 128 x 256 tiles, for a third more
    epilogue code (hopper_kernel.py).

    a_major / b_major: "k" (the default: A (M, K), B (N, K) row-major) or "mn" (A given as (K, M), B as (K, N)
    row-major: a transposed operand read as stored; wgmma's transposed shared-memory operands, 64-column TMA boxes;
    B MN-major needs BN, halved with multicast, a multiple of 64). kernel(A, B, C) then takes A (K, M) / B (K, N).
    The TMA unit needs 16-byte row strides: M (N) a multiple of 8 for an MN-major A (B)."""
    out = out or ab
    if ab not in HALF_TYPES or out not in OUTS:
        raise tiledsl.LaunchError(f"hopper gemm supports float16/bfloat16 inputs and float16/bfloat16/float32 "
                                  f"outputs, not {ab} -> {out}")
    return _get(ab, ab, out, stages, consumers, bn, tma_store, multicast, persistent, num_sms, group_m, bias,
                activation, split_k, stream_k, defer_epilogue, a_major, b_major)


def make_hopper_gemm_fp8(a_type: str = "e4m3", b_type: str | None = None, out: str = "bfloat16",
                         stages: int = STAGES, consumers: int = CONSUMERS, bn: int = 256, tma_store: bool = True,
                         multicast: bool = False, persistent: bool = True, num_sms: int = NUM_SMS,
                         group_m: int = GROUP_M, *, bias: str | None = None, activation: str | None = None,
                         split_k: int = 1, stream_k: bool = False, a_major: str = "k", b_major: str = "k"):
    """The FP8 kernel: A (M, K) of `a_type` and B (N, K) of `b_type` (e4m3 or e5m2, default a_type), both as
    uint8 bytes (K-major: wgmma reads fp8 only K-major), C (M, N) of `out`; called as kernel(A, B, C, scale_a,
    scale_b) or kernel(A, B, C, bias, scale_a, scale_b), the scales float32 tensors of one element. wgmma
    m64nBNk32 over K tiles of 128 bytes; the epilogue multiplies the f32 accumulators by scale_a * scale_b
    before the bias and activation. The other parameters as make_hopper_gemm's (default: persistent, BN 256,
    TMA store); with stream_k (no bias or activation) called as kernel(A, B, C, scale_a, scale_b, W, F), the
    workspace of `workspace`. a_major / b_major other than "k" are refused (fp8 wgmma has no transpose)."""
    b_type = b_type or a_type
    if a_type not in FP8 or b_type not in FP8 or out not in OUTS:
        raise tiledsl.LaunchError(f"hopper fp8 gemm supports e4m3/e5m2 inputs and float16/bfloat16/float32 "
                                  f"outputs, not {a_type} x {b_type} -> {out}")
    return _get(a_type, b_type, out, stages, consumers, bn, tma_store, multicast, persistent, num_sms, group_m,
                bias, activation, split_k, stream_k, False, a_major, b_major)


HALF_TYPES = ("float16", "bfloat16")


DTYPES = {"torch.float16": "float16", "torch.bfloat16": "bfloat16", "torch.float32": "float32",
          "torch.float8_e4m3fn": "e4m3", "torch.float8_e5m2": "e5m2"}


def _bias_of(bias, N, out, a):
    """The bias as the kernel takes it (C's dtype or float32; another of f16/bf16 converted to float32, exactly)
    and its dtype name for make_hopper_gemm, after the host checks; (None, None) without a bias."""
    if bias is None:
        return None, None
    torch = _torch()
    if bias.dim() != 1 or bias.shape[0] != N:
        raise tiledsl.LaunchError(f"bias is {tuple(bias.shape)}: need ({N},), one value per column of C")
    if bias.dtype not in (torch.float16, torch.bfloat16, torch.float32):
        raise tiledsl.LaunchError(f"bias is {bias.dtype}: need C's dtype ({out.dtype}) or torch.float32")
    if bias.device != a.device:
        raise tiledsl.LaunchError(f"bias is on {bias.device}, a on {a.device}")
    if bias.dtype not in (out.dtype, torch.float32):
        bias = bias.float()
    return bias.contiguous(), DTYPES[str(bias.dtype)]


def _torch():
    import torch
    return torch


def _out_of(a, M, N, out, out_dtype, default):
    if out is None:
        return _torch().empty((M, N), dtype=out_dtype or default, device=a.device)
    if tuple(out.shape) != (M, N) or not out.is_contiguous():
        raise tiledsl.LaunchError(f"out is {tuple(out.shape)}: need a contiguous ({M}, {N})")
    return out


def _grid_width(persistent, a):
    return sm_count(a) if persistent else NUM_SMS


_VERDICTS = {}


def schedule_checked(kernel, M: int, N: int, K: int):
    """Refuse a launch whose walk the schedule model (schedule_model.check) finds unsound for this shape: the
    direct calls check as matmul's plans do (the verdict is kept per kernel and shape, so a steady call pays one
    dict lookup)."""
    w = kernel.walk
    if not (w["SKW"] or w["SK"] > 1 or w["MC"] > 1 or w["SMS"] < 1 << 30):
        return                          # one tile per block, nobody waits: coverage is the grid's
    key = (kernel, M, N, K)
    why = _VERDICTS.get(key, False)
    if why is False:
        from . import schedule_model
        why = _VERDICTS[key] = schedule_model.check(kernel, M, N, K)
    if why is not None:
        raise tiledsl.LaunchError(f"hopper gemm {M}x{N}x{K}: the schedule model refuses this launch ({why}); "
                                  f"matmul() falls back to a configuration it accepts")


def major_of(x) -> str:
    """How a 2-D operand x (rows, K) lies in memory, as the Hopper kernel could read it without a copy: "mn" where
    it is the transpose of a contiguous (K, rows) tensor (x.t() of one, stride (1, rows)) whose rows are a multiple
    of 8 and whose data is 16-byte aligned (the TMA unit's strides and base), else "k" (read as x.contiguous():
    no copy where x is already row-major)."""
    if x.is_contiguous() or x.stride(0) != 1 or x.stride(1) != x.shape[0] or x.shape[0] % 8:
        return "k"
    return "mn" if x.data_ptr() % 16 == 0 else "k"


def operand(x, major: str):
    """The tensor the kernel takes for operand x (rows, K) read `major`: x.contiguous() (K-major), or the (K, rows)
    row-major tensor x is a transpose of (MN-major; a copy only where x is not such a view)."""
    return x.contiguous() if major == "k" else x.t().contiguous()


def majors_for(a, b, a_major: str, b_major: str, bn: int, multicast: bool) -> tuple:
    """hopper_matmul's a_major / b_major resolved: "auto" is `major_of` (the strides decide), kept K-major where the
    kernel cannot read the operand MN-major (B: BN, halved with multicast, not a multiple of 64); "k" and "mn" as
    given (a LaunchError where "mn" cannot be read: rows not a multiple of 8)."""
    got = []
    for name, x, m, ok in (("a", a, a_major, True), ("b", b, b_major, (bn // (2 if multicast else 1)) % 64 == 0)):
        if m == "auto":
            m = major_of(x) if ok else "k"
        elif m == "mn" and x.shape[0] % 8:
            raise tiledsl.LaunchError(f"hopper gemm: {name}_major='mn' needs {name}'s rows ({x.shape[0]}) a multiple "
                                      f"of 8 (the TMA unit reads (K, rows) with 16-byte row strides)")
        elif m not in ("k", "mn"):
            raise tiledsl.LaunchError(f"hopper gemm: {name}_major={m!r}: 'k', 'mn' or 'auto'")
        got.append(m)
    return tuple(got)


def hopper_matmul(a, b, out_dtype=None, *, out=None, bias=None, activation=None, stages: int = STAGES,
                  consumers: int = CONSUMERS, bn: int = BN, tma_store: bool | None = None, multicast: bool = False,
                  persistent: bool = False, group_m: int = GROUP_M, split_k: int = 1, stream_k: bool = False,
                  a_major: str = "k", b_major: str = "k"):
    """C = act(a @ b.T + bias) for torch CUDA tensors a (M, K) and b (N, K), both float16 or both bfloat16, on
    an sm_90 GPU; any M and N, K a multiple of 8 (16-byte rows for the TMA unit). Returns C (M, N) of `out_dtype`
    (default: a's dtype), or writes `out`. bias: None or (N,) of C's dtype or float32 (another of f16/bf16 is
    converted to float32 first), added per column in f32;
    activation: None, "relu", "gelu" (erf form, as torch's default) or "silu", on the f32 values. tma_store
    (default: where C's rows are multiples of 16 bytes) picks the TMA-store epilogue, multicast the 2-CTA clusters
    that share B tiles, persistent a grid of one block per SM of a's device walking tiles in grouped order,
    split_k > 1 clusters of that many blocks splitting each tile's K loop, stream_k the persistent grid's last
    partial wave split by K steps over every block (make_hopper_gemm; its workspace kept per device and stream).
    a_major / b_major: how the kernel reads a and b: "k" (the default: a.contiguous(), b.contiguous()), "mn" (a
    as the (K, M) row-major tensor a is a transpose of, b as (K, N): no copy where a = x.t() of a contiguous x;
    rows a multiple of 8) or "auto" (the strides decide: `major_of`). Not gated: matmul() asks the gate
    (tiledsl.ops.gates, "gemm_mn_major") before it passes "auto" for CUDA tensors."""
    kernel, args = hopper_launch(a, b, out_dtype, out=out, bias=bias, activation=activation, stages=stages,
                                 consumers=consumers, bn=bn, tma_store=tma_store, multicast=multicast,
                                 persistent=persistent, group_m=group_m, split_k=split_k, stream_k=stream_k,
                                 a_major=a_major, b_major=b_major)
    _launcher(kernel, a)(*args)
    return args[2]


def hopper_launch(a, b, out_dtype=None, *, out=None, bias=None, activation=None, stages: int = STAGES,
                  consumers: int = CONSUMERS, bn: int = BN, tma_store: bool | None = None, multicast: bool = False,
                  persistent: bool = False, group_m: int = GROUP_M, split_k: int = 1, stream_k: bool = False,
                  a_major: str = "k", b_major: str = "k"):
    """What hopper_matmul launches, after its checks: (kernel, args), C being args[2] (matmul's plans keep the
    kernel of a fused epilogue and launch it without these checks on later calls)."""
    if a.dim() != 2 or b.dim() != 2 or a.shape[1] != b.shape[1] or a.dtype != b.dtype:
        raise tiledsl.LaunchError(f"a is {tuple(a.shape)} {a.dtype}, b is {tuple(b.shape)} {b.dtype}: need (M, K) "
                                  f"and (N, K) of one dtype")
    M, K = a.shape
    N = b.shape[0]
    out = _out_of(a, M, N, out, out_dtype, a.dtype)
    ab, od = (DTYPES.get(str(x.dtype), str(x.dtype)) for x in (a, out))
    if tma_store is None:
        tma_store = (N * out.element_size()) % 16 == 0
    bias, bias_dt = _bias_of(bias, N, out, a)
    am, bm = majors_for(a, b, a_major, b_major, bn, multicast)
    kernel = make_hopper_gemm(ab, od, stages, consumers, bn, tma_store, multicast, persistent,
                              _grid_width(persistent, a), group_m, bias=bias_dt, activation=activation,
                              split_k=split_k, stream_k=stream_k, a_major=am, b_major=bm)
    if K % 8:
        raise tiledsl.LaunchError(f"hopper gemm needs K a multiple of 8 (the TMA unit reads rows of 16-byte "
                                  f"multiples); got M={M}, N={N}, K={K}")
    schedule_checked(kernel, M, N, K)
    extra = () if bias is None else (bias,)
    if stream_k:
        extra = workspace(kernel, a)
    return kernel, (operand(a, am), operand(b, bm), out) + extra


def hopper_matmul_fp8(a, b, scale_a, scale_b, out_dtype=None, *, out=None, bias=None, activation=None,
                      stages: int = STAGES, consumers: int = CONSUMERS, bn: int = 256, tma_store: bool | None = None,
                      multicast: bool = False, persistent: bool = True, group_m: int = GROUP_M, split_k: int = 1,
                      stream_k: bool = False):
    """C = act((a @ b.T) * scale_a * scale_b + bias) for torch CUDA tensors a (M, K) and b (N, K) of
    torch.float8_e4m3fn or torch.float8_e5m2 (mixed allowed), per-tensor scales (float32 tensors of one element,
    on a's device: read by the kernel, never synced to the host), on an sm_90 GPU; K a multiple of 16. Returns C
    (M, N) of `out_dtype` (default torch.bfloat16; float16 and float32 too), or writes `out`. bias and
    activation as hopper_matmul's. The default configuration: persistent grid, BN 256, TMA store where C's rows
    are multiples of 16 bytes (make_hopper_gemm_fp8); stream_k as hopper_matmul's (no bias or activation)."""
    torch = _torch()
    if a.dim() != 2 or b.dim() != 2 or a.shape[1] != b.shape[1] or \
            DTYPES.get(str(a.dtype)) not in FP8 or DTYPES.get(str(b.dtype)) not in FP8:
        raise tiledsl.LaunchError(f"a is {tuple(a.shape)} {a.dtype}, b is {tuple(b.shape)} {b.dtype}: need (M, K) "
                                  f"and (N, K) of torch.float8_e4m3fn or torch.float8_e5m2")
    scales = []
    for name, sc in (("scale_a", scale_a), ("scale_b", scale_b)):
        if not isinstance(sc, torch.Tensor) or sc.numel() != 1 or sc.dtype != torch.float32 or \
                sc.device != a.device:
            raise tiledsl.LaunchError(f"{name} must be a float32 tensor of one element on {a.device} (read by "
                                      f"the kernel), got {sc!r:.80}")
        scales.append(sc.reshape(1))
    M, K = a.shape
    N = b.shape[0]
    out = _out_of(a, M, N, out, out_dtype, torch.bfloat16)
    od = DTYPES.get(str(out.dtype), str(out.dtype))
    if tma_store is None:
        tma_store = (N * out.element_size()) % 16 == 0
    bias, bias_dt = _bias_of(bias, N, out, a)
    kernel = make_hopper_gemm_fp8(DTYPES[str(a.dtype)], DTYPES[str(b.dtype)], od, stages, consumers, bn, tma_store,
                                  multicast, persistent, _grid_width(persistent, a), group_m, bias=bias_dt,
                                  activation=activation, split_k=split_k, stream_k=stream_k)
    if K % 16:
        raise tiledsl.LaunchError(f"hopper fp8 gemm needs K a multiple of 16 (the TMA unit reads rows of 16-byte "
                                  f"multiples); got M={M}, N={N}, K={K}")
    args = (a.contiguous().view(torch.uint8), b.contiguous().view(torch.uint8), out)
    args += (() if bias is None else (bias,)) + tuple(scales)
    if stream_k:
        args += workspace(kernel, a)
    schedule_checked(kernel, M, N, K)
    _launcher(kernel, a)(*args)
    return out


_INTERPRETED = {}


def _launcher(kernel, a):
    """kernel for CUDA tensors; for CPU tensors its twin on the (fibered) interpreter, made once per kernel (the
    torch op's CPU route: small sizes, every lane simulated)."""
    if a.is_cuda:
        return kernel
    if kernel not in _INTERPRETED:
        _INTERPRETED[kernel] = tiledsl.jit(kernel.fn, interpret=True)
    return _INTERPRETED[kernel]

