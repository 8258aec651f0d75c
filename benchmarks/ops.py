"""tiledsl.ops called as a PyTorch user calls them (the `torch.ops.tiledsl` custom ops, through `tiledsl.ops.<name>`)
against torch's own ops, side by side in one run (issue 32: the figures of issues 17 and 18 must hold through the
op layer):

- `ops.linear(x, w)` against `F.linear` (cuBLAS) and Triton's matmul (benchmarks/gemm.py's): f16 and bf16 at
  issue 17's shapes (1024^3 .. 8192^3 and two LLM projections); and `ops.linear(x, w, b, activation="gelu")` (fused
  epilogue) against `F.gelu(F.linear(x, w, b))`;
- `ops.matmul_fp8` against `torch._scaled_mm` (e4m3, per-tensor scales, bf16 out);
- `ops.scaled_dot_product_attention` at issue 18's shapes: the forward at D = 64, 128 and 256, N = 4096 and 16384,
  causal and not, against each of torch's SDPA backends (cuDNN, flash); at every D also the backward alone (a
  retained graph's `autograd.grad`) and forward + backward (a training step's attention), against the fastest.

gemm.py's side_by_side times every row: medians of CUDA-event timings after warm-up, the candidates interleaved
call by call, L2 evicted before each call; the attention rows also queue a ~2 ms spin kernel before each call
(BUSY_US), so that an autograd forward + backward's host path (longer than the flush; timed on its own by
benchmarks/host_path.py and benchmarks/profile_ops.py) does not leave the GPU idle inside the events. Every row's
result is checked (GEMM: relative Frobenius error against the fp32 product; attention: against torch's output and
gradients). Prints a markdown table; `--quick` keeps one shape per family.
`python benchmarks/ops.py [--quick] [--only linear,fp8,attention] [--dims 64,128,256] [--reps 20] [--json FILE]`
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gemm import side_by_side, triton_matmul  # noqa: E402

LINEAR = [(4096, 4096, 4096), (8192, 8192, 8192), (16384, 4096, 4096), (4096, 14336, 4096), (2048, 2048, 2048),
          (1024, 1024, 1024)]
FP8 = [(4096, 4096, 4096), (8192, 8192, 8192)]
# issue 18's (B, H, N, D): B x H x N x D constant per D; the backward rows at BACKWARD_D (issue 18: 128; issue 35: 64
# and 256)
ATTN = [(4, 16, 4096, 128), (1, 16, 16384, 128), (4, 32, 4096, 64), (1, 32, 16384, 64), (4, 8, 4096, 256),
        (1, 8, 16384, 256)]
BACKWARD_D = (64, 128, 256)
BACKENDS = ("CUDNN_ATTENTION", "FLASH_ATTENTION")
BUSY_US = 2000


def rel(x, ref):
    return ((x.float() - ref.float()).norm() / ref.float().norm()).item()


def _row(op, dtype, shape, flops, ms, names, err):
    """A table row: TFLOP/s of ours (ms[0]) and of each peer (ms[1:], named), the fastest peer's name."""
    peers = {n: flops / t / 1e9 for n, t in zip(names, ms[1:])}
    row = dict(op=op, dtype=dtype, shape=shape, ours=flops / ms[0] / 1e9, peers=peers,
               peer_name=max(peers, key=peers.get), err=err)
    row["peer"] = peers[row["peer_name"]]
    print(row, flush=True)
    return row


def linear_rows(torch, ops, shapes, dtypes, reps):
    F = torch.nn.functional
    tri = triton_matmul()
    rows = []
    for dt in dtypes:
        for (M, N, K) in shapes:
            sets = [(torch.randn(M, K, device="cuda", dtype=dt), torch.randn(N, K, device="cuda", dtype=dt))
                    for _ in range(2 if M * K >= 2**24 else 3)]
            x, w = sets[0]
            err = rel(ops.linear(x, w), x.float() @ w.float().T)
            assert err <= 1e-2, f"linear {M}x{N}x{K}: relative error {err}"
            fns, names = [ops.linear, F.linear], ["F.linear"]
            if tri is not None:
                c = torch.empty(M, N, device="cuda", dtype=dt)
                tri(x, w, c)
                assert rel(c, x.float() @ w.float().T) <= 1e-2, "triton's product is wrong"
                fns.append(lambda x, w, c=c: tri(x, w, c))
                names.append("Triton")
            ms = side_by_side(fns, torch, sets, reps=reps)
            rows.append(_row("linear", str(dt)[6:], f"{M}x{N}x{K}", 2 * M * N * K, ms, names, err))
            del sets
    M = N = K = 4096
    dt = torch.float16
    bias = torch.randn(N, device="cuda", dtype=dt)
    sets = [(torch.randn(M, K, device="cuda", dtype=dt), torch.randn(N, K, device="cuda", dtype=dt)) for _ in range(2)]
    x, w = sets[0]
    err = rel(ops.linear(x, w, bias, "gelu"), F.gelu(x.float() @ w.float().T + bias.float()))
    assert err <= 1e-2, f"linear + bias + gelu: relative error {err}"
    ms = side_by_side([lambda x, w: ops.linear(x, w, bias, "gelu"), lambda x, w: F.gelu(F.linear(x, w, bias))],
                      torch, sets, reps=reps)
    rows.append(_row("linear + bias + gelu", "float16", f"{M}x{N}x{K}", 2 * M * N * K, ms, ["F.gelu(F.linear)"],
                     err))
    return rows


def fp8_rows(torch, ops, shapes, reps):
    rows = []
    e4m3 = torch.float8_e4m3fn
    sa = torch.tensor(0.75, device="cuda")
    sb = torch.tensor(1.25, device="cuda")
    for (M, N, K) in shapes:
        sets = [((torch.randn(M, K, device="cuda") / 2).to(e4m3), (torch.randn(N, K, device="cuda") / 2).to(e4m3))
                for _ in range(2)]
        a, b = sets[0]
        err = rel(ops.matmul_fp8(a, b, sa, sb, torch.bfloat16), (a.float() @ b.float().T) * (sa * sb))
        assert err <= 5e-2, f"fp8 {M}x{N}x{K}: relative error {err}"
        ms = side_by_side([lambda a, b: ops.matmul_fp8(a, b, sa, sb, torch.bfloat16),
                           lambda a, b: torch._scaled_mm(a, b.T, scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16)],
                          torch, sets, reps=reps)
        rows.append(_row("matmul_fp8", "e4m3", f"{M}x{N}x{K}", 2 * M * N * K, ms, ["torch._scaled_mm"], err))
        del sets
    return rows


def _sdpa_with(torch, backend):
    from torch.nn.attention import SDPBackend, sdpa_kernel
    F = torch.nn.functional

    def f(q, k, v, causal):
        with sdpa_kernel(getattr(SDPBackend, backend)):
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    return f


def attention_rows(torch, ops, shapes, dtypes, reps):
    rows = []
    for dt in dtypes:
        for (B, H, N, D) in shapes:
            for causal in (False, True):
                flops = 4 * B * H * N * N * D / (2 if causal else 1)
                shape = f"{B}x{H}x{N}x{D}" + (" causal" if causal else "")
                mk = lambda: torch.randn(B, H, N, D, device="cuda", dtype=dt)  # noqa: E731
                sets = [(mk(), mk(), mk(), mk()) for _ in range(2)]
                q, k, v, do = sets[0]
                peers = {}
                for be in BACKENDS:
                    f = _sdpa_with(torch, be)
                    try:
                        ref = f(q, k, v, causal)
                        peers[be] = f
                    except RuntimeError:
                        continue
                o = ops.scaled_dot_product_attention(q, k, v, is_causal=causal)
                err = rel(o, ref)
                assert err <= 1e-2, f"sdpa {shape}: relative error {err}"
                fns = [lambda q, k, v, do: ops.scaled_dot_product_attention(q, k, v, is_causal=causal)]
                fns += [lambda q, k, v, do, f=f: f(q, k, v, causal) for f in peers.values()]
                rows.append(_row("sdpa forward", str(dt)[6:], shape, flops,
                                 side_by_side(fns, torch, sets, busy_us=BUSY_US, reps=reps), list(peers), err))
                if D in BACKWARD_D:
                    rows += _backward_rows(torch, ops, sets, peers, causal, str(dt)[6:], shape, flops, reps)
                del sets
    return rows


def _backward_rows(torch, ops, sets, peers, causal, dtype, shape, flops, reps):
    """The backward alone (autograd.grad through a retained graph, 2.5x the forward's flops) and forward +
    backward (3.5x), ours against each SDPA backend, gradients checked against the first backend's."""
    def step(sdpa):
        def run(q, k, v, do):
            qq, kk, vv = (x.detach().requires_grad_() for x in (q, k, v))
            return torch.autograd.grad(sdpa(qq, kk, vv), (qq, kk, vv), do)
        return run

    def backward(sdpa):
        graphs = {}

        def run(q, k, v, do):
            if id(q) not in graphs:     # one forward per input set, outside the timing
                qq, kk, vv = (x.detach().requires_grad_() for x in (q, k, v))
                graphs[id(q)] = (sdpa(qq, kk, vv), (qq, kk, vv))
            o, inputs = graphs[id(q)]
            return torch.autograd.grad(o, inputs, do, retain_graph=True)
        return run
    mine = lambda q, k, v: ops.scaled_dot_product_attention(q, k, v, is_causal=causal)  # noqa: E731
    q, k, v, do = sets[0]
    theirs, wants = {}, []
    for be, f in peers.items():         # a backend whose forward runs may still lack the backward (D = 256)
        fn = lambda q, k, v, f=f: f(q, k, v, causal)  # noqa: E731
        try:
            wants.append(step(fn)(q, k, v, do))
            theirs[be] = fn
        except RuntimeError:
            continue
    if not theirs:
        return []
    got, want = step(mine)(q, k, v, do), wants[0]
    gerr = max(rel(g, w) for g, w in zip(got, want))
    assert gerr <= 2e-2, f"sdpa backward {shape}: relative error {gerr}"
    rows = []
    for name, wrap, mult in (("sdpa backward", backward, 2.5), ("sdpa forward + backward", step, 3.5)):
        fns = [wrap(mine)] + [wrap(f) for f in theirs.values()]
        ms = side_by_side(fns, torch, sets, busy_us=BUSY_US, reps=reps)
        rows.append(_row(name, dtype, shape, mult * flops, ms, list(theirs), gerr))
    return rows


def table(rows):
    out = ["| op | dtype | shape | tiledsl.ops TFLOP/s | peers TFLOP/s | vs fastest peer | vs each peer | rel err |",
           "| --- | --- | --- | ---: | --- | ---: | --- | ---: |"]
    for r in rows:
        peers = ", ".join(f"{n} {t:.0f}" for n, t in r["peers"].items())
        each = " / ".join(f"{r['ours'] / t:.2f}" for t in r["peers"].values())
        out.append(f"| {r['op']} | {r['dtype']} | {r['shape']} | {r['ours']:.0f} | {peers} | "
                   f"{r['ours'] / r['peer']:.2f} | {each} | {r['err']:.1e} |")
    return "\n".join(out)


def set_bwd_defaults(items):
    """NAME=VALUE pairs onto fa3_backward's variant defaults (True / False / None / a string such as own)."""
    from tiledsl.ops.flash import fa3_backward
    known = ("SCORE_SPLIT", "DQ_COMBINE", "DQ_OVERLAP", "TAIL_SPLIT", "TMA_KV")
    for item in items:
        name, _, value = item.partition("=")
        if name not in known:
            raise SystemExit(f"--bwd-default: {name!r} is not one of {', '.join(known)}")
        setattr(fa3_backward, name, {"True": True, "False": False, "None": None}.get(value, value))
        print(f"fa3_backward.{name} = {getattr(fa3_backward, name)!r}")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="one shape per family")
    p.add_argument("--only", default="linear,fp8,attention", help="comma-separated families")
    p.add_argument("--dims", default="64,128,256", help="attention head dims (comma-separated)")
    p.add_argument("--reps", type=int, default=20, help="timed calls of each candidate a row (side_by_side)")
    p.add_argument("--json", help="write the rows to this file")
    p.add_argument("--bwd-default", action="append", default=[], metavar="NAME=VALUE",
                   help="set one of the FA3 backward's module defaults for this run, e.g. SCORE_SPLIT=own or "
                        "DQ_COMBINE=True (tiledsl/ops/flash/fa3_backward.py): a variant timed through tiledsl.ops "
                        "before it becomes the default")
    opts = p.parse_args(argv)
    import torch
    set_bwd_defaults(opts.bwd_default)

    import tiledsl.ops as ops
    if not torch.cuda.is_available():
        print("benchmarks/ops.py needs a CUDA GPU")
        return 0
    only = set(opts.only.split(","))
    dtypes = [torch.float16] if opts.quick else [torch.float16, torch.bfloat16]
    rows = []
    if "linear" in only:
        rows += linear_rows(torch, ops, LINEAR[:1] if opts.quick else LINEAR, dtypes, opts.reps)
    if "fp8" in only and torch.cuda.get_device_capability() == (9, 0):
        rows += fp8_rows(torch, ops, FP8[:1] if opts.quick else FP8, opts.reps)
    if "attention" in only:
        dims = {int(d) for d in opts.dims.split(",")}
        shapes = [s for s in (ATTN[:1] if opts.quick else ATTN) if s[3] in dims]
        rows += attention_rows(torch, ops, shapes, dtypes, opts.reps)
    print(table(rows))
    if opts.json:
        with open(opts.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
