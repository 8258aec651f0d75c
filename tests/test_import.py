"""`import tiledsl` is light: no torch, no cupy (not even numpy), well under 150 ms."""
import json
import statistics
import subprocess
import sys

PROBE = ("import time, sys, json; t = time.perf_counter(); import tiledsl; dt = time.perf_counter() - t; "
         "print(json.dumps({'ms': dt * 1e3, 'mods': [m for m in ('torch', 'cupy', 'numpy', 'llvmlite', "
         "'cuda') if m in sys.modules]}))")


def test_import_is_fast_and_imports_no_framework():
    runs = [json.loads(subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True,
                                      check=True).stdout) for _ in range(5)]
    for r in runs:
        assert "torch" not in r["mods"] and "cupy" not in r["mods"], r
    assert statistics.median(r["ms"] for r in runs) < 150, runs
