"""`@tiledsl.inline`: a helper a kernel can call. Its body is expanded at the call site at compile time (there
are no device calls): parameters bind to the caller's values (buffer views, scalars, constants), an optional
final `return` gives the call's value, and errors point at the helper's own lines."""
from __future__ import annotations

import ast
import hashlib
import inspect
import linecache
import textwrap
import threading
from typing import Any, Callable

from ..core.errors import TiledslError


class InlineFunction:
    """A Python function marked `@tiledsl.inline`: callable only from inside a kernel, where the front end
    expands its body at the call site. Editing it recompiles every kernel that calls it."""

    def __init__(self, fn: Callable[..., Any]):
        if not inspect.isfunction(fn):
            raise TiledslError(f"@tiledsl.inline decorates a Python function, got {type(fn).__name__}")
        self.fn = fn
        self._names = None                     # (code object, global names it reads)
        self._text = None                      # (code object, its file's lines, source text): _source
        self.__name__ = fn.__name__
        self.__doc__ = fn.__doc__

    def __call__(self, *args, **kwargs):
        raise TiledslError(f"{self.fn.__name__} is a @tiledsl.inline helper: call it from inside a kernel")

    def __repr__(self) -> str:
        return f"<tiledsl inline {self.fn.__qualname__}>"

    def _source(self) -> str:
        """Its source text, as `inspect.getsource` reads it. Kept while the function and its file's lines are the
        same objects: a kernel's cache key fingerprints every helper it reaches, to any depth, on each compile
        (FA3's forward: ~60 reads a compile, each tokenizing the helper), and linecache hands out a new list of
        lines only when the file changed on disk (checkcache), which is when the text must be read again."""
        code = self.fn.__code__
        lines = None
        file = code.co_filename
        if file.endswith(".py"):
            linecache.checkcache(file)
            lines = linecache.getlines(file, self.fn.__globals__) or None
        hit = self._text
        if hit is not None and hit[0] is code and hit[1] is lines and lines is not None:
            return hit[2]
        try:
            text = inspect.getsource(self.fn)
        except (OSError, TypeError):
            text = repr(code.co_code)
        self._text = (code, lines, text)
        return text

    def global_names(self) -> list[str]:
        """The names its body reads from its module's globals (what the front end resolves there)."""
        code = self.fn.__code__
        if self._names is None or self._names[0] is not code:
            try:
                tree = ast.parse(textwrap.dedent(self._source()))
                names = sorted({n.id for n in ast.walk(tree) if isinstance(n, ast.Name)})
            except SyntaxError:
                names = sorted(code.co_names)
            self._names = (code, names)
        g = self.fn.__globals__
        return [n for n in self._names[1] if n in g]

    def __tiledsl_reads__(self) -> list[tuple[dict, str]]:
        """(globals dict, name) of every global it reads: a kernel calling it depends on each (cache key and
        staleness check walk these, and those of the helpers among them, to any depth)."""
        g = self.fn.__globals__
        return [(g, n) for n in self.global_names()]

    def __tiledsl_fingerprint__(self, depth: int, value_fingerprint: Callable[[object, int], str | None]) -> str:
        """Its source and everything it reads (through `value_fingerprint`, cache/fingerprint.py's
        `fingerprint_value`), so editing a helper, or a global it reads, recompiles the kernels that call it. Helpers
        it calls are fingerprinted whole, to any depth (a helper already being fingerprinted, reached again through
        recursion, stands for itself by name: the front end refuses the recursion)."""
        active = _active()
        if id(self) in active:
            return f"inline-cycle:{self.fn.__module__}.{self.fn.__qualname__}"
        active.add(id(self))
        try:
            h = hashlib.sha256(self._source().encode())
            g = self.fn.__globals__
            for n in self.global_names():
                v = g.get(n, _UNSET)
                if v is not self:
                    h.update(f"{n}={value_fingerprint(v, 0) or 'object:' + type(v).__name__};".encode())
            if self.fn.__closure__:
                for n, c in zip(self.fn.__code__.co_freevars, self.fn.__closure__):
                    try:
                        v = c.cell_contents
                    except ValueError:
                        continue
                    h.update(f"closure {n}={value_fingerprint(v, 0) or 'object:' + type(v).__name__};".encode())
            return "inline:" + h.hexdigest()
        finally:
            active.discard(id(self))


_UNSET = object()
_state = threading.local()


def _active() -> set:
    """The helpers being fingerprinted on this thread (a cycle guard)."""
    a = getattr(_state, "active", None)
    if a is None:
        a = _state.active = set()
    return a


def inline(fn: Callable[..., Any]) -> InlineFunction:
    """Mark `fn` as a helper that kernels may call; its body is expanded where it is called (no device calls).

        @tiledsl.inline
        def axpy(a, x, y, i):
            y[i] = a * x[i] + y[i]

    Parameters bind to the caller's values (views, scalars, constants); an optional final `return` gives the
    call's value; errors point at the helper's own lines. Calling it from Python raises TiledslError.
    """
    return InlineFunction(fn)
