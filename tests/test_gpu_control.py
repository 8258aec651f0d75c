"""while/break/continue/early return and T.device_print on the GPU (issue 15): every kernel of
tests/control_kernels.py gives the same arrays as the interpreter (and the numpy reference), and vprintf's text,
read from the process's stdout after the device syncs, holds the lines the interpreter prints (in any order).
The same kernels pass ptxas in tests/test_control_flow.py and tests/test_device_print.py, which need no GPU."""
import numpy as np
import pytest

import tiledsl
from control_kernels import CASES, printer, printer_args, printer_lines
from helpers import gpu_and_interpreter

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("name,fn,make,ref", CASES, ids=[c[0] for c in CASES])
def test_gpu_equals_interpreter(name, fn, make, ref):
    pytest.importorskip("torch")
    dev, host = gpu_and_interpreter(fn, make)
    np.testing.assert_array_equal(dev[-1], host[-1])
    np.testing.assert_array_equal(host[-1], ref(*make())[0])


def test_gpu_device_print(capfd):
    torch = pytest.importorskip("torch")
    capfd.readouterr()
    dev = [torch.from_numpy(a).cuda() for a in printer_args()]
    tiledsl.jit(printer)(*dev)
    torch.cuda.synchronize()                 # vprintf's buffer is flushed to stdout when the device syncs
    out = capfd.readouterr().out
    assert sorted(out.splitlines(keepends=True)) == sorted(printer_lines()), out
