"""Several GPUs: a kernel runs on the device that holds its tensors, modules are cached per device.

Marker `multigpu`: these run only where two or more GPUs are present (skipped elsewhere).
"""
import threading

import numpy as np
import pytest

import seed_fma
import seed_mma

pytestmark = [pytest.mark.gpu, pytest.mark.multigpu]
torch = pytest.importorskip("torch")
if torch.cuda.device_count() < 2:
    pytest.skip("needs two or more GPUs", allow_module_level=True)

import tiledsl  # noqa: E402


def _mma_on(device):
    a, b, ap, bp = seed_mma.inputs()
    dev = f"cuda:{device}"
    out = torch.zeros((16, 8), device=dev)
    seed_mma.warp_mma(torch.from_numpy(ap).to(dev), torch.from_numpy(bp).to(dev), out)
    ref = a.astype("float32") @ b.astype("float32").T
    np.testing.assert_allclose(out.cpu().numpy(), ref, rtol=2e-4, atol=2e-4)


@pytest.mark.parametrize("device", [0, 1])
def test_seed_mma_runs_on_the_tensors_device(device):
    torch.cuda.set_device(1 - device)             # the current device is the other one
    _mma_on(device)
    assert any(dev == device for (_, dev) in seed_mma.warp_mma._plans)


@pytest.mark.parametrize("device", [0, 1])
def test_seed_fma_on_each_device(device):
    a = torch.arange(-2, 2, dtype=torch.float32, device=f"cuda:{device}").reshape(4, 1)
    out = torch.zeros_like(a)
    seed_fma.affine_fma(a, out)
    assert out.eq(2 * a + 1).all()


def test_mixed_devices_are_refused():
    a = torch.zeros((4, 1), device="cuda:0")
    out = torch.zeros((4, 1), device="cuda:1")
    with pytest.raises(tiledsl.LaunchError, match="one device"):
        seed_fma.affine_fma(a, out)


def test_two_threads_two_devices():
    errors = []

    def work(device):
        try:
            for _ in range(20):
                _mma_on(device)
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    ts = [threading.Thread(target=work, args=(d,)) for d in (0, 1)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors, errors[0]


@pytest.mark.parametrize("device", [0, 1])
def test_gemm_on_each_device(device):
    from tiledsl.ops.gemm import matmul as MM
    torch.cuda.set_device(1 - device)
    dev = f"cuda:{device}"
    a = torch.randn(512, 256, device=dev, dtype=torch.float16)
    b = torch.randn(384, 256, device=dev, dtype=torch.float16)[:256].contiguous()
    c = MM.matmul(a, b)
    assert c.device.index == device
    ref = a.float() @ b.float().T
    assert ((c.float() - ref).norm() / ref.norm()).item() < 1e-2
