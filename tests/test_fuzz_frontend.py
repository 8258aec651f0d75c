"""Grammar-based fuzzing of the front end and the pattern checks.

Hypothesis builds random kernel source texts: assignments, typed and untyped arithmetic, element reads and writes
of tensor parameters and local/shared buffers with constant (possibly out-of-range) or run-time indices,
for/if/unroll/grid, random tile.apply calls with random opcodes, operands and keywords, random annotations and
launch configurations, and now and then a statement the language does not support. Each text is written to a
module on disk (so inspect.getsource works), imported, and compiled with numpy arrays standing for the arguments.

The only allowed outcomes are a CompiledKernel, a CompilationError or a LaunchError whose message does not
admit to a compiler bug (internal error, invalid generated LLVM IR, PTX that ptxas rejects). Anything else --
a KeyError, TypeError, AssertionError... escaping, or a bug message -- fails the test with the source text.
"""
import ast
import importlib.util
import itertools
import os
import random
import re
import tempfile

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tiledsl

HEADER = '''\
import tiledsl
from tiledsl import T
from tiledsl.layout import S, TileLayout, laneid

la = TileLayout(S[(1, 2, 2, 8, 2, 4) : (8, 4, 1, 4 @ laneid, 2, 1 @ laneid)])
lb = TileLayout(S[(1, 2, 8, 2, 4) : (4, 2, 4 @ laneid, 1, 1 @ laneid)])
ld = TileLayout(S[(1, 1, 2, 8, 4, 2) : (4, 4, 2, 4 @ laneid, 1 @ laneid, 1)])
lane32 = TileLayout(S[(32, 1) : (1 @ laneid, 1)])
rows = TileLayout(S[(4, 2) : (2, 1)])
lane_rep1 = TileLayout(S[(32, 1, 1) : (1 @ laneid, 1, 1)])
lane_rep2 = TileLayout(S[(32, 2, 1) : (1 @ laneid, 1, 1)])
lane_rep4 = TileLayout(S[(32, 4, 1) : (1 @ laneid, 1, 1)])
frag1 = TileLayout(S[(1, 8, 4) : (1, 4 @ laneid, 1 @ laneid)])
frag2 = TileLayout(S[(2, 8, 4) : (1, 4 @ laneid, 1 @ laneid)])
frag4 = TileLayout(S[(4, 8, 4) : (1, 4 @ laneid, 1 @ laneid)])
ZERO = 0
HALF = 0.5
NAME = "x"
'''

# name -> (annotation text, shape or None, dtype)
TENSORS = {
    "A": ("T.Tensor((4, 1), \"float32\")", (4, 1), "float32"),
    "B": ("T.Tensor((8,), \"int32\")", (8,), "int32"),
    "H": ("T.Tensor((4, 2), \"float16\")", (4, 2), "float16"),
    "W": ("T.Tensor((1, 2, 16, 8), \"uint32\")", (1, 2, 16, 8), "uint32"),
    "M": ("T.Tensor((\"N\", 4), \"float32\")", (5, 4), "float32"),
    "U": ("T.Tensor((2, 2), \"uint64\")", (2, 2), "uint64"),
    "Q": ("T.Tensor((32, 1), \"float32\")", (32, 1), "float32"),
}
SCALARS = {"n": "T.int32", "x": "T.float32", "u": "T.uint32", "f": "T.bool", "L": "T.int64", "d": "T.float64"}
BAD_ANNOTATIONS = ["int", "\"float32\"", "T.int16", "T.Tensor", "None", "\"T.Tensor((4,), 'float32')\"", "\"zz\"",
                   "\"T.Tensor((4,), 'float8')\""]

# Scalar bfloat16 arithmetic is left out while the codegen bug below (test_bf16_scalar_*) is open; put
# "bfloat16" back into DTYPES and the typed constants once those tests pass.
DTYPES = ["float32", "float16", "int32", "uint32", "int64", "uint64", "float64", "int8", "uint8",
          "int16", "uint16", "bool", "float8"]
OPCODES = [
    "fma.rn.f32", "fma.f32", "add.f32", "add.rn.f32", "sub.rz.f32", "mul.rn.f32", "mul.lo.s32", "mul.hi.u32",
    "add.s32", "add.sat.s32", "min.f32", "max.NaN.f32", "neg.f32", "abs.s32", "div.rn.f32", "div.approx.f32",
    "div.s32", "sqrt.rn.f32", "rcp.approx.f32", "ex2.approx.f32", "lg2.approx.ftz.f32", "mov.b32", "mov.b64",
    "mov.f32", "mov.u32", "cvt.rn.f16.f32", "cvt.f32.f16", "cvt.rzi.s32.f32", "cvt.rn.f32.s32", "cvt.rn.f16x2.f32",
    "cvt.rn.bf16.f32", "cvt.u32.u64", "cvt.s64.s32", "add.rn.f16x2", "fma.rn.bf16x2", "fma.rn.f32x2", "add.rn.bf16",
    "fma.rn.relu.f16", "ld.global.f32", "ld.global.v2.f32", "ld.global.v4.b32", "ld.shared.f32", "ld.local.f32",
    "ld.global.nc.f32", "ld.global.u64", "ld.global.L2::cache_hint.f32", "st.global.f32", "st.global.v2.f32",
    "st.shared.b32", "st.shared.v4.b32", "st.global.s32", "st.global.wb.f32", "ld.global.b16", "st.global.b16",
    "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32", "mma.sync.aligned.m16n8k8.row.col.f32.bf16.bf16.f32",
    "mma.sync.aligned.m16n8k16.row.col.f32.f16.bf16.f32", "mma.sync.aligned.m8n8k4.row.col.f32.f16.f16.f32",
    "ldmatrix.sync.aligned.m8n8.x4.shared.b16", "stmatrix.sync.aligned.m8n8.x2.shared.b16",
    "cp.async.ca.shared.global", "cp.async.commit_group", "frob.f32", "", "add", "ld", "mov.b32 ",
]
BAD_STATEMENTS = [
    "while n > 0:\n    pass", "try:\n    pass\nexcept Exception:\n    pass", "for i99 in range(n):\n    break",
    "for i99 in range(4):\n    continue", "del zz", "global UNUSED_GLOBAL", "import math", "raise ValueError()",
    "v9 = [1 for _ in range(2)]", "v9 = lambda: 1",
    "v9 = f\"{n}\"", "yield 1", "assert n > 0", "assert ZERO == 1, 'no'", "v9 = v8 = 1", "A.x = 1",
    "with T.cuda.syncthreads():\n    pass", "def inner():\n    pass", "return 1", "v9 = {1: 2}", "v9 = A @ A",
    "v9 = (v8 := 2)", "T.static_assert(ZERO == 1, 'static')", "v9 = NAME", "v9 = NAME + 1",
]
MMA_BLOCK = """\
ar{k} = T.alloc_local((8,), "uint32")
br{k} = T.alloc_local((4,), "uint32")
dr{k} = T.alloc_local((4,), "float32")
T.cuda.tile.apply(T.ptx["mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"], dr{k}.view(1, 1, 16, 8, layout={ld}),
                  ar{k}.view(1, 2, 16, 8, layout={la}), br{k}.view(1, 2, 8, 8, layout=lb), {c}, scope={scope})"""


class Gen:
    """Draws one kernel module's text from a seeded Random (hypothesis draws, replays and reports the seed).

    Most choices are well typed, so that many kernels get through every stage; `wild` mutations (about one node in
    twenty) put in wrong types, out-of-range indices, unknown names and unsupported statements."""

    def __init__(self, rnd, wild):
        self.rnd = rnd
        self.wild = wild                    # probability of a deliberate mistake at each choice point
        self.count = itertools.count()
        self.tensors = {}                   # name -> (shape, dtype)
        self.buffers = {}                   # name -> (shape, dtype, scope)
        self.vars = {}                      # scalar variable -> "f32" | "i32"
        self.loop_vars = []
        self.block_threads = 1

    def pick(self, seq):
        return self.rnd.choice(list(seq))

    def chance(self, p):
        return self.rnd.random() < p

    def oops(self):
        return self.rnd.random() < self.wild

    # -------------------------------------------------------------- kernel
    def module(self):
        params, ptext = [], []
        names = self.rnd.sample(sorted(TENSORS), self.rnd.randint(1, 4))
        if "A" not in names and self.chance(0.7):
            names.append("A")
        for name in names:
            ann, shape, dtype = TENSORS[name]
            if self.chance(self.wild / 4):
                ann = self.pick(BAD_ANNOTATIONS)
            self.tensors[name] = (shape, dtype)
            params.append((name, "tensor", shape, dtype))
            ptext.append(f"{name}: {ann}")
        scalars = self.rnd.sample(sorted(SCALARS), self.rnd.randint(0, 3))
        if "n" not in scalars and self.chance(0.7):
            scalars.append("n")
        for name in scalars:
            ann = SCALARS[name] if not self.chance(self.wild / 4) else self.pick(BAD_ANNOTATIONS)
            params.append((name, "scalar", None, SCALARS[name]))
            ptext.append(f"{name}: {ann}")
            if name in ("n",):
                self.vars[name] = "i32"
            elif name == "x":
                self.vars[name] = "f32"
        if self.chance(0.3):
            params.append(("C", "constexpr", None, None))
            ptext.append("C: T.constexpr")
        lines = []
        if self.chance(0.95):
            block = self.pick(["1", "32", "32", "64", "128", "(32, 2)", "(16, 2, 2)"])
            grid = self.pick(["1", "2", "(2, 3)"] + (["n"] if "n" in self.vars else []))
            if self.oops():
                block = self.pick(["2048", "(1, 1, 65)", "0", "n", "48", "1.5", "(1, 2, 3, 4)"])
            if self.oops():
                grid = self.pick(["0", "x", "(1, 2, 3, 4)", "-1"])
            self.block_threads = _threads(block)
            lines.append(f"T.device_entry(launch=T.cuda.LaunchConfig(grid={grid}, block={block}))")
        lines += self.statements(0, self.rnd.randint(1, 7))
        body = "\n".join("    " + ln for text in lines for ln in text.split("\n"))
        src = HEADER + "\n\n@tiledsl.jit\ndef kern(" + ", ".join(ptext) + "):\n" + body + "\n"
        return src, params

    def statements(self, depth, n):
        return [self.statement(depth) for _ in range(n)]

    def statement(self, depth):
        kinds = ["store", "store", "assign", "assign", "annassign", "augassign", "alloc", "apply", "apply",
                 "apply", "view", "pass", "sync", "mma"]
        if depth < 2:
            kinds += ["for", "for", "unroll", "grid", "if", "if"]
        if self.oops():
            return self.pick(BAD_STATEMENTS)
        return getattr(self, "s_" + self.pick(kinds))(depth)

    def block(self, depth):
        saved, saved_buffers = dict(self.vars), dict(self.buffers)
        inner = self.statements(depth + 1, self.rnd.randint(1, 3))
        # names bound inside run-time flow end with it (and a static `if` may never bind them)
        self.vars = {k: v for k, v in self.vars.items() if k in saved}
        self.buffers = saved_buffers
        return "\n".join("    " + ln for text in inner for ln in text.split("\n"))

    def s_pass(self, depth):
        return "pass"

    def s_sync(self, depth):
        return "T.cuda.syncthreads()"

    def s_mma(self, depth):
        k = next(self.count)
        c, scope, la, ld = "T.float32(0)", '"warp"', "la", "ld"
        if self.oops():
            c = self.pick(["0.0", "T.float16(0)", "x", "1", "T.int64(0)"])
        if self.oops():
            scope = self.pick(['"thread"', '"cta"', '"warpgroup"', '"cluster"'])
        if self.oops():
            la = self.pick(["lb", "rows", "lane32"])
        if self.oops():
            ld = self.pick(["la", "lane32", "rows"])
        return MMA_BLOCK.format(k=k, c=c, scope=scope, la=la, ld=ld)

    def s_store(self, depth):
        pool = self.writable()
        if not pool or self.oops():
            return f"{self.wild_element()} = {self.wild_expr(2)}"
        name, shape, dtype = self.pick(pool)
        value = self.typed(dtype, 2)
        return f"{name}[{self.indices(shape)}] = {value}"

    def writable(self):
        out = [(n, s, d) for n, (s, d) in self.tensors.items()]
        out += [(n, s, d) for n, (s, d, _) in self.buffers.items()]
        return sorted(out)

    def s_assign(self, depth):
        ty = self.pick(["f32", "i32"])
        same = [v for v, t in self.vars.items() if t == ty and v not in SCALARS]
        name = self.pick(same) if same and self.chance(0.5) else f"v{next(self.count)}"
        value = self.expr(ty, 3) if not self.oops() else self.wild_expr(3)
        if name not in self.vars:
            self.vars[name] = ty
        return f"{name} = {value}"

    def s_annassign(self, depth):
        name = f"v{next(self.count)}"
        ty = self.pick(["f32", "i32"])
        ann = {"f32": "float32", "i32": "int32"}[ty]
        if self.oops():
            ann = self.pick(["float16", "uint32", "float64", "bool"])
        text = f"{name}: T.{ann} = {self.expr(ty, 2)}"
        self.vars[name] = ty
        return text

    def s_augassign(self, depth):
        own = [v for v in self.vars if v not in SCALARS]
        if not own:
            return self.s_assign(depth)
        name = self.pick(own)
        ty = self.vars[name]
        op = self.pick(["+=", "-=", "*="] + (["//=", "%=", "<<=", "|="] if ty == "i32" else ["/="]))
        value = self.expr(ty, 2) if not self.oops() else self.wild_expr(2)
        return f"{name} {op} {value}"

    def s_alloc(self, depth):
        name = f"r{next(self.count)}"
        shape = self.pick([(4, 1), (4,), (1, 1), (2, 2), (8,), (4, 2), (1,), (2, 1)])
        dtype = self.pick(["float32", "float32", "uint32", "int32", "float16", "uint64"])
        scope = "shared" if self.chance(0.2) else "local"
        if self.oops():                                 # refused: the name is never bound
            shape = self.pick([(0,), (13000,), (4, -1)])
            return f"{name} = T.alloc_{scope}({shape!r}, \"{dtype}\")"
        if self.oops():
            dtype = self.pick(["bool", "float8", "int128"])
            return f"{name} = T.alloc_{scope}({shape!r}, \"{dtype}\")"
        self.buffers[name] = (shape, dtype, scope)
        return f"{name} = T.alloc_{scope}({shape!r}, \"{dtype}\")"

    def s_view(self, depth):
        if not self.buffers:
            return self.s_alloc(depth)
        base = self.pick(sorted(self.buffers))
        shape, dtype, scope = self.buffers[base]
        name = f"w{next(self.count)}"
        how = self.pick(["dtype", "shape", "layout"])
        if how == "dtype":
            nd = self.pick(["uint32", "float16", "uint64", "float32", "int8"])
            text = f"{name} = {base}.view(dtype=\"{nd}\")"
            bits = shape[-1] * _bits(dtype)
            if bits % _bits(nd) == 0:                     # otherwise refused (or not worth indexing)
                self.buffers[name] = (shape[:-1] + (bits // _bits(nd),), nd, scope)
        elif how == "shape":
            n = 1
            for e in shape:
                n *= e
            ns = self.pick([s for s in [(n,), (n, 1), (1, n), (2, n // 2)] if all(e > 0 for e in s)])
            if self.oops():
                ns = self.pick([(2 * n,), (3, 3)])
            text = f"{name} = {base}.view({', '.join(map(str, ns))})"
            self.buffers[name] = (ns, dtype, scope)
        else:
            lay, ns = self.pick([("rows", (4, 2)), ("lane32", (32, 1)), ("la", (1, 2, 16, 8))])
            text = f"{name} = {base}.view({', '.join(map(str, ns))}, layout={lay})"
            self.buffers[name] = (ns, dtype, scope)
        return text

    def s_for(self, depth):
        v = f"i{next(self.count)}"
        bound = self.pick(["4", "2, 8, 2", "0, 3"] + (["n", "0, n"] if "n" in self.vars else []))
        if self.oops():
            bound = self.pick(["x", "4.0", "0, 4, n", "A", "-1", "C", "0, 4, 0"])
        self.loop_vars.append(v)
        body = self.block(depth)
        self.loop_vars.pop()
        return f"for {v} in range({bound}):\n{body}"

    def s_unroll(self, depth):
        v = f"i{next(self.count)}"
        bound = self.pick(["4", "2", "1, 4", "0, 4, 2"])
        if self.oops():
            bound = self.pick(["n", "5000", "C", "x", "5"])
        self.loop_vars.append(v)
        body = self.block(depth)
        self.loop_vars.pop()
        return f"for {v} in T.unroll({bound}):\n{body}"

    def s_grid(self, depth):
        a, b = f"i{next(self.count)}", f"i{next(self.count)}"
        ext = self.pick(["2, 2", "2, 4"] + (["n, 4"] if "n" in self.vars else []))
        if self.oops():
            ext = self.pick(["2", "2, 2, 2", "x, 2"])
        self.loop_vars += [a, b]
        body = self.block(depth)
        del self.loop_vars[-2:]
        return f"for {a}, {b} in T.grid({ext}):\n{body}"

    def s_if(self, depth):
        text = f"if {self.expr('bool', 2)}:\n{self.block(depth)}"
        if self.chance(0.3):
            text += f"\nelif {self.expr('bool', 1)}:\n{self.block(depth)}"
        if self.chance(0.5):
            text += f"\nelse:\n{self.block(depth)}"
        return text

    # -------------------------------------------------------------- tile.apply
    def reg(self, shape, dtype, lines):
        """A local buffer of this shape and dtype: an existing one, or a new allocation added to `lines`."""
        fits = [n for n, (s, d, sc) in self.buffers.items() if s == shape and d == dtype and sc == "local"]
        if fits and self.chance(0.6):
            return self.pick(sorted(fits))
        name = f"r{next(self.count)}"
        self.buffers[name] = (shape, dtype, "local")
        lines.append(f"{name} = T.alloc_local({shape!r}, \"{dtype}\")")
        return name

    def s_apply(self, depth):
        if self.oops() or self.chance(0.15):
            return self.wild_apply()
        lines = []
        rep = self.pick([1, 2, 4])
        kind = self.pick(["fma", "add", "cvt", "ld", "st", "mov", "sh", "pack", "ldmatrix", "cp_async"])
        if kind == "ldmatrix":
            return self.ldmatrix()
        if kind == "cp_async":
            return self.cp_async()
        if kind == "fma":
            r = self.reg((rep, 1), "float32", lines)
            call = ("fma.rn.f32", [r, r, "T.float32(2)", self.pick(["T.float32(1)", r, "x" if "x" in self.vars
                                                                        else "1.0"])])
        elif kind == "add":
            ty, d = self.pick([("f32", "float32"), ("s32", "int32"), ("u32", "uint32"), ("f64", "float64")])
            r = self.reg((rep, 1), d, lines)
            op = self.pick(["add", "sub", "min", "max"]) + (".rn" if ty.startswith("f") and self.chance(0.5) else "")
            if op.startswith(("min", "max")):
                op = op.split(".")[0]
            call = (f"{op}.{ty}", [r, r, r])
        elif kind == "cvt":
            r = self.reg((rep, 1), "float32", lines)
            h = self.reg((rep, 1), "float16", lines)
            call = ("cvt.rn.f16.f32", [h, r]) if self.chance(0.5) else ("cvt.f32.f16", [r, h])
        elif kind in ("ld", "st"):
            shape, tname = ((4, 1), "A") if "A" in self.tensors else ((32, 1), "Q") if "Q" in self.tensors else \
                (None, None)
            if tname is None:
                return self.wild_apply()
            r = self.reg(shape, "float32", lines)
            call = ("ld.global.f32", [r, tname]) if kind == "ld" else ("st.global.f32", [tname, r])
        elif kind == "sh":
            fits = [n for n, (s, d, sc) in self.buffers.items() if s == (4, 1) and d == "float32" and sc == "shared"]
            sname = self.pick(sorted(fits)) if fits else None
            if sname is None:
                sname = f"s{next(self.count)}"
                self.buffers[sname] = ((4, 1), "float32", "shared")
                lines.append(f"{sname} = T.alloc_shared((4, 1), \"float32\")")
            r = self.reg((4, 1), "float32", lines)
            call = ("st.shared.f32", [sname, r]) if self.chance(0.5) else ("ld.shared.f32", [r, sname])
        elif kind == "mov":
            r = self.reg((rep, 1), "uint32", lines)
            call = ("mov.b32", [r, self.pick([r, "T.uint32(7)", "n" if "n" in self.vars else "1"])])
        else:
            w = self.reg((rep, 1), "uint32", lines)
            h = self.reg((rep, 2), "uint16", lines)
            call = ("mov.b32", [w, h]) if self.chance(0.5) else ("mov.b32", [h, w])
        opcode, operands = call
        kws = []
        if self.chance(0.15):
            kws.append("pred=" + self.pick(["n > 0" if "n" in self.vars else "True", "T.cuda.lane_id() < 4"]))
            if self.chance(0.5):
                kws.append("preserve_dst=True")
        if self.chance(0.1) and self.block_threads % 32 == 0:
            kws.append('scope="warp"')
            return "\n".join(lines + [self.lane_apply(opcode, rep)])
        lines.append(f"T.cuda.tile.apply({', '.join([f'T.ptx[{opcode!r}]'] + operands + kws)})")
        return "\n".join(lines)

    def ldmatrix(self):
        k, count = next(self.count), self.pick([1, 2, 4])
        op = self.pick(["ldmatrix", "ldmatrix", "stmatrix"])
        opcode = f"{op}.sync.aligned.m8n8.x{count}{self.pick(['', '.trans'])}.shared.b16"
        regs = f"rm{k}.view({count}, 8, 4, layout=frag{count})"
        operands = [regs, f"sm{k}"] if op == "ldmatrix" else [f"sm{k}", regs]
        return (f"sm{k} = T.alloc_shared(({count}, 8, 4), \"uint32\")\n"
                f"rm{k} = T.alloc_local(({count},), \"uint32\")\n"
                f"T.cuda.tile.apply(T.ptx[{opcode!r}], {', '.join(operands)}, scope=\"warp\")")

    def cp_async(self):
        k = next(self.count)
        if "W" in self.tensors:
            src, shape, dtype = "W[0, 0, 0:16, 0:4]", (16, 4), "uint32"
        elif "B" in self.tensors:
            src, shape, dtype = "B.view(2, 4)", (2, 4), "int32"
        else:
            return self.wild_apply()
        cache, chunk = self.pick([("cg", 16), ("ca", 16)])
        lines = [f"sc{k} = T.alloc_shared({shape!r}, \"{dtype}\")",
                 f"T.cuda.tile.apply(T.ptx[\"cp.async.{cache}.shared.global\"], sc{k}, {src}, chunk_bytes={chunk})",
                 "T.cuda.tile.apply(T.ptx[\"cp.async.commit_group\"])",
                 "T.cuda.tile.apply(T.ptx[\"cp.async.wait_group\"], 0)"]
        self.buffers[f"sc{k}"] = (shape, dtype, "shared")
        return "\n".join(lines)

    def lane_apply(self, opcode, rep):
        k = next(self.count)
        return (f"q{k} = T.alloc_local(({rep}, 1), \"float32\")\n"
                f"T.cuda.tile.apply(T.ptx[\"add.rn.f32\"], q{k}.view(32, {rep}, 1, layout=lane_rep{rep}), "
                f"q{k}.view(32, {rep}, 1, layout=lane_rep{rep}), T.float32(1), scope=\"warp\")")

    def wild_apply(self):
        op = self.pick(OPCODES)
        operands = [self.wild_operand() for _ in range(self.rnd.randint(0, 5))]
        kws = []
        if self.chance(0.4):
            kws.append("scope=" + self.pick(['"thread"', '"warp"', '"cta"', '"warpgroup"', '"cluster"', '"block"',
                                             "3"]))
        if self.chance(0.2):
            kws.append("pred=" + self.pick(["n > 0", "True", "False", "None", "f", "x", "A", "T.cuda.lane_id() < 4"]))
        if self.chance(0.1):
            kws.append("preserve_dst=" + self.pick(["True", "False", "n > 1", "1"]))
        if self.chance(0.05):
            kws.append(self.pick(["cache_policy=T.uint64(0)", "cache_policy=1.5", "chunk_bytes=16", "alpha=2"]))
        opcode = f"T.ptx[{op!r}]" if not self.chance(0.05) else self.pick([repr(op), "T.ptx[3]", "T.ptx[NAME]"])
        return f"T.cuda.tile.apply({', '.join([opcode] + operands + kws)})"

    def wild_operand(self):
        kind = self.pick(["buffer", "buffer", "slice", "tensor", "scalar"])
        pool = sorted(self.buffers) if kind != "tensor" and self.buffers else sorted(self.tensors)
        if kind == "scalar" or not pool:
            return self.pick(["T.float32(2)", "T.float32(0)", "1.0", "1", "T.uint32(0x3C003C00)", "x", "n",
                              "T.float16(1)", "T.uint64(0)", "(1, 2)", "NAME"])
        name = self.pick(pool)
        shape = self.buffers[name][0] if name in self.buffers else self.tensors[name][0]
        if kind == "slice":
            return f"{name}[{self.slice(shape[0])}]"
        return name

    def slice(self, extent):
        a = self.pick([0, 0, 1, 2, extent - 1, extent, -1])
        b = self.pick([a + 1, a + 2, extent, extent + 1, a])
        if self.chance(0.1):
            return self.pick(["n:n + 1", "0:4:2", ":", "1:", "n"])
        return f"{a}:{b}"

    # -------------------------------------------------------------- expressions
    def indices(self, shape):
        return ", ".join(self.index(e) for e in shape)

    def index(self, extent):
        if extent <= 0:
            return "0"
        if self.oops():
            return str(self.pick([extent, -1, 2**40, 1.5, "x", "zz", "A"]))
        ints = [v for v, t in self.vars.items() if t == "i32"] + self.loop_vars + ["T.cuda.lane_id()",
                                                                                     "T.cuda.thread_id()"]
        if self.chance(0.5) or not ints:
            return str(self.rnd.randrange(extent))
        return f"{self.pick(ints)} % {extent}"

    def typed(self, dtype, depth):
        """An expression of exactly `dtype`."""
        if dtype == "float32":
            return self.expr("f32", depth)
        if dtype == "int32":
            return self.expr("i32", depth)
        return f"T.cast({self.expr(self.pick(['f32', 'i32']), depth)}, \"{dtype}\")"

    def expr(self, ty, depth):
        if self.oops():
            return self.wild_expr(depth)
        if ty == "bool":
            if depth > 0 and self.chance(0.3):
                return f"({self.expr('bool', depth - 1)} {self.pick(['and', 'or'])} {self.expr('bool', depth - 1)})"
            if depth > 0 and self.chance(0.1):
                return f"(not {self.expr('bool', depth - 1)})"
            t = self.pick(["f32", "i32"])
            return f"({self.expr(t, depth - 1)} {self.pick(['<', '<=', '==', '!=', '>', '>='])} " \
                   f"{self.expr(t, depth - 1)})"
        if depth <= 0 or self.chance(0.3):
            return self.leaf(ty)
        kind = self.pick(["bin", "bin", "bin", "minmax", "ifexp", "cast", "un"])
        a, b = self.expr(ty, depth - 1), self.expr(ty, depth - 1)
        if kind == "bin":
            ops = ["+", "-", "*"] + (["/"] if ty == "f32" else ["//", "%", "&", "|", "^", "<<", ">>"])
            op = self.pick(ops)
            if op in ("//", "%") and not self.oops():
                b = str(self.rnd.randint(1, 7))
            if op in ("<<", ">>"):
                b = str(self.rnd.randint(0, 5))
            return f"({a} {op} {b})"
        if kind == "minmax":
            return f"{self.pick(['T.min', 'T.max'])}({a}, {b})"
        if kind == "ifexp":
            return f"({a} if {self.expr('bool', depth - 1)} else {b})"
        if kind == "un":
            return f"(-{a})" if ty == "f32" or self.chance(0.5) else f"(~{a})"
        other = "i32" if ty == "f32" else "f32"
        return f"T.cast({self.expr(other, depth - 1)}, \"{ {'f32': 'float32', 'i32': 'int32'}[ty]}\")"

    def leaf(self, ty):
        choices = ["const", "const", "var", "elem", "elem"]
        kind = self.pick(choices)
        if kind == "const":
            if ty == "f32":
                return self.pick(["0.0", "1.5", "-2.0", "0.5", "HALF", "T.float32(3)", "1"])
            return self.pick(["0", "1", "2", "3", "7", "-1", "ZERO", "T.int32(5)", "A.shape[0]" if "A" in
                              self.tensors else "4"])
        if kind == "var":
            pool = [v for v, t in self.vars.items() if t == ty] + (self.loop_vars if ty == "i32" else [])
            if ty == "i32":
                pool += ["T.cuda.lane_id()", "T.cuda.thread_id()", "T.cuda.block_id()", "T.cuda.warp_id()"]
            if pool:
                return self.pick(pool)
            return "1.0" if ty == "f32" else "1"
        want = "float32" if ty == "f32" else "int32"
        pool = [(n, s) for n, (s, d) in self.tensors.items() if d == want]
        pool += [(n, s) for n, (s, d, _) in self.buffers.items() if d == want]
        if not pool:
            return "1.0" if ty == "f32" else "1"
        name, shape = self.pick(sorted(pool))
        return f"{name}[{self.indices(shape)}]"

    # the wild side: anything goes
    def wild_element(self):
        pool = [(n, s) for n, (s, _) in self.tensors.items()] + [(n, v[0]) for n, v in self.buffers.items()]
        if not pool:
            return "zz[0]"
        name, shape = self.pick(sorted(pool))
        rank = len(shape) + self.pick([0, 0, -1, 1])
        idx = [self.wild_index(shape[k] if k < len(shape) else 1) for k in range(max(rank, 1))]
        return f"{name}[{', '.join(idx)}]"

    def wild_index(self, extent):
        if self.chance(0.6):
            return str(self.pick([0, 0, 1, extent - 1, extent, -1, 2**40]))
        r = self.pick(self.loop_vars + ["n", "T.cuda.lane_id()", "C", "ZERO", "x", "1.5"])
        return f"{r} % {max(extent, 1)}" if self.chance(0.5) else r

    def wild_expr(self, depth):
        if depth <= 0 or self.chance(0.35):
            return self.wild_leaf()
        kind = self.pick(["bin", "bin", "cmp", "bool", "un", "ifexp", "cast", "minmax", "call"])
        a, b = self.wild_expr(depth - 1), self.wild_expr(depth - 1)
        if kind == "bin":
            return f"({a} {self.pick(['+', '-', '*', '/', '//', '%', '&', '|', '^', '<<', '>>', '**'])} {b})"
        if kind == "cmp":
            return f"({a} {self.pick(['<', '<=', '==', '!=', '>', '>='])} {b})"
        if kind == "bool":
            return f"({a} {self.pick(['and', 'or'])} {b})"
        if kind == "un":
            return f"({self.pick(['-', 'not ', '~', '+'])}{a})"
        if kind == "ifexp":
            return f"({a} if {self.wild_expr(depth - 1)} else {b})"
        if kind == "cast":
            return f"T.cast({a}, \"{self.pick(DTYPES)}\")"
        if kind == "minmax":
            return f"{self.pick(['T.min', 'T.max', 'min', 'max'])}({a}, {b})"
        return self.pick([f"abs({a})", f"int({a})", f"float({a})", f"T.float32({a})", f"T.int32({a})",
                          f"T.uint32({a})", f"T.float16({a})", f"len({a})", f"T.unroll({a})",
                          f"(NAME is not None)", f"T.cuda.thread_id(axis={a})"])

    def wild_leaf(self):
        kind = self.pick(["int", "float", "typed", "var", "elem", "special", "shape"])
        if kind == "int":
            return str(self.pick([0, 1, 2, 3, 7, -1, 255, 2**31, 2**40, 2**64]))
        if kind == "float":
            return self.pick(["0.0", "1.5", "-2.0", "1e30", "1e300", "0.5", "HALF", "NAME"])
        if kind == "typed":
            return self.pick(["T.float32(1)", "T.float16(2)", "T.int8(300)", "T.uint32(0x3C003C00)", "T.int64(-5)",
                              "T.float64(0.1)", "T.bool(1)", "T.uint8(-1)", "T.int32(2.5)"])
        if kind == "var":
            return self.pick(list(self.vars) + self.loop_vars + ["zz", "x", "n", "u", "d", "f", "C"])
        if kind == "special":
            return self.pick(["T.cuda.lane_id()", "T.cuda.warp_id()", "T.cuda.thread_id()", "T.cuda.block_id(1)",
                              "T.cuda.block_dim()", "T.cuda.grid_dim(axis=2)", "T.cuda.thread_id(axis=5)"])
        if kind == "shape":
            pool = sorted(self.tensors) + sorted(self.buffers)
            return f"{self.pick(pool)}.{self.pick(['shape[0]', 'ndim', 'dtype', 'shape'])}" if pool else "0"
        return self.wild_element()


def _threads(block: str) -> int:
    """Threads of a block written as text ("n" or a float count as 1; a bad one as its product)."""
    try:
        v = ast.literal_eval(block)
    except ValueError:
        return 1
    out = 1
    for x in (v if isinstance(v, tuple) else (v,)):
        out *= int(x)
    return out


def _bits(dtype):
    return {"float16": 16, "uint16": 16, "int8": 8, "float64": 64, "uint64": 64}.get(dtype, 32)


@st.composite
def kernel_sources(draw):
    rnd = random.Random(draw(st.integers(0, 2**64 - 1)))  # uniform choices; hypothesis keeps and replays the seed
    wild = draw(st.sampled_from([0.0, 0.02, 0.05, 0.05, 0.1, 0.3]))
    return Gen(rnd, wild).module()


def make_args(params, draw_bad):
    args = []
    for name, kind, shape, dtype in params:
        if kind == "tensor":
            npd = {"bfloat16": np.uint16}.get(dtype, dtype)
            args.append(np.zeros(shape, npd))
        elif kind == "constexpr":
            args.append(draw_bad)
        elif dtype in ("T.float32", "T.float64"):
            args.append(1.5)
        elif dtype == "T.bool":
            args.append(True)
        else:
            args.append(3)
    return args


BUG_SIGNS = ("internal compiler error", "internal error", "ptxas rejected", "please report")

_counter = itertools.count()


@pytest.fixture(scope="module")
def fuzz_dir():
    with tempfile.TemporaryDirectory(prefix="tiledsl-fuzz-") as d:
        yield d


@pytest.mark.slow
@settings(max_examples=int(os.environ.get("TILEDSL_FUZZ_EXAMPLES", "500")), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                 HealthCheck.data_too_large])
@given(src=kernel_sources(),
       target=st.sampled_from(["sm_90", "sm_90", "sm_80", "sm_75", "sm_86"]),
       constexpr=st.sampled_from([1, 2, 0, -3, 2.5, "s", (1, 2), None, {}]),
       block=st.sampled_from([None, None, None, 32, 64, (32, 2), 2048]))
def test_random_kernels_compile_or_fail_cleanly(fuzz_dir, monkeypatch, src, target, constexpr, block):
    monkeypatch.setenv("TILEDSL_DISABLE_DISK_CACHE", "1")
    text, params = src
    path = os.path.join(fuzz_dir, f"fz_{next(_counter)}.py")
    with open(path, "w") as f:
        f.write(text)
    spec = importlib.util.spec_from_file_location(os.path.basename(path)[:-3], path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)                 # the generator only writes valid Python
    kw = {} if block is None else {"block": block}
    try:
        ck = mod.kern.compile(*make_args(params, constexpr), target=target, **kw)
    except (tiledsl.CompilationError, tiledsl.LaunchError) as e:
        msg = str(e)
        assert not any(s in msg for s in BUG_SIGNS), f"compiler bug reported for\n{text}\n{msg}"
        if isinstance(e, tiledsl.CompilationError):
            if e.loc is None:
                # the one known gap: string annotations are evaluated in tiledsl/jit.py without a location
                # (tests/bad_inputs/test_bad_types.py::...[string_annotation_unknown_dtype] is its strict xfail)
                assert msg.startswith("cannot evaluate the annotation"), f"no location for\n{text}\n{msg}"
            else:
                lines = text.splitlines()
                assert e.loc.file == path and 1 <= e.loc.line <= len(lines), msg
                assert e.loc.text.rstrip("\n") == lines[e.loc.line - 1], msg
        assert type(e) in (tiledsl.CompilationError, tiledsl.LaunchError)
    except Exception as e:                        # noqa: BLE001 - anything else is the bug this test hunts
        pytest.fail(f"{type(e).__name__} escaped for\n{text}\n{e!r}")
    else:
        assert ck.asm["ptx"] and ".entry" in ck.asm["ptx"]
        assert re.search(r"\.target sm_\d+", ck.asm["ptx"])


# ---------------------------------------------------------------------------------------------------------------
# Bugs the fuzzer found, kept as plain tests. Fixed ones guard the fix; open ones (outside the front end) are
# strict xfails that start failing -- and so get noticed -- as soon as the bug is fixed.

def _compile_src(tmp_path, body, params='A: T.Tensor((4, 4), "float32")', target="sm_90", name="regress"):
    path = tmp_path / f"{name}.py"
    path.write_text(HEADER + f"\n\n@tiledsl.jit\ndef kern({params}):\n" +
                    "\n".join("    " + ln for ln in body.strip("\n").splitlines()) + "\n")
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    args = []
    for p in mod.kern.params():
        ann = p[2]
        if p[1] == "tensor":
            args.append(np.zeros(ann.shape, {"bfloat16": np.uint16}.get(ann.dtype.name, ann.dtype.np)))
        else:
            args.append(1)
    return mod.kern.compile(*args, target=target)


def test_narrow_and_wide_integer_indices_mix(tmp_path, monkeypatch):
    # was: "internal code generation error (Operands must be the same type, got (i32, i16))"
    monkeypatch.setenv("TILEDSL_DISABLE_DISK_CACHE", "1")
    ck = _compile_src(tmp_path, '''
T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
v = T.cast(n, "uint16")
A[v % 4, n % 4] = A[L % 4, u % 4]
r = T.alloc_local((2, 1), "float32")
T.cuda.tile.apply(T.ptx["ld.global.f32"], r, A[L % 2:L % 2 + 2, 0:1])
''', params='A: T.Tensor((4, 4), "float32"), L: T.int64, n: T.int32, u: T.uint32')
    assert ck.asm["expanded"].count("ld.global.f32") == 2 and "ld.global" in ck.asm["ptx"]


def test_explicit_infinity_into_float16(tmp_path, monkeypatch):
    # was: OverflowError escaping from llvmlite while printing a half constant above 65504. Since issue 14 a finite
    # constant beyond the type is refused even when converted explicitly (tests/bad_inputs/test_bad_frontend2.py);
    # infinity written as float('inf') still converts
    monkeypatch.setenv("TILEDSL_DISABLE_DISK_CACHE", "1")
    ck = _compile_src(tmp_path, '''
T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
A[0] = T.cast(float("inf"), "float16")
A[1] = T.float16(-float("inf"))
A[2] = T.float16(65504.0)
''', params='A: T.Tensor((4,), "float16")')
    assert "0x7C00" in ck.asm["ptx"] or "0x7c00" in ck.asm["ptx"].lower()


@pytest.mark.parametrize("value", ["2147483648", "-1e6", "2 ** 2000"])
def test_explicit_cast_beyond_float16_is_refused(tmp_path, monkeypatch, value):
    monkeypatch.setenv("TILEDSL_DISABLE_DISK_CACHE", "1")
    with pytest.raises(tiledsl.CompilationError, match="out of range for float16") as e:
        _compile_src(tmp_path, "T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))\n"
                     f"A[0] = T.cast({value}, \"float16\")", params='A: T.Tensor((4,), "float16")')
    assert "float('inf')" in str(e.value) and e.value.loc is not None


@pytest.mark.parametrize("stmt", ["A[0] = A[1] + A[2]", "A[0] = A[1] if A[2] < A[3] else A[0]",
                                  "A[0] = A[1] if A[2] else A[3]"])
def test_bf16_scalar_arithmetic_compiles(tmp_path, monkeypatch, stmt):
    monkeypatch.setenv("TILEDSL_DISABLE_DISK_CACHE", "1")
    ck = _compile_src(tmp_path, "T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))\n" + stmt,
                      params='A: T.Tensor((4,), "bfloat16")')
    assert "st.global" in ck.asm["ptx"]           # the result is stored, not folded away


def test_bf16_conversion_on_sm75(tmp_path, monkeypatch):
    monkeypatch.setenv("TILEDSL_DISABLE_DISK_CACHE", "1")
    try:
        _compile_src(tmp_path, '''
T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
A[0] = T.cast(B[1], "bfloat16")
''', params='A: T.Tensor((4,), "bfloat16"), B: T.Tensor((4,), "float32")', target="sm_75")
    except tiledsl.CompilationError as e:
        assert "ptxas rejected" not in str(e) and e.loc is not None, str(e)
