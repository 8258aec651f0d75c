"""The index of the first element below a threshold, as a kernel author writes it from the docs: every thread walks
a grid-strided share of X with a `while` loop that stops at its first hit (`and` short-circuits, as in Python: X[i]
is read only where i < N, docs/control-flow.md), and the hits meet in one `red.global.min.s32` (integer atomics
commute: the result does not depend on their order). Out[0] = N where no element is below.

    python examples/first_below.py       # on the GPU: 2^26 values against torch
    (no GPU: runs 5000 values on the CPU interpreter)
"""
import sys

import numpy as np

import tiledsl
from tiledsl import T

THREADS = 256
MAX_BLOCKS = 132 * 8


@tiledsl.jit
def first_below(X: T.Tensor(("N",), "float32"), threshold: T.float32, Out: T.Tensor((1,), "int32")):
    T.device_entry(launch=T.cuda.LaunchConfig(
        grid=T.max(1, T.min((N + THREADS - 1) // THREADS, MAX_BLOCKS)), block=THREADS))  # noqa: F821
    stride = T.cuda.grid_dim() * THREADS
    i = T.cuda.block_id() * THREADS + T.cuda.thread_id()
    while i < N and X[i] >= threshold:  # noqa: F821
        i += stride
    if i < N:  # noqa: F821
        T.cuda.tile.apply(T.ptx["red.global.min.s32"], Out[0:1], i)


def find_first_below(x, threshold):
    """First index of 1-D float32 x below threshold (len(x) where none): torch CUDA tensors on the GPU, numpy arrays
    on the interpreter."""
    if isinstance(x, np.ndarray):
        out = np.full(1, len(x), np.int32)
        tiledsl.jit(first_below.fn, interpret=True)(x, threshold, out)
        return int(out[0])
    import torch
    out = torch.full((1,), x.numel(), dtype=torch.int32, device=x.device)
    first_below(x, threshold, out)
    return int(out.item())


def main():
    from tiledsl.runtime.driver import gpu_available
    if not gpu_available():
        x = np.random.default_rng(0).uniform(0, 1, 5000).astype(np.float32)
        x[[3111, 4000]] = -1.0
        assert find_first_below(x, 0.0) == 3111 and find_first_below(np.abs(x), 0.0) == 5000
        print("first_below: no GPU found; ran 5000 values on the CPU interpreter: exact")
        return
    import torch
    x = torch.rand(1 << 26, device="cuda")
    x[[40_000_000, 50_000_000]] = -1.0
    got = find_first_below(x, 0.0)
    want = int(torch.nonzero(x < 0)[0])
    assert got == want, (got, want)
    print(f"first_below: OK on the GPU (2^26 values, first at {got})")


if __name__ == "__main__":
    sys.exit(main())
