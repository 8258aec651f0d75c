"""What the attention benchmarks' rows have in common (benchmarks/attention.py's forward and backward tables,
benchmarks/attention_fp8_bench.py's FP8 table): the TFLOP/s of a timed shape, and the cells of its table line. One
spelling here keeps the three tables readable side by side (the same n/a, the same rounding, the winning variant
named the same way with every variant's figure beside it)."""


def timing(flop, quick):
    """(TFLOP/s of a median time in ms for `flop` operations, bench()'s options: --quick times fewer runs)."""
    return (lambda ms: flop / (ms * 1e-3) / 1e12), (dict(reps=10, min_ms=50.0) if quick else {})


ROUNDS = 3                  # benchmarks/attention.py --rounds sets it


def side_by_side(fns: dict, torch, bench, reps: dict) -> dict:
    """{name: median ms}: each fn timed by bench() once a round for ROUNDS rounds, the fns in turn (a different one
    first each round), the median of its rounds. Side by side, because the H200 runs these kernels near its 700 W
    cap: timed one after the other, whoever ran first after an idle spell had cooler silicon (the GEMM benchmark's
    `side_by_side` saw cuBLAS at 748 TFLOP/s first in a process and 688 interleaved). `reps`: timing()'s bench
    options for the whole measurement, spread over the rounds."""
    import numpy as np
    per = dict(reps, reps=min(reps.get("reps", 30), 10), min_ms=reps.get("min_ms", 150.0) / ROUNDS)
    names = list(fns)
    times = {k: [] for k in names}
    for r in range(ROUNDS):
        for k in names[r % len(names):] + names[:r % len(names)]:
            times[k].append(bench(fns[k], torch, **per))
    return {k: float(np.median(v)) for k, v in times.items()}


def tflops(x) -> str:
    """A TFLOP/s cell: n/a where the path did not run (None)."""
    return "n/a" if x is None else f"{x:.0f}"


def ratio(r, ours, theirs) -> str:
    """r[ours] / r[theirs] to two places; n/a where either is missing (or 0)."""
    return "n/a" if not r.get(ours) or not r.get(theirs) else f"{r[ours] / r[theirs]:.2f}"


def variant(c) -> str:
    """A configuration tuple as --configs spells it (2.128.2.0), any other label as it is."""
    return ".".join(map(str, c)) if isinstance(c, tuple) else str(c)


def best_of(best, each) -> str:
    """The fastest variant, with every variant's TFLOP/s beside it where more than one ran."""
    return variant(best) + (" (" + ", ".join(f"{variant(c)}: {t:.0f}" for c, t in each.items()) + ")"
                            if len(each) > 1 else "")


def notes(r) -> str:
    """The row's notes (a backend that could not run the shape), bracketed, or nothing."""
    return f" ({'; '.join(r['notes'])})" if r.get("notes") else ""


def explicit_configs(text) -> list:
    """--configs given as configurations: '8.1.1,2.128.2.0' -> [(8, 1, 1), (2, 128, 2, 0)]."""
    return [tuple(int(x) for x in c.split(".")) for c in text.split(",")]
