"""The row-wise torch ops (tiledsl.ops.softmax, layer_norm, rms_norm, add_rms_norm) against torch's on the GPU, forward
and forward + backward, at model sizes and a ragged one. Every result is checked against torch in float32 at every
size before it is timed; times are medians of CUDA-event timings after warm-up (benchmarks/kernels.py's bench),
over inputs rotated so the L2 cache does not serve repeated runs.

    python benchmarks/rowwise_ops.py [--quick] [--dtype bfloat16|float16]

torch's side: torch.softmax, F.layer_norm, F.rms_norm, and for add + RMS norm torch.compile of
(F.rms_norm(x + r), x + r). GB/s counts the fewest bytes an op must move (inputs read once, outputs written once;
weights and per-row statistics left out); `copy` is a torch copy_ of the rows' bytes (read + written), the ceiling.
"""
import argparse

import torch
import torch.nn.functional as F

import tiledsl.ops as ops
from kernels import Rotating, bench, copy_ms          # benchmarks/kernels.py (this script's folder)

REL = {torch.float16: 2e-3, torch.bfloat16: 1.2e-2}


def rel(got, want):
    return ((got.float() - want.float()).norm() / want.float().norm()).item()


def cases(n, eps=1e-6):
    """name -> (ours(x, r, w, b), torch's(x, r, w, b), float32 reference(x, r, w, b), streams of rows moved)."""
    add_rms = torch.compile(lambda x, r, w: (F.rms_norm(x + r, (n,), w, eps), x + r))
    return {
        "softmax": (lambda x, r, w, b: ops.softmax(x, -1), lambda x, r, w, b: torch.softmax(x, -1),
                    lambda x, r, w, b: torch.softmax(x.float(), -1), 2),
        "layer_norm": (lambda x, r, w, b: ops.layer_norm(x, (n,), w, b), lambda x, r, w, b: F.layer_norm(x, (n,), w, b),
                       lambda x, r, w, b: F.layer_norm(x.float(), (n,), w.float(), b.float()), 2),
        "rms_norm": (lambda x, r, w, b: ops.rms_norm(x, w, eps), lambda x, r, w, b: F.rms_norm(x, (n,), w, eps),
                     lambda x, r, w, b: F.rms_norm(x.float(), (n,), w.float(), eps), 2),
        "add_rms_norm": (lambda x, r, w, b: ops.add_rms_norm(x, r, w, eps)[0], lambda x, r, w, b: add_rms(x, r, w)[0],
                         lambda x, r, w, b: F.rms_norm((x + r).float(), (n,), w.float(), eps), 4),
    }


def backward_of(fn, x, r, w, b, dy):
    def run():
        y = fn(x, r, w, b)
        return [g for g in torch.autograd.grad(y, (x, w), dy, allow_unused=True) if g is not None]
    return run


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16"])
    a = ap.parse_args(argv)
    dtype = getattr(torch, a.dtype)
    # model sizes, a ragged hidden size, rows past the register-held kernels (long_rows.py), a vocabulary's softmax
    sizes = ([(4096, 4096), (16384, 8192)] if a.quick else
             [(4096, 4096), (16384, 4096), (4096, 8192), (16384, 8192), (16384, 4097), (4096, 16384), (1024, 65536),
              (256, 151936)])
    table = []
    for rows, n in sizes:
        xs = [(torch.randn(rows, n, device="cuda") * 2 + 0.5).to(dtype).requires_grad_() for _ in range(3)]
        rs = [torch.randn(rows, n, device="cuda").to(dtype) for _ in range(3)]
        w = (torch.rand(n, device="cuda") + 0.5).to(dtype).requires_grad_()
        b = (torch.randn(n, device="cuda") * 0.1).to(dtype).requires_grad_()
        dy = torch.randn(rows, n, device="cuda").to(dtype)
        t_copy = copy_ms(torch, rows * n * 2)
        for name, (ours, theirs, ref, streams) in cases(n).items():
            for x, r in zip(xs, rs):                                 # correct first, on every input set
                with torch.no_grad():
                    e = rel(ours(x, r, w, b), ref(x, r, w, b))
                assert e < REL[dtype], (name, rows, n, e)
                ga = backward_of(ours, x, r, w, b, dy)()
                gb = backward_of(theirs, x, r, w, b, dy)()
                for u, v in zip(ga, gb):
                    assert rel(u, v) < 4 * REL[dtype], (name, "grad", rows, n, rel(u, v))
            rot = Rotating(list(zip(xs, rs)))
            nbytes = streams * rows * n * 2
            with torch.no_grad():
                t_ours = bench(lambda: ours(*rot.next(), w, b), torch)
                t_theirs = bench(lambda: theirs(*rot.next(), w, b), torch)
            tb_ours = bench(lambda: backward_of(ours, *rot.next(), w, b, dy)(), torch)
            tb_theirs = bench(lambda: backward_of(theirs, *rot.next(), w, b, dy)(), torch)
            copy_bw = 2 * rows * n * 2 / t_copy / 1e6
            table.append((f"{name} {a.dtype} {rows} x {n}", nbytes, copy_bw, t_theirs, t_ours, tb_theirs, tb_ours))

    print(f"\n{'op':44s} {'copy GB/s':>9s} | {'fwd torch ms':>12s} {'ours ms':>8s} {'GB/s':>6s} {'speedup':>7s} | "
          f"{'fwd+bwd torch ms':>16s} {'ours ms':>8s} {'speedup':>7s}")
    for label, nbytes, copy_bw, t_t, t_o, tb_t, tb_o in table:
        print(f"{label:44s} {copy_bw:9.0f} | {t_t:12.4f} {t_o:8.4f} {nbytes / t_o / 1e6:6.0f} {t_t / t_o:6.2f}x | "
              f"{tb_t:16.4f} {tb_o:8.4f} {tb_t / tb_o:6.2f}x")


if __name__ == "__main__":
    main()
