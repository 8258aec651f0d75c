"""The instructions a kernel is mostly made of (a GEMM: ~5500 loads of register slots before slots.py forwarded most
of them, ~3000 stores, ~2700 extractvalues and ~840 inline-asm calls), built and printed with less of llvmlite's
generic machinery.

Each class is llvmlite's own instruction with a `_to_string` that writes exactly the text llvmlite would (same
words, spacing and operand references; an alignment or metadata, which codegen never sets on them, falls back to
llvmlite's printer), and each helper does what `IRBuilder.load/store/extract_value` do minus the checks that
codegen's types already guarantee. `tests/test_compile_speed.py` compares the printed text with llvmlite's.
"""
from __future__ import annotations

from llvmlite.ir import instructions as _I
from llvmlite.ir import types as _T

_VOID = _T.VoidType()


def _init(ins, parent, typ, opname, operands):
    """What `Instruction.__init__` sets, without its assertions; the name is registered in the function's scope
    exactly as llvmlite does (every instruction, even a store, takes the next `.N`), so later names stay equal."""
    ins.parent = parent
    ins.type = typ
    ins._name = _fresh_name(parent.scope)
    ins.opname = opname
    ins.operands = operands
    ins.flags = []
    ins.metadata = {}


def _fresh_name(scope) -> str:
    """`scope.register("", deduplicate=True)`: the next unused `.N` (llvmlite's counter for the empty base name,
    stepped past names taken otherwise), registered; without deduplicate's loop through `is_used` and format."""
    used = scope._useset
    counts = scope._basenamemap
    n = counts[""] + 1
    name = f".{n}"
    while name in used:
        n += 1
        name = f".{n}"
    counts[""] = n
    used.add(name)
    return name


class Load(_I.LoadInstr):
    def __init__(self, parent, ptr, typ):
        _init(self, parent, typ, "load", [ptr])
        self.align = None

    def _to_string(self):
        if self.align is not None or self.metadata:
            return super()._to_string()
        p = self.operands[0]
        return f"{self.get_reference()} = load {self.type}, {p.type} {p.get_reference()}"


class Store(_I.StoreInstr):
    def __init__(self, parent, val, ptr):
        # (StoreInstr makes a new VoidType per store; one shared instance prints the same)
        _init(self, parent, _VOID, "store", [val, ptr])
        self.align = None

    def _to_string(self):
        if self.align is not None or self.metadata:
            return super()._to_string()
        v, p = self.operands
        return f"store {v.type} {v.get_reference()}, {p.type} {p.get_reference()}"


class Extract(_I.ExtractValue):
    def __init__(self, parent, agg, index: int):
        _init(self, parent, agg.type.elements[index], "extractvalue", [agg])
        self.aggregate = agg
        self.indices = [index]

    def _to_string(self):
        if self.metadata:
            return super()._to_string()
        a = self.aggregate
        return f"{self.get_reference()} = extractvalue {a.type} {a.get_reference()}, " + \
            ", ".join([str(i) for i in self.indices])


def load(b, ptr, typ):
    """`b.load(ptr, typ=typ)` for a pointer operand."""
    ld = Load(b._block, ptr, typ)
    b._insert(ld)
    return ld


def store(b, value, ptr):
    """`b.store(value, ptr)` for an opaque pointer operand."""
    st = Store(b._block, value, ptr)
    b._insert(st)
    return st


def extract(b, agg, index: int):
    """`b.extract_value(agg, index)`."""
    ev = Extract(b._block, agg, index)
    b._insert(ev)
    return ev


class AsmCall(_I.CallInstr):
    """`call <ret> asm [sideeffect] "<text>", "<constraints>"(<args>)`, as `IRBuilder.asm` makes and prints it
    (llvmlite writes `asm  "` with two spaces when there is no side effect; so does this)."""

    def __init__(self, parent, inline, args):
        _init(self, parent, inline.function_type.return_type, "call", [inline, *args])
        self.cconv = None
        self.tail = ""
        self.fastmath = _I.FastMathFlags()
        self.attributes = _I.CallInstrAttributes()
        self.arg_attributes = {}

    def _to_string(self):
        if self.metadata or self.arg_attributes or self.fastmath or self.tail or self.cconv:
            return super()._to_string()
        inline = self.operands[0]
        args = ", ".join([f"{a.type} {a.get_reference()}" for a in self.operands[1:]])
        head = "" if isinstance(self.type, _T.VoidType) else f"{self.get_reference()} = "
        attrs = " " + " ".join(sorted(self.attributes)) if self.attributes else ""
        se = "sideeffect" if inline.side_effect else ""
        return f'{head}call {self.type} asm {se} "{inline.asm}", "{inline.constraint}"({args}){attrs}'


def asm(b, fty, text, constraint, args, side_effect):
    """`b.asm(fty, text, constraint, args, side_effect)` for arguments of the function type's own types."""
    return asm_call(b, _I.InlineAsm(fty, text, constraint, side_effect), args)


def asm_call(b, inline, args):
    """A call of the inline asm `inline` (one object may serve many calls: it is printed in place each time)."""
    call = AsmCall(b._block, inline, args)
    b._insert(call)
    return call
