"""Wrong fused-epilogue and FP8 requests to the Hopper GEMM (tiledsl/ops/gemm/hopper.py): an unknown activation, a
bias of the wrong dtype, length or device, fp8 calls with half-precision operands, scales that are not one float32
element on the device, K not a multiple of 16 for fp8, and a bias of the wrong length handed to the kernel itself.
Each is a LaunchError naming the argument (the kernel's own size binding for the last)."""
import numpy as np
import pytest

import tiledsl
from badcase import Case, run


def _H():
    from tiledsl.ops.gemm import hopper
    return hopper


def _t():
    return pytest.importorskip("torch")


def _half(m, n, k, dt="float16"):
    torch = _t()
    return torch.zeros(m, k, dtype=getattr(torch, dt)), torch.zeros(n, k, dtype=getattr(torch, dt))


def _fp8(m, n, k):
    torch = _t()
    return torch.zeros(m, k, dtype=torch.float8_e4m3fn), torch.zeros(n, k, dtype=torch.float8_e4m3fn)


def _one():
    return _t().ones(1, dtype=_t().float32)


def _bias_too_long_to_the_kernel():
    k = _H().make_hopper_gemm("float16", "float32", bias="float32")
    a = np.zeros((128, 64), np.float16)
    return k.compile(a, a, np.zeros((128, 128), np.float32), np.zeros(130, np.float32))


CASES = [
    Case("epilogue-unknown-activation", action=lambda: _H().make_hopper_gemm("float16", activation="tanh"),
         err=tiledsl.LaunchError, words=("activation='tanh'", "'gelu'")),
    Case("epilogue-bias-dtype-not-out-or-f32",
         action=lambda: _H().make_hopper_gemm("float16", "float16", bias="bfloat16"),
         err=tiledsl.LaunchError, words=("bias of bfloat16", "float16 output")),
    Case("fp8-make-half-inputs", action=lambda: _H().make_hopper_gemm_fp8("float16"),
         err=tiledsl.LaunchError, words=("e4m3/e5m2 inputs", "float16")),
    Case("fp8-make-int-output", action=lambda: _H().make_hopper_gemm_fp8("e4m3", "e4m3", "int8"),
         err=tiledsl.LaunchError, words=("-> int8",)),
    Case("epilogue-bias-length-at-the-kernel", action=_bias_too_long_to_the_kernel, err=tiledsl.LaunchError,
         words=("size 'N' is 128", "argument 'bias'")),
]

TORCH_CASES = [
    Case("matmul-bias-wrong-length",
         action=lambda: _H().hopper_matmul(*_half(128, 128, 64), bias=_t().zeros(129, dtype=_t().float16)),
         err=tiledsl.LaunchError, words=("bias is (129,)", "(128,)")),
    Case("matmul-bias-wrong-dtype",
         action=lambda: _H().hopper_matmul(*_half(128, 128, 64), bias=_t().zeros(128, dtype=_t().int32)),
         err=tiledsl.LaunchError, words=("bias is torch.int32", "torch.float32")),
    Case("matmul-unknown-activation",
         action=lambda: _H().hopper_matmul(*_half(128, 128, 64), activation="swish"),
         err=tiledsl.LaunchError, words=("activation='swish'",)),
    Case("fp8-matmul-half-operands", action=lambda: _H().hopper_matmul_fp8(*_half(128, 128, 64), _one(), _one()),
         err=tiledsl.LaunchError, words=("torch.float8_e4m3fn or torch.float8_e5m2",)),
    Case("fp8-matmul-scale-two-elements",
         action=lambda: _H().hopper_matmul_fp8(*_fp8(128, 128, 64), _t().ones(2), _one()),
         err=tiledsl.LaunchError, words=("scale_a", "one element")),
    Case("fp8-matmul-scale-a-python-float", action=lambda: _H().hopper_matmul_fp8(*_fp8(128, 128, 64), 1.0, _one()),
         err=tiledsl.LaunchError, words=("scale_a", "float32 tensor")),
    Case("fp8-matmul-scale-b-float64",
         action=lambda: _H().hopper_matmul_fp8(*_fp8(128, 128, 64), _one(), _t().ones(1, dtype=_t().float64)),
         err=tiledsl.LaunchError, words=("scale_b", "float32")),
    Case("fp8-matmul-k-not-16", action=lambda: _H().hopper_matmul_fp8(*_fp8(128, 128, 72), _one(), _one()),
         err=tiledsl.LaunchError, words=("K a multiple of 16", "K=72")),
]


@pytest.mark.parametrize("case", [c.param() for c in CASES])
def test_bad_hopper_epilogue(case):
    run(case)


@pytest.mark.parametrize("case", [c.param() for c in TORCH_CASES])
def test_bad_hopper_epilogue_host(case):
    pytest.importorskip("torch")
    run(case)
