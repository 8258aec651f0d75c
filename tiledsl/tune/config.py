"""`tiledsl.Config`: one candidate of an autotuned kernel, its constexpr values and launch options."""
from __future__ import annotations

from ..cache.fingerprint import fingerprint_value
from ..core.errors import TiledslError

# launch options a Config understands besides grid and block; num_warps is Triton's spelling of the block size
_LAUNCH_OPTIONS = ("num_warps",)


def _dims_ok(v) -> bool:
    if isinstance(v, bool):
        return False
    if isinstance(v, int):
        return v > 0
    return isinstance(v, tuple) and 1 <= len(v) <= 3 and all(isinstance(x, int) and not isinstance(x, bool)
                                                             and x > 0 for x in v)


class Config:
    """One candidate for `tiledsl.autotune`: `Config({"BLOCK": 128}, block=256)`.

    constexprs: the values of the kernel's `T.constexpr` parameters (or, for a kernel factory, its keyword
        arguments) for this candidate; ints, floats, bools, strings, dtypes, layouts or tuples of those.
    grid, block: launch dimensions (an int or a tuple of up to 3 ints; `grid` may be a callable of the bound
        arguments), overriding the body's `T.device_entry(launch=...)`; None keeps the body's.
    num_warps: Triton's spelling of `block=32 * num_warps`.
    Anything else raises a TiledslError naming it."""

    __slots__ = ("constexprs", "grid", "block")

    def __init__(self, constexprs: dict | None = None, *, grid=None, block=None, **launch_options):
        if constexprs is None:
            constexprs = {}
        if not isinstance(constexprs, dict):
            raise TiledslError(f"tiledsl.Config takes a dict of constexpr values first, got "
                               f"{type(constexprs).__name__}")
        for name, v in constexprs.items():
            if not isinstance(name, str) or not name.isidentifier():
                raise TiledslError(f"tiledsl.Config: constexpr names are parameter names, got {name!r}")
            if fingerprint_value(v) is None:
                raise TiledslError(f"tiledsl.Config: constexpr '{name}' must be an int, float, bool, str, dtype, "
                                   f"layout or tuple of those, got {type(v).__name__}")
        for name in launch_options:
            if name not in _LAUNCH_OPTIONS:
                raise TiledslError(f"tiledsl.Config got an unknown launch option '{name}'; it takes grid=, block= "
                                   f"and num_warps=")
        nw = launch_options.get("num_warps")
        if nw is not None:
            if isinstance(nw, bool) or not isinstance(nw, int) or not 1 <= nw <= 32:
                raise TiledslError(f"tiledsl.Config: num_warps must be an int from 1 to 32, got {nw!r}")
            if block is not None:
                raise TiledslError("tiledsl.Config: give block= or num_warps=, not both")
            block = 32 * nw
        if isinstance(block, list):
            block = tuple(block)
        if isinstance(grid, list):
            grid = tuple(grid)
        if block is not None and not _dims_ok(block):
            raise TiledslError(f"tiledsl.Config: block must be a positive int or a tuple of up to 3, got {block!r}")
        if grid is not None and not callable(grid) and not _dims_ok(grid):
            raise TiledslError(f"tiledsl.Config: grid must be a positive int, a tuple of up to 3 or a callable, "
                               f"got {grid!r}")
        self.constexprs = dict(constexprs)
        self.grid = grid
        self.block = block

    def fingerprint(self) -> str:
        """A stable text naming this candidate (the store keeps the winner by it)."""
        parts = [f"{k}={fingerprint_value(v)}" for k, v in sorted(self.constexprs.items())]
        g = self.grid
        if callable(g):
            code = getattr(g, "__code__", None)
            g = f"callable:{getattr(g, '__qualname__', type(g).__name__)}:" + \
                (code.co_code.hex() if code is not None else "")
        parts.append(f"grid={g}")
        parts.append(f"block={self.block}")
        return ",".join(parts)

    def __repr__(self) -> str:
        extra = "".join(f", {n}={getattr(self, n)!r}" for n in ("grid", "block") if getattr(self, n) is not None)
        return f"Config({self.constexprs!r}{extra})"

    def __eq__(self, other) -> bool:
        return isinstance(other, Config) and other.fingerprint() == self.fingerprint()

    def __hash__(self) -> int:
        return hash(self.fingerprint())
