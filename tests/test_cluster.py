"""Clusters on any machine: the launch configuration and its signature, PTX and ptxas for sm_90 / sm_90a of every
kernel tests/test_gpu_cluster.py runs, the same kernels on the interpreter (a cluster runs as one batch with
distributed shared memory), and the interpreter's faults where the GPU would hang or misbehave."""
import numpy as np
import pytest

import cluster_kernels as K
import tiledsl
from helpers import ptxas
from tiledsl import T
from tiledsl.abi.signature import KernelSignature

KERNELS = [
    ("exchange", lambda: [np.zeros((8, 64), np.uint32)], "sm_90"),
    ("specials", lambda: [np.zeros((24, 7), np.int32)], "sm_90"),
    ("remote_arrive", lambda: [np.zeros((2, 32), np.uint32)], "sm_90"),
    ("elect", lambda: [np.zeros(64, np.uint32)], "sm_90"),
    ("producer_consumer", lambda: [np.arange(128, dtype=np.float32), np.zeros(128, np.float32)], "sm_90a"),
]


@pytest.mark.parametrize("name,args,target", KERNELS, ids=[k[0] for k in KERNELS])
def test_gpu_kernels_assemble(name, args, target):
    ck = getattr(K, name).compile(*args(), target=target)
    ptx = ck.asm["ptx"]
    r = ptxas(ptx, target)
    assert r.returncode == 0, r.stderr
    assert "warning" not in r.stderr, r.stderr
    if name in ("exchange", "remote_arrive", "specials"):
        assert ".explicitcluster" in ptx and ".reqnctapercluster" in ptx
    if name == "exchange":
        assert ptx.count("mapa.shared::cluster.u32") == 2
        assert "st.shared::cluster.u32" in ptx and "ld.shared::cluster.u32" in ptx
        assert "barrier.cluster.arrive.release.aligned" in ptx and "barrier.cluster.wait.acquire.aligned" in ptx
    if name == "remote_arrive":
        assert "mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%cr]" in ptx
    if name == "producer_consumer":
        assert "setmaxnreg.dec.sync.aligned.u32 40" in ptx and "setmaxnreg.inc.sync.aligned.u32 208" in ptx
    if name == "specials":
        for reg in ("%cluster_ctarank", "%cluster_nctarank", "%clusterid.x", "%cluster_ctaid.y"):
            assert reg in ptx


def test_cluster_travels_in_the_signature():
    ck = K.exchange.compile(np.zeros((8, 64), np.uint32), target="sm_90")
    assert ck.signature.cluster == (2, 1, 1) and ck.signature.clustered
    again = KernelSignature.from_data(ck.signature.to_data())
    assert again.cluster == (2, 1, 1)
    old = ck.signature.to_data()
    del old["cluster"]                                  # an entry written before clusters existed
    assert KernelSignature.from_data(old).cluster == (1, 1, 1)
    plain = K.elect.compile(np.zeros(64, np.uint32), target="sm_90")
    assert plain.signature.cluster == (1, 1, 1) and ".reqnctapercluster" not in plain.asm["ptx"]


def interpret(name, *args, target="sm_90"):
    tiledsl.jit(getattr(K, name).fn, interpret=True, target=target)(*args)
    return args


def test_interpreter_exchanges_through_distributed_shared_memory():
    (out,) = interpret("exchange", np.zeros((8, 64), np.uint32))
    np.testing.assert_array_equal(out, K.exchange_expected())


def test_interpreter_cluster_special_registers():
    (out,) = interpret("specials", np.zeros((24, 7), np.int32))
    np.testing.assert_array_equal(out, K.specials_expected())


def test_interpreter_batches_whole_clusters():
    # more blocks than one batch holds: clusters must never straddle two batches
    @tiledsl.jit(interpret=True)
    def many(Out: T.Tensor((4096,), "uint32")):
        T.device_entry(launch=T.cuda.LaunchConfig(grid=(64, 64), block=32, cluster=(2, 4, 1)))
        tid = T.cuda.thread_id()
        box = T.alloc_shared((1,), "uint32")
        rank = T.cuda.cluster_ctarank()
        if tid == 0:
            me = T.cast(T.cuda.block_id(0) + 64 * T.cuda.block_id(1), "uint32")
            T.cuda.tile.apply(T.ptx["st.shared::cluster.u32"], box, me,
                              rank=(rank + 1) % 8)
        T.cuda.tile.apply(T.ptx["barrier.cluster.arrive.release.aligned"])
        T.cuda.tile.apply(T.ptx["barrier.cluster.wait.acquire.aligned"])
        if tid == 0:
            Out[T.cuda.block_id(0) + 64 * T.cuda.block_id(1)] = box[0]
    out = np.zeros(4096, np.uint32)
    many(out)
    bx, by = np.meshgrid(np.arange(64), np.arange(64))
    rank = bx % 2 + 2 * (by % 4)
    src = (rank - 1) % 8                                   # the rank that wrote into this block
    sx, sy = bx - bx % 2 + src % 2, by - by % 4 + src // 2
    np.testing.assert_array_equal(out.reshape(64, 64), sx + 64 * sy)


def test_interpreter_remote_mbarrier_arrive():
    (out,) = interpret("remote_arrive", np.zeros((2, 32), np.uint32))
    np.testing.assert_array_equal(out, K.remote_arrive_expected())


def test_interpreter_elect_and_setmaxnreg():
    (out,) = interpret("elect", np.zeros(64, np.uint32))
    np.testing.assert_array_equal(out, [1001] + [0] * 31 + [1001] + [0] * 31)
    a, out = interpret("producer_consumer", np.arange(128, dtype=np.float32), np.zeros(128, np.float32),
                       target="sm_90a")
    np.testing.assert_array_equal(out, a * 3 + 1)


def _fault(fn, *args, grid=None):
    k = tiledsl.jit(fn, interpret=True, target="sm_90a")
    with pytest.raises(tiledsl.KernelFault) as e:
        (k if grid is None else k[grid, (64, 1, 1)])(*args)
    return str(e.value)


def test_interpreter_faults():
    def half_arrive(Out: T.Tensor((2,), "uint32")):
        T.device_entry(launch=T.cuda.LaunchConfig(grid=2, block=64, cluster=2))
        if T.cuda.cluster_ctarank() == 0:
            T.cuda.tile.apply(T.ptx["barrier.cluster.arrive"])
            T.cuda.tile.apply(T.ptx["barrier.cluster.wait"])
    assert "can never complete" in _fault(half_arrive, np.zeros(2, np.uint32))

    def twice(Out: T.Tensor((2,), "uint32")):
        T.device_entry(launch=T.cuda.LaunchConfig(grid=2, block=64, cluster=2))
        T.cuda.tile.apply(T.ptx["barrier.cluster.arrive"])
        T.cuda.tile.apply(T.ptx["barrier.cluster.arrive"])
    assert "again before barrier.cluster.wait" in _fault(twice, np.zeros(2, np.uint32))

    def bad_rank(Out: T.Tensor((2,), "uint32")):
        T.device_entry(launch=T.cuda.LaunchConfig(grid=2, block=64, cluster=2))
        box = T.alloc_shared((1,), "uint32")
        T.cuda.tile.apply(T.ptx["st.shared::cluster.u32"], box, 1, rank=T.cuda.cluster_ctarank() + 1)
    assert "outside the cluster of 2" in _fault(bad_rank, np.zeros(2, np.uint32))

    def partial_elect(Out: T.Tensor((2,), "uint32")):
        T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=64))
        d = T.alloc_local((1,), "uint32")
        if T.cuda.lane_id() < 16:
            T.cuda.tile.apply(T.ptx["elect.sync"], d, 0xFFFFFFFF)
    assert "does not execute it" in _fault(partial_elect, np.zeros(2, np.uint32))

    def split_warpgroup(Out: T.Tensor((2,), "uint32")):
        T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=128))
        if T.cuda.thread_id() < 64:
            T.cuda.tile.apply(T.ptx["setmaxnreg.dec.sync.aligned.u32"], 40)
    assert "all 128 threads of a warpgroup" in _fault(split_warpgroup, np.zeros(2, np.uint32))


def _split(dec, inc, consumers_first=False):
    """A producer warpgroup (dec) and two consumer warpgroups (inc) at a cap of 168 registers (384 threads: the
    block owns 64512), the consumers waiting on the producer's mbarrier (the FA3 forward's shape), the branch
    order as written or consumers first."""
    init, arrive, wait = K.INIT, K.CTA_ARRIVE, K.CTA_WAIT

    def split(A: T.Tensor((128,), "float32"), Out: T.Tensor((256,), "float32")):
        T.device_entry(launch=T.cuda.LaunchConfig(grid=2, block=384, max_registers=168))
        tid = T.cuda.thread_id()
        tile = T.alloc_shared((128,), "float32")
        full = T.alloc_shared((1,), "uint64")
        if tid == 0:
            T.cuda.tile.apply(T.ptx[init], full, 128)
        T.cuda.syncthreads()
        if consumers_first:
            if tid >= 128:
                T.cuda.tile.apply(T.ptx["setmaxnreg.inc.sync.aligned.u32"], inc)
                T.cuda.tile.apply(T.ptx[wait], full, 0)
                Out[tid - 128] = tile[tid % 128] + 1.0
            else:
                T.cuda.tile.apply(T.ptx["setmaxnreg.dec.sync.aligned.u32"], dec)
                tile[tid] = A[tid] * 3.0
                T.cuda.tile.apply(T.ptx[arrive], full)
        else:
            if tid < 128:
                T.cuda.tile.apply(T.ptx["setmaxnreg.dec.sync.aligned.u32"], dec)
                tile[tid] = A[tid] * 3.0
                T.cuda.tile.apply(T.ptx[arrive], full)
            else:
                T.cuda.tile.apply(T.ptx["setmaxnreg.inc.sync.aligned.u32"], inc)
                T.cuda.tile.apply(T.ptx[wait], full, 0)
                Out[tid - 128] = tile[tid % 128] + 1.0
    return split


@pytest.mark.parametrize("consumers_first", [False, True])
def test_interpreter_setmaxnreg_split_that_fits(consumers_first):
    # 128 x 24 + 256 x 240 = 64512: the block's own registers (the consumers' inc waits for the producer's dec
    # when they come first, as on the GPU)
    a = np.arange(128, dtype=np.float32)
    out = np.zeros(256, np.float32)
    tiledsl.jit(_split(24, 240, consumers_first), interpret=True, target="sm_90a")(a, out)
    np.testing.assert_array_equal(out, np.concatenate([a * 3 + 1] * 2))


@pytest.mark.parametrize("consumers_first", [False, True])
def test_interpreter_setmaxnreg_split_that_hangs(consumers_first):
    # 128 x 32 + 256 x 240 = 65536 > 384 x 168 = 64512: the GPU hung on this split (the dynamic attention walk,
    # 2026-12-01); the interpreter names the inc
    msg = _fault(_split(32, 240, consumers_first), np.arange(128, dtype=np.float32), np.zeros(256, np.float32))
    assert "setmaxnreg.inc.sync.aligned.u32 240 waits for registers no warpgroup will free" in msg
    assert "384 threads x 168 registers" in msg and "128 x (32, 240, 240)" in msg


def test_interpreter_setmaxnreg_inc_without_a_dec():
    # every warpgroup asks for more and nobody gives any back
    def greedy(Out: T.Tensor((2,), "uint32")):
        T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=256, max_registers=128))
        T.cuda.tile.apply(T.ptx["setmaxnreg.inc.sync.aligned.u32"], 136)
    assert "waits for registers no warpgroup will free" in _fault(greedy, np.zeros(2, np.uint32))
