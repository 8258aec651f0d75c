"""Bad launch configurations: in the kernel (CompilationError at the line) or at the call (LaunchError)."""
import numpy as np
import pytest

import tiledsl
from tiledsl import LaunchError, T
from tiledsl.layout import S, TileLayout, laneid
from badcase import Case, run
from helpers import FakeCudaArray

MMA = "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"
la = TileLayout(S[(1, 2, 2, 8, 2, 4) : (8, 4, 1, 4 @ laneid, 2, 1 @ laneid)])
lb = TileLayout(S[(1, 2, 8, 2, 4) : (4, 2, 4 @ laneid, 1, 1 @ laneid)])
ld = TileLayout(S[(1, 1, 2, 8, 4, 2) : (4, 4, 2, 4 @ laneid, 1 @ laneid, 1)])


def k_too_many_threads(A: T.Tensor((4,), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=2048))
    A[0] = 1.0


def k_too_many_threads_2d(A: T.Tensor((4,), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=(64, 32)))
    A[0] = 1.0


def k_block_z_too_large(A: T.Tensor((4,), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=(1, 1, 65)))
    A[0] = 1.0


def k_zero_grid(A: T.Tensor((4,), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=0, block=32))
    A[0] = 1.0


def k_four_dim_block(A: T.Tensor((4,), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=(2, 2, 2, 2)))
    A[0] = 1.0


def k_runtime_block(A: T.Tensor((4,), "float32"), n: T.int32):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=n))
    A[0] = 1.0


def k_float_grid(A: T.Tensor((4,), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1.5, block=32))
    A[0] = 1.0


def k_launch_missing_block(A: T.Tensor((4,), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1))
    A[0] = 1.0


def k_device_entry_not_first(A: T.Tensor((4,), "float32")):
    A[0] = 1.0
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))


def k_device_entry_twice(A: T.Tensor((4,), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=64))


def k_device_entry_not_config(A: T.Tensor((4,), "float32")):
    T.device_entry(launch=(1, 32))


def k_mma_in_48_threads():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=48))
    ar = T.alloc_local((8,), "uint32")
    br = T.alloc_local((4,), "uint32")
    dr = T.alloc_local((4,), "float32")
    av = ar.view(1, 2, 16, 8, layout=la)
    bv = br.view(1, 2, 8, 8, layout=lb)
    dv = dr.view(1, 1, 16, 8, layout=ld)
    T.cuda.tile.apply(T.ptx[MMA], dv, av, bv, T.float32(0), scope="warp")


def k_warp_scope_in_40_threads(A: T.Tensor((40, 1), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=40))
    r = T.alloc_local((1, 1), "float32")
    T.cuda.tile.apply(T.ptx["add.rn.f32"], r, r, r, scope="cta")


def k_shared_300kb(A: T.Tensor((4,), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    big = T.alloc_shared((300 * 1024 // 4,), "float32")
    big[0] = A[0]
    A[1] = big[0]


def k_shared_total_over_limit(A: T.Tensor((4,), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    s1 = T.alloc_shared((200, 256), "float32")
    s2 = T.alloc_shared((28, 256), "float32")
    s1[0, 0] = A[0]
    s2[0, 0] = A[0]


def k_shared_200kb_on_sm80(A: T.Tensor((4,), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    big = T.alloc_shared((200, 256), "float32")
    big[0, 0] = A[0]


@tiledsl.jit
def kl(A: T.Tensor((4,), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    A[0] = 1.0


def _call(grid, block):
    return lambda: kl[grid, block](FakeCudaArray((4,)))


def _compile(**kw):
    return lambda: tiledsl.jit(kl.fn).compile(np.zeros(4, np.float32), target="sm_90", **kw)


C = Case
CASES = [
    C("device_entry_2048_threads", k_too_many_threads, "block=2048", ("2048 threads", "at most 1024")),
    C("device_entry_2048_threads_2d", k_too_many_threads_2d, "block=(64, 32)", ("2048 threads",)),
    C("device_entry_block_z_65", k_block_z_too_large, "block=(1, 1, 65)", ("z <= 64",)),
    C("device_entry_zero_grid", k_zero_grid, "grid=0", ("grid dimension must be a positive",)),
    C("device_entry_4d_block", k_four_dim_block, "(2, 2, 2, 2)", ("block takes 1 to 3 dimensions",)),
    C("device_entry_runtime_block", k_runtime_block, "block=n", ("positive compile-time int",)),
    C("device_entry_float_grid", k_float_grid, "grid=1.5", ("each grid dimension must be",)),
    C("launch_config_missing_block", k_launch_missing_block, "LaunchConfig(grid=1)", ("missing argument 'block'",)),
    C("device_entry_not_first", k_device_entry_not_first, "T.device_entry", ("must be the first statement",)),
    C("device_entry_twice", k_device_entry_twice, "block=64", ("T.device_entry is given twice",)),
    C("device_entry_not_a_config", k_device_entry_not_config, "launch=(1, 32)", ("T.cuda.LaunchConfig",)),
    C("mma_in_48_thread_block", k_mma_in_48_threads, "T.ptx[MMA]", ("whole warps", "48 threads")),
    C("cta_scope_in_40_thread_block", k_warp_scope_in_40_threads, "scope=\"cta\"", ("whole warps", "40")),
    C("shared_300kb", k_shared_300kb, "big = T.alloc_shared", ("shared memory", "307200 bytes", "232448")),
    C("shared_total_over_48kb", k_shared_total_over_limit, "s2 = T.alloc_shared",
      ("shared memory", "233472 bytes", "204800 bytes before")),
    C("shared_200kb_on_sm80", k_shared_200kb_on_sm80, "big = T.alloc_shared", ("shared memory", "204800 bytes",
                                                                              "166912", "sm_80"), target="sm_80"),
    C("call_block_2048", action=_call(1, 2048), err=LaunchError, words=("2048 threads", "at most 1024")),
    C("call_block_z_65", action=_call(1, (1, 1, 65)), err=LaunchError, words=("z <= 64",)),
    C("call_zero_grid", action=_call(0, 32), err=LaunchError, words=("must be positive",)),
    C("call_negative_block", action=_call(1, -32), err=LaunchError, words=("must be positive",)),
    C("call_four_dim_grid", action=_call((1, 1, 1, 1), 32), err=LaunchError, words=("up to 3 ints",)),
    C("call_float_grid", action=_call(1.5, 32), err=LaunchError, words=("up to 3 ints",)),
    C("call_string_block", action=_call(1, "32"), err=LaunchError, words=("up to 3 ints",)),
    C("call_missing_block", action=lambda: kl[1](FakeCudaArray((4,))), err=LaunchError,
      words=("kernel[grid, block]",)),
    C("compile_block_2048", action=_compile(block=2048), err=LaunchError, words=("2048 threads",)),
    C("compile_block_z_65", action=_compile(block=(1, 1, 65)), err=LaunchError, words=("z <= 64",)),
    C("compile_zero_grid", action=_compile(grid=0), err=LaunchError, words=("must be positive",)),
]


@pytest.mark.parametrize("case", [c.param() for c in CASES])
def test_bad_launch_configuration(case):
    run(case)
