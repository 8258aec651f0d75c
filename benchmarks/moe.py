"""Mixture-of-experts and block-scaled FP8 (issue 37) against torch's best on this machine, side by side:

- grouped bf16 forward `ops.grouped_mm(x, w, offsets)` against `torch._grouped_mm` (where this torch has it) and a
  per-expert cuBLAS loop (torch.mm per expert into slices of one output; the loop knows the counts on the host,
  which the grouped calls do not need); Mixtral-8x7B-like (8 experts, hidden 4096, MLP 14336: the up projection
  4096 -> 14336 and the down projection 14336 -> 4096) and DeepSeek-V3-like (256 experts, hidden 7168, expert MLP
  2048) and the issue's 64 experts 2048 -> 1408, token counts drawn from a fixed seed, balanced (uniform routing)
  and skewed (Zipf-like routing, the last expert empty); "tokens" are the routed rows of x (T * top-k);
- the backward's dx (`grouped_mm(dy, w, offsets, w_kn=True)`: w read as stored, wgmma's transposed B) and
  dw (`ops.grouped_mm_weight_grad`, the K-grouped kernel, its transposes of dy and x included in the timing,
  against torch._grouped_mm's K-grouped form and the loop);
- `ops.matmul_fp8_blockwise` (1 x 128 activation scales, 128 x 128 weight scales) against `torch._scaled_mm` /
  `F.scaled_mm` with the same blockwise scales where this torch and cuBLAS take them on sm_90 (each layout tried,
  checked, and left out with a note if refused), rowwise `_scaled_mm` (another recipe, timed only), and our
  per-tensor `ops.matmul_fp8`; `ops.grouped_mm_fp8_blockwise` against torch._scaled_grouped_mm (rowwise scales,
  another recipe: timed only);
- `ops.quantize_fp8_blockwise` against the copy bandwidth (x.clone()).

Every row is checked (relative Frobenius error against an f32 reference) before it is timed; gemm.py's side_by_side
gives medians of CUDA events, L2 evicted before each call. `--gates NAME[,NAME]` (gated paths, tiledsl/ops/gates.py,
e.g. gemm_fp8_blockwise_pipelined) times each of our calls twice in the same rotation: "tiledsl" with every gate off
and "tiledsl, gates on" with those on (TILEDSL_ENABLE set around each call), both checked, and the ratio still
against the best torch peer. `python benchmarks/moe.py [--quick | --full] [--gates NAMES] [--json FILE]`;
the default run (one routed-row count per shape) should take about 2 minutes on an H200 after the kernels are
compiled (about a minute more on the first run), --quick about 30 s, --full (256 .. 65536 rows) several minutes.
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gemm import side_by_side  # noqa: E402

SEED = 37
# (name, experts, K, N, routed rows)
GROUPED = [("mixtral up", 8, 4096, 14336, [16384]),
           ("mixtral down", 8, 14336, 4096, [16384]),
           ("deepseek up", 256, 7168, 2048, [32768]),
           ("deepseek down", 256, 2048, 7168, [32768]),
           ("64 experts", 64, 2048, 1408, [8192])]
FULL = [("mixtral up", 8, 4096, 14336, [256, 4096, 16384, 65536]),
        ("mixtral down", 8, 14336, 4096, [4096, 65536]),
        ("deepseek up", 256, 7168, 2048, [256, 4096, 32768, 65536]),
        ("deepseek down", 256, 2048, 7168, [4096, 32768]),
        ("64 experts", 64, 2048, 1408, [8192])]
QUICK = [("mixtral up", 8, 4096, 14336, [16384]), ("deepseek up", 256, 7168, 2048, [32768])]
FP8 = [(4096, 4096, 4096), (8192, 8192, 8192), (4096, 14336, 4096), (32768, 2048, 7168)]


def rel(x, ref):
    return ((x.float() - ref.float()).norm() / ref.float().norm()).item()


def config_of(c):
    """A configuration tuple of the sweeps (stages, consumers, bn, group_m[, tma_store 0/1]) as a config= dict."""
    cfg = dict(stages=c[0], consumers=c[1], bn=c[2], group_m=c[3])
    if len(c) > 4:
        cfg["tma_store"] = bool(c[4])
    return cfg


def checked_configs(configs, call, error, tol):
    """(fns, names) for the sweeps: call(cfg) (a function of the timed arguments) for each configuration whose
    error(cfg) (a relative error against the reference) is within tol; one the kernel refuses, or that gives
    another answer, is printed and left out."""
    import tiledsl
    fns, names = [], []
    for c in configs:
        cfg = config_of(c)
        try:
            err = error(cfg)
        except tiledsl.TiledslError as e:
            print(f"  {c}: refused: {str(e).splitlines()[0][:150]}", flush=True)
            continue
        if err > tol:
            print(f"  {c}: relative error {err:.1e}: left out", flush=True)
            continue
        fns.append(call(cfg))
        names.append(c)
    return fns, names


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


GATES = ""              # --gates: the gated paths "tiledsl, gates on" runs with (and "tiledsl" without)
OURS_ON = "tiledsl, gates on"


def with_gates(fn, names):
    """fn with exactly the gated paths `names` open: TILEDSL_ENABLE names them and TILEDSL_DISABLE the others (the
    planners read both when they make a plan), set around the call (microseconds of host time, hidden behind
    side_by_side's L2 flush)."""
    from tiledsl.ops import gates
    want = {n.strip() for n in names.split(",") if n.strip()}
    env = {"TILEDSL_ENABLE": ",".join(sorted(want)),
           "TILEDSL_DISABLE": ",".join(sorted(n for n in gates.GATED if n not in want))}

    def run(*args):
        old = {k: os.environ.get(k) for k in env}
        os.environ.update(env)
        try:
            return fn(*args)
        finally:
            for k, v in old.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
    return run


def best_peer(peers):
    """The fastest torch peer's name (our own gated form is not a peer)."""
    theirs = {k: v for k, v in peers.items() if k != OURS_ON}
    return max(theirs, key=theirs.get) if theirs else "-"


def measure(torch, rows, op, routing, shape, fl, ours, peers, args, ref, tol=1e-2):
    """One row: ours checked against ref (relative error <= tol, else an AssertionError), each peer run and checked
    once (a peer this torch refuses, or that gives another answer, is left out with a note; a peer given as
    (fn, None) computes another recipe and is only run), then all timed side by side; rates in TFLOP/s of fl
    flops. With --gates, ours runs with every gate off and again, as OURS_ON beside the peers, with GATES on."""
    if GATES:
        peers = {OURS_ON: with_gates(ours, GATES), **peers}
        ours = with_gates(ours, "")
    err = rel(ours(*args), ref)
    assert err <= tol, f"{op} {shape}: relative error {err}"
    fns, names = [ours], []
    for name, fn in peers.items():
        fn, pref = fn if isinstance(fn, tuple) else (fn, ref)
        try:
            got = fn(*args)
            perr = 0.0 if pref is None else rel(got, pref)
        except (RuntimeError, TypeError, ValueError, AttributeError, NotImplementedError) as e:
            print(f"  {name} refused: {str(e)[:160]}", flush=True)
            continue
        if perr > tol:
            print(f"  {name} left out: relative error {perr:.1e}", flush=True)
            continue
        fns.append(fn)
        names.append(name)
    ms = side_by_side(fns, torch, [args])
    peer_rates = {n: fl / m / 1e9 for n, m in zip(names, ms[1:])}
    best = best_peer(peer_rates)
    rows.append(dict(op=op, routing=routing, shape=shape, ours=fl / ms[0] / 1e9, peers=peer_rates, best=best,
                     peer=peer_rates.get(best, float("nan")), err=err))
    print(rows[-1], flush=True)


def grouped_rows(torch, ops, specs):
    rows = []
    gmm = getattr(torch, "_grouped_mm", None)
    for name, E, K, N, sizes in specs:
        for Tn in sizes:
            for skew in (False, True):
                routing = "skewed" if skew else "balanced"
                shape = f"{name}: {E} x {Tn} rows, {K}->{N}"
                fl = 2 * Tn * N * K
                off = torch.cumsum(counts(torch, E, Tn, skew), 0).to(torch.int32).cuda()
                ends = off.tolist()
                loop = loop_mm(torch, ends)
                x = torch.randn(Tn, K, device="cuda", dtype=torch.bfloat16)
                w = torch.randn(E, N, K, device="cuda", dtype=torch.bfloat16) / K ** 0.5
                out = torch.empty(Tn, N, device="cuda", dtype=torch.bfloat16)
                peers = {"per-expert loop": loop}
                if gmm:
                    peers["torch._grouped_mm"] = lambda x, w, off, out: gmm(x, w.transpose(1, 2), offs=off)
                measure(torch, rows, "grouped_mm fwd", routing, shape, fl,
                        lambda x, w, off, out: ops.grouped_mm(x, w, off, out=out), peers, (x, w, off, out),
                        loop(x, w, off, torch.empty_like(out)))
                # backward dx = dy @ w[e] per expert: grouped_mm reading w as stored (w_kn)
                dy = torch.randn(Tn, N, device="cuda", dtype=torch.bfloat16)
                dx = torch.empty(Tn, K, device="cuda", dtype=torch.bfloat16)

                def loop_kn(dy, w, off, dx):
                    s0 = 0
                    for e, end in enumerate(ends):
                        if end > s0:
                            torch.mm(dy[s0:end], w[e], out=dx[s0:end])
                        s0 = end
                    return dx
                peers = {"per-expert loop": loop_kn}
                if gmm:
                    peers["torch._grouped_mm"] = lambda dy, w, off, dx: gmm(dy, w, offs=off)
                measure(torch, rows, "grouped_mm bwd dx", routing, shape, fl,
                        lambda dy, w, off, dx: ops.grouped_mm(dy, w, off, out=dx, w_kn=True), peers, (dy, w, off, dx),
                        loop_kn(dy, w, off, torch.empty_like(dx)))
                # backward dw[e] = dy_e^T x_e (K-grouped): ours reads dy and x token-major as stored. The forward's
                # and dx's tensors go first: torch._grouped_mm's K-grouped form asks for 14 GB of workspace at the
                # DeepSeek-like shapes, which an 80 GB H100 no longer had beside them (session 37)
                del w, out, dx
                torch.cuda.empty_cache()

                def loop_dw(dy, x, off, dw):
                    s0 = 0
                    for e, end in enumerate(ends):
                        torch.mm(dy[s0:end].T, x[s0:end], out=dw[e])
                        s0 = end
                    return dw
                rdw = torch.empty(E, N, K, device="cuda", dtype=torch.bfloat16)
                peers = {"per-expert loop": loop_dw}
                if gmm:
                    peers["torch._grouped_mm"] = lambda dy, x, off, dw: gmm(dy.t(), x, offs=off)
                measure(torch, rows, "grouped_mm bwd dw", routing, shape, fl,
                        lambda dy, x, off, dw: ops.grouped_mm_weight_grad(dy, x, off, out=dw), peers,
                        (dy, x, off, rdw), loop_dw(dy, x, off, torch.empty_like(rdw)))
                del x, dy, rdw
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


def blockwise_operands(torch, ops, M, N, K):
    """A (M, K) bf16 activation quantised 1 x 128 and a (N, K) weight quantised 128 x 128: (a, sa, b, sb), their
    f32 reference product, and sa M-major (the layout cuBLAS takes its 1 x 128 scales in)."""
    x = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    a, sa = ops.quantize_fp8_blockwise(x)
    b, sb = weights_128(torch, torch.randn(N, K, device="cuda") / K ** 0.5)
    return a, sa, b, sb, blockwise_ref(torch, a, sa, b, sb), sa.t().contiguous().t()


def fp8_rows(torch, ops, shapes):
    """Dense blockwise FP8: ours against torch._scaled_mm with the same block scales (in the layouts cuBLAS takes
    them: scale_a M-major, scale_b as given or transposed; whichever this torch accepts and gets right), else
    rowwise scales (another recipe, only timed), and against our per-tensor matmul_fp8."""
    rows = []
    one = torch.tensor(1.0, device="cuda")
    bf16 = torch.bfloat16
    F = torch.nn.functional
    for (M, N, K) in shapes:
        a, sa, b, sb, ref, sam = blockwise_operands(torch, ops, M, N, K)
        ra = torch.ones(M, 1, device="cuda")
        rb = torch.ones(1, N, device="cuda")
        peers = {
            "torch._scaled_mm blockwise": lambda a, b: torch._scaled_mm(a, b.T, scale_a=sam, scale_b=sb.t(),
                                                                        out_dtype=bf16),
            "torch._scaled_mm blockwise (scale_b contiguous)": lambda a, b: torch._scaled_mm(
                a, b.T, scale_a=sam, scale_b=sb.t().contiguous(), out_dtype=bf16),
            "F.scaled_mm BlockWise1x128/128x128": lambda a, b: F.scaled_mm(
                a, b.T, sam, F.ScalingType.BlockWise1x128, sb.t(), F.ScalingType.BlockWise128x128,
                output_dtype=bf16),
            "F.scaled_mm BlockWise1x128/128x128 (scale_b contiguous)": lambda a, b: F.scaled_mm(
                a, b.T, sam, F.ScalingType.BlockWise1x128, sb.t().contiguous(), F.ScalingType.BlockWise128x128,
                output_dtype=bf16),
            "torch._scaled_mm rowwise (other recipe)": (lambda a, b: torch._scaled_mm(
                a, b.T, scale_a=ra, scale_b=rb, out_dtype=bf16), None),
            "ops.matmul_fp8 per-tensor": (lambda a, b: ops.matmul_fp8(a, b, one, one, bf16), None)}
        measure(torch, rows, "matmul_fp8_blockwise", "-", f"{M}x{N}x{K}", 2 * M * N * K,
                lambda a, b: ops.matmul_fp8_blockwise(a, b, sa, sb), peers, (a, b), ref, tol=2e-3 * 5)
        rows[-1]["err"] = rel(ops.matmul_fp8_blockwise(a, b, sa, sb, out_dtype=torch.float32), ref)
        assert rows[-1]["err"] <= 2e-3, f"matmul_fp8_blockwise {M}x{N}x{K}: relative error {rows[-1]['err']}"
    return rows


def grouped_fp8_rows(torch, ops, specs):
    rows = []
    for name, E, K, N, sizes in specs:
        Tn = sizes[-1]
        for skew in (False, True):
            off = torch.cumsum(counts(torch, E, Tn, skew), 0).to(torch.int32).cuda()
            qx, sx = ops.quantize_fp8_blockwise(torch.randn(Tn, K, device="cuda", dtype=torch.bfloat16))
            qw, sw = weights_128(torch, torch.randn(E, N, K, device="cuda") / K ** 0.5)
            ref = torch.empty(Tn, N, device="cuda")
            s = 0
            for e, end in enumerate(off.tolist()):
                if end > s:
                    ref[s:end] = blockwise_ref(torch, qx[s:end], sx[s:end], qw[e], sw[e])
                s = end
            err = rel(ops.grouped_mm_fp8_blockwise(qx, qw, off, sx, sw, out_dtype=torch.float32), ref)
            assert err <= 2e-3, f"grouped fp8 {name}: relative error {err}"
            peers = {}
            if hasattr(torch, "_scaled_grouped_mm"):
                ra = torch.ones(Tn, device="cuda")
                rb = torch.ones(E, N, device="cuda")
                peers["torch._scaled_grouped_mm rowwise (other recipe)"] = (lambda: torch._scaled_grouped_mm(
                    qx, qw.transpose(1, 2), ra, rb, offs=off, out_dtype=torch.bfloat16), None)
            measure(torch, rows, "grouped_mm_fp8_blockwise", "skewed" if skew else "balanced",
                    f"{name}: {E} x {Tn} rows, {K}->{N}", 2 * Tn * N * K,
                    lambda: ops.grouped_mm_fp8_blockwise(qx, qw, off, sx, sw), peers, (), ref, tol=1e-2)
            rows[-1]["err"] = err
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
        best = r["peers"].get(best_peer(r["peers"]), float("nan"))
        if r["op"].startswith("quantize"):
            peers += " (GB/s; ours in GB/s)"
        out.append(f"| {r['op']} | {r['routing']} | {r['shape']} | {r['ours']:.0f} | {peers} | "
                   f"{r['ours'] / best:.2f} | {r['err']:.1e} |")
    return "\n".join(out)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="one shape per family (about 30 s)")
    p.add_argument("--full", action="store_true", help="routed rows from 256 to 65536 (several minutes)")
    p.add_argument("--only", default="grouped,fp8,grouped_fp8,quant", help="comma-separated families")
    p.add_argument("--gates", default="", help="gated paths (comma-separated) to time on beside off, e.g. "
                   "--gates gemm_fp8_blockwise_pipelined --only fp8,grouped_fp8")
    p.add_argument("--json", help="write the rows to this file")
    opts = p.parse_args(argv)
    global GATES
    GATES = opts.gates
    import torch

    import tiledsl.ops as ops
    only = set(opts.only.split(","))
    rows = []
    specs = QUICK if opts.quick else FULL if opts.full else GROUPED
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
