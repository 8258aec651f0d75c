"""wgmma on the GPU (sm_90a, an H200): the matrix of tests/test_wgmma.py (N x f16/bf16 x A in registers or shared x
swizzle x trans) against torch, each also on the interpreter with the same result, and the SASS shows HGMMA with
no local-memory spills. The same kernels compile and pass ptxas -arch=sm_90a in tests/test_wgmma.py on any machine."""
import numpy as np
import pytest

import tiledsl
from test_wgmma import MATRIX, case_id
from wgmma_cases import inputs, make_kernel

pytestmark = pytest.mark.gpu


def _hopper():
    torch = pytest.importorskip("torch")
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("wgmma needs sm_90 (sm_90a): an H100/H200")
    return torch


def _on_gpu(torch, x):
    return torch.from_numpy(np.ascontiguousarray(x).view(np.int16)).cuda().view(torch.uint16)


@pytest.mark.parametrize("case", MATRIX, ids=[case_id(c) for c in MATRIX])
def test_matrix_against_torch_and_the_interpreter(case):
    torch = _hopper()
    n, ab, a_regs, sw, ta, tb = case
    k, _, _, so = make_kernel(n, ab, a_regs, sw, ta, tb)
    a, b, ref = inputs(n, ab, 2, seed=n + sw)
    out = torch.zeros(so, dtype=torch.float32, device="cuda")
    k(_on_gpu(torch, a), _on_gpu(torch, b), out)            # no target: the device's sm_90 becomes sm_90a
    torch.cuda.synchronize()
    tdt = torch.float16 if ab == "f16" else torch.bfloat16
    ta_ = _on_gpu(torch, a).view(tdt).float()
    tb_ = _on_gpu(torch, b).view(tdt).float()
    expect = (ta_ @ tb_.T).cpu().numpy()
    got = out.cpu().numpy()
    np.testing.assert_array_equal(got, expect)
    np.testing.assert_array_equal(got, ref.astype(np.float32))
    host = np.zeros(so, np.float32)
    tiledsl.jit(k.fn, interpret=True)(a, b, host)
    np.testing.assert_array_equal(host, got)


def test_sass_shows_hgmma_and_no_spills():
    _hopper()
    k, _, _, so = make_kernel(128, "bf16", False, 128)
    a, b, _ = inputs(128, "bf16", 2)
    ck = k.compile(a, b, np.zeros(so, np.float32))
    assert ck.metadata.get("spill_stores", 0) == 0 and ck.metadata.get("spill_loads", 0) == 0
    sass = ck.asm["sass"]
    if not sass:
        pytest.skip("no cuobjdump/nvdisasm to disassemble with")
    assert "HGMMA" in sass, sass[:2000]
    assert "STL" not in sass and "LDL" not in sass
