"""Expanded tile IR -> LLVM IR (NVPTX) with llvmlite's IR builder.

Scalars live in allocas and local buffers in alloca arrays; LLVM's SROA/mem2reg turns both into registers once
indices are constant. Each native instruction becomes inline asm holding exactly its PTX text, so nothing is
re-selected behind the user's back.
"""
from __future__ import annotations

from llvmlite import ir as ll

from ...core import dtypes as dt
from ...ir import nodes as ir
from ...core.errors import CompilationError
from ...core.target import Target
from ...ir.printer import native_str
from . import fast
from .asm import emit_native
from .cse import ValueTable
from .slots import SlotValues, written_slots
from .types import DATALAYOUT, GLOBAL, I1, I8, I16, I32, I64, SHARED, lltype, memtype, memtype_bytes


class Codegen:
    def __init__(self, kernel: ir.Kernel, target: Target, debug_buffer=False):
        self.k = kernel
        self.debug_buffer = debug_buffer
        self.target = target
        self.sm = target.sm
        # a context of its own: the asm results' identified struct types (asm.py) belong to this module only
        self.module = ll.Module(name=kernel.name, context=ll.Context())
        self.module.triple = "nvptx64-nvidia-cuda"
        self.module.data_layout = DATALAYOUT
        self.vars = {}
        self.storage = {}
        self.intrinsics = {}
        self.loops = []                  # (continue target, break target) of the enclosing loops, innermost last
        self.values = ValueTable()
        self.slot_ptrs = {}
        self.slot_ids = set()            # ids of the register-slot pointers in slot_ptrs
        self.slots = SlotValues(kernel)  # what each slot holds within the current block (slots.py)
        self.asm_types = {}              # (element types) -> the identified struct an asm call returns
        self.asm_templates = {}          # a native's shape -> its inline asm (asm.py emit_native)

    # ------------------------------------------------------------ module
    def run(self) -> str:
        k = self.k
        argtys, binds = [], []
        for p in k.params:
            if p.kind == "tensor":
                argtys.append(ll.PointerType(addrspace=GLOBAL))
                binds.append(("tensor", p))
            elif p.kind == "scalar":
                argtys.append(I8 if p.dtype.kind == "bool" else lltype(p.dtype))
                binds.append(("scalar", p))
            elif p.kind == "tensormap":
                argtys.append(_ByvalPointer(TENSOR_MAP))
                binds.append(("tensormap", p))
        for name, v in k.sizes.items():
            argtys.append(I32)
            binds.append(("size", v))
        if self.debug_buffer:
            argtys.append(ll.PointerType(addrspace=GLOBAL))
            binds.append(("debug", None))
        fn = ll.Function(self.module, ll.FunctionType(ll.VoidType(), argtys), k.name)
        fn.calling_convention = "ptx_kernel"
        self.fn = fn
        entry = fn.append_basic_block("entry")
        self.entry_builder = ll.IRBuilder(entry)
        body = fn.append_basic_block("body")
        self.b = ll.IRBuilder(body)
        grid_constants = []
        for arg, (kind, p) in zip(fn.args, binds):
            if kind == "tensor":
                arg.name = p.name
                self.storage[id(p.storage)] = arg
                arg.add_attribute("noundef")
            elif kind == "scalar":
                arg.name = p.name
                val = self.entry_builder.trunc(arg, I1) if p.dtype.kind == "bool" else arg
                self.store_var(p.var, val, builder=self.entry_builder)
            elif kind == "tensormap":
                # the CUtensorMap by value: `.param .align 64 .b8 name[128]`; a grid constant, so its address is
                # the param's own (cvta.param), never a local copy, when TMA instructions name it
                arg.name = p.name
                arg.add_attribute("byval")
                arg.attributes.align = 64
                self.storage[id(p.storage)] = arg
                grid_constants.append(fn.args.index(arg) + 1)
            elif kind == "debug":
                arg.name = "tiledsl_debug"
                self.debug_ptr = arg
            else:
                arg.name = p.name
                self.store_var(p, arg, builder=self.entry_builder)
        asked = _shared_alignments(k.body)

        def align_of(st):                   # wgmma's swizzled operands and TMA boxes ask more than 16 bytes
            return max(_align_of(st), asked.get(id(st), 0))
        shared = [st for st in k.allocs if st.scope == "shared"]
        self.dynamic_shared = 0
        if sum(_aligned(st.size * memtype_bytes(st.dtype)) for st in shared) > self.target.static_shared_limit:
            # Above 48 KB a block's shared memory must be dynamic: one extern array, allocations at offsets.
            dyn = ll.GlobalVariable(self.module, ll.ArrayType(I8, 0), "tiledsl_dynamic_smem", addrspace=SHARED)
            dyn.linkage = "external"
            dyn.align = max([128] + [align_of(st) for st in shared])
            off = 0
            for st in shared:
                off = _aligned(off, max(128, align_of(st)))
                ptr = self.entry_builder.gep(dyn, [I32(0), I32(off)], source_etype=dyn.value_type)
                ptr.type = ll.PointerType(addrspace=SHARED)
                self.storage[id(st)] = ptr
                off += _aligned(st.size * memtype_bytes(st.dtype))
            self.dynamic_shared = off
        for st in k.allocs:
            if st.scope == "shared" and self.dynamic_shared:
                continue
            if st.scope == "local":
                a = self.entry_builder.alloca(ll.ArrayType(memtype(st.dtype), st.size), name=st.name)
                a.align = 16
                self.storage[id(st)] = a
            elif st.scope == "shared":
                g = ll.GlobalVariable(self.module, ll.ArrayType(memtype(st.dtype), st.size), f"{st.name}",
                                      addrspace=SHARED)
                g.linkage = "internal"
                g.align = align_of(st)
                g.initializer = ll.Constant(g.value_type, ll.Undefined)
                self.storage[id(st)] = g
        self.stmts(k.body)
        self.b.ret_void()
        self.slots.sweep(fn)
        self.entry_builder.branch(body)
        threads = k.launch.block[0] * k.launch.block[1] * k.launch.block[2]
        md = self.module.add_named_metadata("nvvm.annotations")
        md.add(self.module.add_metadata([fn, ll.MetaDataString(self.module, "maxntidx"), I32(threads)]))
        md.add(self.module.add_metadata([fn, ll.MetaDataString(self.module, "maxntidy"), I32(1)]))
        md.add(self.module.add_metadata([fn, ll.MetaDataString(self.module, "maxntidz"), I32(1)]))
        for index in grid_constants:
            md.add(self.module.add_metadata([fn, ll.MetaDataString(self.module, "grid_constant"),
                                             self.module.add_metadata([I32(index)])]))
        if k.launch.max_registers:
            md.add(self.module.add_metadata([fn, ll.MetaDataString(self.module, "maxnreg"),
                                             I32(k.launch.max_registers)]))
        if k.launch.min_blocks_per_sm:
            md.add(self.module.add_metadata([fn, ll.MetaDataString(self.module, "minctasm"),
                                             I32(k.launch.min_blocks_per_sm)]))
        cluster = tuple(getattr(k.launch, "cluster", (1, 1, 1)))
        if cluster != (1, 1, 1):        # PTX .explicitcluster and .reqnctapercluster x, y, z
            for axis, c in zip("xyz", cluster):
                md.add(self.module.add_metadata([fn, ll.MetaDataString(self.module, f"cluster_dim_{axis}"), I32(c)]))
        return str(self.module)

    # ------------------------------------------------------------ variables
    def var_slot(self, v, ty=None):
        slot = self.vars.get(id(v))
        if slot is None:
            ty = ty or lltype(v.dtype)
            slot = self.entry_builder.alloca(ty, name=getattr(v, "name", "v"))
            self.vars[id(v)] = slot
        return slot

    def load_var(self, v):
        slot = self.var_slot(v)
        return self.load_slot(slot, slot.allocated_type, id(v), "")

    def store_var(self, v, value, builder=None):
        slot = self.var_slot(v, value.type)
        if builder is None:
            self.store_slot(slot, value, id(v), "")
        else:
            fast.store(builder, value, slot)
        self.values.assigned(v)

    def load_slot(self, ptr, typ, group, tname: str):
        """A load of a slot (a variable's alloca or a register slot of buffer `group` read as type `tname`), or
        the value the current block already holds for it (slots.py)."""
        block = self.b.block
        v = self.slots.get(block, ptr, typ)
        if v is None:
            v = fast.load(self.b, ptr, typ)
            self.slots.put(block, ptr, v, group, tname)
        return v

    def store_slot(self, ptr, value, group, tname: str):
        st = fast.store(self.b, value, ptr)
        self.slots.put(self.b.block, ptr, value, group, tname, st)

    # ------------------------------------------------------------ statements
    def stmts(self, body):
        for s in body:
            try:
                getattr(self, "s_" + type(s).__name__)(s)
            except CompilationError:
                raise
            except Exception as e:
                raise CompilationError(f"internal code generation error ({type(e).__name__}: {e}); please report "
                                       f"it", s.loc) from None

    def s_Assign(self, s: ir.Assign):
        self.store_var(s.var, self.expr(s.value))

    def s_Store(self, s: ir.Store):
        ptr = self.elem_ptr(s.storage, s.dtype, s.offset)
        val = self.expr(s.value)
        if s.dtype.kind == "bool":
            val = self.b.zext(val, I8)
        if s.storage.scope != "local":
            self.b.store(val, ptr)
        elif id(ptr) in self.slot_ids:
            self.store_slot(ptr, val, id(s.storage), s.dtype.name)
        else:
            self.b.store(val, ptr)
            self.slots.forget(id(s.storage))       # a run-time index: any of the buffer's slots may change

    def s_For(self, s: ir.For):
        b = self.b
        start = self.expr(s.start)
        self.store_var(s.var, start)
        self.values.entering_loop(s.var, s.body)
        head = self.fn.append_basic_block("for.head")
        body = self.fn.append_basic_block("for.body")
        # a `continue` jumps to the step; the block exists only when one does, so other loops stay as they were
        step = self.fn.append_basic_block("for.step") if _exits(s.body, ir.Continue) else None
        done = self.fn.append_basic_block("for.done")
        b.branch(head)
        b.position_at_end(head)
        i = self.load_var(s.var)
        stop = self.expr(s.stop)
        cmp = b.icmp_signed("<", i, stop) if s.var.dtype.is_signed else b.icmp_unsigned("<", i, stop)
        b.cbranch(cmp, body, done)
        b.position_at_end(body)
        self.loops.append((step, done))
        try:
            with self.values.region():
                self.stmts(s.body)
        finally:
            self.loops.pop()
        if step is not None:
            b.branch(step)
            b.position_at_end(step)
        with self.values.region():      # the step block: reached from every `continue`, not only the body's end
            i = self.load_var(s.var)
            slot = self.var_slot(s.var)
            st = self.expr(s.step)
            self.store_slot(slot, b.add(i, st), id(s.var), "")
            d = s.var.dtype
            top = (1 << (d.bits - 1)) - 1 if d.is_signed else (1 << d.bits) - 1
            if isinstance(s.step, ir.Const) and (s.step.value == 1 or isinstance(s.stop, ir.Const) and
                                                 s.stop.value - 1 <= top - s.step.value):
                # i < stop here (the body cannot assign the index): i + 1, or i + step below a constant stop far
                # enough from the type's largest value, cannot wrap
                b.branch(head)
            else:
                # a step of k > 1 wraps past the type's largest value when stop is within k of it, and the wrapped
                # index is below stop again: the loop would never end. Python's next index is past stop there,
                # so the loop ends where the step would wrap.
                last = b.sub(ll.Constant(i.type, top), st)
                wraps = b.icmp_signed(">", i, last) if d.is_signed else b.icmp_unsigned(">", i, last)
                b.cbranch(wraps, done, head)
        b.position_at_end(done)
        self.values.entering_loop(s.var, s.body)      # what the loop assigned differs from its header's view

    def s_While(self, s: ir.While):
        b = self.b
        head = self.fn.append_basic_block("while.head")
        body = self.fn.append_basic_block("while.body")
        done = self.fn.append_basic_block("while.done")
        self.values.entering_loop(None, s.body)
        b.branch(head)
        b.position_at_end(head)
        b.cbranch(self.expr(s.cond), body, done)
        b.position_at_end(body)
        self.loops.append((head, done))
        try:
            with self.values.region():
                self.stmts(s.body)
        finally:
            self.loops.pop()
        b.branch(head)
        b.position_at_end(done)
        self.values.entering_loop(None, s.body)

    def _jump(self, target, what):
        self.b.branch(target)
        # what follows in the same list is unreachable; it goes into a block LLVM deletes
        self.b.position_at_end(self.fn.append_basic_block(f"after.{what}"))

    def s_Break(self, s: ir.Break):
        if not self.loops:
            raise CompilationError("'break' outside a loop", s.loc)
        self._jump(self.loops[-1][1], "break")

    def s_Continue(self, s: ir.Continue):
        if not self.loops or self.loops[-1][0] is None:
            raise CompilationError("'continue' outside a loop", s.loc)
        self._jump(self.loops[-1][0], "continue")

    def s_Return(self, s: ir.Return):
        self.b.ret_void()
        self.b.position_at_end(self.fn.append_basic_block("after.return"))

    def s_Print(self, s: ir.Print):
        from .printf import emit_print
        emit_print(self, s)

    def s_If(self, s: ir.If):
        cond = self.expr(s.cond)
        # the block before the if dominates both branches and the join: what it knew of the slots holds there,
        # less what the branches may store
        known = self.slots.snapshot(self.b.block)
        with self.b.if_else(cond) as (then, orelse):
            with then, self.values.region():
                self.slots.resume(self.b.block, known)
                self.stmts(s.then)
            with orelse, self.values.region():
                self.slots.resume(self.b.block, known)
                self.stmts(s.orelse)
        self.slots.resume(self.b.block, known, written_slots(s.then + s.orelse))

    def s_Barrier(self, s):
        fty = ll.FunctionType(ll.VoidType(), [])
        self.b.asm(fty, "bar.sync 0;", "~{memory}", [], True)
        self.b.block.instructions[-1].attributes.add("convergent")

    def s_Trap(self, s: ir.Trap):
        cond = self.expr(s.cond)
        known = self.slots.snapshot(self.b.block)
        with self.b.if_then(cond, likely=False), self.values.region():
            self._trap(s)
        self.slots.resume(self.b.block, known)         # a failing thread stops; no slot is written

    def _trap(self, s: ir.Trap):
        if not self.debug_buffer:
            self.b.asm(ll.FunctionType(ll.VoidType(), []), "trap;", "~{memory}", [], True)
            return
        # The first failing thread records (site, block, thread, value: a per-dimension check's index, else 0);
        # every failing thread stops.
        b = self.b
        blk = b.add(self.sreg("ctaid.x"), b.mul(self.sreg("nctaid.x"),
                    b.add(self.sreg("ctaid.y"), b.mul(self.sreg("nctaid.y"), self.sreg("ctaid.z")))))
        thr = b.add(self.sreg("tid.x"), b.mul(self.sreg("ntid.x"),
                    b.add(self.sreg("tid.y"), b.mul(self.sreg("ntid.y"), self.sreg("tid.z")))))
        text = ("{ .reg .b32 %to; .reg .pred %tq; atom.global.cas.b32 %to, [$0], 0, $1; "
                "setp.eq.b32 %tq, %to, 0; @%tq st.global.b32 [$0+4], $2; @%tq st.global.b32 [$0+8], $3; "
                "@%tq st.global.b32 [$0+12], $4; exit; }")
        value = self.expr(s.value) if s.value is not None else I32(0)
        fty = ll.FunctionType(ll.VoidType(), [self.debug_ptr.type, I32, I32, I32, I32])
        b.asm(fty, text, "l,r,r,r,r,~{memory}", [self.debug_ptr, I32(s.code), blk, thr, value], True)

    def s_Native(self, s: ir.Native):
        emit_native(self, s)

    def s_Apply(self, s):
        raise CompilationError("tile.apply reached code generation unexpanded", s.loc)

    # ------------------------------------------------------------ addresses
    def base_ptr(self, st: ir.Storage):
        base = self.storage[id(st)]
        if not base.type.is_opaque:            # allocas and globals carry their array type; index by element
            base.type = ll.PointerType(addrspace=base.type.addrspace)
        return base

    def elem_ptr(self, st: ir.Storage, d: dt.DType, offset):
        base = self.base_ptr(st)
        off = self.index(offset)
        if isinstance(off, ll.Constant) and st.scope == "local":
            # a register slot: one pointer per slot, in the entry block (it dominates every use)
            key = (id(st), d.name, off.constant)
            ptr = self.slot_ptrs.get(key)
            if ptr is None:
                ptr = self.slot_ptrs[key] = self.entry_builder.gep(base, [off], source_etype=memtype(d))
                self.slot_ids.add(id(ptr))
            return ptr
        return self.b.gep(base, [off], source_etype=memtype(d))

    def index(self, offset):
        v = self.expr(ir.as_expr(offset))
        if v.type.width < 64:
            if isinstance(v, ll.Constant) and isinstance(v.constant, int):
                bits = v.type.width
                return ll.Constant(I64, v.constant - ((v.constant >> (bits - 1)) & 1) * (1 << bits))
            v = self.b.sext(v, I64)
        return v

    # ------------------------------------------------------------ expressions
    def expr(self, e):
        key = self.values.key(e)
        if key is None:
            return getattr(self, "e_" + type(e).__name__)(e)
        v = self.values.get(key)
        if v is None:
            v = getattr(self, "e_" + type(e).__name__)(e)
            self.values.put(key, v)
        return v

    def e_Const(self, e: ir.Const):
        t = lltype(e.dtype)
        if e.dtype.name == "bfloat16":
            return ll.Constant(I16, dt.bf16_bits(e.value))      # the run-time cast's rounding (NaN -> 0x7FFF)
        if e.dtype.kind == "bool":
            return ll.Constant(I1, int(bool(e.value)))
        if e.dtype.is_int:
            return ll.Constant(t, int(e.value) & ((1 << e.dtype.bits) - 1))
        return ll.Constant(t, float(e.value))

    def e_Var(self, e: ir.Var):
        return self.load_var(e)

    def e_Load(self, e: ir.Load):
        ptr = self.elem_ptr(e.storage, e.dtype, e.offset)
        if e.storage.scope == "local" and id(ptr) in self.slot_ids:
            v = self.load_slot(ptr, memtype(e.dtype), id(e.storage), e.dtype.name)
        else:
            if e.storage.scope == "local":
                self.slots.read(id(e.storage))      # a run-time index: it may read any stored slot
            v = self.b.load(ptr, typ=memtype(e.dtype))
        return self.b.trunc(v, I1) if e.dtype.kind == "bool" else v

    def e_Special(self, e: ir.Special):
        if e.name == "warpid":
            bx, by, _ = self.k.launch.block
            tid = self.sreg("tid.x")
            if by > 1 or self.k.launch.block[2] > 1:
                ty, tz = self.sreg("tid.y"), self.sreg("tid.z")
                tid = self.b.add(tid, self.b.mul(I32(bx), self.b.add(ty, self.b.mul(I32(by), tz))))
            return self.b.lshr(tid, I32(5))
        if e.name in ("laneid", "cluster.ctarank", "cluster.nctarank"):
            return self.sreg(e.name)
        return self.sreg(f"{e.name}.{'xyz'[e.axis]}")

    def sreg(self, name):
        fname = "llvm.nvvm.read.ptx.sreg." + name
        f = self.module.globals.get(fname)
        if f is None:
            f = ll.Function(self.module, ll.FunctionType(I32, []), fname)
        return self.b.call(f, [])

    def intrinsic(self, name, ret, args):
        f = self.module.globals.get(name)
        if f is None:
            f = ll.Function(self.module, ll.FunctionType(ret, args), name)
        return f

    def e_Cast(self, e: ir.Cast):
        from .casts import cast
        return cast(self, self.expr(e.a), e.a.dtype, e.dtype)

    def e_Unary(self, e: ir.Unary):
        b, a = self.b, self.expr(e.a)
        d = e.dtype
        if e.op == "not":
            return b.xor(a, ll.Constant(I1, 1))
        if e.op == "invert":
            return b.not_(a)
        if d.name == "bfloat16" and e.op in ("neg", "abs"):
            return b.xor(a, I16(0x8000)) if e.op == "neg" else b.and_(a, I16(0x7FFF))
        if e.op == "neg":
            return b.fneg(a) if d.is_float else b.neg(a)
        if e.op == "abs":
            if d.is_float:
                return b.call(self.intrinsic(f"llvm.fabs.{_fsuf(d)}", a.type, [a.type]), [a])
            return b.call(self.intrinsic(f"llvm.abs.i{d.bits}", a.type, [a.type, I1]), [a, ll.Constant(I1, 0)])
        raise CompilationError(f"unknown unary op {e.op}", e.loc)

    def e_Select(self, e: ir.Select):
        return self.b.select(self.expr(e.cond), self.expr(e.a), self.expr(e.b))

    def e_Compare(self, e: ir.Compare):
        a, c = self.expr(e.a), self.expr(e.b)
        d = e.a.dtype
        if d.name == "bfloat16":                 # compare exactly in f32
            from .casts import cast
            a, c, d = cast(self, a, d, dt.float32), cast(self, c, d, dt.float32), dt.float32
        sym = {"lt": "<", "le": "<=", "gt": ">", "ge": ">=", "eq": "==", "ne": "!="}[e.op]
        if d.is_float:
            return self.b.fcmp_unordered(sym, a, c) if e.op == "ne" else self.b.fcmp_ordered(sym, a, c)
        if d.is_signed:
            return self.b.icmp_signed(sym, a, c)
        return self.b.icmp_unsigned(sym, a, c)

    def e_Binary(self, e: ir.Binary):
        from .arith import binary
        return binary(self, e, self.expr(e.a), self.expr(e.b))


def _exits(body, kind) -> bool:
    """Does `body` hold a `kind` statement (Break/Continue) that leaves THIS loop (not one nested in it)?"""
    for s in body:
        if isinstance(s, kind):
            return True
        if isinstance(s, ir.If) and (_exits(s.then, kind) or _exits(s.orelse, kind)):
            return True
    return False


def _align_of(st) -> int:
    """A shared buffer's alignment: 16 bytes, or more where a family asked (wgmma's swizzled operands)."""
    return max(16, getattr(st, "align", None) or 16)


TENSOR_MAP = ll.ArrayType(I8, 128)


class _ByvalPointer(ll.PointerType):
    """An opaque `ptr` that remembers the type it points to, for the `byval(<type>)` attribute llvmlite writes."""

    def __init__(self, pointee):
        super().__init__()
        self.pointee = pointee


def _shared_alignments(body) -> dict:
    """id(shared storage) -> the alignment a native asks of it (a TMA box: 128 bytes or its swizzle's period)."""
    out = {}

    def walk(stmts):
        for s in stmts:
            if isinstance(s, ir.Native):
                st, a = getattr(s.form, "smem", None), getattr(s.form, "smem_align", 0)
                if st is not None and a:
                    out[id(st)] = max(out.get(id(st), 0), a)
            for sub in (getattr(s, "body", None), getattr(s, "then", None), getattr(s, "orelse", None)):
                if isinstance(sub, list):
                    walk(sub)
    walk(body)
    return out


def _aligned(n: int, a: int = 128) -> int:
    return (n + a - 1) // a * a


def _fsuf(d):
    return {16: "f16", 32: "f32", 64: "f64"}[d.bits]


def generate_llvm(kernel: ir.Kernel, target: Target, debug_buffer: bool = False) -> tuple[str, int]:
    """(LLVM IR text, dynamic shared memory bytes) of an expanded kernel for `target`."""
    cg = Codegen(kernel, target, debug_buffer)
    text = cg.run()
    return text, cg.dynamic_shared


__all__ = ["generate_llvm", "native_str"]
