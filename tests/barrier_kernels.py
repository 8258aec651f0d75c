"""Kernels with named barriers (tiledsl/isa/barrier/), shared by tests/test_barrier.py (compile, ptxas, interpreter)
and tests/test_gpu_barrier.py (the same kernels on the GPU, compared with the interpreter)."""
import numpy as np

import tiledsl
from tiledsl import T

ROUNDS = 4                 # rounds per consumer warpgroup of the ping-pong kernel


@tiledsl.jit
def partial(A: T.Tensor((256,), "uint32"), Out: T.Tensor((2, 256), "uint32")):
    """Warps 0..3 exchange values through shared memory behind barrier 1 (128 threads); warps 4..7 never touch it.
    Two blocks, so the barrier state is per block."""
    T.device_entry(launch=T.cuda.LaunchConfig(grid=2, block=256))
    tid = T.cuda.thread_id()
    b = T.cuda.block_id()
    buf = T.alloc_shared((128,), "uint32")
    if tid < 128:
        buf[tid] = A[tid] * 2 + T.cast(b, "uint32")
        T.cuda.tile.apply(T.ptx["bar.sync"], 1, 128)
        Out[b, tid] = buf[(tid + 32) % 128]
    else:
        Out[b, tid] = A[tid] + 1


def partial_expected(a):
    rows = []
    for b in range(2):
        lo = (a[:128] * 2 + b)[(np.arange(128) + 32) % 128]
        rows.append(np.concatenate([lo, a[128:] + 1]))
    return np.array(rows, np.uint32)


@tiledsl.jit
def halves(A: T.Tensor((256,), "uint32"), Out: T.Tensor((256,), "uint32")):
    """Each half of the block syncs on its own barrier, chosen at run time (1 for warps 0..3, 2 for 4..7), with
    barrier.sync.aligned, and reads a neighbour's value in its half."""
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=256))
    tid = T.cuda.thread_id()
    buf = T.alloc_shared((256,), "uint32")
    buf[tid] = A[tid] + 7
    T.cuda.tile.apply(T.ptx["barrier.sync.aligned"], 1 + tid // 128, 128)
    Out[tid] = buf[tid // 128 * 128 + (tid + 64) % 128]


def halves_expected(a):
    i = np.arange(256)
    return (a + 7)[i // 128 * 128 + (i + 64) % 128].astype(np.uint32)


# The two ping-pong kernels below differ only in how the consumers' turns are written (two copies of the loop with
# immediate barrier ids, or one copy with ids computed from the warpgroup); the set-up, the producer and what a
# turn does are these helpers, so the two kernels test the same exchange.

@tiledsl.inline
def pingpong_setup(tid):
    """(data, full, cnt): the producer's 2 * ROUNDS rows in shared memory, the mbarrier its 128 threads complete,
    and the log position the consumers advance; thread 0 initialises them before the block meets."""
    data = T.alloc_shared((2 * ROUNDS, 128), "uint32")
    full = T.alloc_shared((1,), "uint64")
    cnt = T.alloc_shared((1,), "uint32")
    if tid == 0:
        T.cuda.tile.apply(T.ptx["mbarrier.init.shared::cta.b64"], full[0:1], 128)
        T.cuda.tile.apply(T.ptx["fence.mbarrier_init.release.cluster"])
        cnt[0] = 0
    T.cuda.syncthreads()
    return data, full, cnt


@tiledsl.inline
def pingpong_produce(A, data, full, t):
    """The producer warpgroup: every row of A times 3 into shared memory, then its arrival on `full`."""
    for r in range(2 * ROUNDS):
        data[r, t] = A[r, t] * 3
    T.cuda.tile.apply(T.ptx["mbarrier.arrive.shared::cta.b64"], full[0:1])


@tiledsl.inline
def pingpong_turn(Out, Log, data, cnt, t, local_bar, tag, row):
    """One consumer turn (its warpgroup holds the turn): read the log position, meet on the warpgroup's own
    barrier `local_bar` so every thread has read it before thread 0 appends `tag` and moves it, and write output
    row `row` offset by the position (the order of the turns shows in both)."""
    pos = cnt[0]
    T.cuda.tile.apply(T.ptx["bar.sync"], local_bar, 128)
    if t == 0:
        Log[pos] = T.cast(tag, "uint32")
        cnt[0] = pos + 1
    Out[row, t] = data[row, t] + pos


@tiledsl.jit
def pingpong(A: T.Tensor((2 * ROUNDS, 128), "uint32"), Out: T.Tensor((2 * ROUNDS, 128), "uint32"),
             Log: T.Tensor((2 * ROUNDS,), "uint32")):
    """A producer warpgroup fills shared memory and completes an mbarrier; two consumer warpgroups take turns
    (ping-pong) through named barriers 1 and 2 (256 threads: one syncs, the other arrives), each appending to `Log`
    at a shared position it reads in its turn; barriers 3 and 4 are warpgroup-local (128 threads)."""
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=384))
    tid = T.cuda.thread_id()
    wg = tid // 128
    t = tid % 128
    data, full, cnt = pingpong_setup(tid)
    if wg == 0:                                           # the producer
        pingpong_produce(A, data, full, t)
    else:
        T.cuda.tile.apply(T.ptx["mbarrier.try_wait.parity.shared::cta.b64"], full[0:1], 0)
        if wg == 1:                                       # consumer 1 goes first
            for i in range(ROUNDS):
                T.cuda.tile.apply(T.ptx["bar.sync"], 1, 256)         # my turn (consumer 2 arrived)
                pingpong_turn(Out, Log, data, cnt, t, 3, 100 + i, 2 * i)
                T.cuda.tile.apply(T.ptx["bar.arrive"], 2, 256)       # consumer 2's turn
        else:
            T.cuda.tile.apply(T.ptx["bar.arrive"], 1, 256)           # consumer 1 may start
            for i in range(ROUNDS):
                T.cuda.tile.apply(T.ptx["bar.sync"], 2, 256)
                pingpong_turn(Out, Log, data, cnt, t, 4, 200 + i, 2 * i + 1)
                if i < ROUNDS - 1:
                    T.cuda.tile.apply(T.ptx["bar.arrive"], 1, 256)


@tiledsl.jit
def pingpong_shared(A: T.Tensor((2 * ROUNDS, 128), "uint32"), Out: T.Tensor((2 * ROUNDS, 128), "uint32"),
                    Log: T.Tensor((2 * ROUNDS,), "uint32")):
    """`pingpong` with the two consumer warpgroups running one copy of the code (as FA3's consumers do): consumer c
    syncs on barrier 1 + c and arrives on the other's, its warpgroup-local barrier is 3 + c. The interpreter runs
    each warpgroup of the consumer part as its own fiber, so the turns alternate there as on the GPU."""
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=384))
    tid = T.cuda.thread_id()
    wg = tid // 128
    t = tid % 128
    data, full, cnt = pingpong_setup(tid)
    if wg == 0:                                           # the producer
        pingpong_produce(A, data, full, t)
    else:
        T.cuda.tile.apply(T.ptx["mbarrier.try_wait.parity.shared::cta.b64"], full[0:1], 0)
        c = wg - 1
        if c == 1:
            T.cuda.tile.apply(T.ptx["bar.arrive"], 1, 256)           # consumer 1 may start
        for i in range(ROUNDS):
            T.cuda.tile.apply(T.ptx["bar.sync"], 1 + c, 256)         # my turn
            pingpong_turn(Out, Log, data, cnt, t, 3 + c, 100 * (c + 1) + i, 2 * i + c)
            if c == 0 or i < ROUNDS - 1:                             # consumer 2's last turn hands to nobody
                T.cuda.tile.apply(T.ptx["bar.arrive"], 2 - c, 256)


def pingpong_inputs():
    a = (np.arange(2 * ROUNDS * 128, dtype=np.uint32) * 7 % 1000).reshape(2 * ROUNDS, 128)
    return a, np.zeros_like(a), np.zeros(2 * ROUNDS, np.uint32)


def pingpong_expected(a):
    log = np.array([v for i in range(ROUNDS) for v in (100 + i, 200 + i)], np.uint32)
    return (a * 3 + np.arange(2 * ROUNDS, dtype=np.uint32)[:, None]).astype(np.uint32), log


@tiledsl.jit
def too_few(Out: T.Tensor((256,), "uint32")):
    """Only 4 warps reach a barrier that waits for 8: a hang on the GPU, a KernelFault on the interpreter."""
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=256))
    tid = T.cuda.thread_id()
    if tid < 128:
        T.cuda.tile.apply(T.ptx["bar.sync"], 1, 256)
    Out[tid] = T.cast(tid, "uint32")


@tiledsl.jit
def stalemate(Out: T.Tensor((256,), "uint32")):
    """Two warpgroups each wait for the other's arrival first: neither part of the if/else can go on."""
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=256))
    tid = T.cuda.thread_id()
    if tid < 128:
        T.cuda.tile.apply(T.ptx["bar.sync"], 1, 256)
        T.cuda.tile.apply(T.ptx["bar.arrive"], 2, 256)
    else:
        T.cuda.tile.apply(T.ptx["bar.sync"], 2, 256)
        T.cuda.tile.apply(T.ptx["bar.arrive"], 1, 256)
    Out[tid] = T.cast(tid, "uint32")


GPU_KERNELS = [partial, halves, pingpong, pingpong_shared]          # run on the GPU too (tests/test_gpu_barrier.py)


def args_of(kernel) -> list:
    """Arrays to compile (or run) `kernel` with."""
    z = np.zeros(256, np.uint32)
    return {partial: [z, np.zeros((2, 256), np.uint32)], halves: [z, z.copy()], pingpong: list(pingpong_inputs()),
            pingpong_shared: list(pingpong_inputs()),
            too_few: [z], stalemate: [z]}[kernel]
