"""A sample of the racy kernels of tests/bad_inputs/test_bad_races.py run on the GPU, for compute-sanitizer:

    compute-sanitizer --tool racecheck --racecheck-report hazard python benchmarks/racecheck_sample.py
    compute-sanitizer --tool racecheck python benchmarks/racecheck_sample.py --only neighbour_without_syncthreads

Each kernel is launched once (its result is not checked: the kernels are wrong on purpose); the interpreter's race
detector stops every one of them (`python benchmarks/racecheck_sample.py --interpret` shows its verdicts, one line
each). racecheck should report a shared-memory hazard for each kernel of SHARED below; the async-proxy cases
(ASYNC) are what the interpreter adds and racecheck is not expected to see; CLEAN (the same kernels with their
synchronisation put back) must stay silent on both.
"""
from __future__ import annotations

import argparse
import os
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests", "bad_inputs"))
sys.path.insert(0, os.path.join(ROOT, "tests"))

import tiledsl  # noqa: E402
import test_bad_races as R  # noqa: E402
import test_racecheck as C  # noqa: E402

# plain shared-memory races between warps, which racecheck tracks
SHARED = ["tree_without_syncthreads", "tree_without_the_first_syncthreads", "result_read_without_syncthreads",
          "neighbour_without_syncthreads", "broadcast_without_syncthreads", "transpose_without_syncthreads",
          "write_write", "histogram_without_atomics", "war_across_iterations", "scan_without_the_read_barrier",
          "named_barrier_leaves_a_warp_out", "mbarrier_never_waited", "ldmatrix_without_syncthreads",
          "cp_async_without_barrier_after_the_wait"]
# asynchronous copies and the async proxy: flagged by the interpreter
ASYNC = ["cp_async_read_before_its_wait", "bulk_copy_read_before_its_mbarrier",
         "tma_load_read_before_the_full_barrier", "tma_store_without_fence_proxy_async",
         "wgmma_before_the_full_barrier", "wgmma_without_fence_proxy_async"]
# the same kinds of kernel with their synchronisation put back (tests/test_racecheck.py): silent on both tools
CLEAN = {
    "tree_reduction": (C.k_tree, lambda: (np.arange(128, dtype=np.float32), np.zeros(128, np.float32))),
    "transpose": (C.k_transpose, lambda: (np.arange(1024, dtype=np.float32).reshape(32, 32),
                                          np.zeros((32, 32), np.float32))),
    "loop_two_barriers": (C.k_loop_two_barriers, lambda: (np.ones((4, 128), np.float32), np.zeros(128, np.float32))),
    "histogram_atomics": (C.k_histogram, lambda: (np.arange(128, dtype=np.int32) % 8, np.zeros(8, np.int32))),
    "bar_arrive_sync": (C.k_arrive_sync, lambda: (np.ones(64, np.float32), np.zeros(32, np.float32))),
    "mbarrier_waited": (C.k_mbar, lambda: (np.ones(64, np.float32), np.zeros(32, np.float32))),
    "cp_async_waited": (C.k_cp_async, lambda: (np.arange(256, dtype=np.uint32).reshape(64, 4),
                                               np.zeros(64, np.uint32))),
}


def kind(cid):
    return "shared" if cid in SHARED else "clean" if cid in CLEAN else "async"


def cases():
    by_id = {c.id: c for c in R.CASES}
    return by_id


def args_of(case):
    """The numpy arguments the corpus runs the kernel with."""
    return case.args


def on_gpu(cid, by_id):
    import torch
    fn, args = (CLEAN[cid][0], CLEAN[cid][1]()) if cid in CLEAN else (R.raw(by_id[cid].fn), args_of(by_id[cid]))
    dev = [torch.from_numpy(np.ascontiguousarray(a)).cuda() for a in args]
    tiledsl.jit(fn)(*dev)
    torch.cuda.synchronize()


def on_interpreter(cid, by_id):
    try:
        if cid in CLEAN:
            fn, args = CLEAN[cid]
            tiledsl.jit(fn, interpret=True)(*args())
        else:
            by_id[cid].action()
    except tiledsl.KernelFault as e:
        return str(e).splitlines()[0]
    return "NO RACE REPORTED"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", action="append", help="run only this case id (repeatable)")
    ap.add_argument("--interpret", action="store_true", help="show the interpreter's verdicts instead")
    ns = ap.parse_args()
    by_id = cases()
    ids = ns.only or SHARED + ASYNC + list(CLEAN)
    for cid in ids:
        if ns.interpret:
            print(f"{cid}: {on_interpreter(cid, by_id)}")
            continue
        print(f"== {cid} ({kind(cid)})", flush=True)
        on_gpu(cid, by_id)
    return 0


if __name__ == "__main__":
    sys.exit(main())
