"""Host time per call of the torch ops against torch's own, at shapes small enough that the GPU is never the
bottleneck: what an eager caller pays before the kernel starts (and what an event timing exposes when that is longer
than the work queued ahead of it).

    python benchmarks/host_path.py              # needs a GPU and torch
    python benchmarks/host_path.py --profile    # also: cProfile of the slowest tiledsl paths (top entries)

Each row: `--calls` back-to-back calls timed with time.perf_counter (no synchronisation inside the loop) after a
warm-up; rounds interleave the rows and the table shows the median round's microseconds per call.
"""
from __future__ import annotations

import argparse
import cProfile
import faulthandler
import os
import pstats
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def _paths(torch, F, ops):
    from tiledsl.ops.flash.fa3 import attention_hopper
    from tiledsl.ops.flash.forward import attention
    dev, dt = "cuda", torch.float16
    q, k, v = (torch.randn(1, 2, 128, 128, device=dev, dtype=dt) for _ in range(3))
    qg, kg, vg = (t.clone().requires_grad_() for t in (q, k, v))
    go = torch.randn_like(q)
    x = torch.randn(16, 256, device=dev, dtype=dt)
    w = torch.randn(256, 256, device=dev, dtype=dt)
    b = torch.randn(256, device=dev, dtype=dt)
    nw = torch.randn(256, device=dev, dtype=dt)
    r = torch.randn_like(x)

    def sdpa_train(fn):
        def call():
            fn(qg, kg, vg, is_causal=True).backward(go)
        return call

    return {
        "F.sdpa fwd": lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True),
        "ops.sdpa fwd": lambda: ops.scaled_dot_product_attention(q, k, v, is_causal=True),
        "torch.ops.tiledsl.sdpa fwd": lambda: torch.ops.tiledsl.scaled_dot_product_attention_forward(q, k, v, True),
        "flash.forward.attention": lambda: attention(q, k, v, causal=True),
        "fa3.attention_hopper": lambda: attention_hopper(q, k, v, causal=True),
        "F.sdpa fwd+bwd": sdpa_train(F.scaled_dot_product_attention),
        "ops.sdpa fwd+bwd": sdpa_train(ops.scaled_dot_product_attention),
        "F.linear": lambda: F.linear(x, w, b),
        "ops.linear": lambda: ops.linear(x, w, b),
        "F.rms_norm": lambda: F.rms_norm(x, (256,), nw, 1e-5),
        "ops.rms_norm": lambda: ops.rms_norm(x, nw, 1e-5),
        "ops.add_rms_norm": lambda: ops.add_rms_norm(x, r, nw, 1e-5),
        "F.softmax": lambda: torch.softmax(x, -1),
        "ops.softmax": lambda: ops.softmax(x, -1),
    }


def _per_call(fn, calls):
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - t0) / calls * 1e6


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--only", default="", help="comma-separated substrings of the rows to keep")
    args = ap.parse_args()
    faulthandler.dump_traceback_later(300, exit=True)
    import torch
    import torch.nn.functional as F
    import tiledsl.ops as ops
    paths = _paths(torch, F, ops)
    if args.only:
        keep = args.only.split(",")
        paths = {n: f for n, f in paths.items() if any(s in n for s in keep)}
    for fn in paths.values():        # warm-up: compile, tune, allocate
        for _ in range(3):
            fn()
    torch.cuda.synchronize()
    times = {n: [] for n in paths}
    for _ in range(args.rounds):
        for n, fn in paths.items():
            times[n].append(_per_call(fn, args.calls))
            torch.cuda.synchronize()
    print("| path | us per call (median round) | min round |")
    print("| --- | ---: | ---: |")
    for n, ts in times.items():
        print(f"| {n} | {statistics.median(ts):.1f} | {min(ts):.1f} |")
    if args.profile:
        for n in ("ops.sdpa fwd", "ops.sdpa fwd+bwd", "ops.rms_norm"):
            if n not in paths:
                continue
            prof = cProfile.Profile()
            prof.enable()
            for _ in range(args.calls):
                paths[n]()
            prof.disable()
            torch.cuda.synchronize()
            print(f"\n## cProfile: {n}, {args.calls} calls")
            pstats.Stats(prof).sort_stats("tottime").print_stats(22)


if __name__ == "__main__":
    main()
