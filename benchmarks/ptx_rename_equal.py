"""Whether two PTX files are the same program up to a renaming of virtual registers: token for token equal once
every %r / %rd / %p / %f / %fd / %rs register of the first is mapped to the one in the same place of the second,
the map one-to-one. A change that only moves where the code generator numbers its values (an extra variable in the
front end, say) gives PTX that differs in names alone; this proves it where byte equality cannot.

    python benchmarks/ptx_rename_equal.py BEFORE_DIR AFTER_DIR      # every file in both, a line each
"""
import pathlib
import re
import sys

REG = re.compile(r"%(?:rd|rs|fd|r|p|f)\d+\b")


def rename_equal(a: str, b: str):
    """None if b is a with registers renamed one-to-one, else the first line where that fails."""
    la, lb = a.splitlines(), b.splitlines()
    if len(la) != len(lb):
        return f"{len(la)} lines against {len(lb)}"
    fwd, back = {}, {}
    for n, (x, y) in enumerate(zip(la, lb), 1):
        if REG.sub("%", x) != REG.sub("%", y):
            return f"line {n}: {x.strip()[:80]!r} / {y.strip()[:80]!r}"
        for u, v in zip(REG.findall(x), REG.findall(y)):
            if fwd.setdefault(u, v) != v or back.setdefault(v, u) != u:
                return f"line {n}: {u} is {fwd[u]} and {v}"
    return None


def main(before, after):
    bad = 0
    for f in sorted(pathlib.Path(before).glob("*.ptx")):
        g = pathlib.Path(after) / f.name
        if not g.exists():
            print(f"missing: {f.name}")
            bad += 1
            continue
        x, y = f.read_text(), g.read_text()
        why = None if x == y else rename_equal(x, y)
        print(f"{'identical' if x == y else 'renamed' if why is None else 'DIFFERENT'}: {f.name}"
              + (f" ({why})" if why else ""))
        bad += why is not None
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]))
