"""FlashAttention forward: the tiledsl kernels (tiledsl.ops.attention, tiledsl/ops/flash/) against torch SDPA with
each of its backends (flash = FA2, cuDNN, memory-efficient), in one run on the GPU.

    python benchmarks/attention.py [--quick] [--dtypes float16,bfloat16]
                                   [--configs default|all|fa3|fa3all|fa3pp|fa3poly|fa3persist|fa3early|fa3lazy|fa3short|both
                                              |8.1.1,8.2.0]
                                   [--backward [--backward-only] [--bwd-warps 4,8] [--bwd-paths fa3,fa2]]
                                   [--plot FILE.png]
    python benchmarks/attention.py --fp8 [--quick] [--dims 128] [--ns 4096,16384] [--configs fa3all]
    python benchmarks/attention.py --varlen [--backward] [--configs all] | --decode [--quick] [--dtypes bfloat16]
                                   [--dims 128]

Shapes: D in {64, 128, 256}, N in {1024, 4096, 16384} with B*N = 16384 tokens and H*D = 2048, causal and not.
TFLOP/s count 4*B*H*N*N*D (halved for causal); ratios are tiledsl / backend. Times are medians of CUDA-event
timings after warm-up (benchmarks/kernels.py's `bench`), tiledsl's variants and torch's backends timed side by
side: in turn, round after round (attention_rows.side_by_side); the three 64 MiB inputs exceed the L2 cache, so no
rotation is needed. Every shape is checked: O against a float32 reference on two (batch, head) pairs, all rows
(max abs error; the tolerance is 2e-3 in f16, plus twice the reference's own rounding error in bf16), LSE too.
With several --configs the kernel runs with each (warps.mi.qreg: BM = 16 * warps * mi query rows per block) and
the best is reported, with every configuration's figure beside it.

--backward adds a second table: the tiledsl backward (tiledsl/ops/flash/backward.py: delta, the main kernel and the
dQ cast; the forward excluded; its fa3 path, tiledsl/ops/flash/fa3_backward.py, where it supports D, and its fa2
path, the best reported and each shown) against torch's backward through SDPA with each backend, at D in {128, 64, 256}
(those of --dims). torch's backward is timed as torch.autograd.grad(out, (q, k, v), do, retain_graph=True) on a
graph whose forward ran once outside the timing. TFLOP/s count 2.5x the forward's: 10*B*H*N*N*D (halved for
causal); the ratio is tiledsl / the fastest backend. Every shape's dq, dk, dv are checked against float32 torch
autograd on two (batch, head) pairs: relative error ||d - ref|| / ||ref|| <= 1e-2. --plot FILE writes a PNG bar
chart of the tables (matplotlib).

--fp8 prints only the FP8 table instead (benchmarks/attention_fp8_bench.py): tiledsl/ops/flash/fp8.py, e4m3 inputs,
against the f16 FA3-style kernel and cuDNN (f16) at D = 128 and N in {4096, 16384} unless --dims/--ns say otherwise.

--varlen / --decode print only the packed variable-length table / the KV-cache decoding table instead
(benchmarks/attention_ragged.py: attention_varlen against SDPA on nested jagged tensors and on the padded batch,
attention_decode against SDPA on the gathered cache; bf16, D = 128 unless --dtypes / --dims say otherwise).
"""
import argparse
import math
import os
import sys
import traceback

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [ROOT, os.path.dirname(os.path.abspath(__file__))]

import attention_rows  # noqa: E402
from attention_rows import best_of, explicit_configs, notes, ratio, side_by_side, timing, tflops  # noqa: E402
from kernels import bench  # noqa: E402

BACKENDS = ("FLASH_ATTENTION", "CUDNN_ATTENTION", "EFFICIENT_ATTENTION")
# --configs fa3epi: (align, tma_o) of the twins timed beside the FA3 default (its own first)
EPILOGUE_TWINS = ((0, 0), (1, 0), (0, 1))      # not both: a ragged N refuses them (attention_hopper)


def short_candidates(AH, D, causal, N) -> list:
    """--configs fa3short: the default for N, the long sequences' default, and each walk (persistent, dynamic) with
    two and three consumers (D = 64) or the default's (D = 128, 256), each with one Q buffer and with two (double_q,
    at 2 stages where the default's do not fit; two also with align + tma_o where the long default has neither):
    what SHORT_CONFIGS (fa3.py) is chosen from."""
    long = AH.full_config(AH.default_config(D, causal, None if N < 4096 else N))
    epilogue = long[9:11] if not AH.stores_straddle_row_0(long, N) else (long[9], 0)
    out = [AH.full_config(AH.default_config(D, causal, N)), long[:9] + epilogue + long[11:]]
    for cons in ((2, 3) if D == 64 else (long[0],)):
        for walk in (1, 2):
            out.append((cons,) + long[1:6] + (walk,) + long[7:9] + epilogue + (0,))
            # two Q buffers at the long default's stages, else at 2 (D = 128: 3 stages and two Q buffers overflow)
            stages = next((s for s in (long[2], 2) if AH.smem_bytes(D, cons, long[1], s, 2) + 2048 <= AH.SMEM_LIMIT),
                          None)
            if stages:
                out.append(out[-1][:2] + (stages,) + out[-1][3:11] + (1,))
                # and with align + tma_o (O leaves through the item's Q buffer) where the long default has neither
                if epilogue == (0, 0) and not AH.stores_straddle_row_0(out[-1][:9] + (1, 1), N):
                    out.append(out[-1][:9] + (1, 1, 1))
    return list(dict.fromkeys(out))


SHORT = {"FLASH_ATTENTION": "flash", "CUDNN_ATTENTION": "cudnn", "EFFICIENT_ATTENTION": "eff"}


def reference(torch, q, k, v, causal, scale, pairs, chunk=2048):
    """float32 O and LSE of the (batch, head) pairs, computed in chunks of query rows (S of a 16384-row head
    would be 1 GiB at once)."""
    out = []
    g = q.shape[1] // k.shape[1]
    for b, h in pairs:
        qf, kf, vf = q[b, h].float(), k[b, h // g].float(), v[b, h // g].float()
        N = qf.shape[0]
        os_, ls = [], []
        for r0 in range(0, N, chunk):
            s = (qf[r0:r0 + chunk] @ kf.T) * scale
            if causal:
                rows = torch.arange(r0, min(r0 + chunk, N), device=s.device)[:, None]
                s = s.masked_fill(torch.arange(kf.shape[0], device=s.device)[None, :] > rows, float("-inf"))
            lse = torch.logsumexp(s, dim=-1)
            os_.append(torch.exp(s - lse[:, None]) @ vf)
            ls.append(lse)
        out.append((torch.cat(os_), torch.cat(ls)))
    return out


def fa2_call(config):
    """attention()'s keywords for a configuration of the table: an FA2 one may carry a trailing "lazy" or "eager"
    (--fa2-lazy's twin: the configuration with lazy=True / False, the other of attention.LAZY)."""
    if config and config[-1] in ("lazy", "eager"):
        return dict(config=tuple(config[:-1]), path="fa2", lazy=config[-1] == "lazy")
    return dict(config=config)


def check(torch, A, q, k, v, causal, config, target=None):
    """Max abs errors (O, LSE) of tiledsl's result against float32 on two (batch, head) pairs, and the O
    tolerance for the dtype."""
    D = q.shape[-1]
    scale = 1.0 / math.sqrt(D)
    o, lse = A.attention(q, k, v, causal=causal, target=target, **fa2_call(config))
    torch.cuda.synchronize()
    pairs = [(0, 0), (q.shape[0] - 1, q.shape[1] - 1)]
    eo = el = 0.0
    tol = 2e-3
    for (b, h), (ro, rl) in zip(pairs, reference(torch, q, k, v, causal, scale, pairs)):
        eo = max(eo, (o[b, h].float() - ro).abs().max().item())
        el = max(el, (lse[b, h] - rl).abs().max().item())
        if q.dtype == torch.bfloat16:
            tol = max(tol, 2e-3 + 2 * (ro.to(q.dtype).float() - ro).abs().max().item())
    return eo, el, tol


def run_shape(torch, A, dtype, D, N, causal, configs, quick, fa2_target=None):
    dt = getattr(torch, dtype)
    B, H = 16384 // N, 2048 // D
    torch.manual_seed(N + D)
    q, k, v = (torch.randn(B, H, N, D, device="cuda", dtype=dt) for _ in range(3))
    tf, reps = timing(4 * B * H * N * N * D / (2 if causal else 1), quick)
    row = {"dtype": dtype, "causal": causal, "D": D, "N": N, "BH": f"{B}x{H}", "ok": True}
    fns = {}
    for w in configs:
        # an FA2 configuration (3 entries, or 4 with "lazy") may be compiled for another target
        tg = fa2_target if len(w) == 3 or w[-1] in ("lazy", "eager") else None
        eo, el, tol = check(torch, A, q, k, v, causal, w, tg)
        ok = eo <= tol and el <= 1e-3
        row["ok"] &= ok
        row.setdefault("err", []).append(f"{eo:.1e}/{el:.0e}" + ("" if ok else " FAIL"))
        fns[w] = lambda w=w, tg=tg: A.attention(q, k, v, causal=causal, target=tg, **fa2_call(w))
    for be in BACKENDS:
        add_backend(row, fns, be, lambda be=be: sdpa_call(
            torch, be, lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)))
    return timed(row, fns, configs, "config", torch, reps, tf)


def add_backend(row, fns, backend, make):
    """fns[backend's short name] = make() once it has run (the shape's first call outside the timing); a backend
    that cannot run the shape is n/a in the row, its exception's type noted."""
    try:
        f = make()
        f()
        fns[SHORT[backend]] = f
    except Exception as e:
        row[SHORT[backend]] = None
        row.setdefault("notes", []).append(f"{SHORT[backend]}: {type(e).__name__}")


def timed(row, fns, ours, best_key, torch, reps, tf):
    """The row with fns timed side by side: each of tiledsl's variants (the labels `ours`) under "each", the
    fastest's label under best_key and its TFLOP/s under "ours", and each torch backend's TFLOP/s."""
    ms = side_by_side(fns, torch, bench, reps)
    each = {k: tf(ms[k]) for k in ours}
    row[best_key] = max(each, key=each.get)
    row["ours"] = each[row[best_key]]
    row["each"] = each
    row.update({SHORT[be]: tf(ms[SHORT[be]]) for be in BACKENDS if SHORT[be] in ms})
    return row


def sdpa_call(torch, backend, fn):
    """fn() run with torch's SDPA restricted to `backend` (SDPBackend's name)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    def f():
        with sdpa_kernel(getattr(SDPBackend, backend)):
            return fn()
    return f


BWD_TOL = 1e-2
SHORT_DT = {"float16": "f16", "bfloat16": "bf16"}


def backward_reference(torch, q, k, v, do, causal, scale, pairs):
    """float32 (dq, dk, dv) of the (batch, head) pairs by torch autograd through SDPA on float32 inputs (heads are
    independent without GQA: one head at a time keeps a 16384-row head's memory bounded)."""
    out = []
    for b, h in pairs:
        qf, kf, vf = (x[b:b + 1, h:h + 1].detach().float().requires_grad_() for x in (q, k, v))
        o = torch.nn.functional.scaled_dot_product_attention(qf, kf, vf, is_causal=causal, scale=scale)
        out.append(torch.autograd.grad(o, (qf, kf, vf), do[b:b + 1, h:h + 1].float()))
    return out


def run_backward_shape(torch, A, AB, dtype, D, N, causal, quick, warps=(None,), paths=("fa3", "fa2")):
    """One row of the backward table: TFLOP/s of tiledsl's backward (the best of its variants, each checked: the
    fa3 path where it supports D, fa3tma likewise (with tma_kv), the fa2 path with each of `warps`) and of torch's
    per backend, and the largest relative gradient error."""
    from tiledsl.ops.flash import fa2_backward, fa3_backward as ABH
    serves = {"fa2": D in fa2_backward.QTILE, "fa3": D in ABH.SUPPORTED_D,
              "fa3tma": D in ABH.SUPPORTED_D and D not in ABH.COLUMN_SPLIT_D, "fa3dqo": D in ABH.COLUMN_SPLIT_D,
              "fa3ss": D in ABH.COLUMN_SPLIT_D, "fa3ssdqo": D in ABH.COLUMN_SPLIT_D,
              "fa3ssown": D in ABH.COLUMN_SPLIT_D, "fa3ssowndqo": D in ABH.COLUMN_SPLIT_D, "fa3dqc": D == 64}
    variants = [(p, w) for p in paths if serves.get(p, False) for w in (warps if p == "fa2" else (None,))]
    # fa3tma: the fa3 path with dK and dV through the TMA store (attention_backward_hopper's tma_kv); fa3dqo: at
    # D = 256, the second dQ block issued while the first runs (dq_overlap); fa3ss: each consumer's scores over
    # half the tile's queries (score_split), fa3ssdqo with dq_overlap too; fa3ssown(dqo): score_split="own";
    # fa3dqc: at D = 64, one dQ reduction a tile (dq_combine)
    opts = {"fa3tma": dict(path="fa3", tma_kv=True), "fa3dqo": dict(path="fa3", dq_overlap=True),
            "fa3ss": dict(path="fa3", score_split=True),
            "fa3ssdqo": dict(path="fa3", score_split=True, dq_overlap=True),
            "fa3ssown": dict(path="fa3", score_split="own"),
            "fa3ssowndqo": dict(path="fa3", score_split="own", dq_overlap=True),
            "fa3dqc": dict(path="fa3", dq_combine=True)}
    dt = getattr(torch, dtype)
    B, H = 16384 // N, 2048 // D
    torch.manual_seed(N + D + 1)
    q, k, v, do = (torch.randn(B, H, N, D, device="cuda", dtype=dt) for _ in range(4))
    scale = 1.0 / math.sqrt(D)
    tf, reps = timing(10 * B * H * N * N * D / (2 if causal else 1), quick)
    row = {"dtype": dtype, "causal": causal, "D": D, "N": N, "BH": f"{B}x{H}"}
    o, lse = A.attention(q, k, v, causal=causal)
    pairs = [(0, 0), (B - 1, H - 1)]
    refs = backward_reference(torch, q, k, v, do, causal, scale, pairs)
    err = 0.0
    fns = {}
    for path, w in variants:
        kw = opts.get(path, dict(path=path))
        grads = AB.attention_backward(q, k, v, o, lse, do, causal=causal, warps=w, **kw)
        torch.cuda.synchronize()
        for (b, h), ref in zip(pairs, refs):
            for g, r in zip(grads, ref):
                err = max(err, ((g[b:b + 1, h:h + 1].float() - r).norm() / r.norm()).item())
        del grads
        label = f"fa2/{w or fa2_backward.WARPS}" if path == "fa2" else path
        fns[label] = lambda w=w, kw=kw: AB.attention_backward(q, k, v, o, lse, do, causal=causal, warps=w, **kw)
    del refs
    row["err"] = err
    row["ok"] = err <= BWD_TOL
    ours_labels = list(fns)
    for be in BACKENDS:
        add_backend(row, fns, be, lambda be=be: backward_call(torch, be, q, k, v, do, causal))
    return timed(row, fns, ours_labels, "warps", torch, reps, tf)


def backward_call(torch, backend, q, k, v, do, causal):
    """The backend's backward as a call: its graph, the forward run once here, outside the timing."""
    qq, kk, vv = (x.detach().clone().requires_grad_() for x in (q, k, v))
    out = sdpa_call(torch, backend, lambda: torch.nn.functional.scaled_dot_product_attention(
        qq, kk, vv, is_causal=causal))()
    return sdpa_call(torch, backend, lambda: torch.autograd.grad(out, (qq, kk, vv), do, retain_graph=True))


def _bwd_header():
    return ("| dtype | causal | D | N | B x H | path (each) | tiledsl | flash | cuDNN | efficient | best torch | "
            "vs best | max rel err dq/dk/dv |\n| --- | --- | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | "
            "--- | ---: | --- |")


def _bwd_line(r):
    have = {b: r.get(b) for b in ("flash", "cudnn", "eff") if r.get(b)}
    best = max(have, key=have.get) if have else None
    vs_best = "n/a" if not r.get("ours") or best is None else f"{r['ours'] / have[best]:.2f}"
    err = r.get("err")
    err = "ERROR" if err is None else f"{err:.1e}" + ("" if r["ok"] else " FAIL")
    warps = best_of(r.get("warps", "-"), r.get("each") or {})
    return (f"| {r['dtype']} | {'yes' if r['causal'] else 'no'} | {r['D']} | {r['N']} | {r['BH']} | {warps} | "
            f"{tflops(r.get('ours'))} | {tflops(r.get('flash'))} | {tflops(r.get('cudnn'))} | "
            f"{tflops(r.get('eff'))} | {best or 'n/a'} | {vs_best} | {err}{notes(r)} |")


def plot(path, fwd_rows, bwd_rows, title):
    """A PNG of grouped bars (TFLOP/s of tiledsl and each torch backend per shape), one panel per table; False (with
    a message) where matplotlib is not importable."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(f"--plot {path}: matplotlib is not installed (pip install matplotlib); no chart written")
        return False
    panels = [(n, rows) for n, rows in (("forward", fwd_rows), ("backward", bwd_rows)) if rows]
    if not panels:
        print(f"--plot {path}: no rows to plot")
        return False
    fig, axes = plt.subplots(len(panels), 1, figsize=(max(8, 0.9 * max(len(r) for _, r in panels) + 2),
                                                      4.5 * len(panels)), squeeze=False)
    series = (("ours", "tiledsl"), ("flash", "flash"), ("cudnn", "cuDNN"), ("eff", "efficient"))
    for ax, (name, rows) in zip(axes[:, 0], panels):
        labels = [f"{SHORT_DT.get(r['dtype'], r['dtype'])} D{r['D']} N{r['N']}{' c' if r['causal'] else ''}"
                  for r in rows]
        width = 0.8 / len(series)
        for i, (key, label) in enumerate(series):
            xs = [j + (i - (len(series) - 1) / 2) * width for j in range(len(rows))]
            ax.bar(xs, [r.get(key) or 0.0 for r in rows], width, label=label)
        ax.set_xticks(range(len(rows)))
        ax.set_xticklabels(labels, rotation=45, ha="right", fontsize=8)
        ax.set_ylabel("TFLOP/s")
        ax.set_title(f"attention {name}: TFLOP/s (c: causal)")
        ax.legend(fontsize=8)
        ax.grid(axis="y", alpha=0.3)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    print(f"wrote {path}")
    return True


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="fewer timed runs, and N in {4096} only unless --ns")
    p.add_argument("--rounds", type=int, default=None,
                   help=f"rounds of the side-by-side timing (default {attention_rows.ROUNDS}): more for A/B "
                        "comparisons of close variants")
    p.add_argument("--dtypes", default="float16,bfloat16")
    p.add_argument("--dims", default="64,128,256")
    p.add_argument("--ns", default="1024,4096,16384")
    p.add_argument("--configs", default="default",
                   help="kernel configurations to time: FA2's (warps, m16 tiles per warp, Q in registers): 'default' "
                        "(attention.default_config), 'all' (attention.CANDIDATES), or e.g. '8.1.1,8.2.0'; FA3's "
                        "(consumers, BN, stages, overlap[, pingpong[, poly[, persistent[, early_k[, lazy[, align[, "
                        "tma_o]]]]]]]; "
                        "tiledsl/ops/flash/fa3.py, sm_90): 'fa3' (its default_config), 'fa3all' (its CANDIDATES, "
                        "PINGPONG_CANDIDATES, POLY_CANDIDATES, PERSISTENT_CANDIDATES and EARLY_K_CANDIDATES), "
                        "'fa3persist' (its CONFIGS and PERSISTENT_CANDIDATES: the persistent grid beside the "
                        "default), 'fa3early' (its CONFIGS and EARLY_K_CANDIDATES: K's stage freed by its S), "
                        "'fa3pp' (its CONFIGS and PINGPONG_CANDIDATES: the ping-pong schedule beside the default), "
                        "'fa3poly' (its CONFIGS and POLY_CANDIDATES: a share of the softmax's exponentials on the "
                        "FMA pipe beside the default), 'fa3lazy' (its defaults, which take the lazy rescale, beside "
                        "their eager twins), 'fa3epi' (its defaults beside their twins with align and with "
                        "tma_o: the last query block ending at row N, O through the TMA store), e.g. '2.128.2.1', "
                        "'2.128.2.0.1', '2.128.4.1.1.16' or "
                        "'2.128.4.1.1.0.1'; 'both': "
                        "the FA2 and FA3 defaults")
    p.add_argument("--backward", action="store_true",
                   help="also time the backward (D = 128 and 64 of --dims) against torch's, in a second table")
    p.add_argument("--backward-only", action="store_true", help="with --backward: skip the forward table")
    p.add_argument("--bwd-warps", default="default",
                   help="the backward's warps a block to time, best reported: 'default' (attention_backward.WARPS) "
                        "or e.g. '4,8'")
    p.add_argument("--bwd-paths", default="fa3,fa2",
                   help="the backward paths to time, best reported (each shown): fa3 (tiledsl/ops/"
                        "flash/fa3_backward.py, where it supports D), fa3tma (the same with tma_kv: dK and "
                        "dV through the TMA store), fa3dqo (D = 256: dq_overlap), fa3ss / fa3ssdqo / fa3ssown / "
                        "fa3ssowndqo (D = 256: score_split True or own, without and with dq_overlap), fa3dqc "
                        "(D = 64: dq_combine) and/or fa2 (with each of --bwd-warps)")
    p.add_argument("--fa2-target", metavar="SM", default=None,
                   help="compile the FA2 configurations for this target, e.g. sm_80 (on a newer GPU the driver "
                        "compiles its PTX for the device)")
    p.add_argument("--fa2-lazy", action="store_true",
                   help="time each FA2 configuration beside its twin of the other rescale (attention(..., "
                        "lazy=...): eager, as attention.LAZY is on)")
    p.add_argument("--plot", metavar="FILE", help="write a PNG bar chart of the tables (needs matplotlib)")
    p.add_argument("--fp8", action="store_true",
                   help="the FP8 (e4m3) forward against the f16 FA3 kernel and cuDNN instead (default D = 128, N "
                        "4096 and 16384; --configs: the FP8 kernel's, 'fa3all' for its CANDIDATES)")
    p.add_argument("--varlen", action="store_true", help="the packed variable-length table instead "
                   "(benchmarks/attention_ragged.py)")
    p.add_argument("--decode", action="store_true", help="the KV-cache decoding table instead "
                   "(benchmarks/attention_ragged.py)")
    opts = p.parse_args(argv)
    attention_rows.ROUNDS = opts.rounds or attention_rows.ROUNDS
    import torch
    from tiledsl.runtime.driver import gpu_available
    if not gpu_available():
        print("benchmarks/attention.py needs an NVIDIA GPU (tests/test_attention.py compiles the kernels without one)")
        return 0
    if opts.varlen or opts.decode:
        from attention_ragged import main_ragged
        dtypes = ["bfloat16"] if opts.dtypes == p.get_default("dtypes") else opts.dtypes.split(",")
        dims = [128] if opts.dims == p.get_default("dims") else [int(x) for x in opts.dims.split(",")]
        good = all([main_ragged(torch, w, dtypes, dims, opts.quick, opts.backward, opts.configs == "all")
                    for w in ("varlen", "decode") if getattr(opts, w)])
        return 0 if good else 1
    if opts.fp8:
        from attention_fp8_bench import main_fp8
        dims = [128] if opts.dims == p.get_default("dims") else [int(x) for x in opts.dims.split(",")]
        ns = ([4096] if opts.quick else [4096, 16384]) if opts.ns == p.get_default("ns") else \
            [int(x) for x in opts.ns.split(",")]
        return 1 if main_fp8(torch, reference, bench, dims, ns, opts.configs, opts.quick) else 0
    from tiledsl.ops.flash import fa2
    from tiledsl.ops.flash import forward as A
    ns = [4096] if opts.quick and opts.ns == p.get_default("ns") else [int(x) for x in opts.ns.split(",")]
    rows = []
    for dtype in ([] if opts.backward and opts.backward_only else opts.dtypes.split(",")):
        for D in (int(x) for x in opts.dims.split(",")):
            for N in ns:
                for causal in (False, True):
                    try:
                        if opts.configs == "default":
                            configs = [fa2.default_config(D, (1, 1, 1, N, N))]
                        elif opts.configs == "all":
                            configs = fa2.CANDIDATES[D]
                        elif opts.configs in ("fa3", "fa3all", "fa3pp", "fa3poly", "fa3persist", "fa3early",
                                              "fa3lazy", "fa3epi", "fa3short", "both"):
                            from tiledsl.ops.flash import fa3 as AH    # 4-11 entries: fa3
                            pp, poly = AH.PINGPONG_CANDIDATES[D], AH.POLY_CANDIDATES[D]
                            pers, early = AH.PERSISTENT_CANDIDATES[D], AH.EARLY_K_CANDIDATES[D]
                            dflt = AH.default_config(D, causal, N)
                            configs = {"fa3": [dflt],
                                       "fa3all": AH.CANDIDATES[D] + pp + poly + pers + early,
                                       "fa3pp": [dflt] + [c for c in pp if c != dflt],
                                       "fa3poly": [dflt] + poly,
                                       "fa3persist": [dflt] + pers,
                                       "fa3early": [dflt] + early,
                                       "fa3lazy": [dflt, AH.full_config(dflt[:8])],
                                       "fa3epi": [AH.full_config(dflt)[:9] + e for e in EPILOGUE_TWINS],
                                       "fa3short": short_candidates(AH, D, causal, N),
                                       "both": [fa2.default_config(D, (1, 1, 1, N, N)), dflt]}[opts.configs]
                        else:
                            configs = explicit_configs(opts.configs)
                        if opts.fa2_lazy:
                            twin = ("eager",) if fa2.LAZY else ("lazy",)
                            configs = [c for w in configs for c in ((w, tuple(w) + twin) if len(w) == 3
                                                                    else (w,))]
                        r = run_shape(torch, A, dtype, D, N, causal, configs, opts.quick, opts.fa2_target)
                    except Exception:                # report and go on: one table per run
                        traceback.print_exc()
                        r = {"dtype": dtype, "causal": causal, "D": D, "N": N, "BH": "-", "ok": False,
                             "err": ["ERROR"], "ours": None, "config": "-", "each": {}}
                    rows.append(r)
                    print(_line(r), flush=True)
    brows = []
    if opts.backward:
        from tiledsl.ops.flash import backward as AB
        dims = [d for d in (128, 64, 256) if str(d) in opts.dims.split(",")]
        for dtype in opts.dtypes.split(","):
            for D in dims:
                for N in ns:
                    for causal in (False, True):
                        try:
                            warps = ((None,) if opts.bwd_warps == "default"
                                     else tuple(int(w) for w in opts.bwd_warps.split(",")))
                            r = run_backward_shape(torch, A, AB, dtype, D, N, causal, opts.quick, warps,
                                                   tuple(opts.bwd_paths.split(",")))
                        except Exception:            # report and go on: one table per run
                            traceback.print_exc()
                            r = {"dtype": dtype, "causal": causal, "D": D, "N": N, "BH": "-", "ok": False,
                                 "err": None, "ours": None}
                        brows.append(r)
                        print(_bwd_line(r), flush=True)
                        torch.cuda.empty_cache()
    name = torch.cuda.get_device_name()
    if rows:
        print(f"\n{name}, torch {torch.__version__}; forward TFLOP/s (medians); ratios are tiledsl / backend")
        print(_header())
        for r in rows:
            print(_line(r))
    if brows:
        print(f"\n{name}, torch {torch.__version__}; backward TFLOP/s (medians, 10*B*H*N*N*D, halved for causal); "
              f"'vs best' is tiledsl / the fastest torch backend")
        print(_bwd_header())
        for r in brows:
            print(_bwd_line(r))
    bad = [r for r in rows + brows if not r["ok"]]
    print(f"\ncorrectness: {len(rows) + len(brows) - len(bad)}/{len(rows) + len(brows)} shapes within tolerance")
    if opts.plot:
        plot(opts.plot, rows, brows, f"{name}, torch {torch.__version__}")
    return 1 if bad else 0


def _header():
    return ("| dtype | causal | D | N | B x H | config | tiledsl | flash | cuDNN | efficient | vs flash | vs cuDNN | "
            "vs eff | err O/LSE |\n| --- | --- | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | "
            "---: | --- |")


def _line(r):
    cfg = best_of(r["config"], r.get("each") or {})
    return (f"| {r['dtype']} | {'yes' if r['causal'] else 'no'} | {r['D']} | {r['N']} | {r['BH']} | {cfg} | "
            f"{tflops(r.get('ours'))} | {tflops(r.get('flash'))} | {tflops(r.get('cudnn'))} | {tflops(r.get('eff'))} | "
            f"{ratio(r, 'ours', 'flash')} | {ratio(r, 'ours', 'cudnn')} | {ratio(r, 'ours', 'eff')} | "
            f"{', '.join(r.get('err', []))}{notes(r)} |")


if __name__ == "__main__":
    sys.exit(main())
