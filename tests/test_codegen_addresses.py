"""Shared and global addresses in inline asm: a constant addend goes into the instruction as [reg+imm] (PTX spells a
negative one [reg+-n]), so accesses that differ by a static offset share one register."""
import operator
import subprocess

import numpy as np

import tiledsl
from tiledsl import T
from tiledsl.core import dtypes as dt
from tiledsl.ir import nodes as ir
from tiledsl.ir.nodes import split_const
from tiledsl.lower.ptx import ptxas_path


def test_split_const_collects_the_integer_terms():
    i = ir.Var(dt.int32, None, "i")
    e = ir.add(ir.add(ir.mul(i, 4), 12), ir.Const(dt.int32, None, 3))
    rest, c = split_const(e)
    assert c == 15 and isinstance(rest, ir.Binary) and rest.op == "mul"
    rest, c = split_const(ir.Binary(dt.int32, None, "sub", ir.mul(i, 8), ir.Const(dt.int32, None, 4)))
    assert c == -4 and rest.op == "mul"
    assert split_const(7) == (0, 7)
    rest, c = split_const(ir.Binary(dt.int32, None, "sub", ir.Const(dt.int32, None, 4), i))
    assert c == 0 and rest.op == "sub"                  # 4 - i stays whole


def test_split_const_sees_through_scaling_and_floor_division():
    t = ir.Var(dt.int32, None, "t")
    c = lambda v: ir.Const(dt.int32, None, v)  # noqa: E731
    chunk = ir.Binary(dt.int32, None, "add", t, c(256 * 3))          # t + THREADS * j, j = 3
    row = ir.Binary(dt.int32, None, "floordiv", chunk, c(8))
    col = ir.Binary(dt.int32, None, "mod", chunk, c(8))
    e = ir.add(ir.mul(row, 64), col)
    rest, k = split_const(e)
    assert k == 96 * 64                                 # (t + 768) // 8 = t // 8 + 96; (t + 768) % 8 = t % 8
    for tv in (0, 5, 255, -9):                           # the identity holds for every integer, as floor division
        env = {"t": tv}
        assert _eval(e, env) == _eval(rest, env) + k
    rest, k = split_const(ir.Binary(dt.int32, None, "floordiv", ir.Binary(dt.int32, None, "add", t, c(6)), c(4)))
    assert k == 0 and rest.op == "floordiv"             # 6 is no multiple of 4: the division stays whole
    assert split_const(ir.Binary(dt.int32, None, "shl", c(3), c(2))) == (0, 12)


def _eval(e, env):
    if isinstance(e, int):
        return e
    if isinstance(e, ir.Const):
        return e.value
    if isinstance(e, ir.Var):
        return env[e.name]
    op = {"add": operator.add, "sub": operator.sub, "mul": operator.mul, "floordiv": operator.floordiv,
          "mod": operator.mod, "shl": operator.lshift}[e.op]
    return op(_eval(e.a, env), _eval(e.b, env))


def test_unrolled_copies_share_one_global_and_one_shared_register():
    """Chunks tid + 64*j of a swizzled tile (8 rows of 8 chunks apart: a multiple of the swizzle's 256-word
    period): j's share is a constant on both sides of every cp.async."""
    from tiledsl.layout import S, TileLayout
    SW = TileLayout(S[(32, 8, 4):(32, 4, 1)], swizzle=(3, 2, 3))

    @tiledsl.jit
    def k(A: T.Tensor((32, 32), "uint32"), Out: T.Tensor((32, 32), "uint32")):
        T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=64))
        tid = T.cuda.thread_id()
        sm = T.alloc_shared((32 * 32,), "uint32")
        cp = sm.view(32, 8, 4, layout=SW)
        g = A.view(32, 8, 4)
        for j in T.unroll(4):
            T.cuda.tile.apply(T.ptx["cp.async.cg.shared.global"], cp[(tid + 64 * j) // 8, (tid + 64 * j) % 8],
                              g[(tid + 64 * j) // 8, (tid + 64 * j) % 8, :], chunk_bytes=16)
        T.cuda.tile.apply(T.ptx["cp.async.wait_all"])
        T.cuda.syncthreads()
        if tid < 32:
            for j in range(32):
                Out[tid, j] = cp[tid, j // 4, j % 4]
    a = np.arange(32 * 32, dtype=np.uint32).reshape(32, 32)
    ck = k.compile(a, np.zeros((32, 32), np.uint32), target="sm_90")
    copies = [line.strip() for line in ck.asm["ptx"].splitlines() if "cp.async.cg" in line]
    assert len(copies) == 4
    regs = lambda side: {x.split("[")[side].split("+")[0].split("]")[0] for x in copies}  # noqa: E731
    assert len(regs(1)) == 1 and len(regs(2)) == 1, copies
    out = np.zeros((32, 32), np.uint32)
    tiledsl.jit(k.fn, interpret=True)(a, out)
    np.testing.assert_array_equal(out, a)


def test_unrolled_loads_share_an_address_register():
    @tiledsl.jit
    def k(A: T.Tensor((32, 64), "uint32"), Out: T.Tensor((32, 16), "uint32")):
        T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
        i = T.cuda.thread_id()
        sm = T.alloc_shared((32, 64), "uint32")
        for j in range(64):
            sm[i, j] = A[i, j]
        T.cuda.syncthreads()
        r = T.alloc_local((16,), "uint32")
        for q in T.unroll(4):
            T.cuda.tile.apply(T.ptx["ld.shared.v4.b32"], r[4 * q:4 * q + 4], sm[i, 16 * q:16 * q + 4])
        for j in range(16):
            Out[i, j] = r[j]
    a = np.arange(32 * 64, dtype=np.uint32).reshape(32, 64)
    ck = k.compile(a, np.zeros((32, 16), np.uint32), target="sm_90")
    loads = [line.strip() for line in ck.asm["ptx"].splitlines() if "ld.shared.v4.b32" in line]
    assert len(loads) == 4 and sum("+" in x for x in loads) == 3
    assert len({x.split("[")[1].split("+")[0].split("]")[0] for x in loads}) == 1
    out = np.zeros((32, 16), np.uint32)
    tiledsl.jit(k.fn, interpret=True)(a, out)
    np.testing.assert_array_equal(out, a.reshape(32, 4, 16)[:, :, :4].reshape(32, 16))


def test_ptxas_takes_a_negative_displacement(tmp_path):
    ptx = tmp_path / "neg.ptx"
    ptx.write_text(".version 8.0\n.target sm_90\n.address_size 64\n.visible .entry k(.param .u64 p)\n{\n"
                   "  .reg .b32 %r<4>;\n  .reg .b64 %rd<2>;\n  .shared .align 16 .b8 sm[1024];\n"
                   "  mov.u32 %r1, %tid.x;\n  shl.b32 %r2, %r1, 2;\n  mov.u32 %r3, sm;\n  add.s32 %r2, %r2, %r3;\n"
                   "  ld.shared.u32 %r1, [%r2+-16];\n  ld.param.u64 %rd1, [p];\n  st.global.u32 [%rd1], %r1;\n"
                   "  ret;\n}\n")
    r = subprocess.run([ptxas_path(), "-arch=sm_90", str(ptx), "-o", str(tmp_path / "neg.cubin")],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
