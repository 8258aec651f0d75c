"""The producer warpgroup's one issuing thread, as every warp-specialised Hopper kernel of tiledsl.ops picks it
(gemm/hopper_kernel.py, flash/fa3.py, flash/fp8.py, flash/fa3_backward.py; a user's kernel imports them the same way,
`from tiledsl.lib.producer import elect_one`): after
`setmaxnreg.dec`, warp 0 runs `elect.sync` and the elected lane issues every TMA copy (one thread, so each copy and
each expect_tx is issued once; elect.sync rather than lane 0 so the warp stays converged for the compiler), and
how the block's registers are split between it and the consumer warpgroups (consumer_registers); and the
warpgroup index as a warp-uniform value (warpgroup_index)."""
import tiledsl
from tiledsl import T

FULL_MASK = 0xFFFFFFFF


@tiledsl.inline
def elect_one():
    """1 on the lane of the calling warp that elect.sync picks, 0 on the others (every lane of the warp calls it)."""
    leader = T.alloc_local((1,), "uint32")
    elected = T.alloc_local((1,), "uint32")
    T.cuda.tile.apply(T.ptx["elect.sync"], leader, FULL_MASK, p=elected)
    return elected[0]


@tiledsl.inline
def warpgroup_index(tid):
    """tid // 128 as a value ptxas knows to be the same on every lane of the warp (lane 0's, by shfl.sync): what
    derives from it (a consumer's rows of a shared buffer, its wgmma descriptors) then stays in uniform registers,
    where from tid itself every wgmma's descriptor went through R2UR moves (a D = 256 attention main loop: 46 of
    578 instructions a warp and tile)."""
    mine = T.alloc_local((1,), "int32")
    lane0 = T.alloc_local((1,), "int32")
    mine[0] = tid // 128
    T.cuda.tile.apply(T.ptx["shfl.sync.idx.b32"], lane0, mine, 0, 0x1F, FULL_MASK)
    return lane0[0]


def consumer_registers(threads: int, cap: int, consumers: int, producer_regs: int, consumer_regs: int) -> int:
    """The registers a consumer thread asks for with `setmaxnreg.inc` in a block of `threads` threads launched
    with `cap` registers each, once the producer warpgroup has dropped to producer_regs: at most consumer_regs,
    at least cap (inc never lowers), a multiple of 8. The block's pool is threads * cap registers, not the SM's
    65536: an inc that the producer's dec does not pay for waits for registers no warp will free, so the block
    hangs. Raises tiledsl.LaunchError when even cap cannot be met."""
    pool = threads * cap
    regs = max(cap, min(consumer_regs, (pool - 128 * producer_regs) // (128 * consumers) // 8 * 8))
    if 128 * producer_regs + 128 * consumers * regs > pool or not 24 <= producer_regs <= cap:
        raise tiledsl.LaunchError(f"setmaxnreg: a producer warpgroup at {producer_regs} registers and {consumers} "
                                  f"consumer warpgroup(s) at {regs} do not fit the block's {threads} x {cap}")
    return regs
