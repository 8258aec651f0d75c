"""TMA multicast into a 2-CTA cluster (cp.async.bulk.tensor ... .multicast::cluster, cta_mask=0b11): compiled,
assembled with ptxas for sm_90a, and run on the interpreter against numpy. tests/test_gpu_tma.py runs the same
kernel on the H200 against torch.

Each CTA of a (2, 1, 1) cluster loads its half of the cluster's box and multicasts it to both CTAs, so each CTA's
shared tile receives both halves (one from itself, one from its peer) and its mbarrier is paid the bytes of both."""
import numpy as np
import pytest

import tiledsl
from helpers import ptxas
from tiledsl import T
from tiledsl.lang.tensormap import tma_layout

LOAD_MC = "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster"
HALF = (8, 64)                       # the box each CTA issues: 8 rows of 64 f16 (128 bytes, the 128B swizzle)
ROWS = 2 * HALF[0]                   # rows one cluster's tile holds
TILE = tma_layout((2,) + HALF, "float16", 128)
ARRIVE, WAIT = "barrier.cluster.arrive.release.aligned", "barrier.cluster.wait.acquire.aligned"


def multicast_kernel(clusters: int = 2):
    """grid = 2 * clusters blocks of 64 threads; cluster c's tile is rows 16c .. 16c + 15 of A (64 columns), and
    block b writes the tile it received to Out[b]."""
    grid = 2 * clusters
    box_bytes = HALF[0] * HALF[1] * 2

    @tiledsl.jit
    def tma_multicast(A: T.TensorMap(("M", "N"), "float16", box=HALF, swizzle=128),
                      Out: T.Tensor((grid, ROWS, HALF[1]), "float16")):
        T.device_entry(launch=T.cuda.LaunchConfig(grid=grid, block=64, cluster=(2, 1, 1)))
        tid = T.cuda.thread_id()
        rank = T.cuda.cluster_ctarank()
        tile = T.alloc_shared((2,) + HALF, "float16", layout=TILE)
        bar = T.alloc_shared((1,), "uint64")
        if tid == 0:
            T.cuda.tile.apply(T.ptx["mbarrier.init.shared::cta.b64"], bar, 1)
            T.cuda.tile.apply(T.ptx["fence.mbarrier_init.release.cluster"])
        # both CTAs' barriers are initialised before either CTA's multicast reaches them
        T.cuda.tile.apply(T.ptx[ARRIVE])
        T.cuda.tile.apply(T.ptx[WAIT])
        if tid == 0:
            # this CTA's barrier receives both halves: its own copy and its peer's
            T.cuda.tile.apply(T.ptx["mbarrier.arrive.expect_tx.shared::cta.b64"], bar, 2 * box_bytes)
            T.cuda.tile.apply(T.ptx[LOAD_MC], tile[rank], A, bar,
                              coords=(T.cuda.cluster_id(0) * ROWS + rank * HALF[0], 0), cta_mask=0b11)
        T.cuda.tile.apply(T.ptx["mbarrier.try_wait.parity.shared::cta.b64"], bar, 0)
        b = T.cuda.block_id()
        for e in range(tid, ROWS * HALF[1], 64):
            Out[b, e // HALF[1], e % HALF[1]] = tile[e // (HALF[0] * HALF[1]), e // HALF[1] % HALF[0], e % HALF[1]]
        # no CTA leaves while its peer's multicast may still write into it
        T.cuda.tile.apply(T.ptx[ARRIVE])
        T.cuda.tile.apply(T.ptx[WAIT])
    return tma_multicast, (grid, ROWS, HALF[1])


def inputs(clusters: int = 2, seed: int = 0):
    rng = np.random.default_rng(seed)
    a = (rng.standard_normal((clusters * ROWS, HALF[1])) * 8).astype(np.float16)
    want = np.repeat(a.reshape(clusters, ROWS, HALF[1]), 2, axis=0)      # both CTAs of cluster c: its rows
    return a, want


def test_multicast_compiles_and_assembles_for_sm90a():
    k, oshape = multicast_kernel()
    a, _ = inputs()
    ck = k.compile(a, np.zeros(oshape, np.float16), target="sm_90a")
    ptx = ck.asm["ptx"]
    assert ".reqnctapercluster 2, 1, 1" in ptx
    line = next(x for x in ptx.splitlines() if "multicast::cluster" in x)
    assert line.strip().startswith(LOAD_MC) and "], %rs" in line      # the 16-bit cta_mask operand
    assert ".shared .align 1024 .b8 tile" in ptx
    for arch in ("sm_90a", "sm_90"):
        r = ptxas(ptx.replace(".target sm_90a", f".target {arch}"), arch)
        assert r.returncode == 0, r.stderr


def test_multicast_on_the_interpreter_matches_numpy():
    k, oshape = multicast_kernel()
    a, want = inputs()
    out = np.zeros(oshape, np.float16)
    tiledsl.jit(k.fn, interpret=True)(a, out)
    np.testing.assert_array_equal(out, want)


def test_a_mask_beyond_the_cluster_faults_on_the_interpreter():
    """cta_mask 0b101 names rank 2 of a 2-CTA cluster."""
    one = tma_layout(HALF, "float16", 128)

    @tiledsl.jit(interpret=True)
    def wide(A: T.TensorMap(("M", "N"), "float16", box=HALF, swizzle=128)):
        T.device_entry(launch=T.cuda.LaunchConfig(grid=2, block=32, cluster=(2, 1, 1)))
        tile = T.alloc_shared(HALF, "float16", layout=one)
        bar = T.alloc_shared((1,), "uint64")
        if T.cuda.thread_id() == 0:
            T.cuda.tile.apply(T.ptx["mbarrier.init.shared::cta.b64"], bar, 1)
            T.cuda.tile.apply(T.ptx["mbarrier.arrive.expect_tx.shared::cta.b64"], bar, 1024)
            T.cuda.tile.apply(T.ptx[LOAD_MC], tile, A, bar, coords=(0, 0), cta_mask=0b101)
    with pytest.raises(tiledsl.KernelFault, match="cta_mask 0x5 names CTA ranks outside the cluster of 2"):
        wide(np.zeros((8, 64), np.float16))
