"""The warp collectives on the GPU: random kernels agree bit for bit with the interpreter, and a warp sum.

The kernels are tests/test_warp.py's (which assembles every one of them with ptxas on machines without a GPU and
checks the interpreter against references written from the ISA); each random case keeps every result defined by
PTX (source lanes inside the membermask, every named lane active), so the GPU and the interpreter must agree
exactly, inactive lanes included (their outputs stay untouched on both).
"""
import numpy as np
import pytest

import tiledsl
from test_warp import (N, activemask_kernel, interpret, random_case, shfl_kernel, warp_sum_kernel)

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")
COUNT = {"agreed": 0}
CASES = 32


def on_gpu(kernel, arrays, consts):
    dev = [torch.from_numpy(np.ascontiguousarray(a)).cuda() for a in arrays]
    kernel(*dev, *consts)
    torch.cuda.synchronize()
    return [t.cpu().numpy() for t in dev]


@pytest.mark.parametrize("seed", range(CASES))
def test_random_kernel_gpu_equals_interpreter(seed):
    kernel, arrays, consts, outs = random_case(seed)
    gpu = on_gpu(kernel, [a.copy() for a in arrays], consts)
    host = [a.copy() for a in arrays]
    interpret(kernel, *host, *consts)
    for i in outs:
        np.testing.assert_array_equal(gpu[i].view(np.uint32) if gpu[i].dtype.itemsize == 4 else gpu[i],
                                      host[i].view(np.uint32) if host[i].dtype.itemsize == 4 else host[i],
                                      err_msg=f"{kernel.fn.__name__} {consts} output {i}")
    COUNT["agreed"] += 1


def test_at_least_twenty_random_kernels_agreed():
    print(f"random warp-collective kernels agreeing GPU == interpreter: {COUNT['agreed']}")
    assert COUNT["agreed"] >= 20


def test_warp_sum_gpu():
    x = np.random.default_rng(2).standard_normal((4, 32, 1)).astype(np.float32)
    gpu = on_gpu(warp_sum_kernel, [x, np.zeros((4, 1), np.float32)], [])[1]
    host = np.zeros((4, 1), np.float32)
    interpret(warp_sum_kernel, x, host)
    np.testing.assert_array_equal(gpu.view(np.uint32), host.view(np.uint32))    # the same butterfly order
    np.testing.assert_allclose(gpu[:, 0], x.astype(np.float64).sum(axis=(1, 2)), rtol=1e-5, atol=1e-5)


def test_full_warp_shfl_up_and_p():
    a = np.arange(N, dtype=np.uint32) * 7 + 1
    args = [a, np.full(N, 3, np.uint32), np.zeros(N, np.uint32), np.full(N, 0xFFFFFFFF, np.uint32),
            np.ones(N, np.uint32), np.zeros(N, np.uint32), np.zeros(N, np.uint32)]
    gpu = on_gpu(shfl_kernel, [x.copy() for x in args], ["shfl.sync.up.b32"])
    lane = np.arange(N) % 32
    np.testing.assert_array_equal(gpu[5], np.where(lane >= 3, a - 21, a))
    np.testing.assert_array_equal(gpu[6], (lane >= 3).astype(np.uint32))


def test_activemask_under_a_branch():
    act = (np.arange(N) % 3 == 0).astype(np.uint32)
    gpu = on_gpu(activemask_kernel, [act, np.zeros(N, np.uint32)], [])[1]
    host = np.zeros(N, np.uint32)
    interpret(activemask_kernel, act.copy(), host)
    np.testing.assert_array_equal(gpu, host)


def test_docs_page_on_the_gpu(tmp_path):
    from test_patterns_docs import run_page
    run_page("warp", tmp_path, with_gpu=True)
