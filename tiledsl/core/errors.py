"""The three exceptions users see, and the source location every IR node carries."""
from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class Loc:
    """A place in the user's source: file, 1-based line, 0-based column, and the line's text."""
    file: str
    line: int
    col: int
    end_col: int
    text: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.col + 1}"


def _pad(prefix: str) -> str:
    """Blanks as wide on screen as `prefix`: tabs stay tabs, East Asian wide characters take two columns."""
    if prefix.isascii():
        return "".join("\t" if c == "\t" else " " for c in prefix)
    import unicodedata
    return "".join("\t" if c == "\t" else "  " if unicodedata.east_asian_width(c) in "WF" else
                   "" if unicodedata.combining(c) else " " for c in prefix)


class TiledslError(Exception):
    """Base class of every error tiledsl raises on purpose."""


class CompilationError(TiledslError):
    """Something is wrong in a kernel. The message shows the user's line and a caret under the culprit.

    `msg` is the bare message, `loc` where it points (None for errors with no place in the source, such as an
    unknown target)."""

    def __init__(self, msg: str, loc: Loc | None = None):
        self.msg = msg
        self.loc = loc
        super().__init__(self._render())

    def _render(self) -> str:
        if self.loc is None:
            return self.msg
        loc = self.loc
        width = max(1, (loc.end_col - loc.col) if loc.end_col > loc.col else 1)
        stripped = loc.text.rstrip("\n")
        caret = _pad(stripped[:loc.col]) + "^" * min(width, max(1, len(stripped) - loc.col))
        return f"{loc}: error: {self.msg}\n    {stripped}\n    {caret}"


class LayoutError(TiledslError, ValueError):
    """A layout that cannot describe the requested view. The front end reports it at the user's line.
    (Also a ValueError: it is raised for bad values, and was one before it became a TiledslError.)"""


class LaunchError(TiledslError):
    """A call that cannot be launched: wrong arguments, device, configuration. Raised before any launch, with the
    same text on every launch path (and on the interpreter)."""


class KernelFault(TiledslError):
    """A kernel stopped on a failed run-time check (debug bounds checks, interpreter faults)."""


MAX_INT_BITS = 64      # no dtype, extent, stride or count holds more; a larger int is refused where it enters


def too_big(x) -> bool:
    """An int no dtype can hold (|x| >= 2^64): refused before any message or stage tries to print or fold it."""
    return isinstance(x, int) and not isinstance(x, bool) and x.bit_length() > MAX_INT_BITS


def shown(x) -> str:
    """A user's value as a message shows it: short values by repr; an int too long to print by its size (Python
    refuses to write ints of over 4300 digits); an object without a useful repr (`object at 0x...`) by its type."""
    if isinstance(x, int) and not isinstance(x, bool) and x.bit_length() > 200:
        return f"an integer of {x.bit_length()} bits"
    if isinstance(x, (tuple, list)):
        inner = ", ".join(shown(v) for v in x)
        return f"({inner}{',' if len(x) == 1 else ''})" if isinstance(x, tuple) else f"[{inner}]"
    try:
        text = repr(x)
    except Exception:                           # noqa: BLE001 - a user object whose repr fails: name its type
        return f"a {type(x).__name__}"
    if " object at 0x" in text:
        return f"a {type(x).__name__}"
    return text if len(text) <= 80 else text[:77] + "..."


_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))     # .../tiledsl


def _internal(tb) -> bool:
    name = tb.tb_frame.f_code.co_filename
    return name.startswith(_PACKAGE_DIR) and name[len(_PACKAGE_DIR):len(_PACKAGE_DIR) + 1] == os.sep


def user_frames(e: BaseException) -> BaseException:
    """Drop tiledsl's own frames from the traceback of `e` (a TiledslError, and the TiledslErrors it was raised
    from), keeping the user's: the caller, and any user function tiledsl called (a grid callable). Its message
    already names the kernel's line; the frames of the compiler under it only bury that.

    The public entry points catch a TiledslError, call this and re-raise with a bare `raise`, which adds no entry
    for their own frame (a `raise e` would), so the traceback the user sees has no tiledsl frame at all.
    TILEDSL_DEBUG_TRACEBACK=1 keeps every frame (for reporting a bug in tiledsl)."""
    from . import knobs
    if knobs.debug_traceback():
        return e
    import types
    first, seen = e, set()
    while isinstance(e, TiledslError) and id(e) not in seen:
        seen.add(id(e))
        keep = []
        tb = e.__traceback__
        while tb is not None:
            if not _internal(tb):
                keep.append(tb)
            tb = tb.tb_next
        if len(keep) != _length(e.__traceback__):
            new = None
            for t in reversed(keep):
                new = types.TracebackType(new, t.tb_frame, t.tb_lasti, t.tb_lineno)
            e.__traceback__ = new
        e = e.__cause__ if e.__cause__ is not None else (None if e.__suppress_context__ else e.__context__)
    return first


def _length(tb) -> int:
    n = 0
    while tb is not None:
        n, tb = n + 1, tb.tb_next
    return n
