"""Warp-specialised if/else on the interpreter (interpreter/fibers.py): a producer and a consumer that hand data
to each other through mbarriers run as two fibers, as the warps do on the GPU; a wait neither part can satisfy is
still the KernelFault it was; errors in either part name their line."""
import numpy as np
import pytest

import tiledsl
from tiledsl import T

from helpers import ptxas

STAGES = 2


def make_ring(rounds, consumer_rounds=None, single_waiter=False, bad_index=False):
    consumer_rounds = rounds if consumer_rounds is None else consumer_rounds
    R = max(rounds, consumer_rounds)

    @tiledsl.jit
    def ring(A: T.Tensor((R, 32), "uint32"), Out: T.Tensor((R, 32), "uint32")):
        T.device_entry(launch=T.cuda.LaunchConfig(grid=2, block=64))
        tid = T.cuda.thread_id()
        lane = tid % 32
        slots = T.alloc_shared((2, 32), "uint32")
        full = T.alloc_shared((2,), "uint64")
        empty = T.alloc_shared((2,), "uint64")
        if tid == 0:
            for s in range(STAGES):
                T.cuda.tile.apply(T.ptx["mbarrier.init.shared::cta.b64"], full[s:s + 1], 32)
                T.cuda.tile.apply(T.ptx["mbarrier.init.shared::cta.b64"], empty[s:s + 1], 1 if single_waiter else 32)
            T.cuda.tile.apply(T.ptx["fence.mbarrier_init.release.cluster"])
        T.cuda.syncthreads()
        if tid < 32:
            for r in range(rounds):
                s = r % STAGES
                if r >= STAGES:
                    if single_waiter:
                        if lane == 0:     # one thread waits; the warp's store below follows it (lockstep)
                            T.cuda.tile.apply(T.ptx["mbarrier.try_wait.parity.shared::cta.b64"], empty[s:s + 1],
                                              (r // STAGES - 1) % 2)
                    else:
                        T.cuda.tile.apply(T.ptx["mbarrier.try_wait.parity.shared::cta.b64"], empty[s:s + 1],
                                          (r // STAGES - 1) % 2)
                slots[s, lane] = A[r, lane] * 3 + T.cuda.block_id(0)
                T.cuda.tile.apply(T.ptx["mbarrier.arrive.shared::cta.b64"], full[s:s + 1])
        else:
            for r in range(consumer_rounds):
                s = r % STAGES
                T.cuda.tile.apply(T.ptx["mbarrier.try_wait.parity.shared::cta.b64"], full[s:s + 1], (r // STAGES) % 2)
                if bad_index:
                    Out[r + R, lane] = slots[s, lane]
                else:
                    Out[r, lane] = slots[s, lane] + 1
                if single_waiter:
                    if lane == 0:
                        T.cuda.tile.apply(T.ptx["mbarrier.arrive.shared::cta.b64"], empty[s:s + 1])
                else:
                    T.cuda.tile.apply(T.ptx["mbarrier.arrive.shared::cta.b64"], empty[s:s + 1])
    return ring, R


@pytest.mark.parametrize("single_waiter", [False, True])
def test_producer_and_consumer_hand_over_through_a_ring(single_waiter):
    k, R = make_ring(7, single_waiter=single_waiter)
    a = np.arange(R * 32, dtype=np.uint32).reshape(R, 32)
    out = np.zeros_like(a)
    tiledsl.jit(k.fn, interpret=True)(a, out)
    # both blocks write every row; the last writer is block 1 (blocks run in one batch, in order)
    assert np.array_equal(out, a * 3 + 1 + 1) or np.array_equal(out, a * 3 + 1)
    ck = k.compile(a, out, target="sm_90")
    assert ptxas(ck.asm["ptx"], "sm_90").returncode == 0


def make_stop_ring(extra_rounds, consumer_stops=True):
    """Block b's producer hands 2 + b * extra_rounds rows through a 2-stage ring, then a stop mark; its consumer
    takes rows until it sees the mark (it does not know the count: a dynamic walk's stop signal)."""
    R = 2 + extra_rounds

    @tiledsl.jit
    def stop_ring(A: T.Tensor((R, 32), "uint32"), Out: T.Tensor((R, 32), "uint32")):
        T.device_entry(launch=T.cuda.LaunchConfig(grid=2, block=64))
        tid = T.cuda.thread_id()
        lane = tid % 32
        slots = T.alloc_shared((2, 32), "uint32")
        stop = T.alloc_shared((2,), "int32")
        full = T.alloc_shared((2,), "uint64")
        empty = T.alloc_shared((2,), "uint64")
        if tid == 0:
            for s in range(STAGES):
                T.cuda.tile.apply(T.ptx["mbarrier.init.shared::cta.b64"], full[s:s + 1], 32)
                T.cuda.tile.apply(T.ptx["mbarrier.init.shared::cta.b64"], empty[s:s + 1], 32)
            T.cuda.tile.apply(T.ptx["fence.mbarrier_init.release.cluster"])
        T.cuda.syncthreads()
        n = 2 + T.cuda.block_id(0) * extra_rounds
        if tid < 32:
            for r in range(n):
                s = r % STAGES
                if r >= STAGES:
                    T.cuda.tile.apply(T.ptx["mbarrier.try_wait.parity.shared::cta.b64"], empty[s:s + 1],
                                      (r // STAGES - 1) % 2)
                slots[s, lane] = A[r, lane] * 3 + T.cuda.block_id(0)
                stop[s] = 0
                T.cuda.tile.apply(T.ptx["mbarrier.arrive.shared::cta.b64"], full[s:s + 1])
            # the stop mark, after the loop (as FA3's dynamic producer sends it)
            s = n % STAGES
            T.cuda.tile.apply(T.ptx["mbarrier.try_wait.parity.shared::cta.b64"], empty[s:s + 1], (n // STAGES - 1) % 2)
            stop[s] = 1
            T.cuda.tile.apply(T.ptx["mbarrier.arrive.shared::cta.b64"], full[s:s + 1])
        else:
            r = 0
            going = 1
            while going == 1:
                s = r % STAGES
                T.cuda.tile.apply(T.ptx["mbarrier.try_wait.parity.shared::cta.b64"], full[s:s + 1], (r // STAGES) % 2)
                if stop[s] == 1 and consumer_stops:
                    going = 0
                else:
                    Out[r % R, lane] = slots[s, lane] + 1
                    T.cuda.tile.apply(T.ptx["mbarrier.arrive.shared::cta.b64"], empty[s:s + 1])
                    r = r + 1
    return stop_ring, R


def test_blocks_that_stop_at_different_rounds_run_as_on_the_gpu():
    """Block 1 hands 3 rows more than block 0. In lockstep, block 0's consumer waits for its stop mark in one fiber
    with block 1's consumer, and block 0's producer gives the mark only once the producers' loop is over, which
    block 1's producer cannot finish before that consumer fiber frees a stage: a deadlock the GPU's independent
    blocks never have. The batch runs again with a fiber per block (Program.run) and gives the GPU's result, the
    first run's writes undone."""
    k, R = make_stop_ring(3)
    a = np.arange(R * 32, dtype=np.uint32).reshape(R, 32)
    out = np.zeros_like(a)
    tiledsl.jit(k.fn, interpret=True)(a, out)
    assert np.array_equal(out, a * 3 + 1 + 1)      # block 1 writes every row, after block 0 (its rows 0-1)


def test_blocks_that_never_stop_still_fault():
    k, R = make_stop_ring(3, consumer_stops=False)     # each consumer waits for a row after the stop mark
    a = np.zeros((R, 32), np.uint32)
    with pytest.raises(tiledsl.KernelFault, match="can never complete"):
        tiledsl.jit(k.fn, interpret=True)(a, np.zeros_like(a))


def test_a_wait_nobody_satisfies_is_still_a_fault():
    k, R = make_ring(4, consumer_rounds=5)           # the consumer waits for a fifth round never produced
    a = np.zeros((R, 32), np.uint32)
    with pytest.raises(tiledsl.KernelFault, match="can never complete"):
        tiledsl.jit(k.fn, interpret=True)(a, np.zeros_like(a))


def test_an_error_in_the_else_part_names_its_line():
    k, R = make_ring(3, bad_index=True)
    a = np.zeros((R, 32), np.uint32)
    with pytest.raises(tiledsl.KernelFault, match=r"test_interpreter_fibers.py:\d+") as e:
        tiledsl.jit(k.fn, interpret=True)(a, np.zeros_like(a))
    assert "Out[r + R, lane]" in str(e.value)


def test_only_an_if_else_with_a_wait_becomes_fibers():
    from tiledsl.interpreter import fibers
    k, R = make_ring(3)
    a = np.zeros((R, 32), np.uint32)
    from tiledsl.compiler import front
    from tiledsl.core.target import Target
    from tiledsl.passes.expand import expand_kernel
    body = expand_kernel(front(k.fn, {})[0], Target(90)).body
    ifs = [s for s in body if type(s).__name__ == "If"]
    assert [fibers.blocking(s.then) or fibers.blocking(s.orelse) for s in ifs] == [False, True]
