"""The autotuner's winners on disk: one small JSON file per (key, target, device, kernel fingerprint).

They live in the compiled-code cache folder (`TILEDSL_CACHE_DIR`) under `tune/`, so `tiledsl cache clear` and
TILEDSL_DISABLE_DISK_CACHE govern them too. A file is written to a temporary name and renamed into place, so a
reader sees a whole entry or none; an entry that does not parse, or whose recorded key is not the one asked for,
is removed with a warning and the kernel is tuned again (never a crash).
"""
from __future__ import annotations

import hashlib
import json
import os
import tempfile
import warnings

from ..cache import disk
from ..core import knobs

FORMAT = 1


def entry_key(parts: dict) -> str:
    """The file name's hash of everything that picks a winner (a dict of strings)."""
    text = json.dumps(parts, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()


def path(key: str) -> str:
    return os.path.join(knobs.cache_dir(), "tune", key[:2], key + ".json")


def load(key: str) -> dict | None:
    """The stored winner {"config": fingerprint, "ms": ..., "timings": {...}} for `key`, or None."""
    if not disk.usable():
        return None
    p = path(key)
    try:
        with open(p) as f:
            data = json.load(f)
        if not isinstance(data, dict) or data.get("format") != FORMAT or data.get("key") != key \
                or not isinstance(data.get("config"), str):
            raise ValueError("not an autotune entry")
        return data
    except FileNotFoundError:
        return None
    except (OSError, ValueError, UnicodeDecodeError) as e:
        discard(key, f"{type(e).__name__}: {e}")
        return None


def discard(key: str, why: str) -> None:
    """Remove a damaged or useless entry, saying so once; the kernel is tuned again."""
    p = path(key)
    warnings.warn(f"tiledsl: discarding damaged autotune entry {p} ({why}); tuning again", stacklevel=3)
    try:
        os.unlink(p)
    except OSError:
        pass


def save(key: str, record: dict) -> None:
    """Write the winner atomically (temporary file renamed into place); a write that fails only warns."""
    if not disk.usable():
        return
    p = path(key)
    try:
        os.makedirs(os.path.dirname(p), exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".json", dir=os.path.dirname(p))
        try:
            with os.fdopen(fd, "w") as f:
                json.dump(dict(record, format=FORMAT, key=key), f)
            os.replace(tmp, p)
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise
    except OSError as e:
        warnings.warn(f"tiledsl: could not write the autotune result ({e})", stacklevel=3)
