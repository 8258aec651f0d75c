"""Hopper GEMM configurations side by side with cuBLAS and with what matmul picks (the stream-K forms above all):
every candidate of a shape in one side_by_side call (medians of CUDA-event timings after warm-up, the candidates
interleaved call by call, L2 evicted before each call), each result checked against an fp32 product first
(relative Frobenius error <= 1e-2; a candidate that fails or does not build is reported and left out).

A configuration is HOPPER_CONFIGS' tuple (bn, consumers, stages, persistent, tma_store, multicast[, split_k[,
stream_k]]) with stream_k 1 (the partial wave's K steps shared) or 2 (the last whole wave's too), optionally
followed by ":gN" for group_m = N. The default set: issue 31's off-grid shapes and issue 32's 4096 x 14336 x 4096,
each with the stream-K forms the tuner may time (tuning.py; stream_k=2 behind the gate gemm_stream_k_last_wave).

`python benchmarks/gemm_stream_k.py [--shapes "M,N,K;..."] [--configs "256,2,4,1,1,0,1,2;160,2,4,1,1,0,1,2:g16"]
[--dtypes float16,bfloat16] [--reps 30]`
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from gemm import side_by_side  # noqa: E402

# shape -> candidates (issue 31: 1536 x 1536 x 4104 under one wave, 4000^3 and 3072^3 off the tile grid; issue 32:
# 4096 x 14336 x 4096, 13.6 waves of 128 x 256)
DEFAULT = {
    (1536, 1536, 4104): ["128,2,4,1,1,0,1,2", "128,2,4,1,1,0,1,1", "192,2,4,1,1,0", "256,2,4,1,1,0,1,1"],
    (4000, 4000, 4000): ["160,2,4,1,1,0,1,2", "160,2,4,1,1,0,1,1", "256,2,4,1,1,0,1,2", "256,2,4,1,1,0"],
    (3072, 3072, 3072): ["256,2,4,1,1,0,1,2", "192,2,4,1,1,0", "128,2,4,1,1,0,1,2"],
    (4096, 14336, 4096): ["256,2,4,1,1,0,1,1", "256,2,4,1,1,0,1,2", "224,2,4,1,1,0,1,2", "256,2,4,1,1,0,1,1:g16"],
}


def config_of(text: str) -> tuple:
    """matmul's config= (sorted keyword items; hopper_plan.hopper_kwargs reads them) for 'bn,consumers,...[:gN]'."""
    from tiledsl.ops.gemm.hopper_plan import HOPPER_FIELDS
    body, _, group = text.partition(":g")
    kw = dict(zip(HOPPER_FIELDS, (int(x) for x in body.split(","))))
    if group:
        kw["group_m"] = int(group)
    return tuple(sorted(kw.items()))


def run_shape(G, torch, shape, configs, dtname, reps):
    M, N, K = shape
    dt = getattr(torch, dtname)
    sets = [(torch.randn(M, K, device="cuda", dtype=dt), torch.randn(N, K, device="cuda", dtype=dt),
             torch.empty(M, N, device="cuda", dtype=dt)) for _ in range(2)]
    a, b, o = sets[0]
    ref = a.float() @ b.float().T
    names = ["cuBLAS", "matmul (tuned)"]
    fns = [lambda x, y, z: torch.matmul(x, y.T, out=z), lambda x, y, z: G.matmul(x, y, out=z)]
    for text in configs:
        fn = (lambda c: lambda x, y, z: G.matmul(x, y, out=z, config=c))(config_of(text))
        try:
            fn(a, b, o)
            torch.cuda.synchronize()
            err = ((o.float() - ref).norm() / ref.norm()).item()
        except Exception as e:  # noqa: BLE001 - a configuration that does not build is reported
            print(f"{dtname} {M}x{N}x{K} {text}: {type(e).__name__}: {str(e).splitlines()[0][:160]}", flush=True)
            continue
        if err > 1e-2:
            print(f"{dtname} {M}x{N}x{K} {text}: WRONG (relative error {err:.1e})", flush=True)
            continue
        names.append(text)
        fns.append(fn)
    times = side_by_side(fns, torch, sets, reps=reps)
    flops = 2 * M * N * K
    print(f"\n{dtname} {M}x{N}x{K}; matmul picks: {G.plan_of(a, b).describe}", flush=True)
    print("| candidate | TFLOP/s | x cuBLAS |\n| --- | ---: | ---: |")
    for n, t in zip(names, times):
        print(f"| {n} | {flops / t / 1e9:.0f} | {times[0] / t:.3f} |", flush=True)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shapes", default=None, help="M,N,K;... (default: the four shapes above)")
    p.add_argument("--configs", default=None, help="configurations for every shape (default: each shape's own)")
    p.add_argument("--dtypes", default="float16,bfloat16")
    p.add_argument("--reps", type=int, default=30)
    opts = p.parse_args(argv)
    from tiledsl.runtime.driver import gpu_available
    if not gpu_available():
        print("gemm_stream_k: no GPU found")
        return
    import torch
    import tiledsl.ops as G
    shapes = [tuple(int(x) for x in s.split(",")) for s in opts.shapes.split(";")] if opts.shapes else list(DEFAULT)
    for shape in shapes:
        configs = opts.configs.split(";") if opts.configs else DEFAULT.get(shape, DEFAULT[(4096, 14336, 4096)])
        for dtname in opts.dtypes.split(","):
            run_shape(G, torch, shape, configs, dtname, opts.reps)


if __name__ == "__main__":
    main()
