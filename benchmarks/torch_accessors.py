"""What each torch tensor accessor costs from Python, on a CUDA tensor: the floor under any launcher that checks
torch arguments (the native launcher calls the same C functions, minus the interpreter's own ~9 ns per line).

    python benchmarks/torch_accessors.py

Measured on the H200 machine (2026-11-30, torch 2.11): dtype 53, is_cuda 54, dim() 56, data_ptr() 66,
is_contiguous() 70, numel() 76, shape 102 ns; a bare name 9 ns. Six accessors per tensor argument are ~0.35 us, which
is what separates the torch steady launch (1.25x the raw cuLaunchKernel) from cupy's (1.09x).
"""
import timeit

import torch


def main():
    x = torch.zeros(1000, device="cuda" if torch.cuda.is_available() else "cpu")
    cands = ["x.is_cuda", "x.get_device()", "x.device", "x.is_contiguous()", "x.dim()", "x.ndim", "x.numel()",
             "x.nbytes", "x.shape", "x.stride()", "x.data_ptr()", "x.dtype", "x._version", "x.storage_offset()"]
    res = {}
    for _ in range(7):
        for e in cands:
            res.setdefault(e, []).append(timeit.timeit(e, globals={"x": x}, number=200000) / 200000 * 1e9)
    base = min(timeit.repeat("x", globals={"x": x}, number=200000, repeat=7)) / 200000 * 1e9
    print(f"bare name {base:.1f} ns")
    for e, v in res.items():
        print(f"{e:24s} {min(v):6.1f} ns")


if __name__ == "__main__":
    main()
