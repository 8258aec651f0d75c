"""Every environment switch tiledsl reads, declared once: its name, type, default and meaning.

Each `Switch` below is the only place its variable is named; the accessors (`cache_dir()`, `debug()`, ...) read
the environment on every call, so a test's `monkeypatch.setenv` takes effect at once. `python -m tiledsl switches`
lists them. Unparseable values fall back to the default rather than failing a launch.

Switches change what is run or kept, never the compiled code itself: the one that does (`TILEDSL_DEBUG`) is folded
into `core.options.Options` by the caller, and Options go into the cache key.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Callable

_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


def _default_cache_dir() -> str:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "tiledsl")


@dataclass(frozen=True)
class Switch:
    """One environment variable. `kind` is "bool", "int" or "path"; `default` is the value when it is unset,
    empty or unparseable (a callable default is computed at read time, e.g. from XDG_CACHE_HOME)."""
    name: str
    kind: str
    default: object
    doc: str

    def get(self):
        """The switch's current value, typed."""
        raw = os.environ.get(self.name, "").strip()
        default = self.default() if callable(self.default) else self.default
        if not raw:
            return default
        if self.kind == "bool":
            low = raw.lower()
            return True if low in _TRUE else False if low in _FALSE else default
        if self.kind == "int":
            try:
                return int(raw)
            except ValueError:
                return default
        return raw


CACHE_DIR = Switch("TILEDSL_CACHE_DIR", "path", _default_cache_dir,
                   "where compiled kernels are kept (default ~/.cache/tiledsl)")
CACHE_MAX_MB = Switch("TILEDSL_CACHE_MAX_MB", "int", 1024,
                      "disk cache bound in MB, least recently used entries go first (1024)")
DISABLE_DISK_CACHE = Switch("TILEDSL_DISABLE_DISK_CACHE", "bool", False, "never read or write the disk cache")
INTERPRET = Switch("TILEDSL_INTERPRET", "bool", False, "run every kernel on the CPU interpreter")
DEBUG = Switch("TILEDSL_DEBUG", "bool", False, "compile every kernel with run-time bounds checks")
RACECHECK = Switch("TILEDSL_RACECHECK", "bool", True,
                   "the interpreter's race detector, shared and global memory (default on; 0 = off)")
INTERPRET_ORDER = Switch("TILEDSL_INTERPRET_ORDER", "str", "lockstep",
                         "the interpreter's warp order: lockstep (default), or random: warps one at a time in a "
                         "shuffled order between barriers (docs/races.md)")
INTERPRET_SEED = Switch("TILEDSL_INTERPRET_SEED", "int", 0, "the seed of TILEDSL_INTERPRET_ORDER=random (0)")
NATIVE_LAUNCH = Switch("TILEDSL_NATIVE_LAUNCH", "bool", True,
                       "compile steady launchers to native code with LLVM (default on; 0 = keep the Python launchers)")
DUMP_DIR = Switch("TILEDSL_DUMP_DIR", "path", None,
                  "write each compiled kernel's stages (tile, expanded, llvm, ptx) here")
DEBUG_TRACEBACK = Switch("TILEDSL_DEBUG_TRACEBACK", "bool", False,
                         "keep tiledsl's own frames in the tracebacks of its errors (hidden by default)")
ENABLE = Switch("TILEDSL_ENABLE", "str", "",
                "kernel paths built without a GPU that may run on CUDA tensors anyway: names, comma-separated, or "
                "all (tiledsl.ops.gates; off by default until a GPU session has run their tests)")
DISABLE = Switch("TILEDSL_DISABLE", "str", "",
                 "gated kernel paths to keep off on CUDA tensors even when verified: names, comma-separated, or all "
                 "(tiledsl.ops.gates: the path each replaces runs instead, to compare or to work around)")

SWITCHES = [CACHE_DIR, CACHE_MAX_MB, DISABLE_DISK_CACHE, INTERPRET, DEBUG, RACECHECK, INTERPRET_ORDER, INTERPRET_SEED,
            NATIVE_LAUNCH, DUMP_DIR,
            DEBUG_TRACEBACK, ENABLE, DISABLE]


def _reader(switch: Switch) -> Callable[[], object]:
    def read():
        return switch.get()
    read.__doc__ = f"{switch.name}: {switch.doc}"
    return read


cache_dir: Callable[[], str] = _reader(CACHE_DIR)
interpret: Callable[[], bool] = _reader(INTERPRET)
debug: Callable[[], bool] = _reader(DEBUG)
racecheck: Callable[[], bool] = _reader(RACECHECK)
interpret_order: Callable[[], str] = _reader(INTERPRET_ORDER)
interpret_seed: Callable[[], int] = _reader(INTERPRET_SEED)
_dump_warned = set()


def dump_dir() -> str | None:
    """TILEDSL_DUMP_DIR as a folder that exists (created here), or None: unset, or a path that cannot be a
    folder (a file, under a file, not writable), which is warned about once and skipped; a dump must never fail
    a compilation."""
    path = DUMP_DIR.get()
    if not path:
        return None
    try:
        if os.path.lexists(path) and not os.path.isdir(path):
            raise NotADirectoryError(20, "not a directory")
        os.makedirs(path, exist_ok=True)
        if os.access(path, os.W_OK):
            return path
        why = "not writable"
    except OSError as e:
        why = e.strerror or type(e).__name__
    if path not in _dump_warned:
        _dump_warned.add(path)
        import warnings
        warnings.warn(f"tiledsl: {DUMP_DIR.name}={path} cannot hold the dumps ({why}); not dumping", stacklevel=2)
    return None
native_launch: Callable[[], bool] = _reader(NATIVE_LAUNCH)
debug_traceback: Callable[[], bool] = _reader(DEBUG_TRACEBACK)


def enabled_paths() -> frozenset:
    """TILEDSL_ENABLE as a set of names ("all" included as written)."""
    return frozenset(w.strip() for w in ENABLE.get().split(",") if w.strip())


def disabled_paths() -> frozenset:
    """TILEDSL_DISABLE as a set of names ("all" included as written)."""
    return frozenset(w.strip() for w in DISABLE.get().split(",") if w.strip())


def disk_cache_enabled() -> bool:
    """False when TILEDSL_DISABLE_DISK_CACHE is set."""
    return not DISABLE_DISK_CACHE.get()


def cache_max_bytes() -> int:
    """TILEDSL_CACHE_MAX_MB in bytes."""
    return CACHE_MAX_MB.get() * 1024 * 1024
