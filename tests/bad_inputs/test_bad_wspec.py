"""Wrong warp-specialised Hopper kernels and calls (tiledsl/ops/gemm/hopper.py, the TMA multicast test): the pieces
composed wrongly (a consumer's wgmma view of the TMA ring that drops the swizzle or starts mid-pattern, a producer
that keeps more registers than the block's cap, setmaxnreg/wgmma on a named sm_90, a multicast box into a view whose
layout is not the map's) are CompilationErrors at the offending line; bad hopper_matmul calls are LaunchErrors."""
import numpy as np
import pytest

import tiledsl
from tiledsl import T
from tiledsl.layout import S, TileLayout, laneid, wid_in_wg
from badcase import Case, run

MMA = "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16"
LOAD_MC = "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster"
RING = T.tma_layout((2, 64, 64), "float16", 128)
ACC = TileLayout(S[(1, 1, 4, 2, 8, 8, 4, 2) : (1, 1, 1 @ wid_in_wg, 2, 4 @ laneid, 4, 1 @ laneid, 1)])
# the ring's bytes as wgmma reads them: (stage, M repeat, K step, 64 rows, 16 k), rows of 128 bytes, swizzled
GOOD = TileLayout(S[(2, 1, 4, 64, 16) : (64 * 64, 1, 16, 64, 1)], swizzle=(3, 3, 3))
NO_SWIZZLE = TileLayout(S[(2, 1, 4, 64, 16) : (64 * 64, 1, 16, 64, 1)])
# stages 68 rows apart: stage 1 starts 4 rows (512 bytes) into the 1024-byte pattern of the 128-byte swizzle
MID_PATTERN = TileLayout(S[(2, 1, 4, 64, 16) : (68 * 64, 1, 16, 64, 1)], swizzle=(3, 3, 3))
APPLY = "T.cuda.tile.apply(T.ptx[MMA], dv, wa[s], wb[s], scope=\"warpgroup\")"


def _consumer(layout):
    def k_consumer(A: T.Tensor((64, 64), "float16")):
        T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=256, max_registers=128))
        sa = T.alloc_shared((2 * 68 * 64,), "float16")
        sb = T.alloc_shared((2 * 64 * 64,), "float16")
        wa = sa.view(2, 1, 4, 64, 16, layout=layout)
        wb = sb.view(2, 1, 4, 64, 16, layout=GOOD)
        acc = T.alloc_local((32,), "float32")
        dv = acc.view(1, 1, 64, 64, layout=ACC)
        s = T.cuda.block_id() % 2
        if T.cuda.thread_id() >= 128:
            T.cuda.tile.apply(T.ptx["setmaxnreg.inc.sync.aligned.u32"], 200)
            T.cuda.tile.apply(T.ptx[MMA], dv, wa[s], wb[s], scope="warpgroup")
        else:
            T.cuda.tile.apply(T.ptx["setmaxnreg.dec.sync.aligned.u32"], 40)
    return k_consumer


def k_producer_keeps_too_many():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=384, max_registers=168))
    if T.cuda.thread_id() < 128:
        T.cuda.tile.apply(T.ptx["setmaxnreg.dec.sync.aligned.u32"], 176)
    else:
        T.cuda.tile.apply(T.ptx["setmaxnreg.inc.sync.aligned.u32"], 232)


def k_multicast_into_the_wgmma_view(A: T.TensorMap(("M", "N"), "float16", box=(64, 64), swizzle=128)):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=2, block=128, cluster=(2, 1, 1)))
    sa = T.alloc_shared((2 * 64 * 64,), "float16")
    bar = T.alloc_shared((1,), "uint64")
    flat = sa.view(2, 64, 64)                       # row-major, but the map writes the 128-byte swizzle
    if T.cuda.thread_id() == 0:
        T.cuda.tile.apply(T.ptx[LOAD_MC], flat[0], A, bar, coords=(0, 0), cta_mask=0b11)


def _hopper():
    from tiledsl.ops.gemm import hopper
    return hopper


def _torch_pair(shape_a, shape_b, da="float16", db="float16"):
    torch = pytest.importorskip("torch")
    return torch.zeros(*shape_a, dtype=getattr(torch, da)), torch.zeros(*shape_b, dtype=getattr(torch, db))


def _matmul(shape_a, shape_b, da="float16", db="float16"):
    return lambda: _hopper().hopper_matmul(*_torch_pair(shape_a, shape_b, da, db))


def _gemm_named_sm90():
    a = np.zeros((128, 128), np.float16)
    return _hopper().make_hopper_gemm("float16").compile(a, a, a, target="sm_90")


CASES = [
    Case("wgmma-view-of-the-ring-without-its-swizzle", _consumer(NO_SWIZZLE), APPLY,
         ("operand A", "no matrix descriptor expresses"), target="sm_90a"),
    Case("wgmma-view-of-the-ring-mid-pattern", _consumer(MID_PATTERN), APPLY,
         ("operand A", "inside a 128B swizzle pattern"), target="sm_90a"),
    Case("producer-keeps-more-than-the-cap", k_producer_keeps_too_many,
         'T.cuda.tile.apply(T.ptx["setmaxnreg.dec.sync.aligned.u32"], 176)', ("max_registers=168", ".dec"),
         target="sm_90a"),
    Case("setmaxnreg-named-sm90", k_producer_keeps_too_many,
         'T.cuda.tile.apply(T.ptx["setmaxnreg.dec.sync.aligned.u32"], 176)', ("sm_90a", "the target is sm_90")),
    Case("multicast-into-a-view-that-is-not-the-maps", k_multicast_into_the_wgmma_view,
         "T.cuda.tile.apply(T.ptx[LOAD_MC], flat[0], A, bar", ("box/layout mismatch", "swizzle=128"),
         args=(np.zeros((128, 64), np.float16),)),
    Case("hopper-gemm-named-sm90", action=_gemm_named_sm90, words=("sm_90a", "the target is sm_90")),
    Case("hopper-gemm-one-stage", action=lambda: _hopper().make_hopper_gemm("float16", stages=1),
         err=tiledsl.LaunchError, words=("1 stage(s) (at least 2)",)),
    Case("hopper-gemm-persistent-multicast-bn-8",
         action=lambda: _hopper().make_hopper_gemm("float16", bn=8, persistent=True, multicast=True),
         err=tiledsl.LaunchError, words=("BN=8", "2 slices", "(multicast)")),
    Case("hopper-gemm-persistent-no-sms",
         action=lambda: _hopper().make_hopper_gemm("float16", persistent=True, num_sms=0),
         err=tiledsl.LaunchError, words=("num_sms=0", "positive")),
]
# hopper_matmul's host checks take torch tensors (CPU ones do): skipped, not failed, where torch is not installed
TORCH_CASES = [
    Case("hopper-matmul-ragged-k", action=_matmul((128, 100), (128, 100)), err=tiledsl.LaunchError,
         words=("K a multiple of 8", "K=100")),
    Case("hopper-matmul-mixed-dtypes", action=_matmul((128, 64), (128, 64), db="bfloat16"), err=tiledsl.LaunchError,
         words=("of one dtype",)),
    Case("hopper-matmul-float32", action=_matmul((128, 64), (128, 64), "float32", "float32"), err=tiledsl.LaunchError,
         words=("float16/bfloat16 inputs", "float32 -> float32")),
]


@pytest.mark.parametrize("case", [c.param() for c in CASES])
def test_bad_wspec(case):
    run(case)


@pytest.mark.parametrize("case", [c.param() for c in TORCH_CASES])
def test_bad_wspec_host(case):
    pytest.importorskip("torch")
    run(case)
