"""Bad calls of kernels whose steady launcher is the native one with tensor-map parameters or a cluster (on the
stub driver of tests/launch_stubs.py): each raises the very LaunchError the reference checker gives, naming the
argument, after the native launcher has taken over (checked inside each action)."""
import numpy as np
import pytest

import tiledsl
from badcase import Case, run
from tiledsl.core.errors import LaunchError

PSHAPE = (64, 128)


def _steady(mp, kernel_of):
    """Install the stub driver and encoder, build the kernel, launch it until the native launcher runs it."""
    import launch_stubs
    from test_tma import _stub_encoder
    from tiledsl.runtime import driver, tensormap
    drv = launch_stubs.install(mp)
    _stub_encoder(drv, [])
    mp.setattr(driver, "launch_clustered", lambda *a: (0,))
    ex = drv.addrs.get("cuLaunchKernelEx")
    if ex is None:                     # the stub's cuLaunchKernel entry serves for cuLaunchKernelEx's 4 arguments
        import ctypes
        keep = ctypes.CFUNCTYPE(ctypes.c_int, *[ctypes.c_void_p] * 4)(lambda *a: 0)
        drv.keep_ex = keep
        drv.addrs["cuLaunchKernelEx"] = ctypes.cast(keep, ctypes.c_void_p).value
    tensormap.clear()
    k, good = kernel_of(launch_stubs)
    for _ in range(6):
        k(*good)
    assert type(k._call).__name__ == "builtin_function_or_method", k.native_unsupported
    return k, good, launch_stubs


def _maps(ls):
    from test_tma import copy_kernel
    k, pshape = copy_kernel(2, (16, 32), "float16", 64, grid=(4, 4, 1))
    return k, (ls.ndarray((50, 120), "float16"), ls.ndarray((50, 120), "float16"), ls.ndarray(pshape, "float16"))


def _cluster(ls):
    import cluster_kernels as K
    k = tiledsl.jit(K.exchange.fn)
    return k, (ls.ndarray((8, 64), "uint32"),)


def map_call(bad):
    """An action: the two-map kernel, steady on the native launcher, then called with bad(launch_stubs, good)."""
    def action():
        with pytest.MonkeyPatch.context() as mp:
            k, good, ls = _steady(mp, _maps)
            k(*bad(ls, good))
    return action


def cluster_call(bad, grid=None):
    def action():
        with pytest.MonkeyPatch.context() as mp:
            k, good, ls = _steady(mp, _cluster)
            args = bad(ls, good)
            (k[grid, (64, 1, 1)] if grid else k)(*args)
    return action


C = Case
CASES = [
    C("native_map_dtype", action=map_call(lambda ls, g: (ls.ndarray((50, 120), "float32"), g[1], g[2])),
      err=LaunchError, words=("argument 'A'", "dtype float32")),
    C("native_map_stride", action=map_call(lambda ls, g: (ls.ndarray((50, 101), "float16"),
                                                          ls.ndarray((50, 101), "float16"), g[2])),
      err=LaunchError, words=("argument 'A'", "stride of 202 bytes")),
    C("native_map_misaligned", action=map_call(lambda ls, g: (g[0], ls.ndarray((50, 120), "float16",
                                                                               ptr=0x7F0000000008), g[2])),
      err=LaunchError, words=("argument 'B'", "0x7f0000000008", "16-byte aligned")),
    C("native_map_not_contiguous", action=map_call(lambda ls, g: (ls.ndarray((50, 120), "float16",
                                                                             strides=(2, 100)), g[1], g[2])),
      err=LaunchError, words=("argument 'A'", "not contiguous")),
    C("native_map_sizes_disagree", action=map_call(lambda ls, g: (g[0], ls.ndarray((60, 120), "float16"), g[2])),
      err=LaunchError, words=("argument 'B'",)),
    C("native_map_rank", action=map_call(lambda ls, g: (ls.ndarray((50, 120, 1), "float16"), g[1], g[2])),
      err=LaunchError, words=("argument 'A'",)),
    C("native_map_host_array", action=map_call(lambda ls, g: (np.zeros((50, 120), np.float16), g[1], g[2])),
      err=LaunchError, words=("argument 'A'",)),
    C("native_map_not_an_array", action=map_call(lambda ls, g: (3, g[1], g[2])),
      err=LaunchError, words=("argument 'A'",)),
    C("native_map_missing_argument", action=map_call(lambda ls, g: g[:2]), err=LaunchError, words=("Out",)),
    C("native_cluster_dtype", action=cluster_call(lambda ls, g: (ls.ndarray((8, 64), "int64"),)),
      err=LaunchError, words=("argument 'Out'", "dtype int64")),
    C("native_cluster_grid", action=cluster_call(lambda ls, g: g, grid=(3, 1, 1)),
      err=LaunchError, words=("not a whole number of clusters",)),
]


@pytest.mark.parametrize("case", [c.param() for c in CASES])
def test_bad_native_tensormap_and_cluster_calls(case):
    run(case)
