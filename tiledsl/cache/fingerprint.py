"""Stable text fingerprints of the Python values a kernel reads, for cache keys and staleness checks."""
from __future__ import annotations

import math
import sys
import types

from ..core import dtypes as dt
from ..lang import language as L


def _layout_types() -> tuple:
    """(Axis, Shape, TileLayout), or () while tiledsl.layout is not imported: then no value can be one, and a
    process served from the disk cache need not import it (nor the IR it builds on)."""
    m = sys.modules.get("tiledsl.layout")
    return (m.Axis, m.Shape, m.TileLayout) if m is not None else ()


def fingerprint_value(v: object, depth: int = 0) -> str | None:
    """A string that changes whenever `v` would change the compiled code; None when `v` may not be used.

    A type may fingerprint its own values with a method `__tiledsl_fingerprint__(self, depth, fingerprint_value)`
    (the helper it is given fingerprints what the value reads); `InlineFunction` does, so this module need not
    import the language's helpers."""
    if depth > 8:
        return None
    if isinstance(v, int) and not isinstance(v, bool) and v.bit_length() > 64:
        return f"int:{v:#x}"                # (decimal text of ints over 4300 digits is refused by Python)
    if v is None or isinstance(v, (bool, int, str)):
        return f"{type(v).__name__}:{v!r}"
    if isinstance(v, float):
        return f"float:{v.hex() if math.isfinite(v) else repr(v)}"
    if isinstance(v, tuple):
        parts = [fingerprint_value(x, depth + 1) for x in v]
        return None if None in parts else "(" + ",".join(parts) + ")"
    lt = _layout_types()
    if isinstance(v, (dt.DType, L.Opcode, L.TensorType) + lt):
        return f"{type(v).__name__}:{v!r}"
    hook = getattr(type(v), "__tiledsl_fingerprint__", None)
    if hook is not None:                      # an @tiledsl.inline helper: its source and what it reads
        return hook(v, depth, fingerprint_value)
    if isinstance(v, L.Builtin):
        return f"builtin:{v.name}"
    if v is L.T or v is L.constexpr or isinstance(v, (L._Ptx, L._Cuda, L._Tile)):
        return f"tiledsl:{type(v).__name__}"
    if isinstance(v, types.ModuleType) and (v.__name__.startswith("tiledsl") or v.__name__ == "math"):
        return f"module:{v.__name__}"
    if lt and v is lt[2]:
        return "class:TileLayout"
    if isinstance(v, (types.BuiltinFunctionType,)) and getattr(v, "__module__", None) == "builtins":
        return f"builtin:{v.__name__}"
    return None
