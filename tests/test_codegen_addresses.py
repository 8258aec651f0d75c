"""Shared addresses in inline asm: a constant addend goes into the instruction as [reg+imm] (PTX spells a negative
one [reg+-n]), so accesses that differ by a static offset share one register."""
import subprocess

import numpy as np

import tiledsl
from tiledsl import T, dtypes as dt, ir
from tiledsl.codegen.asm import split_const
from tiledsl.backend import ptxas_path


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
