"""A shape fuzz of the public GEMMs of tiledsl.ops (issue 31): `matmul` (f16, bf16) and `matmul_fp8` (e4m3) on
shapes drawn from a fixed seed, every result checked against torch, and a hang reported as a failure with its
shape instead of a stuck process.

Shapes (draw_shapes; no torch needed): M, N, K in 1..--max-dim, the dtypes taken in turn; each dtype cycles through
the kinds of KINDS in a shuffled order: log-uniform dims, dims near a multiple of 64/128/256 (offset -3..+3),
a mix of the two, K not a multiple of 8 (f16/bf16: the padded mma.sync path), M or N below 16, and skinny
(M <= 64, N and K at least 1024). K is otherwise a multiple of 8 (16 for e4m3: hopper_matmul_fp8's TMA rows), drawn
in those units so that "near a multiple" gives K tails of 8..24. Every --tune-every-th shape (f16/bf16) runs with
tune=True (the autotuner), the rest with tune=False. The work is capped so that 300 shapes fit in about 6 minutes on
an H200: M*N*K <= WORK_CAP (2e12: the f32 reference is ~80 ms there) and each of M*N, M*K, N*K <= ELEM_CAP (2e8
elements: 800 MB as f32), by shrinking the largest dim of the product over its cap, keeping its residue mod 256
(so a ragged dim stays ragged). The multipliers being log-uniform, most shapes are small (seed 0's 300: 17 TFLOP in
all), so the time goes to compiling (one mma.sync kernel per padded K % 8 != 0 shape, ~1 s each), tuning and
starting workers; an estimate, not yet measured.

Checks: each shape runs twice (the first call makes the plan, the second is the steady call) into an output
filled with NaN, so that an element no tile writes fails; f16/bf16 against a.float() @ b.float().T (relative
Frobenius error <= 1e-2), e4m3 against the f32 product of the dequantised inputs times the scales (<= 5e-2); a
NaN/Inf where the reference is finite fails either way. Any exception is an error (matmul refuses no f16/bf16
shape: it pads what it cannot tile).

Liveness: one worker subprocess (--worker) runs the shapes in order, printing START i / PLAN i / DONE i lines;
faulthandler kills it when one shape takes more than --timeout s, and the parent kills it when no line comes for
--timeout + GRACE s. The shape it died on is a HANG (or a CRASH: exit code and last stderr lines), and a new worker
resumes at the next shape (as it does after an error that leaves the CUDA context unusable); after --give-up dead
workers in a row (a wedged GPU) the rest are "not run" and fail too. Tuned winners persist in tiledsl's disk cache
(TILEDSL_CACHE_DIR); --fresh-cache tunes and compiles in an empty one.

    python benchmarks/gemm_fuzz.py [--count 300] [--seed 0] [--dtypes float16,bfloat16,e4m3] [--out-json FILE]
    python benchmarks/gemm_fuzz.py --list --count 20    # the shapes only (no GPU)
"""
import argparse
import json
import math
import os
import queue
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

DTYPES = ("float16", "bfloat16", "e4m3")
KINDS = ("log", "near", "mixed", "mixed", "ragged_k", "small_m", "small_n", "skinny")
WORK_CAP = 2e12
ELEM_CAP = 2e8
TOL = {"float16": 1e-2, "bfloat16": 1e-2, "e4m3": 5e-2}
GRACE = 30          # the parent's watchdog: seconds past --timeout before it kills a silent worker
FAILURES = ("hang", "wrong", "crash", "error", "not run")


def _logu(rng, lo, hi):
    return min(hi, max(lo, int(math.exp(rng.uniform(math.log(lo), math.log(hi + 1))))))


def _dim(rng, how, hi, lo=1):
    """One dim in lo..hi: log-uniform, or near (-3..+3) a multiple of 64/128/256 (the multiplier log-uniform, so
    that 63, 65, 129 come up as often as 8191)."""
    if how == "mixed":
        how = rng.choice(("log", "near"))
    if how == "log":
        return _logu(rng, lo, hi)
    m = rng.choice((64, 128, 256))
    k = _logu(rng, max(1, lo // m), max(1, hi // m))
    return min(hi, max(lo, k * m + rng.randint(-3, 3)))


def _cap(dims):
    """Shrink the largest dim of whichever product is furthest over its cap until none is, keeping its residue
    mod 256 (K's alignment, M's raggedness) where the shrunk value allows."""
    for _ in range(32):
        M, N, K = dims
        over = [(M * N * K / WORK_CAP, (0, 1, 2)), (M * N / ELEM_CAP, (0, 1)), (M * K / ELEM_CAP, (0, 2)),
                (N * K / ELEM_CAP, (1, 2))]
        worst, which = max(over)
        if worst <= 1:
            break
        j = max(which, key=lambda d: dims[d])
        target = int(dims[j] / worst)
        new = target - (target - dims[j]) % 256
        if new < 1:
            new = max(16, target - (target - dims[j]) % 16)
        dims[j] = new
    return dims


def _shape(rng, kind, dtype, max_dim):
    """(M, N, K) of one kind; K in units of 8 (16 for e4m3) except for ragged_k on f16/bf16."""
    unit = 16 if dtype == "e4m3" else 1 if kind == "ragged_k" else 8
    how = kind if kind in ("log", "near") else "mixed"
    M, N = _dim(rng, how, max_dim), _dim(rng, how, max_dim)
    K = _dim(rng, how, max_dim // unit) * unit
    if kind == "ragged_k" and unit == 1 and K % 8 == 0:
        K -= rng.randint(1, 3)
    if kind == "small_m":
        M = rng.randint(1, 15)
    elif kind == "small_n":
        N = rng.randint(1, 15)
    elif kind == "skinny":
        lo = min(1024, max_dim)
        M, N = rng.randint(1, 64), _dim(rng, "mixed", max_dim, lo)
        K = _dim(rng, "mixed", max_dim // unit, max(1, lo // unit)) * unit
    return _cap([M, N, K])


def draw_shapes(count, seed=0, dtypes=DTYPES, max_dim=20000, tune_every=10):
    """The fuzz's shapes: a list of dicts (i, M, N, K, dtype, kind, tune), a pure function of its arguments."""
    rng = random.Random(seed)
    cycles = {d: [] for d in dtypes}
    shapes = []
    for i in range(count):
        dt = dtypes[i % len(dtypes)]
        if not cycles[dt]:
            cycles[dt] = rng.sample(KINDS, len(KINDS))
        kind = cycles[dt].pop()
        M, N, K = _shape(rng, kind, dt, max_dim)
        tune = dt != "e4m3" and tune_every > 0 and i % tune_every == 0
        shapes.append(dict(i=i, M=M, N=N, K=K, dtype=dt, kind=kind, tune=tune))
    return shapes


# ---------------------------------------------------------------- the worker (imports torch and the GPU)

def _run_one(torch, G, s):
    """Two calls of one shape, checked; returns (status, err, plan, steady ms, note, context still usable)."""
    i, M, N, K, dt = s["i"], s["M"], s["N"], s["K"], s["dtype"]
    g = torch.Generator(device="cuda").manual_seed(1000003 * i + M + N + K)
    plan, ms, err = "-", 0.0, float("nan")
    try:
        if dt == "e4m3":
            a = torch.randn(M, K, device="cuda", generator=g).to(torch.float8_e4m3fn)
            b = torch.randn(N, K, device="cuda", generator=g).to(torch.float8_e4m3fn)
            sa, sb = (torch.tensor([v], device="cuda") for v in (0.75, 1.25))
            out = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
            plan = "matmul_fp8"

            def call():
                G.matmul_fp8(a, b, sa, sb, out=out)
        else:
            a = torch.randn(M, K, device="cuda", dtype=getattr(torch, dt), generator=g)
            b = torch.randn(N, K, device="cuda", dtype=a.dtype, generator=g)
            out = torch.empty(M, N, device="cuda", dtype=a.dtype)
            plan = G.plan_of(a, b, out=out, tune=s["tune"]).describe       # tuning happens here
            print(f"PLAN {i} {plan}", flush=True)

            def call():
                G.matmul(a, b, out=out, tune=s["tune"])
        ref = a.float() @ b.float().T * (0.75 * 1.25 if dt == "e4m3" else 1.0)
        errs = []
        for _ in range(2):
            out.fill_(float("nan"))
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            call()
            torch.cuda.synchronize()        # a hang stops here, where faulthandler's timer finds it
            ms = (time.perf_counter() - t0) * 1e3
            if dt == "e4m3" and plan == "matmul_fp8":
                plan = G.fp8_plan_of(a, b, torch.bfloat16) or "fp8 (no plan)"
                print(f"PLAN {i} {plan}", flush=True)
            if (~torch.isfinite(out) & torch.isfinite(ref)).any().item():
                return "wrong", float("nan"), plan, ms, "NaN/Inf where the reference is finite", True
            errs.append(((out.float() - ref).norm() / ref.norm()).item())
        err = max(errs)
        ok = err <= TOL[dt]
        return ("ok" if ok else "wrong"), err, plan, ms, "" if ok else f"relative error {err:.2e}", True
    except Exception as e:      # any exception (a LaunchError too) is the shape's error; the worker goes on if it can
        note = f"{type(e).__name__}: {' '.join(str(e).split())}"[:400]
        try:        # a fault poisons the CUDA context: then a fresh worker takes the next shape
            torch.cuda.synchronize()
            alive = torch.ones(1, device="cuda").add_(1).item() == 2
            torch.cuda.empty_cache()
        except Exception:
            alive = False
        return "error", err, plan, ms, note, alive


def worker(path, start, timeout):
    import faulthandler
    sys.path.insert(0, ROOT)
    import torch
    import tiledsl.ops as G                             # matmul, matmul_fp8, plan_of, fp8_plan_of
    torch.backends.cuda.matmul.allow_tf32 = False       # the reference in true f32
    with open(path) as f:
        shapes = json.load(f)
    for s in shapes[start:]:
        i = s["i"]
        print(f"START {i}", flush=True)
        faulthandler.dump_traceback_later(timeout, exit=True)
        status, err, plan, ms, note, alive = _run_one(torch, G, s)
        faulthandler.cancel_dump_traceback_later()
        if note:
            print(f"NOTE {i} {note}", flush=True)
        print(f"DONE {i} {status} {err:.3e} {plan} {ms:.3f}", flush=True)
        if not alive:
            return 3
    return 0


# ---------------------------------------------------------------- the parent (no torch)

def worker_command(path, start, timeout):
    return [sys.executable, os.path.abspath(__file__), "--worker", "--shapes", path, "--start", str(start),
            "--timeout", str(timeout)]


def _spawn(command, env):
    err = tempfile.TemporaryFile(mode="w+")
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=err, text=True, bufsize=1, cwd=ROOT, env=env,
                            start_new_session=True)     # its own process group: a kill reaches its forked compilers
    lines = queue.Queue()

    def pump():
        for line in proc.stdout:
            lines.put(line.rstrip("\n"))
        lines.put(None)
    threading.Thread(target=pump, daemon=True).start()
    return proc, lines, err


def _kill(proc):
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        proc.kill()
    try:
        proc.wait(timeout=GRACE)
    except subprocess.TimeoutExpired:   # stuck in the driver: leave it, a new worker (or give-up) follows
        pass


def _stderr(err):
    """The worker's stderr: faulthandler's "Timeout (" line and the stacks under it (the main thread's last) where it
    fired, else the last 4 lines."""
    err.seek(0)
    text = err.read()
    at = text.rfind("Timeout (")
    lines = [ln for ln in (text[at:] if at >= 0 else text[-8000:]).splitlines() if ln.strip()]
    return lines[:1] + lines[1:][-24:] if at >= 0 else lines[-4:]


def run_fuzz(shapes, timeout, give_up=3, env=None, command=worker_command, log=print):
    """Run the shapes in worker subprocesses; returns one result dict per shape (the shape's keys plus status,
    err, plan, ms, what, wall_s)."""
    fd, path = tempfile.mkstemp(suffix=".json", prefix="gemm_fuzz_")
    with os.fdopen(fd, "w") as f:
        json.dump(shapes, f)
    results, nxt, dead_in_a_row = {}, 0, 0
    try:
        while nxt < len(shapes) and dead_in_a_row < give_up:
            proc, lines, err = _spawn(command(path, nxt, timeout), env)
            current, plan, notes, killed, started, t_start = None, "-", {}, False, False, time.time()
            deadline = time.time() + timeout + GRACE
            while True:
                try:
                    line = lines.get(timeout=max(0.0, deadline - time.time()))
                except queue.Empty:     # silent too long; or it exited and a forked straggler holds the pipe
                    killed = proc.poll() is None
                    _kill(proc)
                    break
                if line is None:
                    break
                word, _, rest = line.partition(" ")
                idx, _, rest = rest.partition(" ")
                if word == "START":
                    current, plan, started, t_start = int(idx), "-", True, time.time()
                    deadline = t_start + timeout + GRACE
                elif word == "PLAN":
                    plan = rest
                elif word == "NOTE":
                    notes[int(idx)] = rest
                elif word == "DONE":
                    parts = rest.split(" ")
                    j = int(idx)
                    res = dict(shapes[j], status=parts[0], err=float(parts[1]), plan=" ".join(parts[2:-1]),
                               ms=float(parts[-1]), what=notes.get(j, ""), wall_s=round(time.time() - t_start, 3))
                    results[j] = res
                    log(_line(res))
                    current, nxt = None, j + 1
                    if parts[0] in ("ok", "wrong"):
                        dead_in_a_row = 0
            rc = proc.returncode
            if not killed:
                try:            # its pipe closed; its exit may still be stuck in the driver's teardown
                    rc = proc.wait(timeout=timeout + GRACE)
                except subprocess.TimeoutExpired:
                    _kill(proc)
            tail = _stderr(err)
            err.close()
            if current is None:
                if started:     # between shapes: done, or left after an error that poisoned its CUDA context
                    dead_in_a_row += rc != 0
                    continue
                current = nxt       # died before its first START (an import error, a broken driver)
            if killed:
                status, what = "hang", f"no output for {timeout + GRACE} s: worker killed"
            elif tail and tail[0].startswith("Timeout ("):
                status, what = "hang", f"over --timeout {timeout} s: faulthandler killed the worker"
            else:
                status, what = "crash", f"exit code {rc}: {' | '.join(ln.strip()[:200] for ln in tail[-3:])}"
            res = dict(shapes[current], status=status, err=float("nan"), plan=plan, ms=0.0, what=what[:600],
                       wall_s=round(time.time() - t_start, 3))
            results[current] = res
            log(_line(res))
            if status == "hang" and tail:
                log("\n".join("      " + ln for ln in tail))     # where each thread was (the last is the main one)
            nxt, dead_in_a_row = current + 1, dead_in_a_row + 1
        if nxt < len(shapes):
            log(f"fuzz: gave up after {give_up} dead workers in a row; {len(shapes) - nxt} shapes not run")
        for s in shapes[nxt:]:
            results[s["i"]] = dict(s, status="not run", err=float("nan"), plan="-", ms=0.0, what="gave up",
                                   wall_s=0.0)
    finally:
        os.unlink(path)
    return [results[s["i"]] for s in shapes]


def _shape_str(r):
    return f"{r['M']}x{r['N']}x{r['K']}"


def _line(r):
    err = "" if math.isnan(r["err"]) else f" err {r['err']:.1e}"
    what = f" ({r['what']})" if r["status"] != "ok" and r["what"] else ""
    return (f"  #{r['i']:<4} {_shape_str(r):>19} {r['dtype']:<8} {'tune' if r['tune'] else '    '} "
            f"{r['status'].upper() if r['status'] != 'ok' else 'ok'}{err} {r['ms']:.2f} ms  {r['plan']}{what}")


def report(results, seconds, log=print):
    """The failure table and the summary lines; returns the number of failures."""
    bad = [r for r in results if r["status"] in FAILURES]
    if bad:
        log("\n| # | shape (MxNxK) | dtype | tune | plan | what |\n|---|---|---|---|---|---|")
        for r in bad:
            what = f"{r['status'].upper()}: {r['what']}".replace("|", "/")
            log(f"| {r['i']} | {_shape_str(r)} | {r['dtype']} | {r['tune']} | {r['plan']} | {what} |")
    count = {k: sum(r["status"] == k for r in results) for k in FAILURES}
    per = {}
    for r in results:
        per[r["dtype"]] = per.get(r["dtype"], 0) + 1
    log(f"\nper dtype: {', '.join(f'{d} {n}' for d, n in per.items())}; {seconds:.0f} s in all")
    log(f"fuzz: {len(results) - count['not run']} shapes, {count['hang']} hangs, {count['wrong']} wrong, "
        f"{count['crash']} crashes, {count['error']} errors")
    return len(bad)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--count", type=int, default=300)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--timeout", type=int, default=120, help="seconds one shape may take (compile and tune included)")
    p.add_argument("--dtypes", default=",".join(DTYPES), help="of float16, bfloat16, e4m3 (e4m3 needs sm_90)")
    p.add_argument("--tune-every", type=int, default=10, help="tune=True on every n-th shape (0: never)")
    p.add_argument("--max-dim", type=int, default=20000)
    p.add_argument("--give-up", type=int, default=3, help="stop after this many dead workers in a row")
    p.add_argument("--fresh-cache", action="store_true", help="compile and tune in an empty TILEDSL_CACHE_DIR")
    p.add_argument("--out-json")
    p.add_argument("--list", action="store_true", help="print the shapes and exit")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--shapes", help=argparse.SUPPRESS)
    p.add_argument("--start", type=int, default=0, help=argparse.SUPPRESS)
    o = p.parse_args(argv)
    if o.worker:
        return worker(o.shapes, o.start, o.timeout)
    dtypes = tuple(d.strip() for d in o.dtypes.split(",") if d.strip())
    if not dtypes or set(dtypes) - set(DTYPES) or o.max_dim < 16 or o.count < 1:
        p.error(f"--dtypes is a list of {', '.join(DTYPES)}; --max-dim >= 16; --count >= 1")
    shapes = draw_shapes(o.count, o.seed, dtypes, o.max_dim, o.tune_every)
    if o.list:
        for s in shapes:
            print(f"#{s['i']:<4} {_shape_str(s):>19} {s['dtype']:<8} {s['kind']:<8} {'tune' if s['tune'] else ''}")
        return 0
    print(f"gemm fuzz: {o.count} shapes, seed {o.seed}, dims 1..{o.max_dim}, {', '.join(dtypes)}, "
          f"timeout {o.timeout} s")
    env = dict(os.environ)
    cache = tempfile.TemporaryDirectory(prefix="gemm_fuzz_cache_") if o.fresh_cache else None
    if cache:
        env["TILEDSL_CACHE_DIR"] = cache.name
    t0 = time.time()
    try:
        results = run_fuzz(shapes, o.timeout, o.give_up, env)
    finally:
        if cache:
            cache.cleanup()
    seconds = time.time() - t0
    failures = report(results, seconds)
    if o.out_json:
        with open(o.out_json, "w") as f:
            rows = [dict(r, err=None if math.isnan(r["err"]) else r["err"]) for r in results]    # strict JSON
            json.dump({"args": vars(o), "seconds": round(seconds, 1), "failures": failures, "results": rows}, f,
                      indent=1)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
