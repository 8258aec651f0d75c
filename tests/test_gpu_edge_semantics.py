"""tests/edge_kernels.py on the GPU: the same arrays as the interpreter (shift clamps, true division's types, range
bounds read once and a step that would wrap: the loop ends)."""
import numpy as np
import pytest

from edge_kernels import CASES
from helpers import gpu_and_interpreter

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("name,fn,make,ref", CASES, ids=[c[0] for c in CASES])
def test_gpu_equals_interpreter(name, fn, make, ref):
    pytest.importorskip("torch")
    dev, host = gpu_and_interpreter(fn, make)
    for d, h in zip(dev, host):
        np.testing.assert_array_equal(d, h)
