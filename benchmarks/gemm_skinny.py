"""The skinny GEMM (tiledsl/ops/gemm/skinny.py: swap-AB, split-K over every SM) against cuBLAS (torch.matmul) and
against the device's copy bandwidth, at M <= 64 over LLM projection sizes, f16 and bf16.

    python benchmarks/gemm_skinny.py [--quick] [--reps N] [--dtype float16|bfloat16|both]

Per shape: ours and cuBLAS timed side by side (gemm.side_by_side: medians of CUDA-event timings after warm-up, the
peers interleaved call by call, L2 flushed by a 256 MB write before each call, input sets rotated), every result
checked against torch's fp32 product (relative error <= 1e-2, else the row says FAIL), and printed: both times,
cuBLAS / ours, the weight read bandwidth (N x K x element bytes / time, TB/s) of both, and ours as a fraction of the
copy bandwidth (gemm_sweep.copy_bandwidth: a 1 GiB device copy, read + write, timed the same way). The gate is
turned on for this process (TILEDSL_ENABLE=gemm_skinny) and the plan's description is printed per shape. A
markdown table last; --quick: 3 values of M over 3 shapes.
"""
import argparse
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

NK = [(4096, 4096), (4096, 14336), (14336, 4096), (28672, 4096), (6144, 4096), (5120, 5120), (11008, 4096),
      (128256, 4096)]
MS = [1, 2, 4, 8, 16, 32, 48, 64]
QUICK_NK = [(4096, 4096), (4096, 14336), (28672, 4096)]
QUICK_MS = [1, 16, 64]


def rel_err(torch, c, a, b):
    ref = a.float() @ b.float().T
    return max(((c.float() - ref).norm() / ref.norm()).item(),
               ((c.float() - ref).abs().max() / ref.abs().max()).item())


def measure(torch, side_by_side, matmul, plan_of, dt, M, N, K, reps, copy_tbs):
    sets = [(torch.randn(M, K, device="cuda", dtype=dt), torch.randn(N, K, device="cuda", dtype=dt),
             torch.empty(M, N, device="cuda", dtype=dt)) for _ in range(2)]
    a, b, c = sets[0]
    matmul(a, b, out=c, tune=False)
    torch.cuda.synchronize()
    err = rel_err(torch, c, a, b)
    plan = plan_of(a, b, c, tune=False).describe
    ours, cub = side_by_side([lambda a, b, c: matmul(a, b, out=c, tune=False),
                              lambda a, b, c: torch.matmul(a, b.T, out=c)], torch, sets, reps)
    wbytes = N * K * a.element_size()
    row = dict(M=M, N=N, K=K, ms=ours, ms_cublas=cub, ratio=cub / ours, err=err, plan=plan,
               tbs=wbytes / (ours * 1e-3) / 1e12, tbs_cublas=wbytes / (cub * 1e-3) / 1e12)
    row["copy_fraction"] = row["tbs"] / copy_tbs
    row["copy_fraction_cublas"] = row["tbs_cublas"] / copy_tbs
    del sets, a, b, c
    torch.cuda.empty_cache()
    return row


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--reps", type=int, default=50)
    p.add_argument("--dtype", default="both", choices=["float16", "bfloat16", "both"])
    args = p.parse_args(argv)
    os.environ["TILEDSL_ENABLE"] = ",".join(filter(None, [os.environ.get("TILEDSL_ENABLE"), "gemm_skinny"]))
    import torch
    if not torch.cuda.is_available():
        print("gemm_skinny: no CUDA device (the skinny kernel needs an sm_90a GPU)")
        return 0
    from gemm import side_by_side
    from gemm_sweep import copy_bandwidth
    from tiledsl.ops.gemm.matmul import matmul, plan_of
    print(f"{torch.cuda.get_device_name(0)}, torch {torch.__version__}", flush=True)
    copy_tbs = copy_bandwidth(torch, side_by_side, args.reps)
    print(f"copy bandwidth (read + write): {copy_tbs:.2f} TB/s", flush=True)
    dtypes = ["float16", "bfloat16"] if args.dtype == "both" else [args.dtype]
    rows, failed = [], 0
    for dtname in dtypes:
        for N, K in (QUICK_NK if args.quick else NK):
            for M in (QUICK_MS if args.quick else MS):
                r = measure(torch, side_by_side, matmul, plan_of, getattr(torch, dtname), M, N, K, args.reps,
                            copy_tbs)
                ok = r["err"] <= 1e-2
                failed += not ok
                r["dtype"] = dtname
                rows.append(r)
                print(f"{dtname} {M}x{N}x{K}: ours {r['ms'] * 1e3:.1f} us, cuBLAS {r['ms_cublas'] * 1e3:.1f} us, "
                      f"{r['ratio']:.2f}x cuBLAS; weight {r['tbs']:.2f} TB/s ({r['copy_fraction']:.2f} of copy; "
                      f"cuBLAS {r['copy_fraction_cublas']:.2f}); err {r['err']:.1e}{'' if ok else ' FAIL'}; "
                      f"{r['plan']}", flush=True)
    print("\n| dtype | M x N x K | ours us | cuBLAS us | cuBLAS / ours | weight TB/s | of copy | cuBLAS of copy |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in rows:
        print(f"| {r['dtype']} | {r['M']}x{r['N']}x{r['K']} | {r['ms'] * 1e3:.1f} | {r['ms_cublas'] * 1e3:.1f} | "
              f"{r['ratio']:.2f} | {r['tbs']:.2f} | {r['copy_fraction']:.2f} | {r['copy_fraction_cublas']:.2f} |")
    if rows:
        import math
        gm = math.exp(sum(math.log(r["ratio"]) for r in rows) / len(rows))
        print(f"\ngeomean cuBLAS / ours {gm:.3f}, min {min(r['ratio'] for r in rows):.2f}; of copy min "
              f"{min(r['copy_fraction'] for r in rows):.2f}; {failed} wrong")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
