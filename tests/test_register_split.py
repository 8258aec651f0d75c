"""The setmaxnreg split of the warp-specialised Hopper kernels (tiledsl.lib.producer.consumer_registers): the
consumers' inc must be paid for by the producer's dec within the block's own registers, or the block hangs on the
GPU (the dynamic attention walk's 32-register producer with two consumers at 240 did, on the H200)."""
import pytest

import tiledsl
from helpers import check_register_split
from tiledsl.lib.producer import consumer_registers


@pytest.mark.parametrize("threads, cap, consumers, producer, want", [
    (384, 168, 2, 24, 240),     # the two-consumer attention forward and backward
    (384, 168, 2, 32, 232),     # ... with the dynamic walk's producer: 240 would not fit
    (512, 128, 3, 32, 160),     # three consumers
    (384, 168, 2, 40, 232),     # the GEMM's producer
    (256, 248, 1, 24, 248),     # one consumer keeps the launch's cap (inc never lowers)
])
def test_the_split_fits_the_block(threads, cap, consumers, producer, want):
    got = consumer_registers(threads, cap, consumers, producer, 240)
    assert got == want and 128 * producer + 128 * consumers * got <= threads * cap


def test_a_producer_above_the_cap_is_refused():
    with pytest.raises(tiledsl.LaunchError, match="do not fit"):
        consumer_registers(384, 168, 2, 176, 240)


def test_the_ptx_check_catches_a_split_that_hangs():
    ptx = (".maxntid 384, 1, 1\n.maxnreg 168\n\tsetmaxnreg.inc.sync.aligned.u32 240;\n"
           "\tsetmaxnreg.dec.sync.aligned.u32 32;\n")
    with pytest.raises(AssertionError):
        check_register_split(ptx)
    check_register_split(ptx.replace("u32 240", "u32 232"))


def test_the_interpreter_hangs_where_the_gpu_did(monkeypatch):
    # the dynamic walk with the consumers' share computed from the SM's 65536 registers (the split that hung on the
    # H200): on the interpreter its second consumer's inc waits for registers nobody frees, a KernelFault
    import numpy as np

    from tiledsl.ops.flash import fa3 as AH
    monkeypatch.setattr(AH, "consumer_registers", lambda threads, cap, cons, p, c: 240)
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((1, 2, 130, 64)).astype(np.float16) for _ in range(3))
    with pytest.raises(tiledsl.KernelFault, match=r"240 waits for registers no warpgroup will free.*"
                                                  r"128 x \(32, 240, 240\) = 65536"):
        AH.attention_hopper(q, k, v, config=(2, 64, 2, 1, 1, 0, 2), num_sms=2)
