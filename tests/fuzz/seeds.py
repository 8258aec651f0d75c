"""The kernels the fuzzer starts from, each with the part of its text it mutates and how its mutants are compiled.

A driver is a small picklable tuple the worker understands:
  ("kernels", names)                      compile each named JITFunction on arrays made from its annotations
  ("gemm", (ab, out, config, shape))      build tiledsl/ops/gemm/mma.py's kernel with make_gemm, then compile it
  ("import", ())                          importing the module compiles (the docs pages call .compile themselves)
"""
from __future__ import annotations

import ast
import pathlib
import re
from dataclasses import dataclass

ROOT = pathlib.Path(__file__).resolve().parent.parent.parent
GPU_MARK = "# needs a GPU"

# small GEMM configurations (BM, BN, BK, WM, WN, stages, double-buffered fragments, spread, unroll, bulk, epilogue)
# with a static 64^3 shape: one cp.async pipeline, one bulk-copy pipeline, one with the shared-memory epilogue
GEMM_DRIVERS = [
    ("float16", "float16", (64, 64, 32, 2, 2, 2, 1), (64, 64, 64)),
    ("bfloat16", "float32", (64, 64, 32, 2, 2, 3, 0), (64, 64, 64)),
    ("float16", "float16", (64, 64, 32, 2, 2, 2, 1, 0, 1, 1), (64, 64, 64)),
    ("float16", "bfloat16", (64, 64, 32, 2, 2, 2, 1, 0, 1, 0, 1), (64, 64, 64)),
]


@dataclass(frozen=True)
class Seed:
    name: str
    text: str
    region: tuple          # (first, last) 0-based line numbers, inclusive, that mutations may touch
    drivers: tuple         # one is picked per mutant


def _region(lines, start_pat, stop_pat):
    """From the first line matching start_pat up to the next matching stop_pat (None: to the end)."""
    start = next(i for i, t in enumerate(lines) if re.match(start_pat, t))
    if stop_pat is None:
        return start, len(lines) - 1
    stop = next(i for i, t in enumerate(lines) if i > start and re.match(stop_pat, t))
    return start, stop - 1


def _example(name, start_pat, stop_pat, drivers, path=None):
    text = (ROOT / (path or f"examples/{name}.py")).read_text()
    return Seed(name, text, _region(text.splitlines(), start_pat, stop_pat), tuple(drivers))


def _without_top_level_asserts(text):
    """The pages check their own PTX with top-level asserts; a mutant that compiles to other code is still a
    compiled kernel, so each assert becomes `pass` (line numbers kept)."""
    lines = text.splitlines()
    for node in ast.parse(text).body:
        if isinstance(node, ast.Assert):
            lines[node.lineno - 1] = "pass"
            for i in range(node.lineno, node.end_lineno):
                lines[i] = ""
    return "\n".join(lines) + "\n"


def _doc(page):
    blocks = re.findall(r"```python\n(.*?)```", page.read_text(), re.S)
    text = _without_top_level_asserts("\n\n".join(b for b in blocks if not b.startswith(GPU_MARK)))
    return Seed(f"doc_{page.stem}", text, (0, len(text.splitlines()) - 1), (("import", ()),))


def all_seeds() -> list[Seed]:
    seeds = [
        _example("seed_mma", r"la = ", r"def inputs", [("kernels", ("warp_mma",))]),
        _example("seed_fma", r"@tiledsl.jit", r"def main", [("kernels", ("affine_fma",))]),
        _example("gemm", r"def layouts", None, [("gemm", d) for d in GEMM_DRIVERS], "tiledsl/ops/gemm/mma.py"),
    ]
    seeds += [_doc(p) for p in sorted((ROOT / "docs" / "patterns").glob("*.md"))]
    return seeds
