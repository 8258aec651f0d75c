"""The example kernels against torch and a device copy, in one run on the GPU: softmax and layer norm (float16
rows), sum and max of a float32 array, a histogram. Every result is checked at every size; times are medians of
CUDA-event timings after warm-up, over inputs rotated so the L2 cache does not serve repeated runs.

    python benchmarks/kernels.py [--quick]

Bandwidth counts the fewest bytes each operation must move (inputs read once, outputs written once); the copy's
bandwidth (a torch copy_ of the same bytes, read + written) is the ceiling the ratios compare with.
"""
import argparse
import os
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [ROOT, os.path.join(ROOT, "examples")]


def bench(fn, torch, reps=30, warmup=5, warm_ms=50.0, min_ms=150.0):
    """Median of per-call event timings: a warm-up of `warmup` calls and at least `warm_ms`, then timed calls in
    batches of `reps`, until at least `min_ms` of them. The calls of a batch are queued back to back, each between
    its own pair of events, and the host waits only at the end of the batch: the device time of each call, not
    the host's time to launch it (waiting after every call counted the wrapper's Python, ~10 us, into a 50 us
    kernel)."""
    import time
    t0 = time.perf_counter()
    n = 0
    while n < warmup or (time.perf_counter() - t0) * 1e3 < warm_ms:
        fn()
        n += 1
        if n % 16 == 0:
            torch.cuda.synchronize()
    torch.cuda.synchronize()
    times = []
    while len(times) < reps or sum(times) < min_ms:
        ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)]
        for s, e in ev:
            s.record()
            fn()
            e.record()
        torch.cuda.synchronize()
        times += [s.elapsed_time(e) for s, e in ev]
    return float(np.median(times))


class Rotating:
    """Several input sets used in turn, so that back-to-back runs do not find their input in the L2 cache."""

    def __init__(self, sets):
        self.sets, self.i = sets, 0

    def next(self):
        self.i = (self.i + 1) % len(self.sets)
        return self.sets[self.i]


def copy_ms(torch, nbytes):
    src = [torch.empty(nbytes // 2, dtype=torch.float16, device="cuda").normal_() for _ in range(3)]
    dst = torch.empty_like(src[0])
    rot = Rotating(src)
    return bench(lambda: dst.copy_(rot.next()), torch)


def softmax_rows(torch, rows_out, quick):
    from tiledsl.ops.rowwise.softmax import softmax
    for cols in ([4096, 32768] if quick else [4096, 8192, 16384, 32768]):
        rows = 8192
        xs = [torch.randn(rows, cols, device="cuda", dtype=torch.float16) * 4 for _ in range(3)]
        y = torch.empty_like(xs[0])
        for x in xs:
            y.fill_(float("nan"))
            softmax(x, y)
            torch.testing.assert_close(y, torch.softmax(x.float(), dim=1).half(), rtol=2e-3, atol=2e-4)
        nbytes = 2 * xs[0].numel() * 2
        t_copy = copy_ms(torch, xs[0].numel() * 2)
        rot = Rotating(xs)
        t_ours = bench(lambda: softmax(rot.next(), y), torch)
        t_torch = bench(lambda: torch.softmax(rot.next(), dim=1), torch)
        rows_out.append((f"softmax fp16 {rows} x {cols}", nbytes, t_copy, t_torch, t_ours))


def layernorm_rows(torch, rows_out, quick):
    from tiledsl.ops.rowwise.layernorm import layer_norm
    F = torch.nn.functional
    for cols in ([4096, 16384] if quick else [4096, 8192, 16384]):
        rows = 8192
        xs = [torch.randn(rows, cols, device="cuda", dtype=torch.float16) * 3 + 1 for _ in range(3)]
        w = torch.randn(cols, device="cuda", dtype=torch.float16)
        b = torch.randn(cols, device="cuda", dtype=torch.float16)
        y = torch.empty_like(xs[0])
        for x in xs:
            y.fill_(float("nan"))
            layer_norm(x, w, b, 1e-5, y)
            ref = F.layer_norm(x.float(), (cols,), w.float(), b.float(), 1e-5).half()
            torch.testing.assert_close(y, ref, rtol=1e-2, atol=1e-2)
        nbytes = 2 * xs[0].numel() * 2
        t_copy = copy_ms(torch, xs[0].numel() * 2)
        rot = Rotating(xs)
        t_ours = bench(lambda: layer_norm(rot.next(), w, b, 1e-5, y), torch)
        t_torch = bench(lambda: F.layer_norm(rot.next(), (cols,), w, b, 1e-5), torch)
        rows_out.append((f"layer norm fp16 {rows} x {cols}", nbytes, t_copy, t_torch, t_ours))


def reduce_rows(torch, rows_out, quick):
    from reduce import reduce
    n = 1 << (26 if quick else 28)
    xs = [torch.randn(n, device="cuda") for _ in range(2)]
    part = torch.empty(1024, device="cuda")
    out = torch.empty(1, device="cuda")
    for x in xs:
        got = reduce(x, "add", part, out).clone()
        want = x.double().sum()
        assert abs(got.double().item() - want.item()) <= 1e-5 * x.double().abs().sum().item(), (got, want)
        assert reduce(x, "max", part, out).item() == x.max().item()
    t_copy = copy_ms(torch, n * 4)                       # copies n*4 bytes: reads and writes them
    rot = Rotating(xs)
    for op, tfn in (("add", torch.sum), ("max", torch.amax)):
        t_ours = bench(lambda: reduce(rot.next(), op, part, out), torch)
        t_torch = bench(lambda: tfn(rot.next()), torch)
        rows_out.append((f"{'sum' if op == 'add' else 'max'} of 2^{n.bit_length() - 1} fp32 (reads only)", n * 4,
                         t_copy, t_torch, t_ours))


def histogram_rows(torch, rows_out, quick):
    from histogram import histogram
    n, bins = 1 << (24 if quick else 26), 256
    xs = [torch.randint(0, bins, (n,), device="cuda", dtype=torch.int32) for _ in range(2)]
    h = torch.empty(bins, device="cuda", dtype=torch.int32)
    for x in xs:
        histogram(x, bins, h)
        assert torch.equal(h.long(), torch.bincount(x, minlength=bins)), "histogram differs from torch.bincount"
    t_copy = copy_ms(torch, n * 4)
    rot = Rotating(xs)
    t_ours = bench(lambda: histogram(rot.next(), bins, h), torch)
    t_torch = bench(lambda: torch.bincount(rot.next(), minlength=bins), torch)
    rows_out.append((f"histogram of 2^{n.bit_length() - 1} int32 into {bins} bins (reads only)", n * 4, t_copy,
                     t_torch, t_ours))


def sweep(torch, quick):
    """Every block size of the softmax and layer norm kernels per row length: the figures behind their TUNED."""
    from tiledsl.ops.rowwise import layernorm as ln
    from tiledsl.ops.rowwise import softmax as sm
    F = torch.nn.functional
    print("| kernel | cols | threads | vectors/thread | registers | ms | vs copy |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for cols in ([4096, 16384] if quick else [4096, 8192, 16384, 32768]):
        rows = 8192
        xs = [torch.randn(rows, cols, device="cuda", dtype=torch.float16) * 4 for _ in range(3)]
        w = torch.randn(cols, device="cuda", dtype=torch.float16)
        b = torch.randn(cols, device="cuda", dtype=torch.float16)
        y = torch.empty_like(xs[0])
        t_copy = copy_ms(torch, xs[0].numel() * 2)
        rot = Rotating(xs)
        for threads in (64, 128, 256, 512, 1024):
            if cols % (8 * threads) or cols // (8 * threads) > 16:
                continue
            for name, make, call, ref in (
                    ("softmax", sm.make_softmax, lambda k, x: k(x, y),
                     lambda x: torch.softmax(x.float(), dim=1).half()),
                    ("layer norm", ln.make_layernorm, lambda k, x: k(x, w, b, y, 1e-5),
                     lambda x: F.layer_norm(x.float(), (cols,), w.float(), b.float(), 1e-5).half())):
                k = make(cols, threads) if name != "softmax" else make(cols, threads, pipelined=False)
                for x in xs[:1]:
                    y.fill_(float("nan"))
                    call(k, x)
                    torch.testing.assert_close(y, ref(x), rtol=1e-2, atol=1e-2)
                t = bench(lambda: call(k, rot.next()), torch)
                regs = next(iter(k._compiled.values())).metadata.get("registers") if getattr(k, "_compiled", None) \
                    else "?"
                print(f"| {name} | {cols} | {threads} | {cols // (8 * threads)} | {regs} | {t:.3f} | "
                      f"{t_copy / t:.3f} |")
            if cols < 8192 or cols // (8 * threads) > 8:
                continue
            for per_sm in (1, 2, 4):
                k = sm.make_softmax(cols, threads, pipelined=True, per_sm=per_sm)
                y.fill_(float("nan"))
                k(xs[0], y)
                torch.testing.assert_close(y, torch.softmax(xs[0].float(), dim=1).half(), rtol=1e-2, atol=1e-2)
                t = bench(lambda: k(rot.next(), y), torch)
                print(f"| softmax pipelined, {per_sm} block(s)/SM | {cols} | {threads} | {cols // (8 * threads)} | "
                      f"- | {t:.3f} | {t_copy / t:.3f} |")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="fewer sizes")
    p.add_argument("--only", default="softmax,layernorm,reduce,histogram")
    p.add_argument("--sweep", action="store_true", help="every block size of softmax and layer norm, then exit")
    opts = p.parse_args(argv)
    import torch
    # the clocks come up from idle before anything is timed (the first row read 0.84 of the copy, 1.0 after)
    x = torch.empty(1 << 28, dtype=torch.uint8, device="cuda")
    t_end = __import__("time").perf_counter() + 0.5
    while __import__("time").perf_counter() < t_end:
        x.add_(1)
    torch.cuda.synchronize()
    if opts.sweep:
        return sweep(torch, opts.quick)
    rows = []
    parts = {"softmax": softmax_rows, "layernorm": layernorm_rows, "reduce": reduce_rows,
             "histogram": histogram_rows}
    for name in opts.only.split(","):
        try:
            parts[name](torch, rows, opts.quick)
        except Exception as e:                      # report and go on: one table per run
            import traceback
            traceback.print_exc()
            rows.append((f"{name}: FAILED {type(e).__name__}: {str(e)[:80]}", 0, 1, 1, 1))
    name = torch.cuda.get_device_name(0)
    print(f"\n{name}, torch {torch.__version__}; ms are medians; GB/s counts the bytes the op must move; "
          "'copy' = a device copy of the input's bytes (read + written)")
    print("| kernel | copy GB/s | torch ms | tiledsl ms | tiledsl GB/s | vs copy | vs torch |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for label, nbytes, t_copy, t_torch, t_ours in rows:
        copy_bytes = nbytes if "reads only" not in label else 2 * nbytes
        bw_copy = copy_bytes / t_copy / 1e6
        bw = nbytes / t_ours / 1e6
        print(f"| {label} | {bw_copy:.0f} | {t_torch:.3f} | {t_ours:.3f} | {bw:.0f} | {bw / bw_copy:.3f} | "
              f"{t_torch / t_ours:.2f}x |")


if __name__ == "__main__":
    main()
