"""`pytest --shard I/K` (tests/conftest.py): K processes together run every collected test exactly once."""
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FILE = "tests/test_gates.py"


def _collected(*extra):
    r = subprocess.run([sys.executable, "-m", "pytest", "--co", "-q", "-p", "no:cacheprovider", FILE, *extra],
                       cwd=ROOT, capture_output=True, text=True, timeout=120)
    return r, [line for line in r.stdout.splitlines() if line.startswith(FILE + "::")]


def test_shards_partition_the_collected_tests():
    _, every = _collected()
    parts = [_collected("--shard", f"{i}/3")[1] for i in range(3)]
    assert sorted(sum(parts, [])) == sorted(every)
    assert all(parts) and sum(map(len, parts)) == len(every)


def test_a_bad_shard_is_a_usage_error():
    r, _ = _collected("--shard", "3/3")
    assert r.returncode != 0 and re.search(r"--shard '3/3': expected I/K", r.stdout + r.stderr)
