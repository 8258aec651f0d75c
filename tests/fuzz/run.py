"""The fuzzer's driver: make mutants, have a worker process judge each under a timeout, count, save failures.

    python -m tests.fuzz --seconds 600 --seed 1 [--workers 1] [--timeout 20] [--out DIR] [--max N] [--only NAME]

Prints a table per seed and the totals; each failure's mutant is saved (with what was mutated and what happened in
a comment at the top) under --out, one file per distinct failure (same kind and same place or message).
Exit status 1 when there was a failure.
"""
from __future__ import annotations

import argparse
import hashlib
import multiprocessing
import os
import pathlib
import random
import re
import sys
import tempfile
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field

if __package__ in (None, ""):          # run as a script: python tests/fuzz/run.py
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent.parent))

from tests.fuzz import judge as J          # noqa: E402
from tests.fuzz.mutate import mutate       # noqa: E402
from tests.fuzz.seeds import all_seeds     # noqa: E402

COLUMNS = ["mutants", "compiled", "located", "not_a_kernel", "internal", "leak", "unlocated", "hang", "crash"]


@dataclass
class Failure:
    kind: str
    seed: str
    detail: str
    mutations: list
    source: str
    tb: str | None = None
    saved: str | None = None

    def signature(self):
        """Failures with the same kind and place (or message without paths, numbers and quotes) are one bug."""
        place = re.search(r" at (\S+:\d+)", self.detail)
        if place and self.kind in ("internal", "hang"):
            return self.kind, self.detail.split(" ")[0], place.group(1)
        text = re.sub(r"\S*\.py:\d+:\d+|0x[0-9a-f]+|\d+|'[^']*'|\"[^\"]*\"", "#", self.detail.splitlines()[0])
        return self.kind, text[:120]


@dataclass
class Report:
    counts: dict = field(default_factory=lambda: defaultdict(Counter))
    failures: list = field(default_factory=list)
    seconds: float = 0.0

    def add(self, seed, outcome):
        self.counts[seed]["mutants"] += 1
        self.counts[seed][outcome] += 1

    def distinct(self):
        seen = {}
        for f in self.failures:
            seen.setdefault(f.signature(), f)
        return list(seen.values())

    def table(self):
        rows = [[s] + [c[k] for k in COLUMNS] for s, c in sorted(self.counts.items())]
        total = Counter()
        for c in self.counts.values():
            total.update(c)
        rows.append(["total"] + [total[k] for k in COLUMNS])
        head = ["seed"] + COLUMNS
        widths = [max(len(str(r[i])) for r in rows + [head]) for i in range(len(head))]
        fmt = lambda r: "  ".join(str(v).rjust(w) if i else str(v).ljust(w)  # noqa: E731
                                  for i, (v, w) in enumerate(zip(r, widths)))
        lines = [fmt(head)] + [fmt(r) for r in rows]
        lines.append(f"{self.seconds:.0f} s; {len(self.failures)} failures, {len(self.distinct())} distinct")
        return "\n".join(lines)


class Worker:
    """One process that imports tiledsl once and judges mutants; killed and replaced on a timeout."""

    def __init__(self, ctx, tmp):
        self.conn, child = ctx.Pipe()
        self.dump = os.path.join(tmp, f"stack-{time.monotonic_ns()}.txt")
        self.proc = ctx.Process(target=J.worker_main, args=(child, self.dump), daemon=True)
        self.proc.start()
        child.close()
        self.served = 0

    def ask(self, req, timeout):
        try:
            self.conn.send((*req, timeout))
        except OSError:
            return "crash", f"the worker was gone before the case (exit code {self.proc.exitcode})", None
        self.served += 1
        if not self.conn.poll(timeout):
            time.sleep(0.5)
            stack = pathlib.Path(self.dump).read_text() if os.path.exists(self.dump) else ""
            where, place = J.hung_in(stack, req[0])
            if where == "mutant":       # the mutant's own Python was slow (np.arange(2**31) ...)
                return "not_a_kernel", f"slow in its own code at {place}", None
            return "hang", f"no answer within {timeout} s, at {place}", stack[-4000:]
        try:
            return self.conn.recv()
        except (EOFError, OSError):
            return "crash", f"the worker died (exit code {self.proc.exitcode})", None

    def alive(self):
        return self.proc.is_alive()

    def stop(self, kill=False):
        if kill or not self.proc.is_alive():
            self.proc.kill()
        else:
            try:
                self.conn.send(None)
            except OSError:
                pass
        self.proc.join(5)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join()


def fuzz(seconds=60.0, seed=0, timeout=20.0, max_mutants=None, only=None, out=None, log=None, recycle=200):
    """Judge mutants for `seconds` (or until max_mutants); the Report. One worker: the machines this runs on are
    shared, and the judging is CPU-bound."""
    rng = random.Random(seed)
    seeds = [s for s in all_seeds() if not only or s.name in only]
    if not seeds:
        raise SystemExit(f"no seed named {only}")
    report = Report()
    ctx = multiprocessing.get_context("spawn")
    start = time.monotonic()
    seen = set()
    with tempfile.TemporaryDirectory(prefix="tiledsl-fuzz-") as tmp:
        worker = Worker(ctx, tmp)
        n = 0
        try:
            while time.monotonic() - start < seconds and (max_mutants is None or n < max_mutants):
                s = rng.choice(seeds)
                driver = rng.choice(s.drivers)
                text, done = mutate(s.text, s.region, rng)
                digest = hashlib.sha1(text.encode()).hexdigest()[:12]
                if not done or digest in seen:
                    continue
                seen.add(digest)
                n += 1
                name = f"fuzz_{s.name}_{n}_{digest}"
                path = os.path.join(tmp, name + ".py")
                with open(path, "w") as f:
                    f.write(text)
                if not worker.alive() or worker.served >= recycle:
                    worker.stop()
                    worker = Worker(ctx, tmp)
                outcome, detail, tb = worker.ask((path, driver, name), timeout)
                if outcome in ("hang", "crash"):
                    worker.stop(kill=True)
                    worker = Worker(ctx, tmp)
                report.add(s.name, outcome)
                if outcome in J.FAILURES:
                    fail = Failure(outcome, s.name, detail, [f"driver {driver}"] + done, text, tb)
                    report.failures.append(fail)
                    if out is not None:
                        _save(fail, out, len(report.failures))
                    if log:
                        log(f"[{n}] {outcome} in {s.name}: {detail.splitlines()[0][:200]}")
                os.unlink(path)
        finally:
            worker.stop()
    report.seconds = time.monotonic() - start
    return report


def _save(fail, out, i):
    out = pathlib.Path(out)
    out.mkdir(parents=True, exist_ok=True)
    head = [f"# fuzz failure: {fail.kind} (seed {fail.seed})"] + [f"# mutation: {m}" for m in fail.mutations]
    head += ["# " + line for line in fail.detail.splitlines()]
    if fail.tb:
        head += ["# " + line for line in fail.tb.splitlines()]
    path = out / f"{i:04d}_{fail.kind}_{fail.seed}.py"
    path.write_text("\n".join(head) + "\n" + fail.source)
    fail.saved = str(path)


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m tests.fuzz", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seconds", type=float, default=60, help="how long to run (default 60)")
    p.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    p.add_argument("--timeout", type=float, default=20, help="seconds one mutant may take before it is a hang (20)")
    p.add_argument("--max", type=int, default=None, dest="max_mutants", help="stop after this many mutants")
    p.add_argument("--only", action="append", help="fuzz only this seed (repeatable): " +
                   ", ".join(s.name for s in all_seeds()))
    p.add_argument("--out", default="fuzz-failures", help="folder for the failures' mutants (fuzz-failures)")
    p.add_argument("--quiet", action="store_true", help="do not print failures as they happen")
    o = p.parse_args(argv)
    report = fuzz(o.seconds, o.seed, o.timeout, o.max_mutants, o.only, o.out,
                  log=None if o.quiet else lambda s: print(s, flush=True))
    print(report.table())
    for f in report.distinct():
        print(f"- {f.kind} in {f.seed}: {f.detail.splitlines()[0][:200]}\n  {f.saved}")
    return 1 if report.failures else 0


if __name__ == "__main__":
    sys.exit(main())
