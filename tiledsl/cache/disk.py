"""The disk cache: one folder per key with JSON metadata, text stages and the cubin, each file's hash recorded.

No pickle: entries are plain files. Writes go to a temporary folder renamed into place, so concurrent
compilations of the same kernel leave one whole entry. A damaged or foreign entry is detected by its hashes,
reported with a warning, and recompiled.
"""
from __future__ import annotations

import hashlib
import json
import os
import time
import warnings

from ..core import knobs

FORMAT = 1


_warned = set()


def _warn_once(msg: str) -> None:
    if msg not in _warned:
        _warned.add(msg)
        warnings.warn(msg, stacklevel=4)


def root_problem(root: str) -> str | None:
    """Why `root` cannot be the cache folder (a file, or under one), or None."""
    path = os.path.abspath(root)
    while True:
        if os.path.lexists(path):
            if not os.path.isdir(path):
                return f"{path} is not a directory"
            return None
        parent = os.path.dirname(path)
        if parent == path:
            return None
        path = parent


def usable() -> bool:
    """The disk cache is on and its folder can be one; otherwise kernels compile without it (one warning)."""
    if not knobs.disk_cache_enabled():
        return False
    root = knobs.cache_dir()
    problem = root_problem(root)
    if problem is not None:
        _warn_once(f"tiledsl: {knobs.CACHE_DIR.name}={root} cannot hold the disk cache ({problem}); compiling "
                   f"without a disk cache")
        return False
    return True


def _dir(key: str) -> str:
    return os.path.join(knobs.cache_dir(), key[:2], key)


def discard(key: str, why: str) -> None:
    """Drop a damaged entry (one whose files pass their hashes but whose contents are not an entry)."""
    d = _dir(key)
    warnings.warn(f"tiledsl: discarding damaged cache entry {d} ({why}); recompiling", stacklevel=3)
    _remove(d)


def load(key: str) -> dict | None:
    if not usable():
        return None
    d = _dir(key)
    meta_path = os.path.join(d, "meta.json")
    if not os.path.exists(meta_path):
        if os.path.isdir(d):                     # entries appear whole (renamed into place): this one is damaged
            warnings.warn(f"tiledsl: discarding damaged cache entry {d} (no meta.json); recompiling", stacklevel=3)
            _remove(d)
        return None
    try:
        with open(meta_path) as f:
            meta = json.load(f)
        if not isinstance(meta, dict) or meta.get("format") != FORMAT or meta.get("key") != key:
            raise ValueError("foreign entry")
        if not isinstance(meta.get("files"), dict):
            raise ValueError("no file list")
        files = {}
        for name, digest in meta["files"].items():
            if not isinstance(name, str) or os.path.basename(name) != name or name in ("", ".", ".."):
                raise ValueError(f"file name {name!r}")
            with open(os.path.join(d, name), "rb") as f:
                data = f.read()
            if hashlib.sha256(data).hexdigest() != digest:
                raise ValueError(f"{name} does not match its hash")
            files[name] = data
        os.utime(meta_path)                      # recency for LRU eviction
        meta["data"] = files
        return meta
    except (OSError, ValueError, KeyError, TypeError, AttributeError, json.JSONDecodeError) as e:
        warnings.warn(f"tiledsl: discarding damaged cache entry {d} ({e}); recompiling", stacklevel=3)
        _remove(d)
        return None


def store(key: str, meta: dict, files: dict) -> None:
    if not usable():
        return
    import shutil                                 # (shutil and tempfile: only where entries are written or removed;
    import tempfile                               # a process served from the cache never imports them)
    d = _dir(key)
    try:
        os.makedirs(os.path.dirname(d), exist_ok=True)
        tmp = tempfile.mkdtemp(prefix=".tmp-", dir=os.path.dirname(d))
        digests = {}
        for name, data in files.items():
            if isinstance(data, str):
                data = data.encode()
            with open(os.path.join(tmp, name), "wb") as f:
                f.write(data)
            digests[name] = hashlib.sha256(data).hexdigest()
        meta = dict(meta, format=FORMAT, key=key, files=digests, created=time.time())
        with open(os.path.join(tmp, "meta.json"), "w") as f:
            json.dump(meta, f)
        try:
            os.rename(tmp, d)
        except OSError:                           # another process won the race: keep its entry
            shutil.rmtree(tmp, ignore_errors=True)
        evict()
    except OSError as e:
        warnings.warn(f"tiledsl: could not write the disk cache ({e})", stacklevel=3)


def _remove(path: str) -> bool:
    """Remove an entry folder, or a link or file where one was expected; False when it could not be removed."""
    try:
        if os.path.islink(path) or not os.path.isdir(path):
            os.unlink(path)
        else:
            import shutil
            shutil.rmtree(path)
        return True
    except OSError:
        return not os.path.lexists(path)


def _listdir(path: str) -> list:
    try:
        return sorted(os.listdir(path))
    except OSError:                               # unreadable, vanished, or not a folder
        return []


def _entry_size(d: str) -> int:
    """Bytes of an entry's files (lstat: a dangling or foreign link counts as itself, never followed)."""
    total = 0
    for f in _listdir(d):
        try:
            total += os.lstat(os.path.join(d, f)).st_size
        except OSError:
            pass
    return total


def entries():
    """(path, bytes, last use) of every entry; anything in the folder that is not a readable entry (a dangling
    link, a file, a folder that cannot be listed) is an entry of 0 bytes, so `clear` removes it."""
    root = knobs.cache_dir()
    out = []
    if root_problem(root) is not None or not os.path.isdir(root):
        return out
    for sub in _listdir(root):
        p = os.path.join(root, sub)
        if os.path.islink(p) or not os.path.isdir(p):
            continue                              # not ours: a cache folder holds two-letter folders only
        for key in _listdir(p):
            d = os.path.join(p, key)
            if key.startswith(".tmp-") and not os.path.islink(d):
                continue
            real = os.path.isdir(d) and not os.path.islink(d)
            try:
                mtime = os.lstat(os.path.join(d, "meta.json")).st_mtime if real else 0
            except OSError:
                mtime = 0
            out.append((d, _entry_size(d) if real else 0, mtime))
    return out


def evict() -> None:
    limit = knobs.cache_max_bytes()
    es = entries()
    total = sum(s for _, s, _ in es)
    if total <= limit:
        return
    for d, size, _ in sorted(es, key=lambda e: e[2]):
        _remove(d)
        total -= size
        if total <= limit:
            break


def info() -> dict:
    root = knobs.cache_dir()
    es = entries()
    out = {"dir": root, "entries": len(es), "bytes": sum(s for _, s, _ in es), "limit_bytes": knobs.cache_max_bytes()}
    problem = root_problem(root)
    if problem is not None:
        out["problem"] = problem
    return out


def clear() -> int:
    """Remove every entry; returns how many were removed."""
    return sum(_remove(d) for d, _, _ in entries())
