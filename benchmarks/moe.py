"""Mixture-of-experts and block-scaled FP8 (issue 37) against torch's best on this machine, side by side:

- grouped bf16 forward `ops.grouped_mm(x, w, offsets)` against `torch._grouped_mm` (where this torch has it) and a
  per-expert cuBLAS loop (torch.mm per expert into slices of one output; the loop knows the counts on the host,
  which the grouped calls do not need); Mixtral-8x7B-like (8 experts, hidden 4096, MLP 14336: the up projection
  4096 -> 14336 and the down projection 14336 -> 4096) and DeepSeek-V3-like (256 experts, hidden 7168, expert MLP
  2048) and the issue's 64 experts 2048 -> 1408, token counts drawn from a fixed seed, balanced (uniform routing)
  and skewed (Zipf-like routing, the last expert empty); "tokens" are the routed rows of x (T * top-k);
- the backward's dx (grouped_mm of dy with w transposed; the transposed weights made once, outside the timing) and
  dw (`ops.grouped_mm_weight_grad`, the K-grouped kernel, its transposes of dy and x included in the timing,
  against torch._grouped_mm's K-grouped form and the loop);
- `ops.matmul_fp8_blockwise` (1 x 128 activation scales, 128 x 128 weight scales) against `torch._scaled_mm` with
  blockwise scales where this torch and cuBLAS take them on sm_90, else rowwise scales, and against our per-tensor
  `ops.matmul_fp8`; `ops.grouped_mm_fp8_blockwise` against torch._scaled_grouped_mm (rowwise scales) or the loop;
- `ops.quantize_fp8_blockwise` against the copy bandwidth (x.clone()).

Every row is checked (relative Frobenius error against an f32 reference) before it is timed; gemm.py's side_by_side
gives medians of CUDA events, L2 evicted before each call. `python benchmarks/moe.py [--quick] [--json FILE]`;
the default run takes about 1-2 minutes on an H200, --quick about 30 s.
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gemm import side_by_side  # noqa: E402

SEED = 37
# (name, experts, K, N, routed rows)
GROUPED = [("mixtral up", 8, 4096, 14336, [4096, 16384, 65536]),
           ("mixtral down", 8, 14336, 4096, [16384]),
           ("deepseek up", 256, 7168, 2048, [4096, 32768]),
           ("deepseek down", 256, 2048, 7168, [32768]),
           ("64 experts", 64, 2048, 1408, [8192])]
QUICK = [("mixtral up", 8, 4096, 14336, [16384]), ("deepseek up", 256, 7168, 2048, [32768])]
FP8 = [(4096, 4096, 4096), (8192, 8192, 8192), (4096, 14336, 4096), (32768, 2048, 7168)]


def rel(x, ref):
    return ((x.float() - ref.float()).norm() / ref.float().norm()).item()


def counts(torch, E, rows, skew, seed=SEED):
    g = torch.Generator().manual_seed(seed)
    w = torch.ones(E) if not skew else 1.0 / torch.arange(1, E + 1).float() ** 1.2
    c = torch.bincount(torch.multinomial(w, rows, replacement=True, generator=g), minlength=E)
    if skew:
        c[0] += c[-1]
        c[-1] = 0
    return c


def loop_mm(torch, ends):
    def run(x, w, off, out):
        s = 0
        for e, end in enumerate(ends):
            if end > s:
                torch.mm(x[s:end], w[e].T, out=out[s:end])
            s = end
        return out
    return run


def grouped_rows(torch, ops, specs):
    rows = []
    has_gmm = hasattr(torch, "_grouped_mm")
    for name, E, K, N, sizes in specs:
        for Tn in sizes:
            for skew in (False, True):
                c = counts(torch, E, Tn, skew)
                off = torch.cumsum(c, 0).to(torch.int32).cuda()
                ends = off.tolist()
                x = torch.randn(Tn, K, device="cuda", dtype=torch.bfloat16)
                w = torch.randn(E, N, K, device="cuda", dtype=torch.bfloat16) / K ** 0.5
                out = torch.empty(Tn, N, device="cuda", dtype=torch.bfloat16)
                loop = loop_mm(torch, ends)
                ref = loop(x, w, off, torch.empty_like(out))
                err = rel(ops.grouped_mm(x, w, off, out=out), ref)
                assert err <= 1e-2, f"grouped_mm {name} {Tn}: relative error {err}"
                fns = [lambda x, w, off, out: ops.grouped_mm(x, w, off, out=out), loop]
                names = ["per-expert loop"]
                if has_gmm:
                    fns.append(lambda x, w, off, out: torch._grouped_mm(x, w.transpose(1, 2), offs=off))
                    names.append("torch._grouped_mm")
                ms = side_by_side(fns, torch, [(x, w, off, out)])
                fl = 2 * Tn * N * K
                best = min(range(1, len(ms)), key=lambda i: ms[i])
                rows.append(dict(op="grouped_mm fwd", routing="skewed" if skew else "balanced",
                                 shape=f"{name}: {E} x {Tn} rows, {K}->{N}", ours=fl / ms[0] / 1e9,
                                 peers={n: fl / m / 1e9 for n, m in zip(names, ms[1:])}, best=names[best - 1],
                                 peer=fl / ms[best] / 1e9, err=err))
                print(rows[-1], flush=True)
                # backward dx = dy @ w[e] per expert: grouped_mm with w transposed (made once, outside the timing)
                dy = torch.randn(Tn, N, device="cuda", dtype=torch.bfloat16)
                wt = w.transpose(1, 2).contiguous()
                dx = torch.empty(Tn, K, device="cuda", dtype=torch.bfloat16)
                err = rel(ops.grouped_mm(dy, wt, off, out=dx), loop(dy, wt, off, torch.empty_like(dx)))
                assert err <= 1e-2, f"grouped_mm dx {name} {Tn}: relative error {err}"
                fns = [lambda dy, wt, off, dx: ops.grouped_mm(dy, wt, off, out=dx), loop]
                if has_gmm:
                    fns.append(lambda dy, wt, off, dx: torch._grouped_mm(dy, w, offs=off))
                ms = side_by_side(fns, torch, [(dy, wt, off, dx)])
                best = min(range(1, len(ms)), key=lambda i: ms[i])
                rows.append(dict(op="grouped_mm bwd dx", routing=rows[-1]["routing"], shape=rows[-1]["shape"],
                                 ours=fl / ms[0] / 1e9, peers={n: fl / m / 1e9 for n, m in zip(names, ms[1:])},
                                 best=names[best - 1], peer=fl / ms[best] / 1e9, err=err))
                print(rows[-1], flush=True)
                # backward dw[e] = dy_e^T x_e (K-grouped): ours includes its token-major transposes of dy and x
                rdw = torch.empty(E, N, K, device="cuda", dtype=torch.bfloat16)
                s0 = 0
                for e, end in enumerate(ends):
                    torch.mm(dy[s0:end].T, x[s0:end], out=rdw[e])
                    s0 = end
                err = rel(ops.grouped_mm_weight_grad(dy, x, off), rdw)
                assert err <= 1e-2, f"grouped_mm dw {name} {Tn}: relative error {err}"

                def loop_dw(dy, x, off, dw):
                    s0 = 0
                    for e, end in enumerate(ends):
                        torch.mm(dy[s0:end].T, x[s0:end], out=dw[e])
                        s0 = end
                    return dw
                fns = [lambda dy, x, off, dw: ops.grouped_mm_weight_grad(dy, x, off, out=dw), loop_dw]
                if has_gmm:
                    fns.append(lambda dy, x, off, dw: torch._grouped_mm(dy.t(), x, offs=off))
                ms = side_by_side(fns, torch, [(dy, x, off, rdw)])
                best = min(range(1, len(ms)), key=lambda i: ms[i])
                rows.append(dict(op="grouped_mm bwd dw", routing=rows[-1]["routing"], shape=rows[-1]["shape"],
                                 ours=fl / ms[0] / 1e9, peers={n: fl / m / 1e9 for n, m in zip(names, ms[1:])},
                                 best=names[best - 1], peer=fl / ms[best] / 1e9, err=err))
                print(rows[-1], flush=True)
                del x, w, out, dy, wt, dx, rdw
    return rows


def weights_128(torch, w):
    """w (..., N, K) as e4m3 with one f32 scale per 128 x 128 block."""
    *lead, N, K = w.shape
    blocks = w.float().unflatten(-1, (K // 128, 128)).unflatten(-3, (N // 128, 128))
    s = blocks.abs().amax(dim=(-3, -1)).clamp_min(1e-12) / 448.0
    q = (blocks / s[..., :, None, :, None]).to(torch.float8_e4m3fn).flatten(-2).flatten(-3, -2)
    return q.contiguous(), s.contiguous()


def blockwise_ref(torch, a, sa, b, sb):
    af = a.float() * sa.repeat_interleave(128, dim=1)
    bf = b.float() * sb.repeat_interleave(128, dim=0).repeat_interleave(128, dim=1)
    return af @ bf.T


def torch_blockwise(torch, a, sa, b, sb, ref):
    """torch._scaled_mm with the block scales, in the first layout this torch takes that gives the right answer;
    else rowwise scales (one per row of a and of b: a different, coarser recipe). Returns (fn, name)."""
    bf16 = torch.bfloat16
    tries = [("blockwise", lambda a, b: torch._scaled_mm(a, b.T, scale_a=sa.t().contiguous().t(), scale_b=sb.t(),
                                                          out_dtype=bf16)),
             ("blockwise", lambda a, b: torch._scaled_mm(a, b.T, scale_a=sa.t().contiguous().t(),
                                                          scale_b=sb.t().contiguous(), out_dtype=bf16))]
    for name, fn in tries:
        try:
            if rel(fn(a, b), ref) <= 1e-2:
                return fn, "torch._scaled_mm " + name
        except (RuntimeError, ValueError, TypeError):
            continue
    ra = torch.ones(a.shape[0], 1, device="cuda")
    rb = torch.ones(1, b.shape[0], device="cuda")
    return (lambda a, b: torch._scaled_mm(a, b.T, scale_a=ra, scale_b=rb, out_dtype=bf16)), "torch._scaled_mm rowwise"


def fp8_rows(torch, ops, shapes):
    rows = []
    one = torch.tensor(1.0, device="cuda")
    for (M, N, K) in shapes:
        x = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
        a, sa = ops.quantize_fp8_blockwise(x)
        b, sb = weights_128(torch, torch.randn(N, K, device="cuda") / K ** 0.5)
        ref = blockwise_ref(torch, a, sa, b, sb)
        err = rel(ops.matmul_fp8_blockwise(a, b, sa, sb, out_dtype=torch.float32), ref)
        assert err <= 2e-3, f"matmul_fp8_blockwise {M}x{N}x{K}: relative error {err}"
        peer, pname = torch_blockwise(torch, a, sa, b, sb, ref)
        ms = side_by_side([lambda a, b: ops.matmul_fp8_blockwise(a, b, sa, sb), peer,
                           lambda a, b: ops.matmul_fp8(a, b, one, one, torch.bfloat16)], torch, [(a, b)])
        fl = 2 * M * N * K
        rows.append(dict(op="matmul_fp8_blockwise", routing="-", shape=f"{M}x{N}x{K}", ours=fl / ms[0] / 1e9,
                         peers={pname: fl / ms[1] / 1e9, "ops.matmul_fp8 (per-tensor)": fl / ms[2] / 1e9},
                         best=pname, peer=fl / ms[1] / 1e9, err=err))
        print(rows[-1], flush=True)
    return rows


def grouped_fp8_rows(torch, ops, specs):
    rows = []
    for name, E, K, N, sizes in specs:
        Tn = sizes[-1]
        for skew in (False, True):
            off = torch.cumsum(counts(torch, E, Tn, skew), 0).to(torch.int32).cuda()
            qx, sx = ops.quantize_fp8_blockwise(torch.randn(Tn, K, device="cuda", dtype=torch.bfloat16))
            qw, sw = weights_128(torch, torch.randn(E, N, K, device="cuda") / K ** 0.5)
            out = ops.grouped_mm_fp8_blockwise(qx, qw, off, sx, sw, out_dtype=torch.float32)
            ref = torch.empty_like(out)
            s = 0
            for e, end in enumerate(off.tolist()):
                if end > s:
                    ref[s:end] = blockwise_ref(torch, qx[s:end], sx[s:end], qw[e], sw[e])
                s = end
            err = rel(out, ref)
            assert err <= 2e-3, f"grouped fp8 {name}: relative error {err}"
            fns = [lambda: ops.grouped_mm_fp8_blockwise(qx, qw, off, sx, sw)]
            pname = None
            if hasattr(torch, "_scaled_grouped_mm"):
                ra = torch.ones(Tn, device="cuda")
                rb = torch.ones(E, N, device="cuda")
                try:
                    torch._scaled_grouped_mm(qx, qw.transpose(1, 2), ra, rb, offs=off, out_dtype=torch.bfloat16)
                    fns.append(lambda: torch._scaled_grouped_mm(qx, qw.transpose(1, 2), ra, rb, offs=off,
                                                                out_dtype=torch.bfloat16))
                    pname = "torch._scaled_grouped_mm rowwise"
                except (RuntimeError, TypeError) as e:
                    print(f"torch._scaled_grouped_mm refused: {str(e)[:120]}", flush=True)
            if pname is None:
                continue
            ms = side_by_side(fns, torch, [()])
            fl = 2 * Tn * N * K
            rows.append(dict(op="grouped_mm_fp8_blockwise", routing="skewed" if skew else "balanced",
                             shape=f"{name}: {E} x {Tn} rows, {K}->{N}", ours=fl / ms[0] / 1e9,
                             peers={pname: fl / ms[1] / 1e9}, best=pname, peer=fl / ms[1] / 1e9, err=err))
            print(rows[-1], flush=True)
    return rows


def quant_rows(torch, ops, shapes):
    rows = []
    for (M, K) in shapes:
        x = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
        ms = side_by_side([lambda x: ops.quantize_fp8_blockwise(x), lambda x: x.clone()], torch, [(x,)])
        moved = M * K * (2 + 1) + M * K // 128 * 4           # bytes read and written
        rows.append(dict(op="quantize_fp8_blockwise", routing="-", shape=f"{M}x{K} bf16", ours=moved / ms[0] / 1e6,
                         peers={"x.clone() GB/s": 2 * M * K * 2 / ms[1] / 1e6}, best="x.clone() GB/s",
                         peer=2 * M * K * 2 / ms[1] / 1e6, err=0.0))
        print(rows[-1], flush=True)
    return rows


def table(rows):
    out = ["| op | routing | shape | tiledsl TFLOP/s | peers (TFLOP/s) | ratio to best peer | rel err |",
           "| --- | --- | --- | ---: | --- | ---: | ---: |"]
    for r in rows:
        peers = ", ".join(f"{k} {v:.0f}" for k, v in r["peers"].items())
        best = max(r["peers"].values())
        if r["op"].startswith("quantize"):
            peers += " (GB/s; ours in GB/s)"
        out.append(f"| {r['op']} | {r['routing']} | {r['shape']} | {r['ours']:.0f} | {peers} | "
                   f"{r['ours'] / best:.2f} | {r['err']:.1e} |")
    return "\n".join(out)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="one shape per family (about 30 s)")
    p.add_argument("--only", default="grouped,fp8,grouped_fp8,quant", help="comma-separated families")
    p.add_argument("--json", help="write the rows to this file")
    opts = p.parse_args(argv)
    import torch

    import tiledsl.ops as ops
    only = set(opts.only.split(","))
    rows = []
    specs = QUICK if opts.quick else GROUPED
    if "grouped" in only:
        rows += grouped_rows(torch, ops, specs)
    if "fp8" in only:
        rows += fp8_rows(torch, ops, FP8[:1] if opts.quick else FP8)
    if "grouped_fp8" in only:
        rows += grouped_fp8_rows(torch, ops, specs)
    if "quant" in only:
        rows += quant_rows(torch, ops, [(16384, 7168)] if opts.quick else [(4096, 4096), (16384, 7168),
                                                                          (65536, 7168)])
    print(table(rows))
    if opts.json:
        with open(opts.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
