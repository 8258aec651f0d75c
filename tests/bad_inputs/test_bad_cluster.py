"""Wrong cluster kernels and calls (LaunchConfig cluster=, barrier.cluster, {ld,st}.shared::cluster, the remote
mbarrier arrive, elect.sync, setmaxnreg): a CompilationError at the offending line naming the operand, parameter
or target, or a LaunchError naming the grid."""
import numpy as np
import pytest

import tiledsl
from tiledsl import T
from badcase import Case, run

ST, LD = "st.shared::cluster.u32", "ld.shared::cluster.u32"
DEC, INC = "setmaxnreg.dec.sync.aligned.u32", "setmaxnreg.inc.sync.aligned.u32"


def k_grid_not_divisible():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=(3, 2), block=32, cluster=(2, 1, 1)))


def k_cluster_too_big():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=16, block=32, cluster=(16, 1, 1)))


def k_cluster_zero():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=4, block=32, cluster=(0, 1, 1)))


def k_cluster_runtime(n: T.int32):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=4, block=32, cluster=(n, 1, 1)))


def k_cluster_sm80():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=4, block=32, cluster=(2, 1, 1)))


def k_rank_sm80(Out: T.Tensor((1,), "int32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    Out[0] = T.cuda.cluster_ctarank()


def k_setmaxnreg_odd():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=128))
    T.cuda.tile.apply(T.ptx[DEC], 36)


def k_setmaxnreg_too_many():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=128))
    T.cuda.tile.apply(T.ptx[INC], 264)


def k_setmaxnreg_dec_above_cap():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=256, max_registers=64))
    T.cuda.tile.apply(T.ptx[DEC], 96)


def k_setmaxnreg_inc_below_cap():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=256, max_registers=128))
    T.cuda.tile.apply(T.ptx[INC], 96)


def k_setmaxnreg_runtime(n: T.int32):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=128))
    T.cuda.tile.apply(T.ptx[DEC], n)


def k_setmaxnreg_partial_warpgroup():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=64))
    T.cuda.tile.apply(T.ptx[DEC], 40)


def k_mapa_global(G: T.Tensor((64,), "uint32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=2, block=64, cluster=2))
    T.cuda.tile.apply(T.ptx[ST], G[0:1], 5, rank=1)


def k_mapa_local():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=2, block=64, cluster=2))
    r = T.alloc_local((1,), "uint32")
    T.cuda.tile.apply(T.ptx[LD], r, r, rank=1)


def k_no_rank():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=2, block=64, cluster=2))
    box = T.alloc_shared((64,), "uint32")
    T.cuda.tile.apply(T.ptx[ST], box[0:1], 5)


def k_rank_outside():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=4, block=64, cluster=2))
    box = T.alloc_shared((64,), "uint32")
    T.cuda.tile.apply(T.ptx[ST], box[0:1], 5, rank=2)


def k_remote_arrive_no_cluster():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=2, block=32))
    bar = T.alloc_shared((1,), "uint64")
    T.cuda.tile.apply(T.ptx["mbarrier.arrive.release.cluster.shared::cluster.b64"], bar, rank=1)


def k_remote_many_elements():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=2, block=64, cluster=2))
    box = T.alloc_shared((64,), "uint32")
    T.cuda.tile.apply(T.ptx[ST], box[0:4], 5, rank=1)


def k_remote_width():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=2, block=64, cluster=2))
    box = T.alloc_shared((64,), "uint16")
    T.cuda.tile.apply(T.ptx[ST], box[0:1], 5, rank=1)


def k_mapa_alone():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=2, block=64, cluster=2))
    box = T.alloc_shared((64,), "uint32")
    r = T.alloc_local((1,), "uint32")
    T.cuda.tile.apply(T.ptx["mapa.shared::cluster.u32"], r, box, 1)


def k_arrive_acquire():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=2, block=64, cluster=2))
    T.cuda.tile.apply(T.ptx["barrier.cluster.arrive.acquire"])


def k_remote_vector():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=2, block=64, cluster=2))
    box = T.alloc_shared((64,), "uint32")
    T.cuda.tile.apply(T.ptx["st.shared::cluster.v2.u32"], box[0:2], 5, rank=1)


def k_barrier_warp_scope():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=2, block=64, cluster=2))
    T.cuda.tile.apply(T.ptx["barrier.cluster.wait"], scope="warp")


def k_elect_shared_dst():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    box = T.alloc_shared((1,), "uint32")
    T.cuda.tile.apply(T.ptx["elect.sync"], box, 0xFFFFFFFF)


def k_barrier_sm80():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    T.cuda.tile.apply(T.ptx["barrier.cluster.arrive"])


CASES = [
    Case("grid-not-divisible", k_grid_not_divisible, "cluster=(2, 1, 1)", ("does not divide grid", "dimension x")),
    Case("cluster-over-8", k_cluster_too_big, "cluster=(16, 1, 1)", ("16 blocks", "at most 8")),
    Case("cluster-zero", k_cluster_zero, "cluster=(0, 1, 1)", ("cluster dimension", "positive")),
    Case("cluster-runtime", k_cluster_runtime, "cluster=(n, 1, 1)", ("cluster dimension", "compile-time")),
    Case("cluster-sm80", k_cluster_sm80, "cluster=(2, 1, 1)", ("clusters need sm_90", "sm_80"), target="sm_80"),
    Case("ctarank-sm80", k_rank_sm80, "cluster_ctarank()", ("need sm_90", "sm_80"), target="sm_80"),
    Case("setmaxnreg-not-multiple-of-8", k_setmaxnreg_odd, "T.ptx[DEC], 36", ("36", "multiple of 8"),
         target="sm_90a"),
    Case("setmaxnreg-above-256", k_setmaxnreg_too_many, "T.ptx[INC], 264", ("264", "24 to 256"), target="sm_90a"),
    Case("setmaxnreg-dec-above-cap", k_setmaxnreg_dec_above_cap, "T.ptx[DEC], 96", ("max_registers=64", ".dec"),
         target="sm_90a"),
    Case("setmaxnreg-inc-below-cap", k_setmaxnreg_inc_below_cap, "T.ptx[INC], 96", ("max_registers=128", ".inc"),
         target="sm_90a"),
    Case("setmaxnreg-runtime-count", k_setmaxnreg_runtime, "T.ptx[DEC], n", ("operand N", "compile-time int"),
         target="sm_90a"),
    Case("setmaxnreg-partial-warpgroup", k_setmaxnreg_partial_warpgroup, "T.ptx[DEC], 40", ("whole warpgroups", "64"),
         target="sm_90a"),
    Case("setmaxnreg-on-sm90", k_setmaxnreg_odd, "T.ptx[DEC], 36", ("sm_90a", "the target is sm_90")),
    Case("mapa-of-global", k_mapa_global, "G[0:1], 5, rank=1", ("operand dst", "mapa maps only shared", "global")),
    Case("mapa-of-register", k_mapa_local, "T.ptx[LD], r, r, rank=1", ("operand src", "mapa maps only shared")),
    Case("remote-without-rank", k_no_rank, "box[0:1], 5)", ("rank= is required",)),
    Case("rank-outside-cluster", k_rank_outside, "rank=2", ("operand rank", "2 is not a CTA", "ranks 0..1")),
    Case("remote-arrive-without-cluster", k_remote_arrive_no_cluster, "bar, rank=1", ("1 is not a CTA", "cluster=")),
    Case("remote-many-elements", k_remote_many_elements, "box[0:4], 5, rank=1", ("one element", "(4,)")),
    Case("remote-width", k_remote_width, "box[0:1], 5, rank=1", ("32 bits", "uint16")),
    Case("mapa-alone", k_mapa_alone, 'T.ptx["mapa.shared::cluster.u32"]', ("not applied on its own", "rank=")),
    Case("arrive-acquire", k_arrive_acquire, 'T.ptx["barrier.cluster.arrive.acquire"]', (".release or .relaxed",)),
    Case("remote-vector", k_remote_vector, 'T.ptx["st.shared::cluster.v2.u32"]', ("one element per thread",)),
    Case("barrier-warp-scope", k_barrier_warp_scope, 'scope="warp"', ("thread instruction", "'warp'")),
    Case("elect-shared-dst", k_elect_shared_dst, "box, 0xFFFFFFFF", ("operand d", "registers")),
    Case("barrier-sm80", k_barrier_sm80, 'T.ptx["barrier.cluster.arrive"]', ("needs sm_90", "sm_80"), target="sm_80"),
]


@pytest.mark.parametrize("case", [c.param() for c in CASES])
def test_bad_cluster(case):
    run(case)


def k_grid_ok(Out: T.Tensor((8,), "int32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=4, block=32, cluster=(2, 1, 1)))
    if T.cuda.thread_id() == 0:
        Out[T.cuda.block_id()] = T.cuda.cluster_ctarank()


def k_grid_runtime(Out: T.Tensor(("n",), "int32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=Out.shape[0], block=32, cluster=(2, 1, 1)))
    if T.cuda.thread_id() == 0:
        Out[T.cuda.block_id()] = T.cuda.cluster_ctarank()


def test_a_call_grid_that_is_not_whole_clusters_is_a_launch_error():
    k = tiledsl.jit(k_grid_ok, interpret=True)
    out = np.zeros(8, np.int32)
    k[(4, 1, 1), (32, 1, 1)](out)                       # kernel[grid, block] keeps the kernel's cluster
    np.testing.assert_array_equal(out[:4], [0, 1, 0, 1])
    with pytest.raises(tiledsl.LaunchError, match=r"not a whole number of clusters \(2, 1, 1\).*dimension x is 3"):
        k[(3, 1, 1), (32, 1, 1)](out)


def test_a_run_time_grid_that_is_not_whole_clusters_is_a_launch_error():
    k = tiledsl.jit(k_grid_runtime, interpret=True)
    out = np.zeros(6, np.int32)
    k(out)
    np.testing.assert_array_equal(out, [0, 1] * 3)
    with pytest.raises(tiledsl.LaunchError, match="dimension x is 5, not a multiple of 2"):
        k(np.zeros(5, np.int32))
