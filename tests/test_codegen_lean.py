"""Codegen's shortcuts emit what the general path emits: register-slot forwarding (lower/llvm/slots.py) gives the
same PTX as loading every slot from its alloca, and the lean inline-asm call (lower/llvm/fast.py) prints the
text llvmlite's builder prints."""
import os
import runpy

import numpy as np
import pytest
from llvmlite import ir as ll

import tiledsl
from tiledsl import T
from tiledsl.compiler import compile_kernel
from tiledsl.core.options import Options
from tiledsl.core.target import Target
from tiledsl.lower.llvm import fast, slots

LC = T.cuda.LaunchConfig

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_asm_call_prints_as_llvmlite_does():
    """Void, single and struct results, side effect or not, the convergent attribute, no arguments."""
    def build(use_fast):
        m = ll.Module("m")
        i16, i32, i64, f32 = ll.IntType(16), ll.IntType(32), ll.IntType(64), ll.FloatType()
        fn = ll.Function(m, ll.FunctionType(ll.VoidType(), [ll.PointerType(addrspace=1)]), "k")
        b = ll.IRBuilder(fn.append_basic_block("entry"))
        asm = fast.asm if use_fast else (lambda b, fty, t, c, args, se: b.asm(fty, t, c, args, se))
        st = ll.LiteralStructType([i32, f32, i16])
        x = asm(b, ll.FunctionType(st, [i32, f32]), "mov.b32 $0, $3; // \\22q\\22", "=r,=f,=h,r,f",
                [ll.Constant(i32, 7), ll.Constant(f32, 1.5)], False)
        y = asm(b, ll.FunctionType(i32, [i32]), "add.s32 $0, $1, 1;", "=r,r", [b.extract_value(x, 0)], True)
        y.attributes.add("convergent")
        z = asm(b, ll.FunctionType(ll.VoidType(), [ll.PointerType(addrspace=1), i64]), "st.global.b64 [$0], $1;",
                "l,l,~{memory}", [fn.args[0], b.zext(y, i64)], True)
        z.attributes.add("convergent")
        asm(b, ll.FunctionType(ll.VoidType(), []), "bar.sync 0;", "~{memory}", [], True)
        b.ret_void()
        return str(m)

    assert build(True) == build(False)
    assert 'asm  "mov.b32' in build(True) and "convergent" in build(True)


def _compiled(fn, forward: bool, monkeypatch):
    with monkeypatch.context() as m:
        if not forward:                      # every slot read from memory, every store kept
            m.setattr(slots.SlotValues, "get", lambda self, block, ptr, typ: None)
            m.setattr(slots.SlotValues, "put", lambda self, *a, **k: None)
        return compile_kernel(fn, {}, Target(90), Options(), want_cubin=False)


def _example(path, name):
    return runpy.run_path(os.path.join(ROOT, path), run_name=f"lean_{name}")[name].fn


@pytest.mark.parametrize("which", ["seed_mma", "slots_kernel"])
def test_slot_forwarding_keeps_the_ptx(which, monkeypatch):
    """The same PTX with forwarding as with every slot loaded and stored (LLVM's mem2reg/SROA, GVN and DSE did
    the same work later); and forwarding did remove loads and stores."""
    fn = _example("examples/seed_mma.py", "warp_mma") if which == "seed_mma" else tiledsl.jit(slots_kernel).fn
    on, off = _compiled(fn, True, monkeypatch), _compiled(fn, False, monkeypatch)
    assert on.asm["ptx"] == off.asm["ptx"]
    from tiledsl.lower.llvm import generate_llvm
    raw_on = generate_llvm(on.expanded_ir, Target(90))[0]
    with monkeypatch.context() as m:
        m.setattr(slots.SlotValues, "get", lambda self, block, ptr, typ: None)
        m.setattr(slots.SlotValues, "put", lambda self, *a, **k: None)
        raw_off = generate_llvm(off.expanded_ir, Target(90))[0]
    assert raw_on.count(" = load ") < raw_off.count(" = load ")
    assert raw_on.count("  store ") <= raw_off.count("  store ")


def slots_kernel(X: T.Tensor((32, 8), "float32"), Out: T.Tensor((32, 8), "float32"), n: T.int32):
    """Slot traffic that forwarding must not get wrong: a register read and written as another width (bit view),
    stores and loads at run-time indices, a loop-carried slot, branches that write some slots (by asm too), asm
    reading and writing slots."""
    T.device_entry(launch=LC(grid=1, block=32))
    i = T.cuda.thread_id()
    r = T.alloc_local((8,), "float32")
    for j in T.unroll(8):
        r[j] = X[i, j]
    r[i % 8] = r[(i + 3) % 8] + 2.0  # any slot may have changed; any stored slot may have been read
    r[5] = r[i % 8] * 3.0
    r[3] = r[5] + 1.0                # (the unrolled store to r[3] was read: it stays)
    r[0] = r[0] + 0.5
    h = r.view(16, dtype="uint16")
    h[1] = h[0]                      # r[0]'s high half: r[0] as float32 is no longer known
    r[2] = r[0] + 1.0
    r[0] = r[2] * 5.0                # the store of r[0] + 0.5 was read (by h[0]): it stays
    acc = r[2]
    for k in range(n):
        acc = acc + r[k % 8]
        r[3] = acc + r[3]
        if k == 2:
            r[4] = r[3]
        acc = acc + r[4]             # r[4] as the branch may have left it
    rv = r.view(8, 1)
    T.cuda.tile.apply(T.ptx["fma.rn.f32"], rv, rv, T.float32(2), T.float32(1))
    q = T.alloc_local((2, 1), "float32")
    T.cuda.tile.apply(T.ptx["fma.rn.f32"], q, rv[0:2, :], T.float32(3), T.float32(1))
    r[7] = r[6] + acc + q[1, 0]
    if i < 4:                        # each branch writes one kind of slot: asm, a store, an assignment
        T.cuda.tile.apply(T.ptx["fma.rn.f32"], q, q, T.float32(3), T.float32(1))
    if i < 6:
        r[1] = r[7]
    if i < 9:
        acc = acc * 2.0
        Out[i, 0] = acc
    r[6] = r[1] + acc + q[1, 0]
    for j in range(8):
        Out[i, j] = r[j]


def test_gemm_ir_keeps_little_slot_traffic():
    """The mma.sync GEMM's LLVM IR (what LLVM parses and optimises): 5510 slot loads and 3058 stores before slot
    forwarding, 291 and 1354 after (`python benchmarks/compile.py --no-gpu --only-examples` figures in
    docs/perf-notes.md, Session 33). A count, not a time, so it holds on a loaded machine."""
    from tiledsl.compiler import front
    from tiledsl.lower.llvm import generate_llvm
    from tiledsl.ops.gemm import mma as gemm
    from tiledsl.passes.expand import expand_kernel
    tgt = Target(90)
    gemm._KERNELS.clear()
    fn = gemm.make_gemm("float16", "float16", None, (4096, 4096, 4096)).fn
    text = generate_llvm(expand_kernel(front(fn, {}, None, None, tgt)[0], tgt), tgt)[0]
    loads, stores = text.count(" = load "), text.count("\n  store ")
    assert loads < 600 and stores < 1600, (loads, stores)
    assert text.count(" = call ") + text.count("  call ") > 800         # the same ~850 calls (asm and sregs)
