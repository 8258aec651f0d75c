"""The eager ops.linear call at decode-sized M on the skinny kernel and on the Hopper path, beside F.linear: host
time per call (2000 calls queued back to back, the launch queue's pace), latency (each call synchronised) and GPU
time (CUDA events over 200 queued calls). Says whether skinny.MIN_WEIGHT_BYTES sits where the launch's fixed
cost stops deciding. GPU machine:  python benchmarks/skinny_host.py"""
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))


def per_call(torch, fn, n, sync_each):
    times = []
    for _ in range(5):
        torch.cuda.synchronize()
        t = time.perf_counter()
        for _ in range(n):
            fn()
            if sync_each:
                torch.cuda.synchronize()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t) / n * 1e6)
    return statistics.median(times)


def gpu_time(torch, fn, n=200):
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    for _ in range(n):
        fn()
    e.record()
    torch.cuda.synchronize()
    return s.elapsed_time(e) / n * 1e3


def main():
    import torch
    import torch.nn.functional as F

    import tiledsl.ops as ops
    from tiledsl.ops.gemm import matmul as MM
    from tiledsl.ops.gemm import skinny as SKN
    print("| M x N x K | path | plan | queued us/call | synced us/call | GPU us/call |")
    print("| --- | --- | --- | ---: | ---: | ---: |")
    for (M, N, K) in [(16, 256, 256), (16, 1024, 1024), (16, 2048, 1024), (16, 2048, 2048), (16, 4096, 2048),
                      (16, 4096, 4096), (1, 4096, 4096), (64, 4096, 4096)]:
        x = torch.randn(M, K, device="cuda", dtype=torch.float16)
        w = torch.randn(N, K, device="cuda", dtype=torch.float16) / K ** 0.5
        b = torch.randn(N, device="cuda", dtype=torch.float16)
        ref = F.linear(x.float(), w.float(), b.float())
        saved = SKN.MIN_WEIGHT_BYTES
        for path in ("skinny", "hopper", "F.linear"):
            MM._PLANS.clear()
            SKN.MIN_WEIGHT_BYTES = 0
            if path == "hopper":
                os.environ["TILEDSL_DISABLE"] = "gemm_skinny"
            fn = (lambda: F.linear(x, w, b)) if path == "F.linear" else (lambda: ops.linear(x, w, b))
            got = fn()
            torch.cuda.synchronize()
            err = ((got.float() - ref).norm() / ref.norm()).item()
            assert err < 1e-2, (M, N, K, path, err)
            plan = "-" if path == "F.linear" else MM.plan_of(x, w).describe[:40]
            for _ in range(200):
                fn()
            q, s, g = per_call(torch, fn, 2000, False), per_call(torch, fn, 300, True), gpu_time(torch, fn)
            print(f"| {M}x{N}x{K} | {path} | {plan} | {q:.1f} | {s:.1f} | {g:.1f} |")
            os.environ.pop("TILEDSL_DISABLE", None)
            SKN.MIN_WEIGHT_BYTES = saved
    MM._PLANS.clear()


if __name__ == "__main__":
    main()
