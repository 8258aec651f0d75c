"""The instruction families and their registry: one parse per opcode, min_sm and refusals checked once, and every
expanded native carrying the form and family the later stages read."""
import os

import numpy as np
import pytest

import tiledsl
from tiledsl import T
from tiledsl.core.errors import CompilationError, Loc
from tiledsl.core.target import Target
from tiledsl.core import dtypes as dt
from tiledsl.ir import nodes as ir
from tiledsl.isa import registry
from tiledsl.isa.family import Family

LOC = Loc("hand.py", 3, 4, 10, "    hand_built()")
COPY = "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes"
WAIT = "mbarrier.try_wait.parity.shared::cta.b64"


def test_each_family_is_one_folder_and_one_registry_line():
    isa = os.path.join(os.path.dirname(tiledsl.__file__), "isa")
    folders = sorted(d for d in os.listdir(isa) if os.path.isfile(os.path.join(isa, d, "pattern.py")))
    assert sorted(f.name for f in registry.FAMILIES) == folders
    for fam in registry.FAMILIES:
        assert isinstance(fam, Family)
        assert os.path.isfile(os.path.join(isa, fam.name, "semantics.py")) and fam.semantics is not None


@pytest.mark.parametrize("opcode,sm,msg", [
    (COPY, 80, f"{COPY}: needs sm_90 or newer; the target is sm_80"),
    ("cp.async.cg.shared.global", 75, "cp.async.cg.shared.global: needs sm_80 or newer; the target is sm_75"),
    ("stmatrix.sync.aligned.m8n8.x4.shared.b16", 80,
     "stmatrix.sync.aligned.m8n8.x4.shared.b16: needs sm_90 or newer; the target is sm_80"),
    ("ldmatrix.sync.aligned.m8n8.x4.shared::cta.b16", 75,
     "ldmatrix.sync.aligned.m8n8.x4.shared::cta.b16: .shared::cta needs PTX ISA 7.8, which tiledsl emits for sm_"),
    ("fma.rn.f32x2", 90, "fma.rn.f32x2: needs sm_100 or newer; the target is sm_90"),
    ("ld.global.L2::cache_hint.f32", 75, "ld.global.L2::cache_hint.f32: needs sm_80 or newer; the target is sm_75"),
])
def test_the_registry_checks_the_target_once(opcode, sm, msg):
    with pytest.raises(CompilationError) as ei:
        registry.lookup(opcode, LOC, Target(sm))
    assert msg in str(ei.value)
    fam, form = registry.lookup(opcode, LOC)               # without a target: parsed, not checked
    assert form.opcode == opcode


@pytest.mark.parametrize("opcode,msg", [
    ("mma.sync.aligned.m16n8k16.row.col.f32.f16.bf16.f32",
     "mma.sync.aligned.m16n8k16.row.col.f32.f16.bf16.f32: A and B must have the same element type"),
    ("mbarrier.test_wait.parity.shared::cta.b64", "has no explicit tile pattern; supported: cp.async.bulk"),
    ("frobnicate.b32", "no explicit tile pattern for frobnicate.b32"),
])
def test_refusals_keep_their_text(opcode, msg):
    with pytest.raises(CompilationError) as ei:
        registry.lookup(opcode, LOC, Target(90))
    assert msg in str(ei.value) and "hand.py:3" in str(ei.value)


def bulk_kernel(A: T.Tensor((64, 32), "uint32"), Out: T.Tensor((64, 32), "uint32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=64))
    tid = T.cuda.thread_id()
    tile = T.alloc_shared((64, 36), "uint32")
    bar = T.alloc_shared((1,), "uint64")
    if tid == 0:
        T.cuda.tile.apply(T.ptx["mbarrier.init.shared::cta.b64"], bar, 1)
        T.cuda.tile.apply(T.ptx["fence.mbarrier_init.release.cluster"])
    T.cuda.syncthreads()
    T.cuda.tile.apply(T.ptx[COPY], tile[tid, 0:32], A[tid, 0:32], bar, copy_bytes=128)
    if tid == 0:
        T.cuda.tile.apply(T.ptx["mbarrier.arrive.expect_tx.shared::cta.b64"], bar, 64 * 128)
    T.cuda.tile.apply(T.ptx[WAIT], bar, 0)
    for j in range(32):
        Out[tid, j] = tile[tid, j]


def natives(body):
    for s in body:
        if isinstance(s, ir.Native):
            yield s
        for sub in (getattr(s, "body", None), getattr(s, "then", None), getattr(s, "orelse", None)):
            if sub:
                yield from natives(sub)


def test_expanded_natives_carry_form_and_family():
    A = np.zeros((64, 32), np.uint32)
    ck = tiledsl.jit(bulk_kernel).compile(A, A, target="sm_90")
    ns = list(natives(ck.expanded_ir.body))
    assert ns and all(n.family is not None and n.form is not None and n.form.opcode == n.opcode for n in ns)
    copy = next(n for n in ns if n.opcode == COPY)
    assert copy.family.name == "bulk" and copy.form.kind == "copy"
    assert copy.family.access_spans(copy) == [128 // 4, 128 // 4, 1]       # dst, src, the 8-byte mbarrier
    # the blocking wait is the bulk family's asm: try_wait in a loop
    assert f"{WAIT} %tw" in ck.asm["ptx"] or "TDW" in ck.asm["llvm"]


def test_hand_built_natives_parse_once_and_a_native_without_family_has_no_semantics():
    st = ir.Storage("R", "local", dt.uint32, 1, LOC)
    r = ir.Reg(st, 0, dt.uint32, True)
    n = registry.native(LOC, "mov.b32", [[r], [ir.Val(ir.Const(dt.uint32, LOC, 7))]])
    assert n.family.name == "register" and n.form.op == "mov"
    k = ir.Kernel("hand", [], [ir.Native(LOC, "mov.b32", n.groups)], ir.LaunchSpec((1, 1, 1), (32, 1, 1)), [st],
                  {}, LOC)
    from tiledsl.interpreter import InterpreterError, run_ir
    with pytest.raises(InterpreterError, match="no semantics for this opcode"):
        run_ir(k, {})
