"""A/B of the FA3-style attention backward's tail split (tiledsl/ops/flash/fa3_backward.py, tail_split) on the
GPU: attention_backward(path="fa3") with tail_split off and on, interleaved with cuDNN's backward (torch SDPA with
the CUDNN_ATTENTION backend), round after round, so clock and thermal drift hit all three alike.

    python benchmarks/attention_backward_split.py [--rounds 5] [--dtypes float16,bfloat16] [--ns 4096,16384]
                                                  [--causal both|yes|no]

Shapes: D = 128, B * N = 16384 tokens, H = 16. TFLOP/s count 10 * B * H * N^2 * D (halved for causal); each
figure is the median over rounds of benchmarks/kernels.py's `bench` medians. Before timing, the split and plain
gradients are checked against each other (relative error <= 1e-2) and the rule's choice is printed
(tail_split_helps: what path="fa3" takes by default).
"""
import argparse
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [ROOT, os.path.dirname(os.path.abspath(__file__))]

import numpy as np  # noqa: E402

from kernels import bench  # noqa: E402


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--dtypes", default="float16,bfloat16")
    p.add_argument("--ns", default="4096,16384")
    p.add_argument("--causal", default="both", choices=["both", "yes", "no"])
    opts = p.parse_args(argv)
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from tiledsl.ops.flash import backward as AB
    from tiledsl.ops.flash import fa3_backward as ABH
    from tiledsl.ops.flash import forward as A
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    causals = {"both": (False, True), "yes": (True,), "no": (False,)}[opts.causal]
    print("| dtype | causal | B x H x N | rule | off TFLOP/s | on TFLOP/s | cuDNN TFLOP/s | on/off | off/cuDNN | "
          "on/cuDNN |\n| --- | --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for dtype in opts.dtypes.split(","):
        for n in map(int, opts.ns.split(",")):
            for causal in causals:
                B, H, D = 16384 // n, 16, 128
                torch.manual_seed(n)
                q, k, v, do = (torch.randn(B, H, n, D, device="cuda", dtype=getattr(torch, dtype)) for _ in range(4))
                o, lse = A.attention(q, k, v, causal=causal)
                run = {s: (lambda s=s: AB.attention_backward(q, k, v, o, lse, do, causal=causal, path="fa3",
                                                             tail_split=s)) for s in (False, True)}
                off, on = run[False](), run[True]()
                for a, b in zip(off, on):
                    err = ((a.float() - b.float()).norm() / b.float().norm()).item()
                    assert err <= 1e-2, err
                del off, on
                with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                    qq, kk, vv = (x.detach().clone().requires_grad_() for x in (q, k, v))
                    out = torch.nn.functional.scaled_dot_product_attention(qq, kk, vv, is_causal=causal)
                    cud = lambda: torch.autograd.grad(out, (qq, kk, vv), do, retain_graph=True)  # noqa: E731
                    cud()
                    times = {"off": [], "on": [], "cudnn": []}
                    for _ in range(opts.rounds):
                        times["off"].append(bench(run[False], torch))
                        times["on"].append(bench(run[True], torch))
                        times["cudnn"].append(bench(cud, torch))
                    del out, qq, kk, vv
                flop = 10 * B * H * n * n * D / (2 if causal else 1)
                tf = {key: flop / (float(np.median(t)) * 1e-3) / 1e12 for key, t in times.items()}
                rule = "on" if ABH.TAIL_SPLIT and ABH.tail_split_helps(causal, (B, H, H, n, n), sms) else "off"
                print(f"| {dtype} | {causal} | {B}x{H}x{n} | {rule} | {tf['off']:.1f} | {tf['on']:.1f} | "
                      f"{tf['cudnn']:.1f} | {tf['on'] / tf['off']:.3f} | {tf['off'] / tf['cudnn']:.3f} | "
                      f"{tf['on'] / tf['cudnn']:.3f} |", flush=True)
                del q, k, v, do, o, lse
    return 0


if __name__ == "__main__":
    sys.exit(main())
