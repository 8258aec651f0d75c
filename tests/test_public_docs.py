"""Public entry points say what they do, and the package ships its type information."""
import os
import tomllib

import tiledsl
from tiledsl import T
from tiledsl.layout import S, TileLayout

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_docstrings():
    for obj in (tiledsl.inline, TileLayout, TileLayout.owner, type(S), T.Tensor, tiledsl.TiledslError,
                tiledsl.CompilationError, tiledsl.LaunchError, tiledsl.KernelFault):
        assert obj.__doc__ and len(obj.__doc__) > 20, obj
    for name in ("device_entry", "alloc_local", "alloc_shared", "grid", "unroll", "min", "max", "cast",
                 "static_assert"):
        assert getattr(T, name).__doc__.startswith(f"T.{name}"), name
    for name in ("LaunchConfig", "lane_id", "warp_id", "thread_id", "block_id", "block_dim", "grid_dim",
                 "syncthreads"):
        assert getattr(T.cuda, name).__doc__.startswith(f"T.cuda.{name}"), name
    assert T.cuda.tile.apply.__doc__.startswith("T.cuda.tile.apply")


def test_py_typed_is_shipped():
    assert os.path.exists(os.path.join(ROOT, "tiledsl", "py.typed"))
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        assert "py.typed" in tomllib.load(f)["tool"]["setuptools"]["package-data"]["tiledsl"]
