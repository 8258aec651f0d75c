"""The grouped GEMMs of MoE (issue 37) in each configuration, one op at a time, beside torch's best for it, side by
side in one run (gemm.py's side_by_side: medians of CUDA events, L2 evicted before each call):

- `--op dw` (default): `grouped_mm_weight_grad` (the K-grouped form, dy and x read token-major as stored) against
  torch._grouped_mm's K-grouped form and the per-expert cuBLAS loop; says what grouped.weight_grad_config chooses;
- `--op fwd`: `grouped_mm(x, w, offsets)` against torch._grouped_mm and the loop; says what default_config chooses;
- `--op dx`: `grouped_mm(dy, w, offsets, w_kn=True)` (w read as stored) against the same.

Every configuration's result is checked against the loop's first (relative error <= 1e-2, bf16 out).

    python benchmarks/moe_sweep.py [--op dw|fwd|dx] [--specs 'E,K,N,rows;...']
        [--configs 'stages,consumers,bn,group_m[,tma];...'] [--skewed]

A configuration's fifth field (0/1) asks for the register stores or the TMA-store epilogue (`tma_store`).
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from gemm import side_by_side  # noqa: E402
from moe import checked_configs, counts, rel  # noqa: E402

# (experts, K (x's columns), N (the output's columns), routed rows): moe.py's routings
SPECS = [(8, 4096, 14336, 16384), (8, 14336, 4096, 16384), (256, 7168, 2048, 32768), (256, 2048, 7168, 32768),
         (64, 2048, 1408, 8192)]
CONFIGS = [(4, 2, 128, 8), (6, 2, 128, 8), (4, 2, 256, 8), (3, 2, 256, 8)]


def parse(text):
    return [tuple(int(v) for v in part.split(",")) for part in text.split(";") if part.strip()] if text else None


def operands(torch, op, E, K, N, rows, ends):
    """(args, ours(cfg) -> fn(*args), the torch peers, the loop's result) for one op: dw[e] = dy_eᵀ x_e (E, N, K);
    fwd out_e = x_e w[e]ᵀ (T, N); dx_e = dy_e w[e] (T, K) with dy (T, N) and w (E, N, K) as stored."""
    import tiledsl.ops as ops
    bf = dict(device="cuda", dtype=torch.bfloat16)
    x = torch.randn(rows, K, **bf)
    off = torch.tensor(ends, dtype=torch.int32, device="cuda")
    spans = list(zip([0] + ends[:-1], ends))
    gmm = getattr(torch, "_grouped_mm", None)
    if op == "dw":
        dy = torch.randn(rows, N, **bf)
        args = (dy, x, torch.empty(E, N, K, **bf))

        def loop(dy, x, dw):
            for e, (s, end) in enumerate(spans):
                torch.mm(dy[s:end].T, x[s:end], out=dw[e])
            return dw
        ours = lambda cfg: lambda dy, x, dw: ops.grouped_mm_weight_grad(dy, x, off, out=dw, config=cfg)  # noqa
        peer = (lambda dy, x, dw: gmm(dy.t(), x, offs=off)) if gmm else None
    else:
        w = torch.randn(E, N, K, **bf) / K ** 0.5
        kn = op == "dx"
        a = torch.randn(rows, N, **bf) if kn else x
        args = (a, w, torch.empty(rows, K if kn else N, **bf))

        def loop(a, w, out):
            for e, (s, end) in enumerate(spans):
                if end > s:
                    torch.mm(a[s:end], w[e] if kn else w[e].T, out=out[s:end])
            return out
        ours = lambda cfg: lambda a, w, out: ops.grouped_mm(a, w, off, out=out, config=cfg, w_kn=kn)  # noqa
        if kn:      # dx: w as stored is (E, N, K), torch's mat_b layout for dy @ w[e]
            peer = (lambda a, w, out: gmm(a, w, offs=off)) if gmm else None
        else:
            peer = (lambda a, w, out: gmm(a, w.transpose(1, 2), offs=off)) if gmm else None
    ref = loop(*args[:-1], torch.empty_like(args[-1]))
    return args, ours, [loop] + ([peer] if peer else []), ref


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--op", default="dw", choices=("dw", "fwd", "dx"))
    p.add_argument("--specs", help="E,K,N,rows;... (default: moe.py's five routings)")
    p.add_argument("--configs", help="stages,consumers,bn,group_m[,tma];...")
    p.add_argument("--skewed", action="store_true", help="skewed routing (moe.py's Zipf-like counts), not balanced")
    opts = p.parse_args(argv)
    import torch
    specs = parse(opts.specs) or SPECS
    configs = parse(opts.configs) or CONFIGS
    print(f"{opts.op}, {'skewed' if opts.skewed else 'balanced'} routing")
    print("| experts x rows, K -> N | config (stages, consumers, bn, group_m[, tma]) | TFLOP/s | torch best | "
          "ratio |")
    print("| --- | --- | ---: | ---: | ---: |")
    for (E, K, N, rows) in specs:
        ends = torch.cumsum(counts(torch, E, rows, opts.skewed), 0).tolist()
        args, ours, peers, ref = operands(torch, opts.op, E, K, N, rows, ends)
        fns, names = checked_configs(configs, ours, lambda cfg: rel(ours(cfg)(*args), ref), 1e-2)
        ms = side_by_side(fns + peers, torch, [args])
        fl = 2 * rows * N * K / 1e9
        best = max(fl / m for m in ms[len(fns):])
        for c, m in zip(names, ms):
            print(f"| {E} x {rows}, {K}->{N} | {c} | {fl / m:.0f} | {best:.0f} | {fl / m / best:.2f} |", flush=True)
        del args, ref
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
