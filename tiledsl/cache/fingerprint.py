"""Stable text fingerprints of the Python values a kernel reads, for cache keys and staleness checks."""
from __future__ import annotations

import math
import types

from ..core import dtypes as dt
from ..lang import language as L
from ..layout import Axis, Shape, TileLayout


def fingerprint_value(v, depth=0):
    """A string that changes whenever `v` would change the compiled code; None when `v` may not be used."""
    if depth > 8:
        return None
    if v is None or isinstance(v, (bool, int, str)):
        return f"{type(v).__name__}:{v!r}"
    if isinstance(v, float):
        return f"float:{v.hex() if math.isfinite(v) else repr(v)}"
    if isinstance(v, tuple):
        parts = [fingerprint_value(x, depth + 1) for x in v]
        return None if None in parts else "(" + ",".join(parts) + ")"
    if isinstance(v, (dt.DType, TileLayout, Axis, Shape, L.Opcode, L.TensorType)):
        return f"{type(v).__name__}:{v!r}"
    from ..lang.inline import InlineFunction
    if isinstance(v, InlineFunction):
        return f"inline:{v.fingerprint(depth)}"
    if isinstance(v, L.Builtin):
        return f"builtin:{v.name}"
    if v is L.T or v is L.constexpr or isinstance(v, (L._Ptx, L._Cuda, L._Tile)):
        return f"tiledsl:{type(v).__name__}"
    if isinstance(v, types.ModuleType) and (v.__name__.startswith("tiledsl") or v.__name__ == "math"):
        return f"module:{v.__name__}"
    if v is TileLayout:
        return "class:TileLayout"
    if isinstance(v, (types.BuiltinFunctionType,)) and getattr(v, "__module__", None) == "builtins":
        return f"builtin:{v.__name__}"
    return None
