"""The interpreter's race detector beside compute-sanitizer's racecheck on the GPU, kernel by kernel (issue 33):
runs benchmarks/racecheck_sample.py under `compute-sanitizer --tool racecheck`, splits its output at the sample's
"== case" lines, counts the hazards racecheck reported for each kernel, and prints them beside the interpreter's
verdict for the same kernel.

    python benchmarks/racecheck_compare.py [--sanitizer PATH] [--timeout S]      # on a GPU machine

A row "both" is a race both tools see; "interpreter only" is expected for the async-proxy cases (racecheck does not
model TMA, wgmma or the async proxy) and for races the GPU's schedule happened not to expose in this run.
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import racecheck_sample as S  # noqa: E402

HAZARD = re.compile(r"(Race reported|Error: Potential .* hazard|hazard detected)", re.IGNORECASE)


def sanitizer_path(given):
    for p in (given, shutil.which("compute-sanitizer"), "/usr/local/cuda/bin/compute-sanitizer",
              "/usr/local/cuda/compute-sanitizer/compute-sanitizer"):
        if p and os.path.exists(p):
            return p
    return None


def per_case(text):
    """{case id: hazards reported} from the sanitizer's output of the whole sample."""
    counts, cur = {}, None
    for line in text.splitlines():
        m = re.match(r"== (\S+) \((shared|async|clean)\)", line)
        if m:
            cur = m.group(1)
            counts[cur] = 0
        elif cur is not None and HAZARD.search(line):
            counts[cur] += 1
    return counts


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sanitizer", help="compute-sanitizer's path (default: PATH, then /usr/local/cuda)")
    ap.add_argument("--timeout", type=int, default=300)
    ns = ap.parse_args()
    exe = sanitizer_path(ns.sanitizer)
    if exe is None:
        print("compute-sanitizer not found (give --sanitizer PATH)")
        return 2
    env = dict(os.environ, PYTHONPATH=os.path.dirname(HERE) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    # the analysis report (racecheck's default: one line a racing pair of accesses), every report printed (the
    # default limit of 100 ends the output inside the first kernel)
    r = subprocess.run([exe, "--tool", "racecheck", "--print-limit", "0", sys.executable,
                        os.path.join(HERE, "racecheck_sample.py")], capture_output=True, text=True,
                       timeout=ns.timeout, env=env)
    text = r.stdout + r.stderr
    counts = per_case(text)
    by_id = S.cases()
    print("| kernel | kind | racecheck hazards | interpreter | verdict |")
    print("| --- | --- | ---: | --- | --- |")
    agree, silent = 0, 0
    for cid in S.SHARED + S.ASYNC + list(S.CLEAN):
        verdict = S.on_interpreter(cid, by_id)
        flagged = not verdict.startswith("NO RACE")
        n = counts.get(cid)
        gpu = "not run" if n is None else n
        both = "both" if flagged and n else "interpreter only" if flagged else "racecheck only" if n else "neither"
        agree += both == "both" and cid in S.SHARED
        silent += both == "neither" and cid in S.CLEAN
        print(f"| {cid} | {S.kind(cid)} | {gpu} | {verdict[:70]} | {both} |")
    print(f"\n{agree} of {len(S.SHARED)} shared-memory racy kernels flagged by both; {silent} of {len(S.CLEAN)} "
          f"fixed kernels silent on both; sanitizer exit {r.returncode}")
    tail = [ln for ln in text.splitlines() if "ERROR SUMMARY" in ln or "RACECHECK SUMMARY" in ln]
    print("\n".join(tail[-3:]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
