"""One f32/f64 -> bf16 rounder: constants in the PTX, run-time casts and the interpreter give the same bits,
and a NaN is 0x7FFF everywhere (before: a bf16 NaN constant became 0x7FC0 on the GPU)."""
import re

import numpy as np
import pytest

import tiledsl
from tiledsl import T
from tiledsl.core.dtypes import BF16_NAN, bf16_bits, bf16_bits_array
from tiledsl.interpreter import rounding as R

NAN = float("nan")


def test_cases():
    assert bf16_bits(1.0) == 0x3F80 and bf16_bits(-0.0) == 0x8000 and bf16_bits(0.1) == 0x3DCD
    assert bf16_bits(float("nan")) == bf16_bits(-float("nan")) == BF16_NAN == 0x7FFF
    assert bf16_bits(float("inf")) == 0x7F80 and bf16_bits(-1e300) == 0xFF80
    assert bf16_bits(1 + 2**-8) == 0x3F80                        # a tie: to even
    assert bf16_bits(1 + 2**-8 + 2**-40) == 0x3F81               # just above the tie: up (no double rounding)
    assert bf16_bits(2.0**-133) == 0x0001                        # smallest subnormal


def test_agrees_with_the_interpreter_rounding():
    rng = np.random.default_rng(13)
    x = rng.standard_normal(50000) * np.exp2(rng.integers(-140, 130, 50000))
    x = np.concatenate([x, [np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0]])
    np.testing.assert_array_equal(bf16_bits_array(x), R.f64_to_bf16_bits(x))


def nan_kernel():
    @tiledsl.jit
    def k(F: T.Tensor((1,), "float32"), Out: T.Tensor((2,), "uint16")):
        T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
        h = T.alloc_local((2,), "bfloat16")
        h[0] = T.bfloat16(NAN)                                   # a constant
        h[1] = T.cast(F[0], "bfloat16")                          # a run-time cast
        hb = h.view(dtype="uint16")
        Out[0] = hb[0]
        Out[1] = hb[1]
    return k


def test_nan_constant_in_the_ptx():
    ptx = nan_kernel().compile(np.zeros(1, np.float32), np.zeros(2, np.uint16), target="sm_90").asm["ptx"]
    consts = {int(v) for v in re.findall(r"st\.global\.[bu]16\s+\[[^\]]+\],\s*(\d+);", ptx)}
    stored = consts | {int(v) for v in re.findall(r"mov\.[bu]16\s+%rs\d+,\s*(\d+);", ptx)}
    assert 0x7FFF in stored and 0x7FC0 not in stored


def test_nan_on_the_interpreter():
    out = np.zeros(2, np.uint16)
    tiledsl.jit(nan_kernel().fn, interpret=True)(np.array([np.nan], np.float32), out)
    assert [hex(v) for v in out] == ["0x7fff", "0x7fff"]


@pytest.mark.gpu
def test_nan_on_the_gpu():
    torch = pytest.importorskip("torch")
    f = torch.tensor([float("nan")], dtype=torch.float32).cuda()
    out = torch.zeros(2, dtype=torch.uint16).cuda()
    nan_kernel()(f, out)
    torch.cuda.synchronize()
    assert [hex(int(v)) for v in out.cpu().to(torch.int32)] == ["0x7fff", "0x7fff"]
