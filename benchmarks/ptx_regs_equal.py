"""Whether the kernels of two PTX snapshot folders (benchmarks/ptx_snapshot.py) that differ in text still assemble to
the same resources: `ptxas -arch=sm_90a -v` of each, registers, spill stores and loads and stack frame compared.
A change that only reorders what LLVM numbers (phi nodes placed in another order) moves register names in the PTX;
this says whether ptxas's allocation came out the same, whether the cubins are even byte-identical, and the SASS
size of each kernel (a kernel capped by maxnreg/setmaxnreg reports its cap either way: the code is the stronger
answer).

    python benchmarks/ptx_regs_equal.py BEFORE_DIR AFTER_DIR [-j 2]   # a line per differing file, then a summary

Exit status 1 if any differing file's figures differ (or one side fails to assemble).
"""
import argparse
import concurrent.futures as cf
import os
import pathlib
import re
import struct
import subprocess
import sys
import tempfile

FIELDS = {"registers": r"Used (\d+) registers", "spill_stores": r"(\d+) bytes spill stores",
          "spill_loads": r"(\d+) bytes spill loads", "stack": r"(\d+) bytes stack frame"}


def resources(path: pathlib.Path, arch: str) -> dict:
    """{kernel name: {field: int}} from ptxas -v, and the cubin's bytes under "<cubin>"."""
    with tempfile.TemporaryDirectory() as d:
        r = subprocess.run(["ptxas", f"-arch={arch}", "-v", "-O3", str(path), "-o", os.path.join(d, "k.cubin")],
                           capture_output=True, text=True)
        if r.returncode != 0:
            return {"<error>": {"text": r.stderr.strip()[:200]}}
        with open(os.path.join(d, "k.cubin"), "rb") as f:
            cubin = f.read()
    out, name = {"<cubin>": cubin}, None
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


def code_bytes(cubin: bytes) -> dict:
    """{".text.<kernel>": size} from the cubin's ELF64 section headers: SASS bytes, 16 per instruction."""
    shoff, = struct.unpack_from("<Q", cubin, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", cubin, 0x3A)
    heads = [struct.unpack_from("<IIQQQQ", cubin, shoff + i * shentsize) for i in range(shnum)]
    names_at = heads[shstrndx][4]
    out = {}
    for name_off, _, _, _, _, size in heads:
        end = cubin.index(b"\0", names_at + name_off)
        name = cubin[names_at + name_off:end].decode()
        if name.startswith(".text."):
            out[name] = size
    return out


def compare(a: pathlib.Path, b: pathlib.Path, arch: str):
    ra, rb = resources(a, arch), resources(b, arch)
    ca, cb = ra.pop("<cubin>", None), rb.pop("<cubin>", None)
    if ca is not None and cb is not None:
        ra["<sass bytes>"], rb["<sass bytes>"] = code_bytes(ca), code_bytes(cb)
    same = "<error>" not in ra and all(ra.get(k) == rb.get(k) for k in ra if k != "<sass bytes>")
    return a.name, same, ra, rb, ca is not None and ca == cb


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
    bad = identical = same_size = 0
    with cf.ThreadPoolExecutor(args.j) as ex:
        for name, same, ra, rb, cubin_same in ex.map(lambda p: compare(*p, args.arch), pairs):
            bad += not same
            identical += cubin_same
            size = ra.get("<sass bytes>") == rb.get("<sass bytes>")
            same_size += size
            code = ("cubin identical" if cubin_same else "same SASS size" if size else
                    f"SASS bytes {ra.get('<sass bytes>')} -> {rb.get('<sass bytes>')}")
            print(f"{'same' if same else 'DIFFERENT'} ({code}): {name} {ra if same else (ra, rb)}")
    print(f"{len(pairs)} files differ in text; registers, spills and stack equal in {len(pairs) - bad} (cubins "
          f"byte-identical in {identical}, SASS of equal size in {same_size}), different in {bad}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
