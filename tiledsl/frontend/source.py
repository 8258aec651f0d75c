"""Reading a kernel's source and turning AST positions into user-facing locations."""
from __future__ import annotations

import ast
import hashlib
import linecache
import os
import textwrap

from ..core.errors import CompilationError, Loc


class Source:
    def __init__(self, fn):
        fast = _fast_source(fn)
        if fast is not None:
            self.file, lines, start, text, dedented, self.tree = fast
        else:
            import inspect
            try:
                lines, start = inspect.getsourcelines(fn)
                self.file = inspect.getsourcefile(fn) or fn.__code__.co_filename
            except (OSError, TypeError) as e:
                raise CompilationError(f"cannot read the source of {getattr(fn, '__name__', fn)!r}: {e}") from None
            text = "".join(lines)
            dedented = textwrap.dedent(text)
            self.tree = None
        self.lines = lines
        self.start = start
        self.indent = _indent_removed(text, dedented)
        self.text = dedented
        self.hash = hashlib.sha256(text.encode()).hexdigest()
        try:
            if self.tree is None:
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
        # a node's Loc is asked once per evaluation: a compile-time loop's body, unrolled, asks again per step
        # (Loc is frozen, so one instance serves every IR node made from `node`)
        locs = self.__dict__.get("_locs")
        if locs is None:
            locs = self._locs = {}
        hit = locs.get(id(node))
        if hit is not None and hit[0] is node:
            return hit[1]
        loc = self._loc(node)
        locs[id(node)] = (node, loc)
        return loc

    def _loc(self, node) -> Loc:
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


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" \t\f"))


def _is_code(line: str) -> bool:
    t = line.strip()
    return bool(t) and t[0] != "#"


def _fast_source(fn):
    """(file, lines, first line number, text, dedented text, AST) of a plain `def` the way
    `inspect.getsourcelines` reads it, without tokenizing (whose first use compiles tokenize's regular
    expressions: ~20 ms of a fresh process's first launch); None for anything else (inspect then reads it).

    The block is the def (decorators included) and every following line until the first code line indented no
    deeper than the def that does not start with a closing bracket; trailing comments stay when indented at least
    as deep as the body (as inspect's block finder keeps them). A line inside a bracket, a string or a backslash
    continuation may be indented less than the def: then the cut text does not parse and inspect reads the
    function instead; when it parses as exactly one def of this name, the cut is where the tokenizer's dedent
    would be."""
    code = getattr(fn, "__code__", None)
    if code is None or code.co_name == "<lambda>" or hasattr(fn, "__wrapped__"):
        return None
    file = code.co_filename
    if not file.endswith(".py") or not os.path.exists(file):
        return None
    linecache.checkcache(file)
    lines = linecache.getlines(file, getattr(fn, "__globals__", None))
    first = code.co_firstlineno - 1
    if not lines or not 0 <= first < len(lines):
        return None
    head = lines[first].lstrip()
    if not head.startswith(("@", "def ", "def\t", "async ")):
        return None
    col = _indent(lines[first])
    n = len(lines)
    i = first
    while i < n and not (_indent(lines[i]) == col and lines[i].lstrip().startswith(("def ", "def\t", "async "))):
        i += 1
    end = i + 1                                   # one past the last line of the candidate block
    j = i + 1
    while j < n:
        line = lines[j]
        if _is_code(line) and _indent(line) <= col and line.lstrip()[0] not in ")]}":
            break
        j += 1
        if _is_code(line) or _indent(line) > col:
            end = j
    block = lines[first:end]
    # trailing blank lines and comments shallower than the body: inspect leaves them out
    while block and not _is_code(block[-1]) and (not block[-1].strip() or _indent(block[-1]) <= col):
        block.pop()
    text = "".join(block)
    dedented = textwrap.dedent(text)
    try:
        tree = ast.parse(dedented)
    except SyntaxError:
        return None
    if len(tree.body) != 1 or not isinstance(tree.body[0], (ast.FunctionDef, ast.AsyncFunctionDef)):
        return None
    fdef = tree.body[0]
    if fdef.name != code.co_name or min([fdef.lineno] + [d.lineno for d in fdef.decorator_list]) != 1:
        return None
    # the body's column, as the tokenizer's INDENT gives it (none when the body shares a line with the header)
    dlines = dedented.splitlines(True)
    body = fdef.body[0]
    body_col = None
    if body.lineno != fdef.lineno and _indent(dlines[body.lineno - 1]) == body.col_offset:
        body_col = body.col_offset + _indent(block[0]) - _indent(dlines[0])
    k = len(block)
    while k > fdef.end_lineno and (body_col is None or not block[k - 1].strip()
                                   or _indent(block[k - 1]) < body_col):
        k -= 1
    if k != len(block):
        block = block[:k]
        text = "".join(block)
        dedented = textwrap.dedent(text)
        tree = ast.parse(dedented)
    return file, block, first + 1, text, dedented, tree


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
