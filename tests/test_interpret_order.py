"""TILEDSL_INTERPRET_ORDER=random (tiledsl/interpreter/warp_order.py): the warps of a block run one at a time in an
order drawn from TILEDSL_INTERPRET_SEED, drawn again at every barrier. A racy kernel's result then depends on the
seed, as it depends on the schedule on a GPU; a correct kernel's does not. (The race detector is turned off here:
it would stop the racy kernel before its result shows.)"""
import os
import sys

import numpy as np
import pytest

import tiledsl

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "bad_inputs"))
import test_bad_races as R  # noqa: E402
import test_racecheck as C  # noqa: E402


def outputs(monkeypatch, fn, make_args, seeds, pick=-1):
    monkeypatch.setenv("TILEDSL_RACECHECK", "0")
    monkeypatch.setenv("TILEDSL_INTERPRET_ORDER", "random")
    got = []
    for seed in seeds:
        monkeypatch.setenv("TILEDSL_INTERPRET_SEED", str(seed))
        args = make_args()
        tiledsl.jit(fn, interpret=True)(*args)
        got.append(args[pick].tobytes())
    return got


def test_a_racy_kernel_gives_different_results_under_two_seeds(monkeypatch):
    got = outputs(monkeypatch, R.k_neighbour, lambda: (R.ar(128), R.z(128)), range(4))
    assert len(set(got)) > 1


def test_a_seed_gives_one_result(monkeypatch):
    got = outputs(monkeypatch, R.k_neighbour, lambda: (R.ar(128), R.z(128)), [3, 3])
    assert got[0] == got[1]


@pytest.mark.parametrize("fn, make_args, want", [
    (C.k_tree, lambda: (R.ar(128), R.z(128)), lambda a: R.ar(128) - R.ar(128).sum()),
    (C.k_transpose, lambda: (R.ar(32, 32), R.z(32, 32)), lambda a: R.ar(32, 32).T),
    (C.k_loop_two_barriers, lambda: (R.ar(4, 128), R.z(128)),
     lambda a: R.ar(4, 128)[:, (np.arange(128) + 32) % 128].sum(axis=0)),
    (C.k_global_partials, lambda: (R.ar(128), R.z(4), R.z(1)), lambda a: np.array([R.ar(128)[::32].sum() * 4])),
], ids=["tree", "transpose", "loop", "global_partials"])
def test_correct_kernels_are_stable_under_every_seed(monkeypatch, fn, make_args, want):
    got = outputs(monkeypatch, fn, make_args, range(4))
    assert len(set(got)) == 1
    out = np.frombuffer(got[0], np.float32)
    np.testing.assert_array_equal(out, np.asarray(want(None), np.float32).reshape(-1))


def test_the_race_detector_runs_under_the_random_order(monkeypatch):
    monkeypatch.setenv("TILEDSL_INTERPRET_ORDER", "random")
    with pytest.raises(tiledsl.KernelFault, match="data race on shared memory"):
        tiledsl.jit(R.k_neighbour, interpret=True)(R.ar(128), R.z(128))


def test_a_fault_in_one_warp_stops_the_launch(monkeypatch):
    monkeypatch.setenv("TILEDSL_INTERPRET_ORDER", "random")
    with pytest.raises(tiledsl.KernelFault):
        tiledsl.jit(R.k_transpose, interpret=True)(R.ar(32, 32), R.z(32, 32))


def k_return_then_barrier(A: tiledsl.T.Tensor((64,), "int32")):
    tiledsl.T.device_entry(launch=tiledsl.T.cuda.LaunchConfig(grid=1, block=64))
    t = tiledsl.T.cuda.thread_id()
    if t >= 32:
        return
    tiledsl.T.cuda.syncthreads()
    A[t] = 1


def test_a_barrier_some_warps_never_reach_faults_as_in_lockstep(monkeypatch):
    monkeypatch.setenv("TILEDSL_INTERPRET_ORDER", "random")
    with pytest.raises(tiledsl.KernelFault, match="barrier"):
        tiledsl.jit(k_return_then_barrier, interpret=True)(np.zeros(64, np.int32))
