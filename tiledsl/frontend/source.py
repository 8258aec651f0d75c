"""Reading a kernel's source and turning AST positions into user-facing locations."""
from __future__ import annotations

import ast
import hashlib
import inspect
import textwrap

from ..core.errors import CompilationError, Loc


class Source:
    def __init__(self, fn):
        try:
            lines, start = inspect.getsourcelines(fn)
            self.file = inspect.getsourcefile(fn) or fn.__code__.co_filename
        except (OSError, TypeError) as e:
            raise CompilationError(f"cannot read the source of {getattr(fn, '__name__', fn)!r}: {e}") from None
        self.lines = lines
        self.start = start
        text = "".join(lines)
        dedented = textwrap.dedent(text)
        self.indent = _indent_removed(text, dedented)
        self.text = dedented
        self.hash = hashlib.sha256(text.encode()).hexdigest()
        try:
            self.tree = ast.parse(dedented)
        except SyntaxError as e:
            loc = Loc(self.file, start + (e.lineno or 1) - 1, max(0, (e.offset or 1) - 1), 0,
                      lines[(e.lineno or 1) - 1] if e.lineno and e.lineno <= len(lines) else "")
            raise CompilationError(f"syntax error: {e.msg}", loc) from None
        fdefs = [n for n in self.tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
        if not fdefs:
            raise CompilationError(f"{fn!r} is not defined by a def statement")
        self.fdef = fdefs[0]

    def loc(self, node) -> Loc:
        lineno = getattr(node, "lineno", None)
        if lineno is None:
            return Loc(self.file, self.start, 0, 0, self.lines[0] if self.lines else "")
        text = self.lines[lineno - 1] if lineno - 1 < len(self.lines) else ""
        col = node.col_offset + self.indent
        end = col + 1
        if getattr(node, "end_lineno", None) == lineno and node.end_col_offset is not None:
            end = node.end_col_offset + self.indent
        elif text:
            end = len(text.rstrip("\n"))
        return Loc(self.file, self.start + lineno - 1, col, end, text)


def _indent_removed(original: str, dedented: str) -> int:
    for o, d in zip(original.splitlines(), dedented.splitlines()):
        if d.strip():
            return len(o) - len(d)
    return 0
