"""Where one op's time goes, host and GPU: torch.profiler's table for a few eager calls of a tiledsl op (forward, or
forward + backward) beside torch's, and each side's wall time per call with the GPU kept busy ahead of it.

    python benchmarks/profile_ops.py [--case rms_norm|add_rms_norm|layer_norm|softmax|sdpa|linear] [--train]
        [--rows 4096 --cols 4096]

The table's CPU columns are the host path (the Python dispatch, allocations, the launches), its CUDA column the
kernels: a host path longer than the kernels is what an event timing shows when nothing is queued ahead.
"""
from __future__ import annotations

import argparse
import faulthandler
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def _case(name, torch, F, ops, rows, cols, train):
    dev, dt = "cuda", torch.bfloat16
    g = dict(device=dev, dtype=dt, requires_grad=train)
    if name == "sdpa":
        q, k, v = (torch.randn(4, 16, rows, 128, **g) for _ in range(3))
        args = (q, k, v)
        return args, (lambda q, k, v: ops.scaled_dot_product_attention(q, k, v, is_causal=True)), \
            (lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True))
    x = torch.randn(rows, cols, **g)
    w = torch.randn(cols, **g)
    if name == "rms_norm":
        return (x, w), (lambda x, w: ops.rms_norm(x, w, 1e-5)), (lambda x, w: F.rms_norm(x, (cols,), w, 1e-5))
    if name == "add_rms_norm":
        r = torch.randn(rows, cols, **g)
        return (x, r, w), (lambda x, r, w: ops.add_rms_norm(x, r, w, 1e-5)[0]), \
            (lambda x, r, w: F.rms_norm(x + r, (cols,), w, 1e-5))
    if name == "layer_norm":
        b = torch.randn(cols, **g)
        return (x, w, b), (lambda x, w, b: ops.layer_norm(x, (cols,), w, b)), \
            (lambda x, w, b: F.layer_norm(x, (cols,), w, b))
    if name == "softmax":
        return (x,), (lambda x: ops.softmax(x, -1)), (lambda x: torch.softmax(x, -1))
    if name == "linear":
        wt = torch.randn(cols, cols, **g)
        return (x, wt), (lambda x, w: ops.linear(x, w)), (lambda x, w: F.linear(x, w))
    raise SystemExit(f"unknown case {name}")


def _step(fn, args, train, grad):
    y = fn(*args)
    if train:
        y.backward(grad)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--case", default="rms_norm")
    ap.add_argument("--train", action="store_true")
    ap.add_argument("--rows", type=int, default=4096)
    ap.add_argument("--cols", type=int, default=4096)
    ap.add_argument("--calls", type=int, default=20)
    ap.add_argument("--cprofile", action="store_true", help="also cProfile tiledsl's calls (GPU busy ahead)")
    args = ap.parse_args()
    faulthandler.dump_traceback_later(240, exit=True)
    import torch
    import torch.nn.functional as F
    from torch.profiler import ProfilerActivity, profile
    import tiledsl.ops as ops
    inputs, ours, theirs = _case(args.case, torch, F, ops, args.rows, args.cols, args.train)
    grad = torch.randn_like(ours(*inputs)) if args.train else None
    for name, fn in (("tiledsl", ours), ("torch", theirs)):
        for _ in range(3):
            _step(fn, inputs, args.train, grad)
        torch.cuda.synchronize()
        torch.cuda._sleep(200_000_000)       # keep the GPU busy so the host path is timed alone
        t0 = time.perf_counter()
        for _ in range(args.calls):
            _step(fn, inputs, args.train, grad)
        host = (time.perf_counter() - t0) / args.calls * 1e6
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(args.calls):
            _step(fn, inputs, args.train, grad)
        torch.cuda.synchronize()
        wall = (time.perf_counter() - t0) / args.calls * 1e6
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(5):
                _step(fn, inputs, args.train, grad)
            torch.cuda.synchronize()
        print(f"\n## {name} {args.case} {'fwd+bwd' if args.train else 'fwd'} {args.rows}x{args.cols}: host "
              f"{host:.1f} us per call (GPU busy ahead), back-to-back wall {wall:.1f} us per call")
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=14, max_name_column_width=60))
        if args.cprofile and name == "tiledsl":
            import cProfile
            import pstats
            torch.cuda._sleep(200_000_000)
            cp = cProfile.Profile()
            cp.enable()
            for _ in range(args.calls):
                _step(fn, inputs, args.train, grad)
            cp.disable()
            torch.cuda.synchronize()
            pstats.Stats(cp).sort_stats("tottime").print_stats(25)


if __name__ == "__main__":
    main()
