"""Clusters on the GPU (sm_90): the distributed-shared-memory exchange, the cluster special registers against the
interpreter, the remote mbarrier arrive, elect.sync, a warp-specialised producer/consumer with setmaxnreg (sm_90a),
and the launch paths (reference, generated and native, which launches clusters with cuLaunchKernelEx). Every kernel here
is also compiled, assembled with ptxas and run on the interpreter by tests/test_cluster.py."""
import numpy as np
import pytest

import cluster_kernels as K
import tiledsl

pytestmark = pytest.mark.gpu


def on_gpu(kernel, *arrays, target=None, launcher=None):
    torch = pytest.importorskip("torch")
    major, minor = torch.cuda.get_device_capability()
    if major < 9:
        pytest.skip("clusters need sm_90")
    dev = [torch.from_numpy(np.ascontiguousarray(a)).cuda() for a in arrays]
    k = tiledsl.jit(kernel.fn, target=target) if target else kernel
    (launcher(k) if launcher else k)(*dev)
    torch.cuda.synchronize()
    return [t.cpu().numpy() for t in dev]


def on_interpreter(kernel, *arrays, target="sm_90"):
    host = [np.array(a, copy=True) for a in arrays]
    tiledsl.jit(kernel.fn, interpret=True, target=target)(*host)
    return host


def test_gpu_dsmem_exchange():
    (out,) = on_gpu(K.exchange, np.zeros((8, 64), np.uint32))
    np.testing.assert_array_equal(out, K.exchange_expected())
    np.testing.assert_array_equal(out, on_interpreter(K.exchange, np.zeros((8, 64), np.uint32))[0])


def test_gpu_cluster_special_registers_match_the_interpreter():
    (out,) = on_gpu(K.specials, np.zeros((24, 7), np.int32))
    np.testing.assert_array_equal(out, on_interpreter(K.specials, np.zeros((24, 7), np.int32))[0])
    np.testing.assert_array_equal(out, K.specials_expected())


def test_gpu_remote_mbarrier_arrive():
    (out,) = on_gpu(K.remote_arrive, np.zeros((2, 32), np.uint32))
    np.testing.assert_array_equal(out, K.remote_arrive_expected())


def test_gpu_elect_one_leader_per_warp():
    (out,) = on_gpu(K.elect, np.zeros(64, np.uint32))
    for w in range(2):
        warp = out[32 * w:32 * (w + 1)]
        assert (warp == 1001).sum() == 1, warp          # exactly one leader, and d names it in every lane
        assert set(warp.tolist()) <= {0, 1001}


def test_gpu_setmaxnreg_producer_consumer():
    a = np.arange(128, dtype=np.float32) * 0.5
    _, out = on_gpu(K.producer_consumer, a, np.zeros(128, np.float32), target="sm_90a")
    np.testing.assert_array_equal(out, a * 3 + 1)
    np.testing.assert_array_equal(out, on_interpreter(K.producer_consumer, a, np.zeros(128, np.float32),
                                                      target="sm_90a")[1])


def test_gpu_cluster_launch_paths():
    # kernel[grid, block] keeps the kernel's cluster; repeated calls take the generated launcher (cuLaunchKernelEx)
    torch = pytest.importorskip("torch")
    k = tiledsl.jit(K.specials.fn)
    out = torch.zeros((24, 7), dtype=torch.int32, device="cuda")
    for _ in range(5):
        out.zero_()
        k[(6, 4, 1), (32, 1, 1)](out)
        k(out)
    torch.cuda.synchronize()
    np.testing.assert_array_equal(out.cpu().numpy(), K.specials_expected())
    assert k.native_unsupported is None or "cluster" in k.native_unsupported or "devices" in k.native_unsupported
    with pytest.raises(tiledsl.LaunchError, match="not a whole number of clusters"):
        k[(5, 4, 1), (32, 1, 1)](out)
