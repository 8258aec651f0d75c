"""The compiler's identity in disk-cache keys: llvmlite's version and a hash of every tiledsl source file.

A changed compiler must never reuse a disk entry, so the key hashes the sources' contents. Reading and hashing
them all (~120 files) costs a fresh process more than the rest of a disk-cache hit, so the content hash is
remembered in the cache folder under the files' (path, mtime_ns, size) signature: a process whose sources are
unchanged stats them and reads one small file. Any edit changes a file's mtime or size, so the signature misses
and the contents are hashed again; the memo never stands in for a content change it has not seen.
"""
from __future__ import annotations

import hashlib
import json
import os

MEMO_NAME = "compiler-hash.json"     # in the cache folder's root, where cache entries (two-letter folders) are not
MEMO_KEEP = 16                       # signatures kept: a few tiledsl trees sharing one cache folder don't thrash

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))   # the whole package


def _sources(root: str = ROOT) -> list:
    """(path relative to `root`, absolute path, stat result) of every .py file, in a fixed order (os.scandir: one
    stat per file and no per-path string work, since a fresh process pays for this on every disk-cache hit)."""
    out = []
    stack = [(root, "")]
    while stack:
        d, rel = stack.pop()
        try:
            entries = list(os.scandir(d))
        except OSError:
            continue
        for e in entries:
            if e.name.endswith(".py") and e.is_file():
                out.append((rel + e.name, e.path, e.stat()))
            elif e.name != "__pycache__" and e.is_dir(follow_symlinks=False):
                stack.append((e.path, rel + e.name + "/"))
    out.sort()
    return out


def content_hash(version: str, root: str = ROOT) -> str:
    """The full hash: `version` and each source file's name and bytes (what a memo entry stands for)."""
    h = hashlib.sha256(version.encode())
    for rel, p, _ in _sources(root):
        with open(p, "rb") as fh:
            h.update(os.path.basename(rel).encode() + fh.read())
    return h.hexdigest()[:16]


def stat_signature(version: str, root: str = ROOT) -> str:
    """A hash of `version`, `root` and every source file's (relative path, mtime_ns, size)."""
    h = hashlib.sha256(f"{version}|{root}".encode())
    for rel, _, st in _sources(root):
        h.update(f"|{rel}:{st.st_mtime_ns}:{st.st_size}".encode())
    return h.hexdigest()


def compiler_hash(version: str, memo_dir: str | None, root: str = ROOT) -> str:
    """`content_hash(version, root)`, read from the memo in `memo_dir` when the sources' signature is there
    (None: no memo, always hash the contents). The memo is best effort: unreadable or unwritable, it is skipped."""
    if memo_dir is None:
        return content_hash(version, root)
    sig = stat_signature(version, root)
    path = os.path.join(memo_dir, MEMO_NAME)
    memo = {}
    try:
        with open(path) as f:
            memo = json.load(f)
        hit = memo.get(sig) if isinstance(memo, dict) else None
        if isinstance(hit, str) and len(hit) == 16:
            return hit
    except (OSError, ValueError):
        memo = {}
    if not isinstance(memo, dict):
        memo = {}
    value = content_hash(version, root)
    # a file changed while we hashed would be remembered under the old signature: only remember an unchanged tree
    if stat_signature(version, root) == sig:
        memo.pop(sig, None)
        memo[sig] = value
        while len(memo) > MEMO_KEEP:
            memo.pop(next(iter(memo)))
        try:
            os.makedirs(memo_dir, exist_ok=True)
            tmp = f"{path}.{os.getpid()}.tmp"
            with open(tmp, "w") as f:
                json.dump(memo, f)
            os.replace(tmp, path)                 # whole or not at all, for concurrent processes
        except OSError:
            pass
    return value
