"""wgmma on the GPU (sm_90a, an H200): the matrix of tests/test_wgmma.py (N x f16/bf16 x A in registers or shared x
swizzle x trans) against torch, each also on the interpreter with the same result, and the SASS shows HGMMA with
no local-memory spills; then fp8 (e4m3 N x rs/ss x swizzle, e5m2 and mixed) and f16 accumulators the same way, with
QGMMA for fp8. The same kernels compile and pass ptxas -arch=sm_90a in tests/test_wgmma.py on any machine."""
import numpy as np
import pytest

import tiledsl
from test_wgmma import MATRIX, TYPED, case_id, typed_id, typed_seed
from wgmma_cases import inputs, make_kernel, make_typed_kernel, result_of, typed_inputs

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


# ------------------------------------------------------------------ fp8 (k32) and f16 accumulators



def _torch_values(torch, bits, kind):
    """The operand's values as f32 on the GPU, decoded by torch from the same bits the kernel reads."""
    x = torch.from_numpy(np.ascontiguousarray(bits)).cuda()
    if kind in ("e4m3", "e5m2"):
        return x.view(torch.float8_e4m3fn if kind == "e4m3" else torch.float8_e5m2).float()
    return x.view(torch.int16).view(torch.float16).float()


def _typed_on_gpu(torch, case):
    n, at, bt, acc, a_regs, sw = case
    k, _, _, (so, eo) = make_typed_kernel(n, at, bt, acc, a_regs, sw)
    a, b, ref = typed_inputs(n, at, bt, acc, seed=typed_seed(case))
    da = torch.from_numpy(a).cuda() if a.dtype == np.uint8 else _on_gpu(torch, a)
    db = torch.from_numpy(b).cuda() if b.dtype == np.uint8 else _on_gpu(torch, b)
    if acc == "f32":
        out = torch.zeros(so, dtype=torch.float32, device="cuda")
        k(da, db, out)
        torch.cuda.synchronize()
        got = out.cpu().numpy()
    else:
        raw = torch.zeros(so, dtype=torch.int32, device="cuda")
        k(da, db, raw.view(torch.uint32))
        torch.cuda.synchronize()
        got = raw.cpu().numpy().view(np.uint32)
    return k, a, b, ref, got, (so, eo)


@pytest.mark.parametrize("case", TYPED, ids=[typed_id(c) for c in TYPED])
def test_fp8_and_f16_acc_against_torch_and_the_interpreter(case):
    torch = _hopper()
    n, at, bt, acc, a_regs, sw = case
    k, a, b, ref, got, (so, eo) = _typed_on_gpu(torch, case)
    expect = _torch_values(torch, a, at) @ _torch_values(torch, b, bt).T      # f32, exact for these inputs
    if acc == "f16":
        expect = expect.half()
    expect = expect.double().cpu().numpy()
    np.testing.assert_array_equal(result_of(got, acc), expect)
    np.testing.assert_array_equal(result_of(got, acc), ref)
    host = np.zeros(so, eo)
    tiledsl.jit(k.fn, interpret=True)(a, b, host)
    np.testing.assert_array_equal(host, got)


@pytest.mark.parametrize("case, unit", [((128, "e4m3", "e4m3", "f32", False, 128), "QGMMA"),
                                        ((256, "e5m2", "e4m3", "f32", True, 32), "QGMMA"),
                                        ((256, "f16", "f16", "f16", True, 0), "HGMMA")],
                         ids=["e4m3-ss", "e5m2xe4m3-rs", "f16acc-rs"])
def test_sass_shows_qgmma_for_fp8_and_hgmma_for_f16_acc(case, unit):
    _hopper()
    n, at, bt, acc, a_regs, sw = case
    k, _, _, (so, eo) = make_typed_kernel(n, at, bt, acc, a_regs, sw)
    a, b, _ = typed_inputs(n, at, bt, acc)
    ck = k.compile(a, b, np.zeros(so, eo))
    assert ck.metadata.get("spill_stores", 0) == 0 and ck.metadata.get("spill_loads", 0) == 0
    sass = ck.asm.get("sass")
    if not sass:
        pytest.skip("no cuobjdump/nvdisasm to disassemble with")
    assert unit in sass, sass[:2000]
    assert "STL" not in sass and "LDL" not in sass
