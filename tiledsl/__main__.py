"""`python -m tiledsl` (or the `tiledsl` script): compile a kernel to a stage's text, look after the disk cache and
list the environment switches.

    tiledsl compile FILE::KERNEL [--target sm_90a] [--sig n=4096,dtype=float16] [--emit ptx|llvm|tile|expanded|sass]
                                  compile one kernel (no GPU needed) and print a stage (tools/compile_cli.py)
    tiledsl cache info [--json]   where the cache is, how many entries, how many bytes, the size bound
    tiledsl cache clear           remove every entry
    tiledsl switches              every TILEDSL_* environment variable, its type, its value here and what it does
"""
from __future__ import annotations

import argparse
import json
import os
import sys


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n} B" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"


def _cache_info(opts) -> int:
    from .cache import disk as cache
    from .core import knobs
    info = cache.info()
    info["enabled"] = knobs.disk_cache_enabled()
    if opts.json:
        print(json.dumps(info, indent=2))
        return 0
    if info.get("problem"):
        state = f"  (unusable: {info['problem']}; kernels compile without a disk cache)"
    else:
        state = "" if os.path.isdir(info["dir"]) else "  (not created yet)"
    print(f"dir:     {info['dir']}{state}")
    print(f"entries: {info['entries']}")
    print(f"bytes:   {info['bytes']} ({_size(info['bytes'])})")
    print(f"limit:   {info['limit_bytes']} ({_size(info['limit_bytes'])}; {knobs.CACHE_MAX_MB.name})")
    if not info["enabled"]:
        print(f"note:    {knobs.DISABLE_DISK_CACHE.name} is set; kernels neither read nor write this cache")
    return 0


def _cache_clear(opts) -> int:
    from .cache import disk as cache
    from .core import knobs
    problem = cache.root_problem(knobs.cache_dir())
    if problem is not None:
        print(f"nothing to clear: {knobs.CACHE_DIR.name}={knobs.cache_dir()} is not a cache folder ({problem})")
        return 1
    n = cache.clear()
    left = len(cache.entries())
    print(f"removed {n} entr{'y' if n == 1 else 'ies'} from {knobs.cache_dir()}" +
          (f"; {left} could not be removed" if left else ""))
    return 1 if left else 0


def _switches(opts) -> int:
    from .core.knobs import SWITCHES
    if opts.json:
        print(json.dumps([{"name": s.name, "kind": s.kind, "doc": s.doc, "value": os.environ.get(s.name)}
                          for s in SWITCHES], indent=2))
        return 0
    width = max(len(s.name) for s in SWITCHES)
    kinds = max(len(s.kind) for s in SWITCHES)
    for s in SWITCHES:
        val = os.environ.get(s.name)
        now = f"  [set: {val}]" if val is not None else ""
        print(f"{s.name:<{width}}  {s.kind:<{kinds}}  {s.doc}{now}")
    return 0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="tiledsl", description="tiledsl: compile a kernel to PTX (or another stage), "
                                                           "the compiled-kernel cache and the settings")
    sub = p.add_subparsers(dest="command", metavar="{compile,cache,switches}")
    sub.required = True
    from .tools.compile_cli import add_parser
    add_parser(sub)
    c = sub.add_parser("cache", help="inspect or clear the disk cache of compiled kernels")
    csub = c.add_subparsers(dest="action", metavar="{info,clear}")
    csub.required = True
    ci = csub.add_parser("info", help="cache folder, entries, bytes and size limit")
    ci.add_argument("--json", action="store_true", help="print a JSON object instead")
    ci.set_defaults(run=_cache_info)
    cc = csub.add_parser("clear", help="remove every cached kernel")
    cc.set_defaults(run=_cache_clear)
    s = sub.add_parser("switches", help="list the TILEDSL_* environment switches")
    s.add_argument("--json", action="store_true", help="print a JSON list instead")
    s.set_defaults(run=_switches)
    return p


def main(argv=None) -> int:
    opts = parser().parse_args(argv)
    return opts.run(opts)


if __name__ == "__main__":
    sys.exit(main())
