"""Races on global memory between the warps of one block (issue 33: "each shared (and block-visible global)
element"): the race detector checks plain loads and stores (`X[i]`) of the tensors a kernel stores to like shared
memory, so each kernel here is a KernelFault naming both source lines. Different blocks are never checked against
each other (nothing inside a kernel orders them but atomics and fences, which the detector does not model)."""
import inspect

import numpy as np
import pytest

import tiledsl
from tiledsl import T
from badcase import Case, line_of, raw, run

LC = T.cuda.LaunchConfig
KF = tiledsl.KernelFault
RACE = ("data race on global memory",)


def k_write_then_read(X: T.Tensor((64,), "float32"), Out: T.Tensor((64,), "float32")):
    T.device_entry(launch=LC(grid=1, block=64))
    t = T.cuda.thread_id()
    if t == 0:
        Out[0] = X[0] * 2.0
    if t == 32:
        Out[1] = Out[0] + 1.0


def k_in_place_shift(X: T.Tensor((64,), "float32")):
    T.device_entry(launch=LC(grid=1, block=64))
    t = T.cuda.thread_id()
    X[t] = X[t] + X[(t + 32) % 64]


def k_partials_read_early(X: T.Tensor((128,), "float32"), Ws: T.Tensor((4,), "float32"),
                          Out: T.Tensor((1,), "float32")):
    T.device_entry(launch=LC(grid=1, block=128))
    t = T.cuda.thread_id()
    v = X[t] * 4.0
    if t % 32 == 0:
        Ws[t // 32] = v
    if t == 0:
        Out[0] = Ws[0] + Ws[1] + Ws[2] + Ws[3]


def k_two_warps_write(X: T.Tensor((64,), "float32"), Out: T.Tensor((1,), "float32")):
    T.device_entry(launch=LC(grid=1, block=64))
    t = T.cuda.thread_id()
    if t == 0:
        Out[0] = X[0]
    if t == 33:
        Out[0] = X[1]


def k_every_block_own_row(X: T.Tensor((4, 64), "float32"), Out: T.Tensor((4, 64), "float32")):
    T.device_entry(launch=LC(grid=4, block=64))
    b = T.cuda.block_id()
    t = T.cuda.thread_id()
    Out[b, t] = X[b, t]
    Out[b, 63 - t] = Out[b, 63 - t] * 2.0


def z(*shape):
    return np.zeros(shape, np.float32)


def ar(*shape):
    return np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)


def race(id, fn, needle, other, args, words=()):
    """A racy kernel: the race is reported at `needle`, against the earlier access at `other`."""
    c = Case(id, fn, needle, RACE + tuple(words), err=KF,
             action=lambda: tiledsl.jit(fn, interpret=True)(*args), args=args)
    c.other = other
    return c


CASES = [
    race("global_write_then_read_by_another_warp", k_write_then_read, "Out[1] = Out[0] + 1.0", "Out[0] = X[0] * 2.0",
         (ar(64), z(64)), ("thread (32, 0, 0)", "thread (0, 0, 0)", "element 0")),
    race("global_in_place_shift_without_barrier", k_in_place_shift, "X[t] = X[t] + X[(t + 32) % 64]",
         "X[t] = X[t] + X[(t + 32) % 64]", (ar(64),), ("conflicts with the read",)),
    race("global_warp_partials_read_without_syncthreads", k_partials_read_early,
         "Out[0] = Ws[0] + Ws[1] + Ws[2] + Ws[3]", "Ws[t // 32] = v", (ar(128), z(4), z(1)), ("'Ws' element 1",)),
    race("global_two_warps_write_one_element", k_two_warps_write, "Out[0] = X[1]", "Out[0] = X[0]",
         (ar(64), z(1)), ("conflicts with the write",)),
    race("global_row_reread_by_another_warp", k_every_block_own_row, "Out[b, 63 - t] = Out[b, 63 - t] * 2.0",
         "Out[b, t] = X[b, t]", (ar(4, 64), z(4, 64))),
]


@pytest.mark.parametrize("case", [c.param() for c in CASES])
def test_bad_global_races(case):
    err = run(case)
    msg = str(err)
    want = line_of(case.fn, case.other)
    assert f"{inspect.getsourcefile(raw(case.fn))}:{want}:" in msg, f"{case.id}: line {want} not named:\n{msg}"
    assert case.other.strip() in msg, msg


@pytest.mark.parametrize("case", [c.param() for c in CASES])
def test_each_racy_kernel_compiles_for_the_gpu(case):
    tiledsl.jit(raw(case.fn)).compile(*case.args, target="sm_90")


def test_the_racy_and_misreading_corpus_holds_at_least_40_kernels():
    """Issue 33's corpus: the shared-memory and asynchronous races, these global ones and the register-order
    mismatches (tests/bad_inputs/test_bad_register_order.py), every one refused or faulted with both lines named."""
    import test_bad_races
    import test_bad_register_order
    every = test_bad_races.CASES + CASES + test_bad_register_order.CASES
    assert len({c.id for c in every}) == len(every) >= 40
    assert all(getattr(c, "other", None) for c in every)
