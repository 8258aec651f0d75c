"""Residual add + RMS norm in one pass, as a kernel author writes it from the docs: one block per row, each thread
holding PER elements of the row in registers, one block reduction (tiledsl.lib.reductions) and scalar math
(`T.rsqrt(..., approx=True)`: rsqrt.approx.f32). S = X + Res is written out (the next residual), Y = S * rsqrt(mean(S^2) + eps) * W.
(tiledsl.ops.add_rms_norm is the tuned version: any row length, 16-byte vectors, a backward.)

    python examples/add_rms_norm.py      # on the GPU: 4096 rows of 4096 f16 against torch
    (no GPU: runs 8 rows of 1024 on the CPU interpreter)
"""
import sys

import numpy as np

import tiledsl
from tiledsl import T
from tiledsl.lib.reductions import block_allreduce

THREADS = 256


def make(n):
    """The kernel for rows of n float16 values (n a multiple of THREADS)."""
    if n % THREADS:
        raise tiledsl.LaunchError(f"this example takes rows of a multiple of {THREADS} values, got {n}")
    PER = n // THREADS

    @tiledsl.jit
    def add_rms_norm(X: T.Tensor(("R", n), "float16"), Res: T.Tensor(("R", n), "float16"),
                     W: T.Tensor((n,), "float16"), Y: T.Tensor(("R", n), "float16"),
                     S: T.Tensor(("R", n), "float16"), eps: T.float32):
        T.device_entry(launch=T.cuda.LaunchConfig(grid=R, block=THREADS))  # noqa: F821
        row, tid = T.cuda.block_id(), T.cuda.thread_id()
        red = T.alloc_shared((THREADS // 32,), "float32")
        s = T.alloc_local((PER,), "float32")
        sq = T.float32(0.0)
        for j in T.unroll(PER):             # column j * THREADS + tid: a warp reads 64 contiguous bytes
            c = j * THREADS + tid
            h = X[row, c] + Res[row, c]     # rounded to f16, as torch's x + residual
            S[row, c] = h
            s[j] = T.cast(h, "float32")
            sq = T.fma(s[j], s[j], sq)
        rstd = T.rsqrt(block_allreduce(sq, red, "add", THREADS) / n + eps, approx=True)     # rsqrt.approx.f32
        for j in T.unroll(PER):
            c = j * THREADS + tid
            Y[row, c] = T.cast(s[j] * rstd * T.cast(W[c], "float32"), "float16")

    return add_rms_norm


def reference(x, res, w, eps):
    s = (x + res).astype(np.float16).astype(np.float64)
    return s * (1 / np.sqrt((s * s).mean(-1, keepdims=True) + eps)) * w.astype(np.float64), s


def main():
    from tiledsl.runtime.driver import gpu_available
    if not gpu_available():
        rng = np.random.default_rng(0)
        x, res = (rng.standard_normal((8, 1024)).astype(np.float16) for _ in range(2))
        w = rng.standard_normal(1024).astype(np.float16)
        y, s = np.zeros_like(x), np.zeros_like(x)
        tiledsl.jit(make(1024).fn, interpret=True)(x, res, w, y, s, 1e-5)
        want_y, want_s = reference(x, res, w, 1e-5)
        err = np.abs(y - want_y).max()
        assert err < 2e-2 and (s == want_s).all(), err
        print(f"add_rms_norm: no GPU found; ran 8 rows of 1024 on the CPU interpreter: max error {err:.1e}")
        return
    import torch
    x, res = (torch.randn(4096, 4096, device="cuda", dtype=torch.float16) for _ in range(2))
    w = torch.randn(4096, device="cuda", dtype=torch.float16)
    y, s = torch.empty_like(x), torch.empty_like(x)
    make(4096)(x, res, w, y, s, 1e-5)
    ref = torch.nn.functional.rms_norm((x + res).float(), (4096,), w.float(), 1e-5)
    torch.testing.assert_close(y.float(), ref, rtol=2e-2, atol=2e-2)
    assert torch.equal(s, x + res)
    print("add_rms_norm: OK on the GPU (4096 x 4096)")


if __name__ == "__main__":
    sys.exit(main())
