"""The native launcher on the GPU (sm_90) for the Hopper launches it now takes: kernels with T.TensorMap parameters
(the map's bytes from the launcher's memo, re-encoded when a tensor changes) and clustered kernels
(cuLaunchKernelEx). Each test checks the result of every launch and that the steady launches were native. The
same kernels are compiled and assembled with ptxas for sm_90 on the CPU by tests/test_native_tensormap.py
(`KERNELS`)."""
import importlib.util
import pathlib

import numpy as np
import pytest

import cluster_kernels as K
import tiledsl
from test_tma import _data, copy_kernel, expected

BOX, SHAPE, GRID = (16, 32), (50, 120), (4, 4, 1)


def _bench():
    path = pathlib.Path(__file__).resolve().parent.parent / "benchmarks" / "launch.py"
    spec = importlib.util.spec_from_file_location("bench_launch_gpu_native", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def KERNELS():
    """(kernel, host arrays of a call) of every kernel these tests launch (for the ptxas check on the CPU)."""
    k, pshape = copy_kernel(2, BOX, "float16", 64, grid=GRID)
    a = _data(SHAPE, "float16")
    f = np.zeros(256, np.float32)
    return [(k, (a, a, np.zeros(pshape, np.float16))), (_bench().add3_maps, (f, f, f, f)),
            (K.exchange, (np.zeros((8, 64), np.uint32),)), (K.specials, (np.zeros((24, 7), np.int32),))]


def _torch():
    torch = pytest.importorskip("torch")
    major, minor = torch.cuda.get_device_capability()
    if major * 10 + minor < 90:
        pytest.skip("needs sm_90")
    if torch.cuda.device_count() > 1:
        pytest.skip("the native launcher is kept off with several devices")
    return torch


def _is_native(k) -> bool:
    return type(k._call).__name__ == "builtin_function_or_method"


@pytest.mark.gpu
def test_gpu_two_map_copy_through_the_native_launcher_with_changing_tensors():
    torch = _torch()
    k, pshape = copy_kernel(2, BOX, "float16", 64, grid=GRID)
    tout = torch.zeros(pshape, dtype=torch.float16, device="cuda")
    fixed_a = torch.from_numpy(_data(SHAPE, "float16", seed=99)).cuda()
    fixed_b = torch.zeros(SHAPE, dtype=torch.float16, device="cuda")
    # new input and output tensors for 6 calls (each misses the memo once), then the same ones for 6 (hits),
    # then alternating between two outputs: every launch must copy the input it was given into the output
    plan = [(torch.from_numpy(_data(SHAPE, "float16", seed=i)).cuda(), torch.zeros(SHAPE, dtype=torch.float16,
                                                                                  device="cuda")) for i in range(6)]
    plan += [(fixed_a, fixed_b)] * 6
    other_b = torch.zeros(SHAPE, dtype=torch.float16, device="cuda")
    plan += [(fixed_a, other_b if i % 2 else fixed_b) for i in range(6)]
    for ta, tb in plan:
        tb.zero_()
        tout.zero_()
        k(ta, tb, tout)
        torch.cuda.synchronize()
        torch.testing.assert_close(tb, ta, rtol=0, atol=0)
        np.testing.assert_array_equal(tout.cpu().numpy(), expected(ta.cpu().numpy(), pshape, 0))
    assert k.native_unsupported is None and _is_native(k)


@pytest.mark.gpu
def test_gpu_two_map_add3_of_the_launch_benchmark_is_native():
    torch = _torch()
    k = tiledsl.jit(_bench().add3_maps.fn)
    a, b = (torch.randn(256, device="cuda") for _ in range(2))
    for i in range(6):
        c = torch.randn(256, device="cuda")
        d = torch.zeros(256, device="cuda")
        k(a, b, c, d)
        torch.cuda.synchronize()
        torch.testing.assert_close(d, c + c + c)
    assert k.native_unsupported is None and _is_native(k)


@pytest.mark.gpu
def test_gpu_cluster_kernels_through_the_native_launcher():
    torch = _torch()
    k = tiledsl.jit(K.specials.fn)
    for _ in range(6):
        out = torch.zeros((24, 7), dtype=torch.int32, device="cuda")       # a new output every time
        k(out)
        torch.cuda.synchronize()
        np.testing.assert_array_equal(out.cpu().numpy(), K.specials_expected())
    assert k.native_unsupported is None and _is_native(k)
    x = tiledsl.jit(K.exchange.fn)
    for _ in range(6):
        out = torch.from_numpy(np.zeros((8, 64), np.uint32)).cuda()      # (as tests/test_gpu_cluster.py makes it)
        x(out)
        torch.cuda.synchronize()
        np.testing.assert_array_equal(out.cpu().numpy(), K.exchange_expected())
    assert x.native_unsupported is None and _is_native(x)


@pytest.mark.gpu
def test_gpu_cluster_launch_with_grid_and_block_through_the_native_launcher():
    torch = _torch()
    k = tiledsl.jit(K.specials.fn)
    out = torch.zeros((24, 7), dtype=torch.int32, device="cuda")
    for _ in range(6):
        out.zero_()
        k[(6, 4, 1), (32, 1, 1)](out)
        torch.cuda.synchronize()
        np.testing.assert_array_equal(out.cpu().numpy(), K.specials_expected())
    assert k.native_unsupported is None
    with pytest.raises(tiledsl.LaunchError, match="not a whole number of clusters"):
        k[(5, 4, 1), (32, 1, 1)](out)
