"""Register provenance (issue 33): two views of one register buffer must agree on what each register holds.

One local buffer is often viewed twice: as ldmatrix's destination and as mma.sync's A or B operand, or as one
mma's D and the next one's C. Each view maps the same registers to coordinates of its own, and nothing made them
agree: an ldmatrix view and an mma view that order the A fragment's registers differently ({ar[0], ar[2], ar[1],
ar[3]}) give a wrong product and no error. This pass, run on the expanded IR, follows what each register holds:

- A *writer* leaves, in every register of one of its operand groups, a mark: its frame (which instruction and what
  kind of fragment), its position in that frame, and the user's line. ldmatrix numbers its 8x8 matrices in issue
  order (repeat, then matrix); the D of mma.sync and of wgmma numbers each issue's native registers.
- A *reader* whose operand group consists of registers with marks of one writer, of the kind it expects, checks
  that they are read in the order they were written: mma.sync's A and B registers (and wgmma's A in registers) must be
  consecutive ldmatrix matrices, in order: in PTX, ldmatrix matrix i is the fragment's register i (the matrix
  whose row addresses lanes 8i..8i+7 give), so reading matrix 2 as register a1 reads rows 0-7 of k 8-15 where the
  mma takes rows 8-15 of k 0-7. An accumulator read (mma C, wgmma D accumulating) must be one issue's D registers
  in their native order.
- Anything else that writes a register (a store, arithmetic, a load, a native this pass does not model) erases
  its mark: where provenance is unknown nothing is claimed. wgmma.fence/commit/wait name the accumulators without
  changing them and keep the marks.

Control flow: both sides of an `if` start from the same marks and only marks they agree on survive; a loop body
is followed once from the marks before it and again from the marks at its end (its second iteration), reporting
on both. A mismatch is a CompilationError at the reader's operand with a counterexample: the register, a lane,
the coordinate the writer put there and the coordinate the reader takes it for.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..core.errors import CompilationError
from ..ir import nodes as ir


@dataclass(frozen=True)
class Written:
    """Registers of operand group `group` get marks of `frame` (a kind and the issuing instruction), numbered
    `first`, `first + 1`, ... in the group's order; `what(i)` names mark i for messages."""
    group: int
    frame: tuple
    first: int
    what: object


@dataclass(frozen=True)
class Read:
    """The registers of operand group `group` are read as native registers 0, 1, ... of a fragment whose lane map
    is `lane_map(lane, r) -> coordinate`; with marks of `frame[0]`'s kind they must be consecutive marks of one
    writer (starting at 0 when `from_zero`), in order. `operand` names the operand, `loc` is its source place."""
    group: int
    kind: str
    lane_map: object
    operand: str
    loc: object
    from_zero: bool = False


KEEP = "keep"                  # a Native whose named registers keep their marks (wgmma fence/commit/wait)


class Mark:
    """Who put a register's value there: (kind, the writing Apply, issue key) as `frame`, and its place in that
    write's order. The writer's `what` is called only for a message (a GEMM leaves ~5 thousand marks, hence a plain
    slotted class: a frozen dataclass's constructor was a fifth of this pass); the name it gives is a function of
    frame and index, so it takes no part in comparing marks."""
    __slots__ = ("frame", "index", "what", "loc")

    def __init__(self, frame: tuple, index: int, what, loc):
        self.frame, self.index, self.what, self.loc = frame, index, what, loc

    def __eq__(self, other):
        return type(other) is Mark and (self.frame == other.frame and self.index == other.index
                                        and self.loc == other.loc)

    def __hash__(self):
        return hash((self.frame, self.index, self.loc))

    def __repr__(self):
        return f"Mark({self.frame!r}, {self.index}, {self.loc!r})"


def check_register_provenance(body: list) -> None:
    """Raise CompilationError where a reader takes registers in another order than their writer put them."""
    _walk(body, {})


def _walk(body, marks: dict) -> dict:
    for s in body:
        if isinstance(s, ir.Native):
            _native(s, marks)
        elif isinstance(s, ir.Store):
            if s.storage.scope == "local":
                _forget_store(s, marks)
        elif isinstance(s, ir.If):
            a = _walk(s.then, dict(marks))
            b = _walk(s.orelse, dict(marks))
            marks.clear()
            marks.update({k: v for k, v in a.items() if b.get(k) == v})
        elif isinstance(s, (ir.For, ir.While)):
            end = _walk(s.body, dict(marks))
            if end != marks:
                # the second iteration starts from the marks the first left
                end = _walk(s.body, dict(end))
            # after the loop: the marks before it (no iteration) and after an iteration, where they agree
            kept = {k: v for k, v in marks.items() if end.get(k) == v}
            marks.clear()
            marks.update(kept)
    return marks


def _key(r: ir.Reg):
    """Marks live per 32-bit register: (storage, word)."""
    return r.storage, r.index * r.dtype.nbytes // 4


def _forget_store(s: ir.Store, marks: dict) -> None:
    off = ir.static_int(s.offset)
    if off is None:                          # a run-time index may reach any register of the buffer
        for k in [k for k in marks if k[0] is s.storage]:
            del marks[k]
        return
    nbytes = s.dtype.nbytes
    for w in range(off * nbytes // 4, ((off + 1) * nbytes + 3) // 4):
        marks.pop((s.storage, w), None)


def _native(n: ir.Native, marks: dict) -> None:
    frags = getattr(n, "frags", ()) or ()
    written = {}
    if frags:
        if KEEP in frags:
            return
        for f in frags:
            if isinstance(f, Read):
                _check(n, f, marks)
        for f in frags:
            if isinstance(f, Written):
                for i, r in enumerate(n.groups[f.group]):
                    written[_key(r)] = Mark(f.frame, f.first + i, f.what, n.loc)
    # every other register the instruction writes no longer holds what its writer put there
    Reg = ir.Reg
    for g in n.groups:
        for r in g:
            if type(r) is Reg and r.write:
                k = (r.storage, r.index * r.dtype.nbytes // 4)          # _key(r)
                m = written.get(k)
                if m is not None:
                    marks[k] = m
                else:
                    marks.pop(k, None)


def _check(n: ir.Native, f: Read, marks: dict) -> None:
    regs = [r for r in n.groups[f.group] if isinstance(r, ir.Reg)]
    got = [marks.get(_key(r)) for r in regs]
    if not regs or any(m is None or m.frame[0] != f.kind for m in got):
        return                                # provenance unknown (or of another kind): nothing claimed
    if any(m.frame != got[0].frame for m in got):
        return                                # several writers (two ldmatrix.x2 for one A): no one order to check
    first = 0 if f.from_zero else got[0].index
    for r, m in enumerate(got):
        if m.index != first + r:
            raise _mismatch(n, f, regs, got, r, first)


def _mismatch(n: ir.Native, f: Read, regs, got, r: int, first: int) -> CompilationError:
    """The counterexample: the read's register `r` holds mark got[r]; in the writer's order that mark is the
    fragment's register got[r].index - first, which on lane 0 holds another coordinate than register r."""
    reg, m = regs[r], got[r]
    lane = 0
    w = m.index - first
    if 0 <= w < len(regs):
        wrote = f"coordinate {f.lane_map(lane, w)} (the fragment's register {w}, in the order written)"
    else:
        wrote = (f"the register {w} places after the fragment's register 0 (in the order written: another "
                 f"fragment's)")
    text = f"\n    {m.loc.text.strip()}" if getattr(m.loc, "text", None) else ""
    op = n.opcode.split(".")[0]
    return CompilationError(
        f"{n.opcode}: operand {f.operand}: its registers are read in another order than they were written: "
        f"register {_reg_name(reg)}, lane {lane}: {m.what(m.index)} at {m.loc} put {wrote} there, but this {op} reads it "
        f"as its {f.operand} register {r}, coordinate {f.lane_map(lane, r)}{text}\n"
        f"the two views of '{reg.storage.name}' map its registers to different coordinates: view it for the "
        f"reader in the writer's register order (tiledsl.layouts pairs ldmatrix_regs with mma_a/mma_b, and one "
        f"accumulator layout serves D and C)", f.loc or n.loc)


def _reg_name(r: ir.Reg) -> str:
    st = r.storage
    if st.dtype.nbytes == r.dtype.nbytes:
        return f"{st.name}[{r.index}]"
    return f"{st.name} ({r.dtype.name} word {r.index})"
