"""The producer warpgroup's one issuing thread, as every warp-specialised Hopper kernel here picks it
(examples/hopper_gemm_kernel.py, attention_hopper.py, attention_fp8.py, attention_backward_hopper.py): after
`setmaxnreg.dec`, warp 0 runs `elect.sync` and the elected lane issues every TMA copy (one thread, so each copy and
each expect_tx is issued once; elect.sync rather than lane 0 so the warp stays converged for the compiler)."""
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
