"""The MoE weight gradient (issue 37): `grouped_mm_weight_grad` (the grouped kernel's K-grouped form, dy and x read
token-major as stored) in each configuration, beside torch._grouped_mm's K-grouped form and the per-expert cuBLAS
loop, side by side in one run (gemm.py's side_by_side: medians of CUDA events, L2 evicted before each call).
Every configuration's result is checked against the loop's first (relative error <= 1e-2, bf16 out). Says which
configuration grouped.weight_grad_config should choose.

    python benchmarks/moe_dw_sweep.py [--specs 'E,K,N,rows;...'] [--configs 'stages,consumers,bn,group_m[,tma];...']
        [--skewed]

A configuration's fifth field (1) asks for the TMA-store epilogue (grouped_kernel's `tma_store`).
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from gemm import side_by_side  # noqa: E402
from moe import checked_configs, counts, rel  # noqa: E402

# (experts, K (x's columns), N (dy's columns), routed rows): moe.py's routings
SPECS = [(8, 4096, 14336, 16384), (8, 14336, 4096, 16384), (256, 7168, 2048, 32768), (256, 2048, 7168, 32768),
         (64, 2048, 1408, 8192)]
CONFIGS = [(4, 2, 128, 8), (6, 2, 128, 8), (4, 2, 256, 8), (3, 2, 256, 8)]


def parse(text):
    return [tuple(int(v) for v in part.split(",")) for part in text.split(";") if part.strip()] if text else None


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--specs", help="E,K,N,rows;... (default: moe.py's five routings)")
    p.add_argument("--configs", help="stages,consumers,bn,group_m[,tma];...")
    p.add_argument("--skewed", action="store_true", help="skewed routing (moe.py's Zipf-like counts), not balanced")
    opts = p.parse_args(argv)
    import torch

    import tiledsl.ops as ops
    specs = parse(opts.specs) or SPECS
    configs = parse(opts.configs) or CONFIGS
    gmm = getattr(torch, "_grouped_mm", None)
    print("| experts x rows, K -> N | config (stages, consumers, bn, group_m[, tma]) | TFLOP/s | torch best | "
          "ratio |")
    print("| --- | --- | ---: | ---: | ---: |")
    for (E, K, N, rows) in specs:
        off = torch.cumsum(counts(torch, E, rows, opts.skewed), 0).to(torch.int32).cuda()
        ends = off.tolist()
        x = torch.randn(rows, K, device="cuda", dtype=torch.bfloat16)
        dy = torch.randn(rows, N, device="cuda", dtype=torch.bfloat16)
        dw = torch.empty(E, N, K, device="cuda", dtype=torch.bfloat16)

        def loop(dy, x, dw):
            s0 = 0
            for e, end in enumerate(ends):
                torch.mm(dy[s0:end].T, x[s0:end], out=dw[e])
                s0 = end
            return dw
        ref = loop(dy, x, torch.empty_like(dw))
        fns, names = checked_configs(
            configs, lambda cfg: lambda dy, x, dw: ops.grouped_mm_weight_grad(dy, x, off, out=dw, config=cfg),
            lambda cfg: rel(ops.grouped_mm_weight_grad(dy, x, off, out=dw, config=cfg), ref), 1e-2)
        peers = [loop]
        if gmm:
            peers.append(lambda dy, x, dw: gmm(dy.t(), x, offs=off))
        ms = side_by_side(fns + peers, torch, [(dy, x, dw)])
        fl = 2 * rows * N * K / 1e9
        best = max(fl / m for m in ms[len(fns):])
        for c, m in zip(names, ms):
            print(f"| {E} x {rows}, {K}->{N} | {c} | {fl / m:.0f} | {best:.0f} | {fl / m / best:.2f} |", flush=True)
        del x, dy, dw, ref


if __name__ == "__main__":
    main()
