"""Which image the driver loads for a compiled kernel on a device (runtime/launchers/reference.module_image)."""
import pytest

import tiledsl
from tiledsl.runtime import driver
from tiledsl.runtime.launchers.reference import module_image


class _Kernel:
    def __init__(self, sm, cubin=b"CUBIN"):
        self.name, self.sm, self.cubin, self.asm = "k", sm, cubin, {"ptx": ".version 8.0"}


@pytest.mark.parametrize("kernel_sm,device_sm,want", [
    (90, 90, b"CUBIN"),                 # the device's own SM: machine code
    (80, 86, b"CUBIN"),                 # same major, older minor: binary compatible
    (80, 90, b".version 8.0\0"),        # older major: the driver compiles the PTX for the device
    (75, 90, b".version 8.0\0"),
])
def test_cubin_where_it_runs_else_ptx(monkeypatch, kernel_sm, device_sm, want):
    monkeypatch.setattr(driver, "compute_capability", lambda device: device_sm)
    assert module_image(_Kernel(kernel_sm), 0) == want


def test_no_cubin_loads_ptx(monkeypatch):
    monkeypatch.setattr(driver, "compute_capability", lambda device: 90)
    assert module_image(_Kernel(90, cubin=None), 0) == b".version 8.0\0"


def test_newer_target_than_the_device_is_a_launch_error(monkeypatch):
    monkeypatch.setattr(driver, "compute_capability", lambda device: 80)
    with pytest.raises(tiledsl.LaunchError, match="compiled for sm_90, but device 0 is sm_80"):
        module_image(_Kernel(90), 0)
