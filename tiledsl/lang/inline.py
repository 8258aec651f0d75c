"""`@tiledsl.inline`: a helper a kernel can call. Its body is expanded at the call site at compile time (there
are no device calls): parameters bind to the caller's values (buffer views, scalars, constants), an optional
final `return` gives the call's value, and errors point at the helper's own lines."""
from __future__ import annotations

import ast
import hashlib
import inspect

from ..core.errors import TiledslError


class InlineFunction:
    def __init__(self, fn):
        if not inspect.isfunction(fn):
            raise TiledslError(f"@tiledsl.inline decorates a Python function, got {type(fn).__name__}")
        self.fn = fn
        self.__name__ = fn.__name__
        self.__doc__ = fn.__doc__

    def __call__(self, *args, **kwargs):
        raise TiledslError(f"{self.fn.__name__} is a @tiledsl.inline helper: call it from inside a kernel")

    def __repr__(self) -> str:
        return f"<tiledsl inline {self.fn.__qualname__}>"

    def fingerprint(self, depth: int) -> str:
        """Its source and everything it reads, so editing a helper recompiles the kernels that call it."""
        from ..cache.fingerprint import fingerprint_value
        try:
            src = inspect.getsource(self.fn)
        except (OSError, TypeError):
            src = repr(self.fn.__code__.co_code)
        h = hashlib.sha256(src.encode())
        try:
            names = sorted({n.id for n in ast.walk(ast.parse(_dedent(src))) if isinstance(n, ast.Name)})
        except SyntaxError:
            names = []
        g = self.fn.__globals__
        for n in names:
            if n in g and g[n] is not self:
                h.update(f"{n}={fingerprint_value(g[n], depth + 1)}".encode())
        return h.hexdigest()


def inline(fn):
    return InlineFunction(fn)


def _dedent(src: str) -> str:
    import textwrap
    return textwrap.dedent(src)
