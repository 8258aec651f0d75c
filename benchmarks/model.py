"""Issue 36: a Llama-3-8B-shaped decoder layer (examples/llama_block.py) on tiledsl.ops against the same layer in
PyTorch, side by side in one process on one GPU:

- train:   a training step (forward + backward: the input's, the residual's and every weight's gradient), 2 x 4096;
- prefill: the forward at 1 x 8192 and 1 x 32768 (no grad);
- decode:  one new token per sequence against a paged KV cache (page 64) of 2k-32k tokens, batch 1/16/64/256,
           the step replayed as a CUDA graph.

Candidates: "tiledsl" (LlamaBlock, eager ops; decode: its step captured in a torch.cuda.graph) against the torch
block (TorchLlamaBlock: cuBLAS, SDPA's best backend, F.rms_norm) eager and under torch.compile (train and prefill:
mode default and "max-autotune-no-cudagraphs"; decode: mode "reduce-overhead"); `--ours-compiled` adds the tiledsl
block under torch.compile (default mode; decode "reduce-overhead"). Timing: gemm.side_by_side (medians of CUDA
events after warm-up, the candidates interleaved call by call, L2 evicted before each call). Each row prints tokens/s
per candidate, the ratio of tiledsl to the faster torch.compile mode and to eager, the relative Frobenius error of
the output and of every weight gradient against a float32 run of the torch block (tiledsl's and torch bf16's side by
side: the issue's bar is 2e-2 on gradients), and a profile line (share of GPU time in GEMM, attention, norms, other,
from torch.profiler's kernel names).

Every case runs in its own try/except (one failure prints and the rest run); faulthandler ends a hung run after
--timeout seconds with every thread's traceback. Each (candidate, shape) compiles once (dynamic=False), so a full
run takes longer than one 10-minute device call: split it with --only, --batches and --contexts (and --json).

    python benchmarks/model.py [--quick] [--only train|prefill|decode[,...]] [--ours-compiled] [--json FILE]
    python benchmarks/model.py --smoke     # no GPU: every code path once on the tiny layer (CPU, interpreter)
"""
import argparse
import faulthandler
import json
import os
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
for _p in (os.path.dirname(HERE), os.path.join(os.path.dirname(HERE), "examples"), HERE):
    sys.path.insert(0, _p)            # this checkout's tiledsl, llama_block, gemm.side_by_side

TRAIN = [(2, 4096)]
PREFILL = [(1, 8192), (1, 32768)]
DECODE_BATCHES = (1, 16, 64, 256)
DECODE_CONTEXTS = (2048, 8192, 32768)
QUICK = dict(train=[(2, 4096)], prefill=[(1, 8192)], decode=[(1, 2048), (64, 32768)])
PAGE = 64
COMPILE_MODES = ("default", "max-autotune-no-cudagraphs")
KINDS = ("train", "prefill", "decode")


def cases(opts):
    """(kind, batch, tokens) rows to run: tokens is the sequence (train, prefill) or the context (decode)."""
    only = [k for k in opts.only.split(",") if k]
    bad = [k for k in only if k not in KINDS]
    if bad:
        raise SystemExit(f"--only takes {', '.join(KINDS)} (comma-separated); got {', '.join(bad)}")
    out = []
    for kind in only:
        if opts.quick:
            out += [(kind, b, n) for b, n in QUICK[kind]]
        elif kind == "decode":
            out += [(kind, b, n) for n in opts.contexts for b in opts.batches]
        else:
            out += [(kind, b, n) for b, n in (TRAIN if kind == "train" else PREFILL)]
    return out


# ------------------------------------------------------------------------------------------------ the candidates

SMOKE = False        # --smoke: the tiny layer on CPU tensors (interpreter), aot_eager compiles, wall-clock timing


def _compiled(torch, fn, mode):
    if SMOKE:
        return torch.compile(fn, backend="aot_eager", fullgraph=True, dynamic=False)
    return torch.compile(fn, mode=None if mode == "default" else mode, fullgraph=True, dynamic=False)


def _sync(torch):
    if not SMOKE:
        torch.cuda.synchronize()


def wall_side_by_side(fns, torch, sets, reps=20):
    """--smoke's timing: medians of wall-clock times, the candidates interleaved (gemm.side_by_side's order)."""
    import statistics
    times = [[] for _ in fns]
    for r in range(reps):
        for j in range(len(fns)):
            f = (r + j) % len(fns)
            t0 = time.perf_counter()
            fns[f](*sets[r % len(sets)])
            times[f].append(1e3 * (time.perf_counter() - t0))
    return [statistics.median(t) for t in times]


def blocks(torch, cfg, device):
    from llama_block import LlamaBlock, TorchLlamaBlock
    ref32 = TorchLlamaBlock(cfg, device=device, dtype=torch.float32)
    peer = TorchLlamaBlock(cfg, device=device)
    peer.load_state_dict({k: v.to(cfg.dtype) for k, v in ref32.state_dict().items()})
    return ref32, peer, LlamaBlock.from_torch(ref32, dtype=cfg.dtype)


def _params(block):
    return list(getattr(block, "_orig_mod", block).parameters())


def train_step(torch, block):
    """fn(x, residual, dy, dr) -> (out, residual, dx, dresidual, *weight grads): a middle layer's step."""
    params = _params(block)

    def step(x, residual, dy, dr):
        x, residual = x.detach().requires_grad_(), residual.detach().requires_grad_()
        out, res = block(x, residual)
        return (out, res, *torch.autograd.grad((out, res), [x, residual, *params], (dy, dr)))
    return step


def prefill_step(torch, block):
    def step(x, residual, dy=None, dr=None):
        with torch.no_grad():
            return block(x, residual)
    return step


def rel(torch, got, want):
    got, want = got.detach().float(), want.detach().float()
    return ((got - want).norm() / want.norm().clamp_min(1e-30)).item()


def errors(torch, got, want, names):
    return {n: rel(torch, g, w) for n, g, w in zip(names, got, want)}


# ------------------------------------------------------------------------------------------------ profile

def profile(torch, fn):
    """{GEMM, attention, norms, other: share of GPU kernel time} of one call of fn, from the kernels' names."""
    from torch.profiler import ProfilerActivity, profile as prof
    fn()
    _sync(torch)
    with prof(activities=[ProfilerActivity.CPU if SMOKE else ProfilerActivity.CUDA]) as p:
        fn()
        _sync(torch)
    share = dict(GEMM=0.0, attention=0.0, norms=0.0, other=0.0)
    for e in p.key_averages():
        t = e.self_cpu_time_total if SMOKE else (getattr(e, "device_time_total", None) or
                                                 getattr(e, "cuda_time_total", 0))
        name = e.key.lower()
        if any(s in name for s in ("gemm", "matmul", "mma", "cutlass", "xmma", "sm90_", "cublas", "wgmma")) and \
                "attention" not in name and "fmha" not in name and "flash" not in name:
            share["GEMM"] += t
        elif any(s in name for s in ("attention", "flash", "fmha", "sdpa", "ragged", "combine", "cudnn")):
            share["attention"] += t
        elif "norm" in name or "rsqrt" in name:      # (inductor's fused RMS norm kernels are named for rsqrt)
            share["norms"] += t
        elif "memset" not in name and "memcpy" not in name:
            share["other"] += t
    total = sum(share.values()) or 1.0
    return {k: v / total for k, v in share.items()}


def profile_line(shares):
    return ", ".join(f"{k} {100 * v:.0f}%" for k, v in shares.items())


# ------------------------------------------------------------------------------------------------ the cases

def run_dense(torch, side_by_side, kind, B, L, ref32, peer, ours, opts):
    """train or prefill at B x L: rows of tokens/s per candidate, errors, profiles."""
    cfg = ours.config
    dev = ours.qkv.device
    g = torch.Generator(device=dev).manual_seed(B * L)
    mk = lambda: torch.randn(B, L, cfg.hidden, device=dev, generator=g)     # noqa: E731
    x32, r32, dy32, dr32 = mk(), mk(), mk(), mk()
    sets = [tuple(t.to(cfg.dtype) for t in (x32, r32, dy32, dr32)), tuple(t.to(cfg.dtype) for t in (mk(), mk(), mk(),
                                                                                                      mk()))]
    step = train_step if kind == "train" else prefill_step
    cands = {"tiledsl": step(torch, ours), "torch eager": step(torch, peer)}
    if opts.ours_compiled:
        cands["tiledsl compiled"] = step(torch, _compiled(torch, ours, "default"))
    for mode in opts.modes:
        cands[f"torch.compile {mode}"] = step(torch, _compiled(torch, peer, mode))
    names = ["out", "residual"] + (["d_x", "d_residual"] + [f"d_{n}" for n, _ in ours.named_parameters()]
                                   if kind == "train" else [])
    want = step(torch, ref32)(x32, r32, dy32, dr32)
    errs = {}
    for name, fn in list(cands.items()):
        t0 = time.time()
        try:
            errs[name] = errors(torch, fn(*sets[0]), want, names)       # also the compile, outside the timing
        except Exception as e:           # a candidate that fails drops out; the others still run
            print(f"  {name}: failed ({type(e).__name__}: {e})", flush=True)
            del cands[name]
            continue
        print(f"  {name}: first call {time.time() - t0:.1f} s", flush=True)
    del want
    ms = dict(zip(cands, side_by_side(list(cands.values()), torch, sets, reps=opts.reps)))
    return _row(torch, kind, B, L, B * L, ms, errs, cands, sets[0])


def _row(torch, kind, B, n, tokens, ms, errs, cands, args):
    row = dict(kind=kind, batch=B, tokens=n, ms=ms, tokens_per_s={k: tokens / (t / 1e3) for k, t in ms.items()},
               errors=errs)
    compiled = [t for k, t in ms.items() if k.startswith("torch.compile")]
    ours = ms.get("tiledsl")
    if ours:
        if compiled:
            row["vs_compile"] = min(compiled) / ours
        if "torch eager" in ms:
            row["vs_eager"] = ms["torch eager"] / ours
    row["profile"] = {}
    for name in ("tiledsl", "torch eager"):
        if name in cands:
            try:
                row["profile"][name] = profile(torch, lambda f=cands[name]: f(*args))
            except Exception as e:
                row["profile"][name] = f"failed: {type(e).__name__}: {e}"
    print_row(row)
    return row


def print_row(row):
    what = {"train": "training step", "prefill": "prefill", "decode": "decode step"}[row["kind"]]
    shape = f"{row['batch']} x {row['tokens']}" if row["kind"] != "decode" else \
        f"batch {row['batch']}, context {row['tokens']}"
    print(f"{what}, {shape}:")
    for k, t in row["ms"].items():
        print(f"  {k:36s} {t:9.3f} ms  {row['tokens_per_s'][k]:12.0f} tokens/s")
    if "vs_compile" in row:
        print(f"  tiledsl vs the faster torch.compile: {row['vs_compile']:.2f}x")
    if "vs_eager" in row:
        print(f"  tiledsl vs torch eager: {row['vs_eager']:.2f}x")
    for k, e in row["errors"].items():
        worst = max(e.values()) if e else float("nan")
        print(f"  error vs float32, {k}: worst {worst:.2e}  " + " ".join(f"{n} {v:.1e}" for n, v in e.items()))
    for k, p in row["profile"].items():
        print(f"  profile {k}: {p if isinstance(p, str) else profile_line(p)}")
    print(flush=True)


def run_decode(torch, side_by_side, B, ctx, ref32, peer, ours, opts):
    """One token per sequence against ctx - 1 cached tokens (random K/V), page size PAGE. The candidates share one
    cache (a 32k context at batch 256 is 34 GB of K and V for the layer): each step writes its new token's K/V at
    position ctx - 1, the same every call, and attends over it."""
    cfg = ours.config
    dev = ours.qkv.device
    g = torch.Generator(device=dev).manual_seed(B + ctx)
    x = torch.randn(B, 1, cfg.hidden, device=dev, generator=g)
    r = torch.randn(B, 1, cfg.hidden, device=dev, generator=g)
    k, v, table, lens = ours.new_cache(B, ctx, PAGE)
    k.normal_(generator=g)
    v.normal_(generator=g)
    lens.fill_(ctx - 1)
    xs, rs = x.to(cfg.dtype), r.to(cfg.dtype)
    # the float32 reference on the first few sequences (their pages are the first ones: new_cache hands them out in
    # order), from the same cache contents
    sub = min(B, 4)
    per = table.shape[1]
    want = ref32.decode(x[:sub], k[:sub * per].float(), v[:sub * per].float(), table[:sub], lens[:sub], r[:sub])

    def graphed(block):
        if SMOKE:                       # no CUDA graph on the CPU: the eager step
            return eager(block)
        # warm-up and capture on one side stream: the ops tune, compile and make their per-stream workspaces at
        # their first calls on a stream (docs/ops.md, CUDA graphs)
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(2):
                block.decode(xs, k, v, table, lens, rs)
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=s):
            out = block.decode(xs, k, v, table, lens, rs)
        return (lambda: graph.replay()), out

    def compiled(block, mode):
        for t in (k, v, table, lens, xs, rs):
            torch._dynamo.mark_static_address(t)     # cudagraph trees keep the graph for inputs mutated in place
        fn = torch.compile(block.decode, mode=mode, fullgraph=True, dynamic=False)
        for _ in range(3):
            out = fn(xs, k, v, table, lens, rs)
        return (lambda: fn(xs, k, v, table, lens, rs)), out

    def eager(block):
        return (lambda: block.decode(xs, k, v, table, lens, rs)), block.decode(xs, k, v, table, lens, rs)

    makers = {"tiledsl": lambda: graphed(ours), "torch eager": lambda: eager(peer)}
    if opts.ours_compiled:
        makers["tiledsl compiled reduce-overhead"] = lambda: compiled(ours, "reduce-overhead")
    makers["torch.compile reduce-overhead"] = lambda: compiled(peer, "reduce-overhead")
    cands, errs = {}, {}
    for name, make in makers.items():
        t0 = time.time()
        try:
            fn, out = make()
            fn()
            _sync(torch)
            errs[name] = errors(torch, [o[:sub] for o in out], want, ["out", "residual"])
            cands[name] = fn
        except Exception as e:
            print(f"  {name}: failed ({type(e).__name__}: {e})", flush=True)
            continue
        print(f"  {name}: set up in {time.time() - t0:.1f} s", flush=True)
    ms = dict(zip(cands, side_by_side([lambda f=f: f() for f in cands.values()], torch, [()], reps=opts.reps)))
    return _row(torch, "decode", B, ctx, B, ms, errs, cands, ())


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    p.add_argument("--quick", action="store_true", help="a few cases: " + str(QUICK))
    p.add_argument("--only", default=",".join(KINDS), help="train, prefill, decode (comma-separated)")
    p.add_argument("--modes", default=",".join(COMPILE_MODES),
                   help="torch.compile modes for train and prefill (comma-separated; 'default' is mode=None)")
    p.add_argument("--batches", default=",".join(map(str, DECODE_BATCHES)), help="decode batches (comma-separated)")
    p.add_argument("--contexts", default=",".join(map(str, DECODE_CONTEXTS)),
                   help="decode contexts in tokens (comma-separated)")
    p.add_argument("--ours-compiled", action="store_true", help="also time the tiledsl block under torch.compile")
    p.add_argument("--reps", type=int, default=20, help="timed calls per candidate")
    p.add_argument("--timeout", type=float, default=570.0, help="seconds before faulthandler ends the run")
    p.add_argument("--list", action="store_true", help="print the cases and exit (no GPU needed)")
    p.add_argument("--smoke", action="store_true",
                   help="no GPU: the tiny layer on CPU tensors (the interpreter), every code path once, wall-clock "
                        "times (meaningless as figures)")
    p.add_argument("--json", help="write the rows to this file")
    opts = p.parse_args(argv)
    opts.modes = [m for m in opts.modes.split(",") if m]
    opts.batches = [int(b) for b in opts.batches.split(",") if b]
    opts.contexts = [int(c) for c in opts.contexts.split(",") if c]
    todo = cases(opts)
    if opts.list:
        for c in todo:
            print(*c)
        return 0
    faulthandler.dump_traceback_later(opts.timeout, exit=True)
    import torch
    from llama_block import TINY, LlamaConfig
    global SMOKE
    SMOKE = opts.smoke
    if SMOKE:
        timer, cfg, device = wall_side_by_side, TINY, "cpu"
        todo = [(k, b, n) for k, b, n in ((("train", 1, 16), ("prefill", 1, 16), ("decode", 2, 40)))
                if k in opts.only]
        opts.reps = min(opts.reps, 2)
    elif not torch.cuda.is_available():
        print("benchmarks/model.py needs a CUDA GPU (--list prints the cases, --smoke runs the tiny layer on the CPU)")
        return 0
    else:
        from gemm import side_by_side as timer
        cfg, device = LlamaConfig(), "cuda"
    torch._dynamo.config.cache_size_limit = 64        # one compile per (candidate, shape)
    torch.backends.cuda.matmul.allow_tf32 = False      # the float32 reference in true float32
    ref32, peer, ours = blocks(torch, cfg, device)
    rows = []
    for kind, B, n in todo:
        print(f"== {kind} {B} x {n}", flush=True)
        try:
            if kind == "decode":
                rows.append(run_decode(torch, timer, B, n, ref32, peer, ours, opts))
            else:
                rows.append(run_dense(torch, timer, kind, B, n, ref32, peer, ours, opts))
        except Exception:
            traceback.print_exc()
            print(f"== {kind} {B} x {n}: failed; going on", flush=True)
        if not SMOKE:
            torch.cuda.empty_cache()
        if opts.json:
            with open(opts.json, "w") as f:
                json.dump(rows, f, indent=1)
    faulthandler.cancel_dump_traceback_later()
    return 0


if __name__ == "__main__":
    sys.exit(main())
