"""tests/edge_kernels.py on the GPU: the same arrays as the interpreter (shift clamps, true division's types, range
bounds read once and a step that would wrap: the loop ends)."""
import numpy as np
import pytest

import tiledsl
from edge_kernels import CASES

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("name,fn,make,ref", CASES, ids=[c[0] for c in CASES])
def test_gpu_equals_interpreter(name, fn, make, ref):
    torch = pytest.importorskip("torch")
    host = make()
    tiledsl.jit(fn, interpret=True)(*host)
    dev = [torch.from_numpy(np.ascontiguousarray(a)).cuda() for a in make()]
    tiledsl.jit(fn)(*dev)
    torch.cuda.synchronize()
    for d, h in zip(dev, host):
        np.testing.assert_array_equal(d.cpu().numpy(), h)
