"""The disk cache: one folder per key with JSON metadata, text stages and the cubin, each file's hash recorded.

No pickle: entries are plain files. Writes go to a temporary folder renamed into place, so concurrent
compilations of the same kernel leave one whole entry. A damaged or foreign entry is detected by its hashes,
reported with a warning, and recompiled.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import time
import warnings

from ..core import knobs

FORMAT = 1


def _dir(key: str) -> str:
    return os.path.join(knobs.cache_dir(), key[:2], key)


def load(key: str) -> dict | None:
    if not knobs.disk_cache_enabled():
        return None
    d = _dir(key)
    meta_path = os.path.join(d, "meta.json")
    if not os.path.exists(meta_path):
        if os.path.isdir(d):                     # entries appear whole (renamed into place): this one is damaged
            warnings.warn(f"tiledsl: discarding damaged cache entry {d} (no meta.json); recompiling", stacklevel=3)
            shutil.rmtree(d, ignore_errors=True)
        return None
    try:
        with open(meta_path) as f:
            meta = json.load(f)
        if meta.get("format") != FORMAT or meta.get("key") != key:
            raise ValueError("foreign entry")
        files = {}
        for name, digest in meta["files"].items():
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
        shutil.rmtree(d, ignore_errors=True)
        return None


def store(key: str, meta: dict, files: dict) -> None:
    if not knobs.disk_cache_enabled():
        return
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


def entries():
    root = knobs.cache_dir()
    out = []
    if not os.path.isdir(root):
        return out
    for sub in os.listdir(root):
        p = os.path.join(root, sub)
        if not os.path.isdir(p):
            continue
        for key in os.listdir(p):
            d = os.path.join(p, key)
            if key.startswith(".tmp-"):
                continue
            size = sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d)) if os.path.isdir(d) else 0
            try:
                mtime = os.path.getmtime(os.path.join(d, "meta.json"))
            except OSError:
                mtime = 0
            out.append((d, size, mtime))
    return out


def evict() -> None:
    limit = knobs.cache_max_bytes()
    es = entries()
    total = sum(s for _, s, _ in es)
    if total <= limit:
        return
    for d, size, _ in sorted(es, key=lambda e: e[2]):
        shutil.rmtree(d, ignore_errors=True)
        total -= size
        if total <= limit:
            break


def info() -> dict:
    es = entries()
    return {"dir": knobs.cache_dir(), "entries": len(es), "bytes": sum(s for _, s, _ in es),
            "limit_bytes": knobs.cache_max_bytes()}


def clear() -> int:
    es = entries()
    for d, _, _ in es:
        shutil.rmtree(d, ignore_errors=True)
    return len(es)
