"""`Builtin`: the object behind each kernel-language function (`T.min`, `T.sqrt`, ...). A module of its own so that
the modules defining builtins (language.py, scalar_math.py) import it without importing each other."""
from __future__ import annotations

from ..core.errors import TiledslError


class Builtin:
    """A kernel-language function; `name` selects its front-end handler, `doc` says what it does in a kernel."""

    def __init__(self, name: str, doc: str = ""):
        self.name = name
        self.__doc__ = doc or f"T.{name}: a kernel-language function (see the front end)."

    def __call__(self, *args, **kwargs):
        raise TiledslError(f"T.{self.name} can only be used inside a @tiledsl.jit kernel")

    def __repr__(self) -> str:
        return f"<tiledsl builtin {self.name}>"
