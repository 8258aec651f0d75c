"""Named barriers on the GPU: the kernels of tests/barrier_kernels.py (a partial-CTA sync, run-time barrier ids,
two consumer warpgroups taking turns through named barriers beside an mbarrier producer) agree with the interpreter
and with the expected values. Every kernel here is also compiled, assembled with ptxas -arch=sm_90 and run on the
interpreter by tests/test_barrier.py."""
import numpy as np
import pytest

import barrier_kernels as K
import tiledsl

pytestmark = pytest.mark.gpu


def on_gpu(kernel, *arrays):
    torch = pytest.importorskip("torch")
    major, _ = torch.cuda.get_device_capability()
    if major < 9:
        pytest.skip("the ping-pong kernel's mbarrier needs sm_90")
    dev = [torch.from_numpy(np.ascontiguousarray(a)).cuda() for a in arrays]
    kernel(*dev)
    torch.cuda.synchronize()
    return [t.cpu().numpy() for t in dev]


def on_interpreter(kernel, *arrays):
    host = [np.array(a, copy=True) for a in arrays]
    tiledsl.jit(kernel.fn, interpret=True, target="sm_90")(*host)
    return host


def test_gpu_partial_cta_sync():
    a = np.arange(256, dtype=np.uint32) * 5
    _, out = on_gpu(K.partial, a, np.zeros((2, 256), np.uint32))
    np.testing.assert_array_equal(out, K.partial_expected(a))
    np.testing.assert_array_equal(out, on_interpreter(K.partial, a, np.zeros((2, 256), np.uint32))[1])


def test_gpu_run_time_barrier_ids():
    a = np.arange(256, dtype=np.uint32) * 3
    _, out = on_gpu(K.halves, a, np.zeros_like(a))
    np.testing.assert_array_equal(out, K.halves_expected(a))
    np.testing.assert_array_equal(out, on_interpreter(K.halves, a, np.zeros_like(a))[1])


@pytest.mark.parametrize("repeat", range(3))
@pytest.mark.parametrize("kernel", [K.pingpong, K.pingpong_shared], ids=["two-copies", "shared-code"])
def test_gpu_ping_pong_order(repeat, kernel):
    a, out, log = K.pingpong_inputs()
    _, out, log = on_gpu(kernel, a, out, log)
    want_out, want_log = K.pingpong_expected(a)
    np.testing.assert_array_equal(log, want_log)           # the consumers' turns alternate, consumer 1 first
    np.testing.assert_array_equal(out, want_out)
    _, i_out, i_log = on_interpreter(kernel, *K.pingpong_inputs())
    np.testing.assert_array_equal(log, i_log)
    np.testing.assert_array_equal(out, i_out)
