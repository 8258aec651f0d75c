"""tiledsl's `matmul` against cuBLAS over a set of shapes (issue 31): `python benchmarks/gemm.py --sweep-shapes
[--dtypes float16,bfloat16,e4m3] [--quick] [--reps N] [--json FILE] [--shapes 'M,N,K;...']`.

The shape set (M, N, K; a is (M, K), b is (N, K), C = a @ b.T):
- LLM projections, for hidden sizes H = 4096, 5120, 8192 with their MLP widths F (4096: 11008 as Llama-2 7B and
  14336 as Llama-3 8B / Mistral 7B; 5120: 13824 as Llama-2 13B; 8192: 28672 as Llama-2/3 70B): the attention
  output projection (N = H, K = H), the fused QKV projection (N = 3H, K = H), the MLP up/gate projection (N = F,
  K = H) and the down projection (N = H, K = F); each with M (tokens) in 1, 16, 64, 128, 256, 1024, 4096, 16384.
  14 weights x 8 M = 112 shapes: from decoding (M <= 64, where the product reads the weight once and the weight
  read bandwidth is what counts) to prefill and training.
- squares 1024, 2048, 3072, 4000, 4096 (also an LLM shape), 8192;
- ragged sizes that no tile divides, or that are long and thin: 1000x3000x4000, 5000x7000x3000, 4095x4097x4096,
  1536x1536x4104, 256x8192x8192 (also an LLM shape), 777x12345x2048, 16384x1024x8192, and the issue's
  16384x8192x1024.
Duplicates are kept once (124 shapes), and shapes whose operands (a, b and C) exceed 6 GB are left out (none of
these do). `--quick` keeps 43 of them (QUICK_M and QUICK_OTHER: every M, every hidden size, 4 squares, 5 ragged).
For e4m3 only the shapes with N and K multiples of 16 remain: the kernel's TMA rows (K) and torch._scaled_mm
(both dimensions of its column-major b.T) need them (119 shapes, 40 quick).

Per shape: the first call of `matmul(a, b)` (f16/bf16; the autotuner runs there, per shape) or `matmul_fp8(a, b,
scale_a, scale_b, torch.bfloat16)` (e4m3, per-tensor scales) is made outside timing and checked against the fp32
product (relative Frobenius error <= 1e-2, e4m3 <= 5e-2); then gemm.py's side_by_side times it against cuBLAS
(`torch.matmul(a, b.T, out=c)`, e4m3 `torch._scaled_mm(a, b.T, ...)`): medians of CUDA events, the two
interleaved call by call, L2 flushed before each call, inputs rotated over 2 or 3 sets. Printed per dtype: a
markdown table (plan, TFLOP/s, ratio tiledsl/cuBLAS, error; for M <= 64 the weight read bandwidth N*K*elt_size /
time in TB/s, and as a fraction of the device copy bandwidth, measured in the same run as a 2^28-element fp32
copy_, bytes read + written / time); then one summary line per dtype (geometric mean and minimum of the ratios,
the minimum over shapes with M, N, K >= 1024, the minimum ratio and weight-read fraction at M <= 64, the wrong
results). The exit status is 1 if any result is wrong or any tiledsl call failed.

Importable without torch or a GPU (torch is passed in, and only `run` touches it): tests/test_gemm_sweep_shapes.py
checks the shape set on the CPU.
"""
import json
import math
import time

# hidden size H -> MLP widths F of the models above
MLP = {4096: (11008, 14336), 5120: (13824,), 8192: (28672,)}
M_VALUES = (1, 16, 64, 128, 256, 1024, 4096, 16384)
SQUARES = (1024, 2048, 3072, 4000, 4096, 8192)
RAGGED = ((1000, 3000, 4000), (5000, 7000, 3000), (4095, 4097, 4096), (1536, 1536, 4104), (256, 8192, 8192),
          (777, 12345, 2048), (16384, 1024, 8192),
          (16384, 8192, 1024))        # the shape: a short K, where a K loop of 16 steps leaves little to hide
MAX_OPERAND_BYTES = 6e9               # a, b and C together; beyond that two input sets and the fp32 check crowd memory
# --quick: about a third, still every M and every hidden size; the weights of H = 4096 at the extreme M and one
# middle one, the other hidden sizes at two M each, and the squares and ragged sizes most likely to show a problem
QUICK_M = {4096: (1, 128, 16384), 5120: (64, 4096), 8192: (16, 1024)}
QUICK_OTHER = ((1024, 1024, 1024), (3072, 3072, 3072), (4000, 4000, 4000), (8192, 8192, 8192), (4095, 4097, 4096),
               (1536, 1536, 4104), (256, 8192, 8192), (777, 12345, 2048), (16384, 8192, 1024))
DTYPES = {"float16": "float16", "bfloat16": "bfloat16", "e4m3": "e4m3", "float8_e4m3fn": "e4m3"}
TOLERANCE = {"float16": 1e-2, "bfloat16": 1e-2, "e4m3": 5e-2}
SMALL_M = 64                          # M up to this reads the weight once per call: its bandwidth is reported


def llm_weights(H=None):
    """(N, K) of the LLM weight matrices of hidden size H (all of MLP's without H): the output projection (H, H),
    the fused QKV projection (3H, H), and per MLP width F the up/gate projection (F, H) and the down one (H, F)."""
    out = []
    for h, widths in MLP.items():
        if H is not None and h != H:
            continue
        out += [(h, h), (3 * h, h)]
        for f in widths:
            out += [(f, h), (h, f)]
    return out


def element_sizes(dtype):
    """(input, output) bytes per element: e4m3 products write bfloat16."""
    return (1, 2) if dtype == "e4m3" else (2, 2)


def operand_bytes(M, N, K, dtype="float16"):
    """Bytes of a (M, K), b (N, K) and C (M, N)."""
    i, o = element_sizes(dtype)
    return (M * K + N * K) * i + M * N * o


def fp8_ok(M, N, K):
    """Whether an e4m3 product of these sizes runs on both sides: K a multiple of 16 (the kernel's TMA rows of
    16-byte multiples) and N too (torch._scaled_mm wants both dimensions of b.T divisible by 16)."""
    return K % 16 == 0 and N % 16 == 0


def shapes(quick=False, dtype="float16"):
    """The sweep's (M, N, K) in table order (the LLM weights by model, M rising; squares; ragged), each once."""
    full = [(M, N, K) for (N, K) in llm_weights() for M in M_VALUES]
    full += [(s, s, s) for s in SQUARES] + [tuple(s) for s in RAGGED]
    keep = None
    if quick:
        keep = {(M, N, K) for H, ms in QUICK_M.items() for (N, K) in llm_weights(H) for M in ms}
        keep |= {tuple(s) for s in QUICK_OTHER}
    out, seen = [], set()
    for s in full:
        if s in seen or operand_bytes(*s, dtype) > MAX_OPERAND_BYTES or (dtype == "e4m3" and not fp8_ok(*s)):
            continue
        if keep is not None and s not in keep:
            continue
        seen.add(s)
        out.append(s)
    return out


def parse_shapes(text):
    """'M,N,K;M,N,K' -> [(M, N, K), ...] (gemm.py's --shapes form)."""
    return [tuple(int(x) for x in sh.split(",")) for sh in text.split(";") if sh.strip()]


def geomean(xs):
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def summarize(dtype, rows):
    """The summary numbers of one dtype's rows (dicts as run() makes them; a ratio is None where a side did not
    run): geometric mean and minimum of the ratios, the minimum over shapes with M, N, K >= 1024, the minimum ratio
    and weight-read fraction of copy at M <= SMALL_M, and the counts of wrong, failed and n/a results. The ratios
    are those of correct results only: a wrong kernel's speed says nothing (it is counted, and fails the run)."""
    timed = [r for r in rows if r["ratio"] is not None and r["status"] == "ok"]
    big = [r for r in timed if min(r["M"], r["N"], r["K"]) >= 1024]
    small = [r for r in timed if r["M"] <= SMALL_M]

    def least(rs, key="ratio"):
        r = min(rs, key=lambda r: r[key], default=None)
        return None if r is None else {"value": r[key], "shape": f"{r['M']}x{r['N']}x{r['K']}"}
    return {"dtype": dtype, "shapes": len(rows), "timed": len(timed),
            "geomean": geomean([r["ratio"] for r in timed]) if timed else None,
            "min": least(timed), "min_big": least(big), "min_small": least(small),
            "min_small_copy_fraction": least([r for r in small if r.get("weight_copy_fraction") is not None],
                                             "weight_copy_fraction"),
            "wrong": sum(r["status"] == "wrong" for r in rows), "failed": sum(r["status"] == "failed" for r in rows),
            "na": sum(r["status"] == "n/a" for r in rows)}


def summary_line(s):
    """`dtype: geomean X.XXx, min X.XXx at MxNxK, shapes with M,N,K >= 1024: min X.XXx, M<=64: min ratio X.XX, min
    weight-read fraction of copy X.XX; wrong: n` (and failed / n/a counts where there are any)."""
    def at(m, fmt="{:.2f}x"):
        return "-" if m is None else fmt.format(m["value"]) + f" at {m['shape']}"
    gm = "-" if s["geomean"] is None else f"{s['geomean']:.2f}x"
    line = (f"{s['dtype']}: geomean {gm}, min {at(s['min'])}, shapes with M,N,K >= 1024: min {at(s['min_big'])}, "
            f"M<={SMALL_M}: min ratio {at(s['min_small'], '{:.2f}')}, min weight-read fraction of copy "
            f"{at(s['min_small_copy_fraction'], '{:.2f}')}; wrong: {s['wrong']}")
    if s["failed"]:
        line += f", failed: {s['failed']}"
    if s["na"]:
        line += f", n/a: {s['na']}"
    return line + f" ({s['timed']} of {s['shapes']} shapes correct and timed)"


def table(dtype, rows):
    """One dtype's rows as a markdown table; the bandwidth columns only at M <= SMALL_M."""
    def f(x, fmt):
        return "-" if x is None else fmt.format(x)
    lines = [f"\n### {dtype} (tiledsl vs cuBLAS{' torch._scaled_mm' if dtype == 'e4m3' else ''})\n",
             "| M | N | K | plan | tiledsl TFLOP/s | cuBLAS TFLOP/s | ratio | rel. err | tiledsl weight TB/s | "
             "cuBLAS weight TB/s | tiledsl / copy | cuBLAS / copy |",
             "| ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in rows:
        plan = r["plan"] if r["status"] in ("ok", "wrong") else f"{r['status']}: {r['plan']}"
        err = f(r["err"], "{:.1e}") + (" WRONG" if r["status"] == "wrong" else "")
        lines.append(f"| {r['M']} | {r['N']} | {r['K']} | {plan} | {f(r['tflops'], '{:.0f}')} | "
                     f"{f(r['tflops_cublas'], '{:.0f}')} | {f(r['ratio'], '{:.2f}')} | {err} | "
                     f"{f(r.get('weight_tbs'), '{:.2f}')} | {f(r.get('weight_tbs_cublas'), '{:.2f}')} | "
                     f"{f(r.get('weight_copy_fraction'), '{:.2f}')} | "
                     f"{f(r.get('weight_copy_fraction_cublas'), '{:.2f}')} |")
    return lines


def copy_bandwidth(torch, side_by_side, reps):
    """The device copy bandwidth in TB/s: dst.copy_(src) of 2^28 fp32 elements (1 GiB each way), bytes read +
    written over the median time, timed as the products are (side_by_side: L2 flushed, so both sides hit HBM)."""
    n = 1 << 28
    src = torch.randn(n, device="cuda")
    dst = torch.empty_like(src)
    ms = side_by_side([lambda d, s: d.copy_(s)], torch, [(dst, src)], max(reps, 10))[0]
    del src, dst
    torch.cuda.empty_cache()
    return 2 * n * 4 / (ms * 1e-3) / 1e12


def _fp8_plan(G, M, N, K, a, b, torch):
    """matmul_fp8's configuration for these operands (gemm.fp8_plan_of)."""
    return G.fp8_plan_of(a, b, torch.bfloat16) or "fp8 (no plan)"


def _inputs(torch, dtype, M, N, K):
    """Input sets (a, b, c) for side_by_side to rotate over: 3 where they are small, else 2 (gemm.py's rule), so
    that consecutive calls of one side do not see the same operands (L2 is flushed before each call anyway)."""
    nsets = 3 if M * K < 2 ** 26 else 2
    if dtype == "e4m3":
        e4m3 = torch.float8_e4m3fn
        sets = [((torch.randn(M, K, device="cuda") / 2).to(e4m3), (torch.randn(N, K, device="cuda") / 2).to(e4m3),
                 torch.empty(M, N, device="cuda", dtype=torch.bfloat16)) for _ in range(nsets)]
    else:
        dt = getattr(torch, dtype)
        sets = [(torch.randn(M, K, device="cuda", dtype=dt), torch.randn(N, K, device="cuda", dtype=dt),
                 torch.empty(M, N, device="cuda", dtype=dt)) for _ in range(nsets)]
    return sets


def measure(G, torch, side_by_side, dtype, M, N, K, reps, copy_tbs):
    """One row: the first (tuning) call outside timing, its error against fp32, then both sides timed."""
    import tiledsl
    row = {"dtype": dtype, "M": M, "N": N, "K": K, "plan": "", "ms": None, "ms_cublas": None, "tflops": None,
           "tflops_cublas": None, "ratio": None, "err": None, "status": "ok"}
    sets = _inputs(torch, dtype, M, N, K)
    a, b, c = sets[0]
    sa = torch.tensor([0.75], device="cuda")        # scales other than 1, so that a kernel that drops them is wrong
    sb = torch.tensor([1.25], device="cuda")
    if dtype == "e4m3":
        ours = lambda x, y, z: G.matmul_fp8(x, y, sa, sb, torch.bfloat16, out=z)  # noqa: E731
        peer = lambda x, y, z: torch._scaled_mm(x, y.T, scale_a=sa, scale_b=sb,  # noqa: E731
                                                out_dtype=torch.bfloat16)
    else:
        ours = lambda x, y, z: G.matmul(x, y, out=z)  # noqa: E731
        peer = lambda x, y, z: torch.matmul(x, y.T, out=z)  # noqa: E731
    t0 = time.perf_counter()
    try:
        c.fill_(float("nan"))                        # a tile the kernel never writes shows as NaN in the error
        ours(a, b, c)                                # routes and tunes (f16/bf16), outside timing
        torch.cuda.synchronize()
        row["plan"] = _fp8_plan(G, M, N, K, a, b, torch) if dtype == "e4m3" else G.plan_of(a, b, c).describe
    except tiledsl.LaunchError as e:                 # a shape the kernel refuses (say, no FP8 kernel): not wrong
        row["status"], row["plan"] = "n/a", str(e).splitlines()[0][:100]
    except Exception as e:  # noqa: BLE001 - one shape's failure is reported, the sweep goes on
        row["status"], row["plan"] = "failed", f"{type(e).__name__}: {str(e).splitlines()[0][:100] if str(e) else ''}"
    row["first_call_s"] = time.perf_counter() - t0
    if row["status"] == "ok":
        ref = a.float() @ b.float().T
        if dtype == "e4m3":
            ref *= (sa * sb)
        err = ((c.float() - ref).norm() / ref.norm()).item()
        del ref
        row["err"] = err
        if not err <= TOLERANCE[dtype]:              # NaN counts as wrong
            row["status"] = "wrong"
    flops = 2 * M * N * K
    fns = [ours, peer] if row["status"] in ("ok", "wrong") else [peer]
    try:
        times = side_by_side(fns, torch, sets, reps)
    except Exception as e:  # noqa: BLE001 - cuBLAS refusing a shape leaves the row without a ratio, not wrong
        print(f"{dtype} {M}x{N}x{K}: timing failed: {type(e).__name__}: {e}", flush=True)
        times = [None] * len(fns)
    if len(fns) == 1:
        times = [None] + times
    row["ms"], row["ms_cublas"] = times
    in_size = element_sizes(dtype)[0]
    for key, ms in (("", times[0]), ("_cublas", times[1])):
        if ms is None:
            continue
        row["tflops" + key] = flops / (ms * 1e-3) / 1e12
        if M <= SMALL_M:                             # the weight is read once: its bandwidth is the figure of merit
            tbs = N * K * in_size / (ms * 1e-3) / 1e12
            row["weight_tbs" + key] = tbs
            row["weight_copy_fraction" + key] = tbs / copy_tbs
    if times[0] is not None and times[1] is not None:
        row["ratio"] = times[1] / times[0]
    del sets, a, b, c
    torch.cuda.empty_cache()
    return row


def run(G, torch, side_by_side, opts):
    """The sweep: G is tiledsl.ops (matmul, matmul_fp8, plan_of, fp8_plan_of), side_by_side benchmarks/gemm.py's;
    opts has dtypes (comma-separated), quick, reps, json (a path or None) and shapes (gemm.py's --shapes form, or
    None for the set above). Returns the
    exit status: 1 if any result was wrong or any tiledsl call failed, 2 for an unknown dtype, else 0."""
    names = [d.strip() for d in getattr(opts, "dtypes", "float16,bfloat16").split(",") if d.strip()]
    unknown = [d for d in names if d not in DTYPES]
    if unknown:
        print(f"gemm --sweep-shapes: unknown dtype {', '.join(unknown)} (have {', '.join(DTYPES)})")
        return 2
    reps = getattr(opts, "reps", None) or 10
    quick = bool(getattr(opts, "quick", False))
    given = parse_shapes(opts.shapes) if getattr(opts, "shapes", None) else None
    print(f"{torch.cuda.get_device_name(0)}, torch {torch.__version__}, reps {reps}", flush=True)
    copy_tbs = copy_bandwidth(torch, side_by_side, reps)
    print(f"device copy bandwidth (2^28 fp32 copy_, read + write): {copy_tbs:.2f} TB/s", flush=True)
    report = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__, "reps": reps, "quick": quick,
              "copy_tbs": copy_tbs, "rows": [], "summaries": [], "seconds": {}}
    summaries = []
    tf = lambda x: "-" if x is None else f"{x:.0f}"  # noqa: E731
    for dtype in (DTYPES[d] for d in names):
        todo = [s for s in given if dtype != "e4m3" or fp8_ok(*s)] if given else shapes(quick, dtype)
        print(f"\n{dtype}: {len(todo)} shapes", flush=True)
        t0 = time.perf_counter()
        rows = []
        for i, (M, N, K) in enumerate(todo):
            r = measure(G, torch, side_by_side, dtype, M, N, K, reps, copy_tbs)
            rows.append(r)
            print(f"[{i + 1}/{len(todo)}] {dtype} {M}x{N}x{K}: {r['status']}, {tf(r['tflops'])} vs "
                  f"{tf(r['tflops_cublas'])} TFLOP/s" + (f" ({r['ratio']:.2f}x)" if r["ratio"] else "") +
                  (f", err {r['err']:.1e}" if r["err"] is not None else "") +
                  f", first call {r['first_call_s']:.1f} s; {r['plan']}", flush=True)
        seconds = time.perf_counter() - t0
        print("\n".join(table(dtype, rows)), flush=True)
        s = summarize(dtype, rows)
        summaries.append(s)
        print("\n" + summary_line(s) + f" [{seconds:.0f} s]", flush=True)
        report["rows"] += rows
        report["summaries"].append(s)
        report["seconds"][dtype] = seconds
        if getattr(opts, "json", None):              # after each dtype: a run cut short still leaves its rows
            with open(opts.json, "w") as fh:
                json.dump(report, fh, indent=1)
    which = "the given shapes" if given else f"{'quick' if quick else 'full'} shape set"
    print(f"\nSummary ({which}; reps {reps}; copy bandwidth {copy_tbs:.2f} TB/s):")
    for s in summaries:
        print(summary_line(s))
    return 1 if any(s["wrong"] or s["failed"] for s in summaries) else 0
