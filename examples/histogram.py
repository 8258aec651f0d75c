"""Histogram of int32 values into `bins` bins with atomics: every block counts a grid-strided share of the input
into its own shared-memory histogram (`red.shared.add.u32` at a run-time bin), then adds its non-zero bins into the
global histogram (`red.global.add.u32`, one per bin). Integer atomics commute, so the result is exact and
independent of the order in which the GPU applies them; it equals `torch.bincount(x, minlength=bins)` for values
in [0, bins). Values outside [0, bins) are not counted.

    python examples/histogram.py       # on the GPU: 2^26 values into 256 bins against torch.bincount
    (no GPU: runs a small case on the CPU interpreter)
"""
import argparse
import sys

import numpy as np

import tiledsl
from tiledsl import T

THREADS = 512
U = 2                    # 16-byte loads (4 values each) per thread per step
CHUNK = THREADS * U * 4  # values one block reads per step
MAX_BLOCKS = 132 * 4     # enough resident blocks to keep the loads in flight on an H200

_KERNELS = {}


def make_histogram(bins):
    """The kernel for `bins` bins (1..THREADS) over any number of int32 values."""
    if not 1 <= bins <= THREADS:
        raise tiledsl.LaunchError(f"histogram supports 1..{THREADS} bins, got {bins}")
    if bins in _KERNELS:
        return _KERNELS[bins]

    @tiledsl.jit
    def histogram_kernel(X: T.Tensor(("N",), "int32"), H: T.Tensor((bins,), "uint32")):
        T.device_entry(launch=T.cuda.LaunchConfig(grid=T.max(1, T.min(N // CHUNK, MAX_BLOCKS)),  # noqa: F821
                                                  block=THREADS))
        G = T.cuda.grid_dim()
        tid = T.cuda.thread_id()
        bid = T.cuda.block_id()
        sh = T.alloc_shared((bins,), "uint32")
        if tid < bins:
            sh[tid] = T.uint32(0)
        T.cuda.syncthreads()
        r = T.alloc_local((U, 4), "int32")
        chunks = N // CHUNK  # noqa: F821
        for k in range((chunks - bid + G - 1) // G):
            base = ((bid + k * G) * (THREADS * U) + tid) * 4
            for i in T.unroll(U):
                T.cuda.tile.apply(T.ptx["ld.global.v4.b32"], r[i], X[base + i * THREADS * 4: base + i * THREADS * 4 + 4])
            for i in T.unroll(U):
                for j in T.unroll(4):
                    b = r[i, j]
                    T.cuda.tile.apply(T.ptx["red.shared.add.u32"], sh[b: b + 1], 1, pred=(b >= 0) & (b < bins))
        first = chunks * CHUNK + bid * THREADS + tid
        for k in range((N - first + G * THREADS - 1) // (G * THREADS)):  # noqa: F821  (the tail, one value each)
            b = X[first + k * (G * THREADS)]
            T.cuda.tile.apply(T.ptx["red.shared.add.u32"], sh[b: b + 1], 1, pred=(b >= 0) & (b < bins))
        T.cuda.syncthreads()
        if tid < bins:
            T.cuda.tile.apply(T.ptx["red.global.add.u32"], H[tid: tid + 1], sh[tid], pred=sh[tid] != 0)

    _KERNELS[bins] = histogram_kernel
    return histogram_kernel


def histogram(x, bins, out=None):
    """Counts of the values of a 1-D int32 array in [0, bins) as a `bins`-element 32-bit array (torch/cupy on the
    GPU, numpy on the interpreter). `out` (int32 or uint32) is zeroed first."""
    k = make_histogram(bins)
    lib = sys.modules[type(x).__module__.split(".")[0]]
    if out is None:
        out = x.new_zeros(bins) if hasattr(x, "new_zeros") else lib.zeros(bins, dtype=lib.int32)
    else:
        out[:] = 0
    if isinstance(x, np.ndarray):
        k = tiledsl.jit(k.fn, interpret=True)
    view = out.view(lib.uint32) if lib.__name__ != "torch" or hasattr(lib, "uint32") else out
    k(x, view)
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--log2n", type=int, default=26)
    p.add_argument("--bins", type=int, default=256)
    opts = p.parse_args(argv)
    from tiledsl.runtime.driver import gpu_available
    if not gpu_available():
        x = np.random.default_rng(0).integers(-3, 64, 3 * CHUNK + 77).astype(np.int32)
        h = histogram(x, 64)
        want = np.bincount(x[(x >= 0) & (x < 64)], minlength=64)
        assert (h == want).all(), (h, want)
        print(f"histogram: no GPU found; counted {x.size} values into 64 bins on the CPU interpreter: exact")
        return
    import torch
    x = torch.randint(0, opts.bins, (1 << opts.log2n,), device="cuda", dtype=torch.int32)
    h = histogram(x, opts.bins)
    assert torch.equal(h.long(), torch.bincount(x, minlength=opts.bins))
    print(f"histogram: OK on the GPU: 2^{opts.log2n} values into {opts.bins} bins equal torch.bincount")


if __name__ == "__main__":
    sys.exit(main())
