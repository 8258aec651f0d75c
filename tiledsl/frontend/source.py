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
            # SyntaxError.offset counts characters of the dedented line (1-based): add back the indent
            loc = Loc(self.file, start + (e.lineno or 1) - 1, max(0, (e.offset or 1) - 1) + self.indent, 0,
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
        col = _chars(text, node.col_offset + self.indent)
        end = col + 1
        if getattr(node, "end_lineno", None) == lineno and node.end_col_offset is not None:
            end = _chars(text, node.end_col_offset + self.indent)
        elif text:
            end = len(text.rstrip("\n"))
        return Loc(self.file, self.start + lineno - 1, col, end, text)


def _chars(line: str, byte_offset: int) -> int:
    """The character column of a UTF-8 byte offset into `line` (the AST counts columns in UTF-8 bytes, so an
    accented identifier or a string of non-ASCII text earlier on the line would shift the caret). The indent the
    dedent removed is ASCII whitespace: one byte per character."""
    if line.isascii():
        return byte_offset
    return len(line.encode("utf-8")[:byte_offset].decode("utf-8", errors="ignore"))


def _indent_removed(original: str, dedented: str) -> int:
    for o, d in zip(original.splitlines(), dedented.splitlines()):
        if d.strip():
            return len(o) - len(d)
    return 0
