"""The cluster kernels shared by tests/test_cluster.py (compile, ptxas, interpreter) and tests/test_gpu_cluster.py."""
import tiledsl
from tiledsl import T

ARRIVE, WAIT = "barrier.cluster.arrive.release.aligned", "barrier.cluster.wait.acquire.aligned"
INIT, FENCE_INIT = "mbarrier.init.shared::cta.b64", "fence.mbarrier_init.release.cluster"
REMOTE_ARRIVE = "mbarrier.arrive.release.cluster.shared::cluster.b64"
CLUSTER_WAIT = "mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64"
CTA_ARRIVE, CTA_WAIT = "mbarrier.arrive.shared::cta.b64", "mbarrier.try_wait.parity.shared::cta.b64"


@tiledsl.jit
def exchange(Out: T.Tensor((8, 64), "uint32")):
    """Each CTA of a 2-CTA cluster writes rank * 1000 + tid into the other's shared memory through mapa, the
    cluster barrier orders it, then each reads its own (shifted by one) and the other's copy back."""
    T.device_entry(launch=T.cuda.LaunchConfig(grid=4, block=64, cluster=(2, 1, 1)))
    tid = T.cuda.thread_id()
    rank = T.cuda.cluster_ctarank()
    box = T.alloc_shared((64,), "uint32")
    got = T.alloc_local((1,), "uint32")
    T.cuda.tile.apply(T.ptx["st.shared::cluster.u32"], box[tid:tid + 1], T.cast(rank * 1000 + tid, "uint32"),
                      rank=1 - rank)
    T.cuda.tile.apply(T.ptx[ARRIVE])
    T.cuda.tile.apply(T.ptx[WAIT])
    nxt = (tid + 1) % 64
    Out[T.cuda.block_id(), tid] = box[nxt]
    T.cuda.tile.apply(T.ptx["ld.shared::cluster.u32"], got, box[tid:tid + 1], rank=1 - rank)
    Out[4 + T.cuda.block_id(), tid] = got[0]
    T.cuda.tile.apply(T.ptx[ARRIVE])            # no CTA leaves while the other may still read its memory
    T.cuda.tile.apply(T.ptx[WAIT])


def exchange_expected():
    import numpy as np
    out = np.zeros((8, 64), np.uint32)
    tid = np.arange(64)
    for b in range(4):
        rank = b % 2
        out[b] = (1 - rank) * 1000 + (tid + 1) % 64          # what the peer wrote into this CTA, shifted
        out[4 + b] = rank * 1000 + tid                       # this CTA's writes, read back from the peer
    return out


@tiledsl.jit
def specials(Out: T.Tensor((24, 7), "int32")):
    """The cluster special registers of every block of a (6, 4) grid in (3, 2, 1) clusters."""
    T.device_entry(launch=T.cuda.LaunchConfig(grid=(6, 4), block=32, cluster=(3, 2, 1)))
    b = T.cuda.block_id(0) + 6 * T.cuda.block_id(1)
    if T.cuda.thread_id() == 0:
        Out[b, 0] = T.cuda.cluster_ctarank()
        Out[b, 1] = T.cuda.cluster_nctarank()
        Out[b, 2] = T.cuda.cluster_id(0)
        Out[b, 3] = T.cuda.cluster_id(1)
        Out[b, 4] = T.cuda.cluster_ctaid(0)
        Out[b, 5] = T.cuda.cluster_ctaid(1)
        Out[b, 6] = T.cuda.cluster_id(2) + T.cuda.cluster_ctaid(2)


def specials_expected():
    import numpy as np
    out = np.zeros((24, 7), np.int32)
    for by in range(4):
        for bx in range(6):
            cx, cy = bx % 3, by % 2
            out[bx + 6 * by] = [cx + 3 * cy, 6, bx // 3, by // 2, cx, cy, 0]
    return out


@tiledsl.jit
def remote_arrive(Out: T.Tensor((2, 32), "uint32")):
    """Thread 0 of each CTA of a 2-CTA cluster writes a value into the other's shared memory and arrives on the
    other's mbarrier (release at cluster scope); every thread waits on its own barrier (acquire at cluster scope)."""
    T.device_entry(launch=T.cuda.LaunchConfig(grid=2, block=32, cluster=2))
    tid = T.cuda.thread_id()
    rank = T.cuda.cluster_ctarank()
    bar = T.alloc_shared((1,), "uint64")
    val = T.alloc_shared((1,), "uint32")
    if tid == 0:
        T.cuda.tile.apply(T.ptx[INIT], bar, 1)
        T.cuda.tile.apply(T.ptx[FENCE_INIT])
    T.cuda.tile.apply(T.ptx[ARRIVE])             # every barrier is initialised before any peer arrives on it
    T.cuda.tile.apply(T.ptx[WAIT])
    if tid == 0:
        T.cuda.tile.apply(T.ptx["st.shared::cluster.u32"], val, T.cast(77 + rank, "uint32"), rank=1 - rank)
        T.cuda.tile.apply(T.ptx[REMOTE_ARRIVE], bar, rank=1 - rank)
    T.cuda.tile.apply(T.ptx[CLUSTER_WAIT], bar, 0)
    Out[T.cuda.block_id(), tid] = val[0] + T.cast(tid, "uint32")
    T.cuda.tile.apply(T.ptx[ARRIVE])
    T.cuda.tile.apply(T.ptx[WAIT])


def remote_arrive_expected():
    import numpy as np
    return np.array([[78 + t for t in range(32)], [77 + t for t in range(32)]], np.uint32)


@tiledsl.jit
def elect(Out: T.Tensor((64,), "uint32")):
    """elect.sync over full warps: d is the leader's lane everywhere, p is 1 in exactly one lane per warp."""
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=64))
    d = T.alloc_local((1,), "uint32")
    p = T.alloc_local((1,), "uint32")
    T.cuda.tile.apply(T.ptx["elect.sync"], d, 0xFFFFFFFF, p=p)
    Out[T.cuda.thread_id()] = p[0] * 1000 + T.cast(T.cuda.lane_id() == T.cast(d[0], "int32"), "uint32")


@tiledsl.jit
def producer_consumer(A: T.Tensor((128,), "float32"), Out: T.Tensor((128,), "float32")):
    """Warp specialisation with setmaxnreg: warpgroup 0 gives registers back and produces A * 3 into shared
    memory, warpgroup 1 takes more registers, waits on the mbarrier and writes the tile + 1."""
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=256, max_registers=128))
    tid = T.cuda.thread_id()
    tile = T.alloc_shared((128,), "float32")
    full = T.alloc_shared((1,), "uint64")
    if tid == 0:
        T.cuda.tile.apply(T.ptx[INIT], full, 128)
        T.cuda.tile.apply(T.ptx["fence.proxy.async"])
    T.cuda.syncthreads()
    if tid < 128:
        T.cuda.tile.apply(T.ptx["setmaxnreg.dec.sync.aligned.u32"], 40)
        tile[tid] = A[tid] * 3.0
        T.cuda.tile.apply(T.ptx[CTA_ARRIVE], full)
    else:
        T.cuda.tile.apply(T.ptx["setmaxnreg.inc.sync.aligned.u32"], 208)
        T.cuda.tile.apply(T.ptx[CTA_WAIT], full, 0)
        Out[tid - 128] = tile[tid - 128] + 1.0
