"""`@tiledsl.inline`: a helper a kernel can call. Its body is expanded at the call site at compile time (there
are no device calls): parameters bind to the caller's values (buffer views, scalars, constants), an optional
final `return` gives the call's value, and errors point at the helper's own lines."""
from __future__ import annotations

import ast
import hashlib
import inspect
import textwrap
from typing import Any, Callable

from ..core.errors import TiledslError


class InlineFunction:
    """A Python function marked `@tiledsl.inline`: callable only from inside a kernel, where the front end
    expands its body at the call site. Editing it recompiles every kernel that calls it."""

    def __init__(self, fn: Callable[..., Any]):
        if not inspect.isfunction(fn):
            raise TiledslError(f"@tiledsl.inline decorates a Python function, got {type(fn).__name__}")
        self.fn = fn
        self.__name__ = fn.__name__
        self.__doc__ = fn.__doc__

    def __call__(self, *args, **kwargs):
        raise TiledslError(f"{self.fn.__name__} is a @tiledsl.inline helper: call it from inside a kernel")

    def __repr__(self) -> str:
        return f"<tiledsl inline {self.fn.__qualname__}>"

    def __tiledsl_fingerprint__(self, depth: int, value_fingerprint: Callable[[object, int], str | None]) -> str:
        """Its source and everything it reads (through `value_fingerprint`, cache/fingerprint.py's
        `fingerprint_value`), so editing a helper recompiles the kernels that call it."""
        try:
            src = inspect.getsource(self.fn)
        except (OSError, TypeError):
            src = repr(self.fn.__code__.co_code)
        h = hashlib.sha256(src.encode())
        try:
            names = sorted({n.id for n in ast.walk(ast.parse(textwrap.dedent(src))) if isinstance(n, ast.Name)})
        except SyntaxError:
            names = []
        g = self.fn.__globals__
        for n in names:
            if n in g and g[n] is not self:
                h.update(f"{n}={value_fingerprint(g[n], depth + 1)}".encode())
        return "inline:" + h.hexdigest()


def inline(fn: Callable[..., Any]) -> InlineFunction:
    """Mark `fn` as a helper that kernels may call; its body is expanded where it is called (no device calls).

        @tiledsl.inline
        def axpy(a, x, y, i):
            y[i] = a * x[i] + y[i]

    Parameters bind to the caller's values (views, scalars, constants); an optional final `return` gives the
    call's value; errors point at the helper's own lines. Calling it from Python raises TiledslError.
    """
    return InlineFunction(fn)
