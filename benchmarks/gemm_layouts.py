"""MN-major operands in the Hopper GEMM (the gated path "gemm_mn_major"), side by side with what they replace:

- linear forward + backward (`ops.linear(x, w)`, then dX and dW: dA = dZ @ B and dB = dZᵀ @ A) with the gate on
  (the backward's transposed operands read as stored), with the gate off (today's `.t().contiguous()` copies) and
  `F.linear` (cuBLAS), bf16;
- matmul per operand layout: a (M, K) and b (N, K) row-major or transposed views (a = x.t() of a contiguous (K, M)
  x), `tiledsl.ops.gemm.matmul` with the gate on against torch's `a @ b.T` (cuBLAS reads either layout).

gemm.py's side_by_side times every row: medians of CUDA-event timings after warm-up, the candidates interleaved
call by call, L2 evicted before each call (and, for the autograd rows, a ~2 ms spin kernel queued before each call so
the host path does not leave the GPU idle inside the events). Every row's result is checked against an fp32
product (relative Frobenius error <= 1e-2; the backward's dX and dW too). Prints a markdown table with the ratios.
`python benchmarks/gemm_layouts.py [--quick] [--json FILE]`
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gemm import side_by_side  # noqa: E402

SHAPES = [(4096, 4096, 4096), (8192, 8192, 8192), (4096, 14336, 4096), (1000, 4096, 1032)]
MAJORS = [("k", "k"), ("k", "mn"), ("mn", "k"), ("mn", "mn")]
BUSY_US = 2000
GATE = "gemm_mn_major"


def rel(x, ref):
    return ((x.float() - ref.float()).norm() / ref.float().norm()).item()


def gated(on, fn):
    """fn with the gate open or closed for the call: TILEDSL_DISABLE (the path is verified), and matmul's plans kept
    apart per state (a plan is made once per shape, with the gate as it was then)."""
    from tiledsl.ops.gemm import matmul as MM
    plans = {}

    def run(*args):
        if on:
            os.environ.pop("TILEDSL_DISABLE", None)
            os.environ["TILEDSL_ENABLE"] = GATE
        else:
            os.environ["TILEDSL_DISABLE"] = GATE
        saved, MM._PLANS = MM._PLANS, plans
        try:
            return fn(*args)
        finally:
            MM._PLANS = saved
            os.environ.pop("TILEDSL_DISABLE", None)
    return run


def linear_rows(torch, ops, shapes, dt):
    F = torch.nn.functional
    rows = []
    for (M, N, K) in shapes:
        mk = lambda *s: torch.randn(*s, device="cuda", dtype=dt)  # noqa: E731
        sets = [(mk(M, K), mk(N, K) / K ** 0.5, mk(M, N)) for _ in range(2)]

        def step(linear):
            def run(x, w, dy):
                xx, ww = x.detach().requires_grad_(), w.detach().requires_grad_()
                y = linear(xx, ww)
                return (y,) + torch.autograd.grad(y, (xx, ww), dy)
            return run
        ours, copies, theirs = gated(True, step(ops.linear)), gated(False, step(ops.linear)), step(F.linear)
        x, w, dy = sets[0]
        want = (x.float() @ w.float().T, dy.float() @ w.float(), dy.float().T @ x.float())
        err = 0.0
        for f in (ours, copies):
            err = max([err] + [rel(g, r) for g, r in zip(f(x, w, dy), want)])
        assert err <= 1e-2, f"linear fwd+bwd {M}x{N}x{K}: relative error {err}"
        t_mn, t_copy, t_ref = side_by_side([ours, copies, theirs], torch, sets, busy_us=BUSY_US)
        flops = 3 * 2 * M * N * K      # the forward's product and the backward's two
        for name, t in (("gate on (MN-major)", t_mn), ("gate off (copies)", t_copy)):
            rows.append(dict(op=f"linear fwd+bwd, {name}", shape=f"{M}x{N}x{K}", ms=t, ours=flops / t / 1e9,
                             peer_name="F.linear", peer_ms=t_ref, peer=flops / t_ref / 1e9, err=err))
            print(rows[-1], flush=True)
        del sets
    return rows


def matmul_rows(torch, shapes, dt):
    from tiledsl.ops.gemm import matmul as MM
    rows = []
    for (M, N, K) in shapes:
        for majors in MAJORS:
            def mk(rows_, major):
                t = torch.randn(rows_, K, device="cuda", dtype=dt)
                return t if major == "k" else t.t().contiguous().t()
            sets = [(mk(M, majors[0]), mk(N, majors[1])) for _ in range(2)]
            a, b = sets[0]
            ours = gated(True, lambda a, b: MM.matmul(a, b))
            err = rel(ours(a, b), a.float() @ b.float().T)
            assert err <= 1e-2, f"matmul {majors} {M}x{N}x{K}: relative error {err}"
            plan = MM.plan_of(a, b)
            t, t_ref = side_by_side([ours, lambda a, b: a @ b.T], torch, sets)
            rows.append(dict(op=f"matmul A {majors[0]}-major, B {majors[1]}-major", shape=f"{M}x{N}x{K}", ms=t,
                             ours=2 * M * N * K / t / 1e9, peer_name="a @ b.T", peer_ms=t_ref,
                             peer=2 * M * N * K / t_ref / 1e9, err=err, plan=plan.describe))
            print(rows[-1], flush=True)
            del sets
    return rows


def table(rows):
    out = ["| op | shape | tiledsl ms | TFLOP/s | peer | peer ms | ratio (peer ms / ours) | rel err |",
           "| --- | --- | ---: | ---: | --- | ---: | ---: | ---: |"]
    for r in rows:
        out.append(f"| {r['op']} | {r['shape']} | {r['ms']:.3f} | {r['ours']:.0f} | {r['peer_name']} | "
                   f"{r['peer_ms']:.3f} | {r['peer_ms'] / r['ms']:.2f} | {r['err']:.1e} |")
    return "\n".join(out)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="4096^3 only")
    p.add_argument("--only", default="linear,matmul", help="comma-separated families")
    p.add_argument("--json", help="write the rows to this file")
    opts = p.parse_args(argv)
    import torch

    import tiledsl.ops as ops
    if not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0):
        print("benchmarks/gemm_layouts.py needs an sm_90 GPU (H100/H200): the MN-major path is the Hopper kernel's")
        return 0
    shapes = SHAPES[:1] if opts.quick else SHAPES
    only = set(opts.only.split(","))
    rows = []
    if "linear" in only:
        rows += linear_rows(torch, ops, shapes, torch.bfloat16)
    if "matmul" in only:
        rows += matmul_rows(torch, shapes, torch.bfloat16)
    print(table(rows))
    if opts.json:
        with open(opts.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
