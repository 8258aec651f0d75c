"""tiledsl.ops called as a PyTorch user calls them (the `torch.ops.tiledsl` custom ops, through `tiledsl.ops.<name>`)
against torch's own ops, side by side in one run (issue 32: the figures of issues 17 and 18 must hold through the
op layer):

- `ops.linear(x, w)` against `F.linear` (cuBLAS): f16 and bf16 at 4096^3, 8192^3 and two LLM projections; and
  `ops.linear(x, w, b, activation="gelu")` (fused epilogue) against `F.gelu(F.linear(x, w, b))`;
- `ops.matmul_fp8` against `torch._scaled_mm` (e4m3, per-tensor scales, bf16 out);
- `ops.scaled_dot_product_attention` forward, and forward + backward (a training step's attention), against
  torch's fastest SDPA backend (cuDNN, flash) at D = 128, N = 4096 and 16384, causal and not.

gemm.py's side_by_side times every row: medians of CUDA-event timings after warm-up, the candidates interleaved
call by call, L2 evicted before each call; the attention rows also queue a ~2 ms spin kernel before each call
(BUSY_US), so that an autograd forward + backward's host path (longer than the flush; timed on its own by
benchmarks/host_path.py and benchmarks/profile_ops.py) does not leave the GPU idle inside the events. Every row's result is checked (GEMM: relative Frobenius error against
the fp32 product; attention: against torch's output and gradients). Prints a markdown table; `--quick` keeps one
shape per family. `python benchmarks/ops.py [--quick] [--json FILE]`
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gemm import side_by_side  # noqa: E402

LINEAR = [(4096, 4096, 4096), (8192, 8192, 8192), (16384, 4096, 4096), (4096, 14336, 4096)]
FP8 = [(4096, 4096, 4096), (8192, 8192, 8192)]
ATTN = [(4, 16, 4096, 128), (1, 16, 16384, 128)]
BACKENDS = ("CUDNN_ATTENTION", "FLASH_ATTENTION")
BUSY_US = 2000


def rel(x, ref):
    return ((x.float() - ref.float()).norm() / ref.float().norm()).item()


def linear_rows(torch, ops, shapes, dtypes):
    F = torch.nn.functional
    rows = []
    for dt in dtypes:
        for (M, N, K) in shapes:
            sets = [(torch.randn(M, K, device="cuda", dtype=dt), torch.randn(N, K, device="cuda", dtype=dt))
                    for _ in range(2)]
            x, w = sets[0]
            err = rel(ops.linear(x, w), x.float() @ w.float().T)
            assert err <= 1e-2, f"linear {M}x{N}x{K}: relative error {err}"
            t, t_ref = side_by_side([ops.linear, F.linear], torch, sets)
            rows.append(dict(op="linear", dtype=str(dt)[6:], shape=f"{M}x{N}x{K}", ours=2 * M * N * K / t / 1e9,
                             peer=2 * M * N * K / t_ref / 1e9, peer_name="F.linear", err=err))
            print(rows[-1], flush=True)
            del sets
    M = N = K = 4096
    dt = torch.float16
    bias = torch.randn(N, device="cuda", dtype=dt)
    sets = [(torch.randn(M, K, device="cuda", dtype=dt), torch.randn(N, K, device="cuda", dtype=dt)) for _ in range(2)]
    x, w = sets[0]
    err = rel(ops.linear(x, w, bias, "gelu"), F.gelu(x.float() @ w.float().T + bias.float()))
    assert err <= 1e-2, f"linear + bias + gelu: relative error {err}"
    t, t_ref = side_by_side([lambda x, w: ops.linear(x, w, bias, "gelu"),
                             lambda x, w: F.gelu(F.linear(x, w, bias))], torch, sets)
    rows.append(dict(op="linear + bias + gelu", dtype="float16", shape=f"{M}x{N}x{K}", ours=2 * M * N * K / t / 1e9,
                     peer=2 * M * N * K / t_ref / 1e9, peer_name="F.gelu(F.linear)", err=err))
    print(rows[-1], flush=True)
    return rows


def fp8_rows(torch, ops, shapes):
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
        t, t_ref = side_by_side([lambda a, b: ops.matmul_fp8(a, b, sa, sb, torch.bfloat16),
                                 lambda a, b: torch._scaled_mm(a, b.T, scale_a=sa, scale_b=sb,
                                                               out_dtype=torch.bfloat16)], torch, sets)
        rows.append(dict(op="matmul_fp8", dtype="e4m3", shape=f"{M}x{N}x{K}", ours=2 * M * N * K / t / 1e9,
                         peer=2 * M * N * K / t_ref / 1e9, peer_name="torch._scaled_mm", err=err))
        print(rows[-1], flush=True)
        del sets
    return rows


def _sdpa_with(torch, backend):
    from torch.nn.attention import SDPBackend, sdpa_kernel
    F = torch.nn.functional

    def f(q, k, v, causal):
        with sdpa_kernel(getattr(SDPBackend, backend)):
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    return f


def attention_rows(torch, ops, shapes, dtypes):
    rows = []
    for dt in dtypes:
        for (B, H, N, D) in shapes:
            for causal in (False, True):
                flops = 4 * B * H * N * N * D / (2 if causal else 1)
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
                assert err <= 1e-2, f"sdpa {B}x{H}x{N}x{D} causal={causal}: relative error {err}"
                fns = [lambda q, k, v, do: ops.scaled_dot_product_attention(q, k, v, is_causal=causal)]
                fns += [lambda q, k, v, do, f=f: f(q, k, v, causal) for f in peers.values()]
                ms = side_by_side(fns, torch, sets, busy_us=BUSY_US)
                best = min(range(1, len(ms)), key=lambda i: ms[i])
                rows.append(dict(op="sdpa forward", dtype=str(dt)[6:], shape=f"{B}x{H}x{N}x{D}" +
                                 (" causal" if causal else ""), ours=flops / ms[0] / 1e9, peer=flops / ms[best] / 1e9,
                                 peer_name=list(peers)[best - 1], err=err))
                print(rows[-1], flush=True)

                def step(sdpa):
                    def run(q, k, v, do):
                        qq, kk, vv = (x.detach().requires_grad_() for x in (q, k, v))
                        return torch.autograd.grad(sdpa(qq, kk, vv), (qq, kk, vv), do)
                    return run
                ours = step(lambda q, k, v: ops.scaled_dot_product_attention(q, k, v, is_causal=causal))
                theirs = {be: step(lambda q, k, v, f=f: f(q, k, v, causal)) for be, f in peers.items()}
                got, want = ours(q, k, v, do), next(iter(theirs.values()))(q, k, v, do)
                gerr = max(rel(g, w) for g, w in zip(got, want))
                assert gerr <= 2e-2, f"sdpa backward {B}x{H}x{N}x{D} causal={causal}: relative error {gerr}"
                ms = side_by_side([ours] + list(theirs.values()), torch, sets, busy_us=BUSY_US)
                best = min(range(1, len(ms)), key=lambda i: ms[i])
                rows.append(dict(op="sdpa forward + backward", dtype=str(dt)[6:], shape=rows[-1]["shape"],
                                 ours=3.5 * flops / ms[0] / 1e9, peer=3.5 * flops / ms[best] / 1e9,
                                 peer_name=list(theirs)[best - 1], err=gerr))
                print(rows[-1], flush=True)
                del sets
    return rows


def table(rows):
    out = ["| op | dtype | shape | tiledsl.ops TFLOP/s | peer | peer TFLOP/s | ratio | rel err |",
           "| --- | --- | --- | ---: | --- | ---: | ---: | ---: |"]
    for r in rows:
        out.append(f"| {r['op']} | {r['dtype']} | {r['shape']} | {r['ours']:.0f} | {r['peer_name']} | "
                   f"{r['peer']:.0f} | {r['ours'] / r['peer']:.2f} | {r['err']:.1e} |")
    return "\n".join(out)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="one shape per family")
    p.add_argument("--only", default="linear,fp8,attention", help="comma-separated families")
    p.add_argument("--json", help="write the rows to this file")
    opts = p.parse_args(argv)
    import torch

    import tiledsl.ops as ops
    if not torch.cuda.is_available():
        print("benchmarks/ops.py needs a CUDA GPU")
        return 0
    only = set(opts.only.split(","))
    dtypes = [torch.float16] if opts.quick else [torch.float16, torch.bfloat16]
    rows = []
    if "linear" in only:
        rows += linear_rows(torch, ops, LINEAR[:1] if opts.quick else LINEAR, dtypes)
    if "fp8" in only and torch.cuda.get_device_capability() == (9, 0):
        rows += fp8_rows(torch, ops, FP8[:1] if opts.quick else FP8)
    if "attention" in only:
        rows += attention_rows(torch, ops, ATTN[:1] if opts.quick else ATTN, dtypes)
    print(table(rows))
    if opts.json:
        with open(opts.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
