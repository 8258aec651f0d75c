"""Which names a kernel's body reads and assigns, and the two mistakes Python's scoping makes of them.

- A size name in an annotation (`T.Tensor(("n", 4096), ...)`) binds `n` in the body. When the body also reads `n`
  and `n` is a module global, a closure variable or a Python builtin, the reader cannot tell which `n` is meant
  (the size silently won): refused at the annotation, naming both.
- A name the body assigns anywhere (`=`, `+=`, `x: T.f32 = ...`, a `for` target) is local to the whole kernel,
  as Python makes it. Reading it before it is assigned is Python's UnboundLocalError, even when a module global
  has that name: `G += A[1]` on a module global `G` is refused (a kernel cannot change a global; its value is a
  compile-time constant), and so is reading `G` before a later `G = ...`. A plain `G = 1` that comes first makes
  an ordinary local, as in Python.
"""
from __future__ import annotations

import ast
import builtins


def scan(fdef) -> tuple[dict, dict]:
    """({name: first node reading it}, {name: first node assigning it}) over the body of `fdef`."""
    reads, writes = {}, {}
    for st in fdef.body:
        for n in ast.walk(st):
            if isinstance(n, ast.Name):
                (writes if isinstance(n.ctx, ast.Store) else reads).setdefault(n.id, n)
    return reads, writes


def size_node(annotation, name):
    """The string constant naming size `name` inside a parameter's annotation (for the caret), or the annotation."""
    for n in ast.walk(annotation):
        if isinstance(n, ast.Constant) and n.value == name:
            return n
    return annotation


def outer_kind(parser, name) -> str | None:
    """What `name` means outside the kernel's own names: 'closure variable', 'module global', 'Python builtin'."""
    if name in parser.closure:
        return "closure variable"
    if name in parser.globals:
        return "module global"
    if hasattr(builtins, name):
        return "Python builtin"
    return None


def size_collision(parser, name, reads) -> str | None:
    """The message refusing size name `name` when the body reads it and it also names an outer value."""
    node = reads.get(name)
    kind = outer_kind(parser, name) if node is not None else None
    if kind is None:
        return None
    return (f"size name '{name}' is also the name of the {kind} '{name}', which the kernel reads at line "
            f"{parser.loc(node).line}: there '{name}' would be this tensor's size, not the {kind}; rename the size "
            f"(or the {kind}) so the kernel says which one it means")


def read_before_assignment(parser, name, writes) -> str | None:
    """The message for reading `name`, not yet bound, where the kernel assigns it (Python: UnboundLocalError), or
    None when the kernel assigns no `name`."""
    node = writes.get(name)
    if node is None:
        return None
    kind = outer_kind(parser, name)
    if kind is None:                       # e.g. an enclosing function's variable, which assigning made local
        return (f"'{name}' is read before it is assigned: the kernel assigns '{name}' at line "
                f"{parser.loc(node).line}, which makes it a local name of the whole kernel, as in Python (which "
                f"raises UnboundLocalError here); assign it before this line")
    return (f"'{name}' is read before it is assigned: the kernel assigns '{name}' at line {parser.loc(node).line}, "
            f"which makes it a local name of the whole kernel, as in Python (which raises UnboundLocalError here); "
            f"the {kind} '{name}' is not read. A kernel cannot change a {kind}: its value is a compile-time "
            f"constant; copy it into a new name first (x = {name}) and change that")
