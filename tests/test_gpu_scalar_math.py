"""Scalar math on the GPU against the interpreter (needs a GPU; tests/test_scalar_math.py checks the same kernels on
the interpreter against numpy and compiles them through ptxas without one).

Each case of tests/scalar_math_kernels.py runs on the GPU (torch CUDA tensors) and on the interpreter with the same
inputs (the special values +-0, +-inf, NaN and subnormals first, then random values over the function's domain):
- exact and correctly rounded forms (sqrt.rn/rz/rm/rp, abs, fma in every rounding mode, min, max, the
  multiplications of x ** k) agree bit for bit (a NaN result: any NaN, as the ISA leaves its payload open);
- the .approx forms (rsqrt, ex2, lg2, sin, cos, tanh, sqrt.approx, and T.exp / T.log built on ex2 / lg2) cannot: the
  interpreter gives the correctly rounded value (isa/register/fastmath.py), the GPU its approximation. Their GPU
  result must lie within the PTX ISA's stated bound of the exact function (scalar_math_kernels.approx_bound; for
  T.exp CUDA's documented 2 + floor(|1.173 x|) ulp), and special values must match the interpreter exactly.
Unsigned cases run on the interpreter only (torch's uint32 tensors lack the operations the launcher's checks use).
"""
import numpy as np
import pytest

import scalar_math_kernels as K

pytestmark = pytest.mark.gpu
GPU_CASES = [c for c in K.CASES if c.dtype != "uint32"]


def _torch_dtype(torch, dtype):
    return {"float32": torch.float32, "float64": torch.float64, "float16": torch.float16, "bfloat16": torch.bfloat16,
            "int16": torch.int16, "int32": torch.int32, "int64": torch.int64}[dtype]


def _to_gpu(torch, dtype, bits):
    signed = {np.uint16: np.int16, np.uint32: np.int32, np.uint64: np.int64}[K.BITS_NP[dtype]]
    t = torch.from_numpy(np.ascontiguousarray(bits).view(signed))      # the bits, carried by a signed integer type
    return t.view(_torch_dtype(torch, dtype)).cuda()


def _bits(torch, t, dtype):
    signed = {np.uint16: torch.int16, np.uint32: torch.int32, np.uint64: torch.int64}[K.BITS_NP[dtype]]
    return t.view(signed).cpu().numpy().view(K.BITS_NP[dtype])


@pytest.mark.parametrize("case", GPU_CASES, ids=[c.id for c in GPU_CASES])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_gpu_agrees_with_the_interpreter(case, seed):
    torch = pytest.importorskip("torch")
    a, b, c = K.inputs(case, seed)
    ref = K.run_interpreter(case, a, b, c)
    args = [_to_gpu(torch, case.dtype, x) for x in (a, b, c)]
    out = torch.zeros_like(args[0])
    K.kernel(case.dtype)(*args, out, **case.constexprs())
    torch.cuda.synchronize()
    got = _bits(torch, out, case.dtype)
    # exact forms: bit for bit against the interpreter; .approx forms: within the ISA's bound of the exact value
    assert K.problems(case, a, b, c, got, ref_out=ref) == []
