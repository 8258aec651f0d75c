"""`python -m tiledsl`: cache info / clear and the switch list, against a private cache folder."""
import json
import os
import subprocess
import sys

import pytest

from tiledsl.cache import disk as cache
from tiledsl.__main__ import main
from tiledsl.core.knobs import SWITCHES

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    d = tmp_path / "cache"
    monkeypatch.setenv("TILEDSL_CACHE_DIR", str(d))
    monkeypatch.delenv("TILEDSL_DISABLE_DISK_CACHE", raising=False)
    monkeypatch.delenv("TILEDSL_CACHE_MAX_MB", raising=False)
    return d


def fill(n):
    for i in range(n):
        cache.store(f"{i:02d}" + "ab" * 31, {"name": f"k{i}"}, {"asm.json": "{}", "kernel.cubin": b"\0" * 100})


def test_info_empty_then_filled(cache_dir, capsys):
    assert main(["cache", "info"]) == 0
    out = capsys.readouterr().out
    assert f"dir:     {cache_dir}" in out and "entries: 0" in out and "bytes:   0" in out
    assert "limit:   1073741824" in out
    fill(3)
    assert main(["cache", "info", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["dir"] == str(cache_dir) and info["entries"] == 3 and info["limit_bytes"] == 1024 ** 3
    assert info["bytes"] == sum(size for _, size, _ in cache.entries()) and info["bytes"] > 300


def test_limit_follows_the_switch(cache_dir, capsys, monkeypatch):
    monkeypatch.setenv("TILEDSL_CACHE_MAX_MB", "5")
    main(["cache", "info"])
    assert f"limit:   {5 * 1024 * 1024} (5.0 MiB" in capsys.readouterr().out


def test_clear(cache_dir, capsys):
    fill(2)
    assert main(["cache", "clear"]) == 0
    assert "removed 2 entries" in capsys.readouterr().out
    assert cache.entries() == []
    assert main(["cache", "clear"]) == 0
    assert "removed 0 entries" in capsys.readouterr().out


def test_switches(capsys, monkeypatch):
    monkeypatch.setenv("TILEDSL_DEBUG", "1")
    assert main(["switches"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == len(SWITCHES)
    for s, line in zip(SWITCHES, lines):
        assert line.startswith(s.name) and s.doc in line
    assert "[set: 1]" in lines[[s.name for s in SWITCHES].index("TILEDSL_DEBUG")]
    main(["switches", "--json"])
    assert [s["name"] for s in json.loads(capsys.readouterr().out)] == [s.name for s in SWITCHES]


def test_bad_usage_exits_with_2(capsys):
    for argv in ([], ["cache"], ["cache", "frobnicate"], ["nonsense"]):
        with pytest.raises(SystemExit) as e:
            main(argv)
        assert e.value.code == 2


def test_module_entry_point(cache_dir):
    fill(1)
    env = dict(os.environ, TILEDSL_CACHE_DIR=str(cache_dir), PYTHONPATH=ROOT)
    r = subprocess.run([sys.executable, "-m", "tiledsl", "cache", "info"], capture_output=True, text=True, env=env,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    assert "entries: 1" in r.stdout
