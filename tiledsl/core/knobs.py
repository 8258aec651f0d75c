"""Every environment switch tiledsl reads, declared once with its type and default."""
from __future__ import annotations

import os
from dataclasses import dataclass


def _flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")


def _cache_dir() -> str:
    explicit = os.environ.get("TILEDSL_CACHE_DIR")
    if explicit:
        return explicit
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "tiledsl")


@dataclass(frozen=True)
class Switch:
    name: str
    kind: str
    doc: str


SWITCHES = [
    Switch("TILEDSL_CACHE_DIR", "path", "where compiled kernels are kept (default ~/.cache/tiledsl)"),
    Switch("TILEDSL_CACHE_MAX_MB", "int", "disk cache bound in MB, least recently used entries go first (1024)"),
    Switch("TILEDSL_DISABLE_DISK_CACHE", "bool", "never read or write the disk cache"),
    Switch("TILEDSL_INTERPRET", "bool", "run every kernel on the CPU interpreter"),
    Switch("TILEDSL_DEBUG", "bool", "compile every kernel with run-time bounds checks"),
    Switch("TILEDSL_NATIVE_LAUNCH", "bool", "compile steady launchers to native code with LLVM (default on; 0 = "
                                            "keep the Python launchers)"),
    Switch("TILEDSL_DUMP_DIR", "path", "write each compiled kernel's stages (tile, expanded, llvm, ptx) here"),
]


def cache_dir() -> str:
    return _cache_dir()


def cache_max_bytes() -> int:
    try:
        return int(os.environ.get("TILEDSL_CACHE_MAX_MB", "1024")) * 1024 * 1024
    except ValueError:
        return 1024 * 1024 * 1024


def disk_cache_enabled() -> bool:
    return not _flag("TILEDSL_DISABLE_DISK_CACHE")


def interpret() -> bool:
    return _flag("TILEDSL_INTERPRET")


def debug() -> bool:
    return _flag("TILEDSL_DEBUG")


def dump_dir() -> str | None:
    return os.environ.get("TILEDSL_DUMP_DIR") or None


def native_launch() -> bool:
    return os.environ.get("TILEDSL_NATIVE_LAUNCH", "1").strip().lower() not in ("0", "false", "no", "off")
