"""An autotuned elementwise kernel, as a kernel author writes it from the docs: Y = gelu(X) (tanh form) on float16,
each thread converting V consecutive values with scalar math (`T.tanh(..., approx=True)`: tanh.approx.f32), tuned by
`tiledsl.autotune` over V and the block size B once per shape of X (the winner kept on disk).

    python examples/tuned_gelu.py       # on the GPU: 2^26 values, the tuned config and its bandwidth
    (no GPU: the first config runs 10000 values on the CPU interpreter, untimed)
"""
import math
import os
import sys
import warnings

import numpy as np

import tiledsl
from tiledsl import T

C = math.sqrt(2 / math.pi)


@tiledsl.autotune(configs=[tiledsl.Config({"V": v, "B": b}) for v in (2, 4, 8) for b in (128, 256, 512)],
                  key=["X"])
@tiledsl.jit
def gelu(X: T.Tensor(("n",), "float16"), Y: T.Tensor(("n",), "float16"), V: T.constexpr, B: T.constexpr):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=(n + B * V - 1) // (B * V), block=B))  # noqa: F821
    first = (T.cuda.block_id() * B + T.cuda.thread_id()) * V
    for j in T.unroll(V):
        i = first + j
        if i < n:  # noqa: F821
            x = T.cast(X[i], "float32")
            Y[i] = T.cast(0.5 * x * (1.0 + T.tanh(C * (x + 0.044715 * x * x * x), approx=True)), "float16")


def reference(x):
    x = x.astype(np.float64)
    return 0.5 * x * (1 + np.tanh(C * (x + 0.044715 * x ** 3)))


def main():
    from tiledsl.runtime.driver import gpu_available
    if not gpu_available():
        x = np.random.default_rng(0).standard_normal(10000).astype(np.float16)
        y = np.zeros_like(x)
        before = os.environ.get("TILEDSL_INTERPRET")
        os.environ["TILEDSL_INTERPRET"] = "1"                # the interpreter runs the first config, untimed
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")              # (it warns that it cannot time the candidates)
                gelu(x, y)
        finally:
            os.environ.pop("TILEDSL_INTERPRET") if before is None else os.environ.update(TILEDSL_INTERPRET=before)
        err = np.abs(y - reference(x)).max()
        assert err < 5e-3, err
        print(f"tuned_gelu: no GPU found; ran 10000 values on the CPU interpreter: max error {err:.1e}")
        return
    import torch
    from tiledsl.testing import do_bench
    x = torch.randn(1 << 26, device="cuda", dtype=torch.float16)
    y = torch.empty_like(x)
    gelu(x, y)
    torch.testing.assert_close(y, torch.nn.functional.gelu(x.float(), approximate="tanh").half(), atol=5e-3, rtol=0)
    ms = do_bench(lambda: gelu(x, y))
    print(f"tuned_gelu: OK on the GPU; best {gelu.best_config}, {4 * x.numel() / ms / 1e6:.0f} GB/s")


if __name__ == "__main__":
    sys.exit(main())
