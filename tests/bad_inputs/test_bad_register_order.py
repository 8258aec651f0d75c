"""Register buffers read in another order than they were written (issue 33, tiledsl/passes/register_provenance.py):
each kernel views one local buffer twice, once for the instruction that writes it (ldmatrix, or an mma's D) and
once for the one that reads it (mma.sync's A, B or C), and the two views map the registers to different
coordinates. Each is a CompilationError at the reader's operand naming the writer's line too (`other`), with a
counterexample: the register, a lane, the coordinate written and the coordinate read."""
import inspect

import numpy as np
import pytest

import tiledsl
from tiledsl import T
from tiledsl.layout import S, TileLayout, laneid, warpid
from badcase import Case, line_of, raw, run

LC = T.cuda.LaunchConfig
CE = tiledsl.CompilationError
WORDS = ("read in another order than they were written", "lane 0")
LDM4 = "ldmatrix.sync.aligned.m8n8.x4.shared.b16"
MMA16 = "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"
MMA8 = "mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32"

# ldmatrix's register image: word (i, r, w) is register i of lane 4r + w (matrix i in register i)
FRAG4 = TileLayout(S[(4, 8, 4) : (1, 4 @ laneid, 1 @ laneid)])
# a (16, 8)-word A tile in shared memory read as four 8x4-word matrices in mma.sync's A register order:
# matrix 1 is rows 8-15, matrix 2 words 4-7
TILE_A = TileLayout(S[(2, 2, 8, 4) : (4, 64, 8, 1)])
# two 8x8-word B tiles (n 0-7, n 8-15) as four matrices: matrix i is n tile i // 2, k words 4 * (i % 2)..
TILE_B = TileLayout(S[(2, 2, 8, 4) : (64, 4, 8, 1)])
MMA_A = TileLayout(S[(1, 1, 2, 8, 2, 4) : (4, 4, 1, 4 @ laneid, 2, 1 @ laneid)])           # a0 a1 a2 a3
MMA_A_SWAPPED = TileLayout(S[(1, 1, 2, 8, 2, 4) : (4, 4, 2, 4 @ laneid, 1, 1 @ laneid)])   # a0 a2 a1 a3
MMA_A8_INTERLEAVED = TileLayout(S[(1, 2, 2, 8, 4) : (4, 1, 2, 4 @ laneid, 1 @ laneid)])     # k8 step kk: kk, kk + 2
MMA_B8 = TileLayout(S[(1, 2, 8, 4) : (2, 1, 4 @ laneid, 1 @ laneid)])
MMA_B2_SWAPPED = TileLayout(S[(2, 1, 8, 2, 4) : (1, 2, 4 @ laneid, 2, 1 @ laneid)])      # n tile n: 2r + n
MMA_B = TileLayout(S[(1, 1, 8, 2, 4) : (2, 2, 4 @ laneid, 1, 1 @ laneid)])
MMA_D = TileLayout(S[(1, 1, 2, 8, 4, 2) : (4, 4, 2, 4 @ laneid, 1 @ laneid, 1)])
MMA_D2 = TileLayout(S[(1, 2, 2, 8, 4, 2) : (8, 4, 2, 4 @ laneid, 1 @ laneid, 1)])
MMA_D_ROWS_SWAPPED = TileLayout(S[(1, 1, 2, 8, 4, 2) : (4, 4, 1, 4 @ laneid, 1 @ laneid, 2)])


def make_a_fragment(la, rewrite=False):
    """One warp: a (16, 16) f16 A tile through shared memory, ldmatrix.x4 into `ar`, then one m16n8k16 mma whose
    A operand views `ar` with layout `la` (B loaded by plain loads: its provenance is unknown)."""
    def k_a_fragment(A: T.Tensor((16, 8), "uint32"), B: T.Tensor((8, 8), "uint32"),
                     Out: T.Tensor((32, 4), "float32")):
        T.device_entry(launch=LC(grid=1, block=32))
        lane = T.cuda.lane_id()
        sm = T.alloc_shared((128,), "uint32")
        for r in range(4):
            sm[lane * 4 + r] = A[(lane * 4 + r) // 8, (lane * 4 + r) % 8]
        T.cuda.syncthreads()
        ar = T.alloc_local((4,), "uint32")
        br = T.alloc_local((2,), "uint32")
        d = T.alloc_local((4,), "float32")
        for r in range(2):
            br[r] = B[lane // 4, lane % 4 + 4 * r]
        T.cuda.tile.apply(T.ptx[LDM4], ar.view(4, 8, 4, layout=FRAG4), sm.view(4, 8, 4, layout=TILE_A), scope="warp")
        if rewrite:
            ar[1] = ar[1] ^ ar[2]
        T.cuda.tile.apply(T.ptx[MMA16], d.view(1, 1, 16, 8, layout=MMA_D), ar.view(1, 1, 16, 8, layout=la),
                          br.view(1, 1, 8, 8, layout=MMA_B), 0.0, scope="warp")
        for r in range(4):
            Out[lane, r] = d[r]
    return k_a_fragment


k_a_registers_swapped = make_a_fragment(MMA_A_SWAPPED)


def k_two_k8_steps_interleaved(A: T.Tensor((16, 8), "uint32"), B: T.Tensor((8, 8), "uint32"),
                               Out: T.Tensor((32, 4), "float32")):
    T.device_entry(launch=LC(grid=1, block=32))
    lane = T.cuda.lane_id()
    sm = T.alloc_shared((128,), "uint32")
    for r in range(4):
        sm[lane * 4 + r] = A[(lane * 4 + r) // 8, (lane * 4 + r) % 8]
    T.cuda.syncthreads()
    ar = T.alloc_local((4,), "uint32")
    br = T.alloc_local((2,), "uint32")
    d = T.alloc_local((4,), "float32")
    for r in range(2):
        br[r] = B[lane // 4, lane % 4 + 4 * r]
    T.cuda.tile.apply(T.ptx[LDM4], ar.view(4, 8, 4, layout=FRAG4), sm.view(4, 8, 4, layout=TILE_A), scope="warp")
    # two k8 steps: step kk must read matrices 2kk (rows 0-7) and 2kk + 1 (rows 8-15); this view reads 0 and 2
    a_steps = ar.view(1, 2, 16, 4, layout=MMA_A8_INTERLEAVED)
    T.cuda.tile.apply(T.ptx[MMA8], d.view(1, 1, 16, 8, layout=MMA_D), a_steps,
                      br.view(1, 2, 8, 4, layout=MMA_B8), 0.0, scope="warp")
    for r in range(4):
        Out[lane, r] = d[r]


def k_b_tiles_interleaved(A: T.Tensor((16, 8), "uint32"), B: T.Tensor((16, 8), "uint32"),
                          Out: T.Tensor((32, 8), "float32")):
    T.device_entry(launch=LC(grid=1, block=32))
    lane = T.cuda.lane_id()
    sb = T.alloc_shared((128,), "uint32")
    for r in range(4):
        sb[lane * 4 + r] = B[(lane * 4 + r) // 8, (lane * 4 + r) % 8]
    T.cuda.syncthreads()
    ar = T.alloc_local((4,), "uint32")
    br = T.alloc_local((4,), "uint32")
    d = T.alloc_local((8,), "float32")
    for r in range(4):
        ar[r] = A[lane // 4 + 8 * (r % 2), lane % 4 + 4 * (r // 2)]
    T.cuda.tile.apply(T.ptx[LDM4], br.view(4, 8, 4, layout=FRAG4), sb.view(4, 8, 4, layout=TILE_B), scope="warp")
    b_view = br.view(2, 1, 8, 8, layout=MMA_B2_SWAPPED)
    T.cuda.tile.apply(T.ptx[MMA16], d.view(1, 2, 16, 8, layout=MMA_D2), ar.view(1, 1, 16, 8, layout=MMA_A), b_view,
                      0.0, scope="warp")
    for r in range(8):
        Out[lane, r] = d[r]


def k_accumulator_rows_swapped(A: T.Tensor((16, 8), "uint32"), B: T.Tensor((8, 8), "uint32"),
                               Out: T.Tensor((32, 4), "float32")):
    T.device_entry(launch=LC(grid=1, block=32))
    lane = T.cuda.lane_id()
    ar = T.alloc_local((4,), "uint32")
    br = T.alloc_local((2,), "uint32")
    acc = T.alloc_local((4,), "float32")
    for r in range(4):
        ar[r] = A[lane // 4 + 8 * (r % 2), lane % 4 + 4 * (r // 2)]
    for r in range(2):
        br[r] = B[lane // 4, lane % 4 + 4 * r]
    d_view = acc.view(1, 1, 16, 8, layout=MMA_D)
    a_view = ar.view(1, 1, 16, 8, layout=MMA_A)
    b_view = br.view(1, 1, 8, 8, layout=MMA_B)
    T.cuda.tile.apply(T.ptx[MMA16], d_view, a_view, b_view, 0.0, scope="warp")
    c_view = acc.view(1, 1, 16, 8, layout=MMA_D_ROWS_SWAPPED)
    T.cuda.tile.apply(T.ptx[MMA16], d_view, a_view, b_view,
                      c_view, scope="warp")
    for r in range(4):
        Out[lane, r] = acc[r]


def k_accumulator_swapped_in_a_loop(A: T.Tensor((16, 8), "uint32"), B: T.Tensor((8, 8), "uint32"),
                                    Out: T.Tensor((32, 4), "float32")):
    T.device_entry(launch=LC(grid=1, block=32))
    lane = T.cuda.lane_id()
    ar = T.alloc_local((4,), "uint32")
    br = T.alloc_local((2,), "uint32")
    acc = T.alloc_local((4,), "float32")
    for r in range(4):
        ar[r] = A[lane // 4 + 8 * (r % 2), lane % 4 + 4 * (r // 2)]
        acc[r] = 0.0
    for r in range(2):
        br[r] = B[lane // 4, lane % 4 + 4 * r]
    for it in range(3):
        # the second iteration reads as C what the first wrote as D, in another register order
        T.cuda.tile.apply(T.ptx[MMA16], acc.view(1, 1, 16, 8, layout=MMA_D), ar.view(1, 1, 16, 8, layout=MMA_A),
                          br.view(1, 1, 8, 8, layout=MMA_B), acc.view(1, 1, 16, 8, layout=MMA_D_ROWS_SWAPPED),
                          scope="warp")
    for r in range(4):
        Out[lane, r] = acc[r]


# ---------------------------------------------------------------- wgmma: one accumulator, two D views

from test_bad_races import A_SIZE, B_SIZE, LA, LB, WG  # noqa: E402
from wgmma_cases import d_layout  # noqa: E402

WG_D = d_layout(8)
WG_D_SWAPPED = TileLayout(S[(1, 1, 4, 2, 8, 1, 4, 2) : (1, 1, 1 @ warpid, 1, 4 @ laneid, 4, 1 @ laneid, 2)])


def k_wgmma_accumulates_in_another_order(A: T.Tensor((64, 16), "uint16"), B: T.Tensor((8, 16), "uint16"),
                                         Out: T.Tensor((64, 8), "float32")):
    T.device_entry(launch=LC(grid=1, block=128))
    t = T.cuda.thread_id()
    sa = T.alloc_shared((A_SIZE,), "uint16")
    sb = T.alloc_shared((B_SIZE,), "uint16")
    av = sa.view(1, 1, 64, 16, layout=LA)
    bv = sb.view(1, 1, 8, 16, layout=LB)
    for it in range(8):
        i = it * 128 + t
        av[0, 0, i // 16, i % 16] = A[i // 16, i % 16]
    bv[0, 0, t // 16, t % 16] = B[t // 16, t % 16]
    T.cuda.tile.apply(T.ptx["fence.proxy.async.shared::cta"])
    T.cuda.syncthreads()
    d = T.alloc_local((4,), "float32")
    dv = d.view(1, 1, 64, 8, layout=WG_D)
    T.cuda.tile.apply(T.ptx["wgmma.fence.sync.aligned"], dv, scope="warpgroup")
    T.cuda.tile.apply(T.ptx[WG], dv, av, bv, scope="warpgroup", scale_d=0)
    T.cuda.tile.apply(T.ptx["wgmma.commit_group.sync.aligned"], dv, scope="warpgroup")
    T.cuda.tile.apply(T.ptx["wgmma.wait_group.sync.aligned"], 0, dv, scope="warpgroup")
    dv2 = d.view(1, 1, 64, 8, layout=WG_D_SWAPPED)
    T.cuda.tile.apply(T.ptx["wgmma.fence.sync.aligned"], dv2, scope="warpgroup")
    T.cuda.tile.apply(T.ptx[WG], dv2, av, bv, scope="warpgroup")
    T.cuda.tile.apply(T.ptx["wgmma.commit_group.sync.aligned"], dv2, scope="warpgroup")
    T.cuda.tile.apply(T.ptx["wgmma.wait_group.sync.aligned"], 0, dv2, scope="warpgroup")
    for r in range(4):
        Out[t // 2, (t % 2) * 4 + r] = d[r]


def u32(*shape):
    return np.zeros(shape, np.uint32)


def f32(*shape):
    return np.zeros(shape, np.float32)


def order(id, fn, needle, other, args, words=(), target="sm_90"):
    """A register-order mismatch: refused at the reader's operand (`needle`), naming the writer's line (`other`)."""
    c = Case(id, fn, needle, WORDS + tuple(words), args=args, target=target)
    c.other = other
    return c


CASES = [
    order("ldmatrix_x4_then_mma_a_registers_0_2_1_3", k_a_registers_swapped,
          "T.cuda.tile.apply(T.ptx[MMA16], d.view(1, 1, 16, 8, layout=MMA_D), ar.view(1, 1, 16, 8, layout=la),",
          "T.cuda.tile.apply(T.ptx[LDM4], ar.view(4, 8, 4, layout=FRAG4), sm.view(4, 8, 4, layout=TILE_A), "
          "scope=\"warp\")",
          (u32(16, 8), u32(8, 8), f32(32, 4)), ("register ar[2]", "A register 1", "coordinate (0, 4)",
                                                "coordinate (8, 0)")),
    order("ldmatrix_x4_then_two_k8_mmas_interleaved", k_two_k8_steps_interleaved,
          "T.cuda.tile.apply(T.ptx[MMA8], d.view(1, 1, 16, 8, layout=MMA_D), a_steps,",
          "T.cuda.tile.apply(T.ptx[LDM4], ar.view(4, 8, 4, layout=FRAG4), sm.view(4, 8, 4, layout=TILE_A), "
          "scope=\"warp\")",
          (u32(16, 8), u32(8, 8), f32(32, 4)), ("operand A", "register ar[2]")),
    order("ldmatrix_x4_then_mma_b_tiles_interleaved", k_b_tiles_interleaved,
          "T.cuda.tile.apply(T.ptx[MMA16], d.view(1, 2, 16, 8, layout=MMA_D2), ar.view(1, 1, 16, 8, layout=MMA_A), b_view,",
          "T.cuda.tile.apply(T.ptx[LDM4], br.view(4, 8, 4, layout=FRAG4), sb.view(4, 8, 4, layout=TILE_B), "
          "scope=\"warp\")",
          (u32(16, 8), u32(16, 8), f32(32, 8)), ("operand B", "register br[2]")),
    order("mma_d_read_as_c_with_rows_swapped", k_accumulator_rows_swapped,
          "c_view, scope=\"warp\")",
          "T.cuda.tile.apply(T.ptx[MMA16], d_view, a_view, b_view, 0.0, scope=\"warp\")",
          (u32(16, 8), u32(8, 8), f32(32, 4)), ("operand C", "mma.sync D of issue (0, 0)")),
    order("mma_d_read_as_c_in_the_next_iteration", k_accumulator_swapped_in_a_loop,
          "br.view(1, 1, 8, 8, layout=MMA_B), acc.view(1, 1, 16, 8, layout=MMA_D_ROWS_SWAPPED),",
          "T.cuda.tile.apply(T.ptx[MMA16], acc.view(1, 1, 16, 8, layout=MMA_D), ar.view(1, 1, 16, 8, layout=MMA_A),",
          (u32(16, 8), u32(8, 8), f32(32, 4)), ("operand C",)),
    order("wgmma_accumulates_through_another_d_view", k_wgmma_accumulates_in_another_order,
          'T.cuda.tile.apply(T.ptx[WG], dv2, av, bv, scope="warpgroup")',
          'T.cuda.tile.apply(T.ptx[WG], dv, av, bv, scope="warpgroup", scale_d=0)',
          (np.zeros((64, 16), np.uint16), np.zeros((8, 16), np.uint16), f32(64, 8)),
          ("operand D", "the wgmma D of issue (0, 0)"), target="sm_90a"),
]


@pytest.mark.parametrize("case", [c.param() for c in CASES])
def test_bad_register_order(case):
    err = run(case)
    msg = str(err)
    want = line_of(case.fn, case.other)
    assert f"{inspect.getsourcefile(raw(case.fn))}:{want}:" in msg, f"{case.id}: line {want} not named:\n{msg}"


@pytest.mark.parametrize("case", [c.param() for c in CASES])
def test_the_interpreter_refuses_them_too(case):
    """The check is part of pattern expansion: the interpreter path refuses the kernel before running it."""
    with pytest.raises(CE, match="read in another order"):
        tiledsl.jit(raw(case.fn), interpret=True)(*case.args)
