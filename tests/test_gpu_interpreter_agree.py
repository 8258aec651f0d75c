"""GPU == interpreter on random kernels from the interpreter's hypothesis strategies.

Bit for bit where PTX is exact (fma.f32 in every rounding mode, f16x2/bf16x2 fma); mma within 1e-6 relative
(the order of the tensor core's internal accumulation is not specified by PTX).
"""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tiledsl
import test_interpreter_helpers as H
from test_interpreter import fma_kernel
from test_interpreter_props import _data, f32s, mma_case

pytestmark = [pytest.mark.gpu, pytest.mark.filterwarnings("ignore::RuntimeWarning")]
torch = pytest.importorskip("torch")
AGREE = settings(max_examples=25, deadline=None, derandomize=True,
                 suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
COUNT = {"mma": 0, "fma": 0}


def _on_gpu(jf, arrays, consts, out_index):
    gpu = tiledsl.jit(jf.fn)
    dev = [torch.from_numpy(np.ascontiguousarray(a)).cuda() for a in arrays]
    gpu(*dev, *consts)
    torch.cuda.synchronize()
    return dev[out_index].cpu().numpy()


@AGREE
@given(mma_case())
def test_mma_gpu_equals_interpreter(case):
    mr, nr, kr, k, ab, orders, tensor_c, exact, seed = case
    rng = np.random.default_rng(seed)
    a = _data(ab, rng, (16 * mr, k * kr), exact)
    b = _data(ab, rng, (8 * nr, k * kr), exact)
    c = rng.standard_normal((16 * mr, 8 * nr)).astype(np.float32) if tensor_c else None
    seen = {}
    interp = H.mma_kernel

    def both(Ar, Br, Cr, Dr, *consts):
        seen["gpu"] = _on_gpu(interp, [Ar, Br, Cr, Dr.copy()], consts, 3)
        interp(Ar, Br, Cr, Dr, *consts)
        seen["interp"] = Dr.copy()

    H.mma_kernel = both
    try:
        H.run_mma(mr, nr, kr, k, ab, a, b, c, 0.25, orders)
    finally:
        H.mma_kernel = interp
    g, i = seen["gpu"], seen["interp"]
    assert not np.isnan(g).any()
    np.testing.assert_allclose(g, i, rtol=1e-6, atol=1e-6 * (1 + np.abs(i).max()))
    COUNT["mma"] += 1


@AGREE
@given(st.lists(st.tuples(f32s, f32s, f32s), min_size=1, max_size=64),
       st.sampled_from(["rn", "rz", "rm", "rp"]), st.booleans())
def test_fma_gpu_equals_interpreter_bit_for_bit(triples, mode, ftz):
    a, b, c = (np.array(v, np.float32) for v in zip(*triples))
    opc = f"fma.{mode}{'.ftz' if ftz else ''}.f32"
    out = np.zeros_like(a)
    fma_kernel(a, b, c, out, opc)
    g = _on_gpu(fma_kernel, [a, b, c, np.zeros_like(a)], [opc], 3)
    np.testing.assert_array_equal(g.view(np.uint32), out.view(np.uint32))
    COUNT["fma"] += 1


def test_at_least_twenty_random_kernels_agreed():
    print(f"random kernels agreeing GPU == interpreter: mma {COUNT['mma']}, fma {COUNT['fma']}")
    assert COUNT["mma"] >= 20 and COUNT["fma"] >= 20
