"""Bad calls of matmul / matmul_fp8 (tiledsl/ops/gemm/matmul.py, fp8.py): a LaunchError naming the argument, checked
without a GPU on host torch tensors (every refusal comes before any launch)."""
import pytest

from tiledsl.ops.gemm import fp8 as FP8
from tiledsl.ops.gemm import hopper_plan as HP
from tiledsl.ops.gemm import matmul as MM
from tiledsl.ops.gemm import mma as MMA
from tiledsl.ops.gemm import plan as GP
import tiledsl
from badcase import Case, run

torch = pytest.importorskip("torch")


def z(*shape, dtype=torch.float16):
    return torch.zeros(*shape, dtype=dtype)


CASES = [
    Case("matmul-k-mismatch", action=lambda: MM.matmul(z(128, 64), z(128, 32)), err=tiledsl.LaunchError,
         words=("(128, 64)", "(128, 32)", "(M, K)")),
    Case("matmul-dtype-mismatch", action=lambda: MM.matmul(z(128, 64), z(128, 64, dtype=torch.bfloat16)),
         err=tiledsl.LaunchError, words=("torch.float16", "torch.bfloat16", "one dtype")),
    Case("matmul-config-does-not-tile", action=lambda: MM.matmul(z(100, 64), z(128, 64), config=MMA.PREFERRED[3]),
         err=tiledsl.LaunchError, words=("multiples of 128", "M=100")),
    Case("matmul-hopper-config-off-sm90", action=lambda: MM.matmul(z(256, 64), z(256, 64), config=HP.HOPPER_CONFIGS[0]),
         err=tiledsl.LaunchError, words=("Hopper configuration", "mma.sync path")),
    Case("matmul-hopper-config-dynamic", action=lambda: MM.matmul(z(256, 64), z(256, 64), config=dict(bn=128),
                                                                  static=False),
         err=tiledsl.LaunchError, words=("Hopper configuration", "static=True")),
    Case("matmul-hopper-config-keyword", action=lambda: HP.hopper_kwargs((("bn", 128), ("num_sms", 8)), 256, 2),
         err=tiledsl.LaunchError, words=("num_sms", "group_m")),
    Case("matmul-activation-name", action=lambda: GP.activate(z(4, 4), "tanh"), err=tiledsl.LaunchError,
         words=("'tanh'", "relu")),
    # (FP8 on CPU tensors runs the kernel on the interpreter: the torch op's CPU route; half inputs are refused)
    Case("matmul-fp8-half-inputs", action=lambda: FP8.matmul_fp8(z(128, 128), z(128, 128), torch.ones(1),
                                                                  torch.ones(1)),
         err=tiledsl.LaunchError, words=("float8_e4m3fn", "(N, K)")),
]


@pytest.mark.parametrize("case", [c.param() for c in CASES])
def test_bad_gemm_calls(case):
    run(case)
