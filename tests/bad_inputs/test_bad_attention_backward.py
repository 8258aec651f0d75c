"""Bad calls of the attention backward (tiledsl/ops/flash/backward.py): a LaunchError naming what is wrong, raised
before any kernel is built or run (numpy arrays stand for the tensors; no GPU needed)."""
import numpy as np
import pytest

import tiledsl
from tiledsl.ops.flash import backward as BWD
from tiledsl.ops.flash import fa2_backward as AB
from badcase import Case, run


def z(*shape, dtype=np.float16):
    return np.zeros(shape, dtype)


X = z(1, 2, 16, 64)
LSE = z(1, 2, 16, dtype=np.float32)


def call(q=X, k=X, v=X, o=X, lse=LSE, do=X, **kw):
    return lambda: BWD.attention_backward(q, k, v, o, lse, do, **kw)


def make(*args):
    return lambda: AB.make_attention_backward(*args)


CASES = [
    Case("head_dim_256_on_fa2", action=call(*(z(1, 2, 16, 256),) * 4, LSE, z(1, 2, 16, 256), path="fa2"),
         err=tiledsl.LaunchError, words=("fa2 backward supports head dims 64, 128", "D = 256", "fa3")),
    Case("head_dim_96", action=call(*(z(1, 2, 16, 96),) * 4, LSE, z(1, 2, 16, 96)), err=tiledsl.LaunchError,
         words=("head dims 64, 128 and 256", "96")),
    Case("o_wrong_shape", action=call(o=z(1, 2, 8, 64)), err=tiledsl.LaunchError, words=("o (1, 2, 8, 64)",
                                                                                         "q's shape")),
    Case("do_wrong_shape", action=call(do=z(1, 1, 16, 64)), err=tiledsl.LaunchError, words=("do (1, 1, 16, 64)",)),
    Case("do_wrong_dtype", action=call(do=X.astype(np.float32)), err=tiledsl.LaunchError,
         words=("o and do must have q's dtype",)),
    Case("lse_float16", action=call(lse=LSE.astype(np.float16)), err=tiledsl.LaunchError,
         words=("lse must be float32", "(1, 2, 16)")),
    Case("lse_wrong_shape", action=call(lse=z(1, 2, 15, dtype=np.float32)), err=tiledsl.LaunchError,
         words=("lse must be float32 (B, H, N)",)),
    Case("zero_scale", action=call(scale=0.0), err=tiledsl.LaunchError, words=("positive finite scale",)),
    Case("negative_scale", action=call(scale=-1.0), err=tiledsl.LaunchError, words=("positive finite scale",)),
    Case("infinite_scale", action=call(scale=float("inf")), err=tiledsl.LaunchError, words=("positive finite",)),
    Case("heads_do_not_divide", action=call(q=z(1, 3, 16, 64), k=X, v=X, o=z(1, 3, 16, 64),
                                            lse=z(1, 3, 16, dtype=np.float32), do=z(1, 3, 16, 64)),
         err=tiledsl.LaunchError, words=("must divide",)),
    Case("float32_inputs", action=call(*(X.astype(np.float32),) * 4, LSE, X.astype(np.float32)),
         err=tiledsl.LaunchError, words=("float16 and bfloat16",)),
    Case("not_4d", action=call(*(z(16, 64),) * 4, LSE, z(16, 64)), err=tiledsl.LaunchError,
         words=("(B, H, N, D)",)),
    Case("kernel_head_dim", action=make("float16", 32, False, (1, 1, 1, 16, 16), 0.1), err=tiledsl.LaunchError,
         words=("head dims 64 and 128", "32")),
    Case("kernel_dtype", action=make("float32", 64, False, (1, 1, 1, 16, 16), 0.1), err=tiledsl.LaunchError,
         words=("float16 and bfloat16", "float32")),
    Case("warps_16", action=call(warps=16), err=tiledsl.LaunchError, words=("4 or 8 warps", "16")),
    Case("kernel_heads", action=make("float16", 64, False, (1, 3, 2, 16, 16), 0.1), err=tiledsl.LaunchError,
         words=("does not divide",)),
]


@pytest.mark.parametrize("case", [c.param() for c in CASES])
def test_bad_attention_backward(case):
    run(case)
