"""Whether the kernels of two PTX snapshot folders (benchmarks/ptx_snapshot.py) that differ in text still assemble to
the same resources: `ptxas -arch=sm_90a -v` of each, registers, spill stores and loads and stack frame compared.
A change that only reorders what LLVM numbers (phi nodes placed in another order) moves register names in the PTX;
this says whether ptxas's allocation came out the same.

    python benchmarks/ptx_regs_equal.py BEFORE_DIR AFTER_DIR [-j 2]   # a line per differing file, then a summary

Exit status 1 if any differing file's figures differ (or one side fails to assemble).
"""
import argparse
import concurrent.futures as cf
import os
import pathlib
import re
import subprocess
import sys
import tempfile

FIELDS = {"registers": r"Used (\d+) registers", "spill_stores": r"(\d+) bytes spill stores",
          "spill_loads": r"(\d+) bytes spill loads", "stack": r"(\d+) bytes stack frame"}


def resources(path: pathlib.Path, arch: str) -> dict:
    """{kernel name: {field: int}} from ptxas -v (compile only; the cubin is thrown away)."""
    with tempfile.TemporaryDirectory() as d:
        r = subprocess.run(["ptxas", f"-arch={arch}", "-v", "-O3", str(path), "-o", os.path.join(d, "k.cubin")],
                           capture_output=True, text=True)
    if r.returncode != 0:
        return {"<error>": {"text": r.stderr.strip()[:200]}}
    out, name = {}, None
    for line in r.stderr.splitlines():
        m = re.search(r"Compiling entry function '([^']+)'", line)
        if m:
            name = m.group(1)
            out[name] = {}
        for field, pat in FIELDS.items():
            m = re.search(pat, line)
            if m and name is not None:
                out[name][field] = int(m.group(1))
    return out


def compare(a: pathlib.Path, b: pathlib.Path, arch: str):
    ra, rb = resources(a, arch), resources(b, arch)
    return a.name, ra == rb and "<error>" not in ra, ra, rb


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("before")
    ap.add_argument("after")
    ap.add_argument("-j", type=int, default=2)
    ap.add_argument("--arch", default="sm_90a")
    args = ap.parse_args(argv)
    before, after = pathlib.Path(args.before), pathlib.Path(args.after)
    pairs = []
    for f in sorted(after.glob("*.ptx")):
        g = before / f.name
        if g.exists() and g.read_bytes() != f.read_bytes():
            pairs.append((g, f))
    bad = 0
    with cf.ThreadPoolExecutor(args.j) as ex:
        for name, same, ra, rb in ex.map(lambda p: compare(*p, args.arch), pairs):
            bad += not same
            print(f"{'same' if same else 'DIFFERENT'}: {name} {ra if same else (ra, rb)}")
    print(f"{len(pairs)} files differ in text; resources equal in {len(pairs) - bad}, different in {bad}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
