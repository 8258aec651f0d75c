"""Sum and max of a large float32 array in two passes: every block reduces a grid-strided share of the array
with 16-byte loads into one partial, then one block reduces the partials. Deterministic: the same input gives
the same bits on every run (no atomics; the order of the additions is fixed by the launch configuration).

    python examples/reduce.py             # on the GPU: sum and max of 2^24 values against torch
    (no GPU: runs a small case on the CPU interpreter)
"""
import argparse
import sys

import numpy as np

import tiledsl
from tiledsl import T
from tiledsl.lib.reductions import block_allreduce, combine

THREADS = 512            # threads per block of the first pass
U = 4                    # 16-byte loads in flight per thread per step
CHUNK = THREADS * U * 4  # elements one block reads per step
FINAL = 1024             # threads of the second pass (and the most partials it takes)


def make_partials(op):
    """Pass 1: P[b] = op over block b's share of X (full chunks grid-strided, then the tail element-wise)."""

    identity = 0.0 if op == "add" else -float("inf")

    @tiledsl.jit
    def partials(X: T.Tensor(("N",), "float32"), P: T.Tensor(("G",), "float32")):
        T.device_entry(launch=T.cuda.LaunchConfig(grid=G, block=THREADS))  # noqa: F821
        r = T.alloc_local((U, 4), "float32")
        red = T.alloc_shared((THREADS // 32,), "float32")
        tid = T.cuda.thread_id()
        bid = T.cuda.block_id()
        acc = T.alloc_local((4,), "float32")
        for j in T.unroll(4):
            acc[j] = identity
        chunks = N // CHUNK  # noqa: F821
        for k in range((chunks - bid + G - 1) // G):  # noqa: F821  (chunks bid, bid + G, ...: a run-time count)
            base = ((bid + k * G) * (THREADS * U) + tid) * 4  # noqa: F821
            for i in T.unroll(U):
                T.cuda.tile.apply(T.ptx["ld.global.v4.f32"], r[i],
                                  X[base + i * THREADS * 4: base + i * THREADS * 4 + 4])
            for i in T.unroll(U):
                for j in T.unroll(4):
                    acc[j] = combine(acc[j], r[i, j], op)
        first = chunks * CHUNK + bid * THREADS + tid
        for k in range((N - first + G * THREADS - 1) // (G * THREADS)):  # noqa: F821  (the tail, one value each)
            acc[0] = combine(acc[0], X[first + k * (G * THREADS)], op)  # noqa: F821
        v = block_allreduce(combine(combine(acc[0], acc[1], op), combine(acc[2], acc[3], op), op), red, op, THREADS)
        if tid == 0:
            P[bid] = v

    return partials


def make_final(op):
    """Pass 2: Out[0] = op over the G partials (G <= FINAL)."""

    identity = 0.0 if op == "add" else -float("inf")

    @tiledsl.jit
    def final(P: T.Tensor(("G",), "float32"), Out: T.Tensor((1,), "float32")):
        T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=FINAL))
        red = T.alloc_shared((FINAL // 32,), "float32")
        tid = T.cuda.thread_id()
        v = T.float32(identity)
        if tid < G:  # noqa: F821
            v = P[tid]
        v = block_allreduce(v, red, op, FINAL)
        if tid == 0:
            Out[0] = v

    return final


KERNELS = {op: (make_partials(op), make_final(op)) for op in ("add", "max")}


def blocks_for(n, sms=132):
    """Pass-1 blocks: 8 per SM (the loads of 4 resident blocks per SM keep HBM busy), never more chunks than
    exist, at least one."""
    return max(1, min(8 * sms, n // CHUNK, FINAL))


def reduce(x, op="add", partials=None, out=None):
    """op ("add" or "max") over a 1-D float32 array (torch or cupy on the GPU, numpy on the interpreter);
    returns a 1-element array of the same kind."""
    lib = type(x).__module__.split(".")[0]
    new = {"torch": lambda n: __import__("torch").empty(n, dtype=x.dtype, device=x.device),
           "cupy": lambda n: __import__("cupy").empty(n, dtype="float32")}.get(lib, lambda n: np.empty(n, np.float32))
    g = blocks_for(x.shape[0])
    partials = new(g) if partials is None else partials[:g]
    out = new(1) if out is None else out
    k1, k2 = KERNELS[op]
    if lib == "numpy":
        k1, k2 = tiledsl.jit(k1.fn, interpret=True), tiledsl.jit(k2.fn, interpret=True)
    k1(x, partials)
    k2(partials, out)
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--log2n", type=int, default=24)
    opts = p.parse_args(argv)
    from tiledsl.runtime.driver import gpu_available
    if not gpu_available():
        x = np.random.default_rng(0).standard_normal(3 * CHUNK + 1000).astype(np.float32)
        s, m = reduce(x, "add"), reduce(x, "max")
        assert abs(float(s[0]) - float(x.astype(np.float64).sum())) < 1e-2 and m[0] == x.max()
        print(f"reduce: no GPU found; ran {x.size} values on the CPU interpreter: sum {s[0]:.4f}, max {m[0]:.4f}")
        return
    import torch
    x = torch.randn(1 << opts.log2n, device="cuda")
    s, m = reduce(x, "add"), reduce(x, "max")
    torch.testing.assert_close(s[0], x.double().sum().float(), rtol=1e-5, atol=1e-2)
    assert m[0] == x.max()
    print(f"reduce: OK on the GPU: sum {s[0].item():.4f} (torch {x.sum().item():.4f}), max {m[0].item():.4f}")


if __name__ == "__main__":
    sys.exit(main())
