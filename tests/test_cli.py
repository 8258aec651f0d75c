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


# ------------------------------------------------------------ compile FILE::KERNEL

KERNELS = '''
import tiledsl
from tiledsl import T

BLOCK = 128


@tiledsl.jit
def scale(X: T.Tensor(("n",), "float32"), Y: T.Tensor(("n",), "float32"), a: T.float32, OP: T.constexpr,
          U: T.constexpr = 1):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=BLOCK))
    i = T.cuda.thread_id()
    if i < n:
        if OP == "sqrt":
            Y[i] = T.sqrt(X[i] * a) * U
        else:
            Y[i] = X[i] * a * U


def make(k):
    @tiledsl.jit
    def fixed(X: T.Tensor((128,), "float32")):
        T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=128))
        i = T.cuda.thread_id()
        X[i] = X[i] * k
    return fixed


def broken(X: T.Tensor((128,), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=128))
    X[0] = no_such_name
'''


@pytest.fixture
def kernels(tmp_path, cache_dir):
    path = tmp_path / "my_kernels.py"
    path.write_text(KERNELS)
    return str(path)


def test_compile_emits_each_stage(kernels, capsys):
    argv = ["compile", f"{kernels}::scale", "--target", "sm_90", "--sig", "n=4096,OP=sqrt,U=2"]
    assert main(argv) == 0
    ptx = capsys.readouterr().out
    assert ".target sm_90" in ptx and ".entry scale(" in ptx and "sqrt.rn.f32" in ptx
    stages = {}
    for emit in ("tile", "expanded", "llvm", "ptx"):
        assert main(argv + ["--emit", emit]) == 0
        stages[emit] = capsys.readouterr().out
    assert stages["ptx"] == ptx
    assert "define" in stages["llvm"] and "scale" in stages["tile"] and stages["tile"] != stages["llvm"]
    # the constexpr is the specialisation: another OP is other code
    assert main(["compile", f"{kernels}::scale", "--sig", "n=8,OP=mul", "--target", "sm_90a"]) == 0
    other = capsys.readouterr().out
    assert "sqrt" not in other and ".target sm_90a" in other


def test_compile_a_factory_expression_and_a_file(kernels, tmp_path, capsys):
    out = tmp_path / "k.ptx"
    assert main(["compile", f"{kernels}::make(3.0)", "--target", "sm_80", "-o", str(out)]) == 0
    assert capsys.readouterr().out == "" and ".entry fixed(" in out.read_text() and ".target sm_80" in out.read_text()


def test_compile_asks_for_what_the_signature_needs(kernels, capsys):
    assert main(["compile", f"{kernels}::scale"]) == 2
    err = capsys.readouterr().err
    assert "scale needs a value for size n (of X), constexpr OP: --sig n=...,OP=..." in err
    assert main(["compile", f"{kernels}::scale", "--sig", "n=4,OP=mul,m=3"]) == 2
    err = capsys.readouterr().err
    assert "--sig names 'm', which scale does not have; it takes constexpr OP, constexpr U, size n, scalar a" in err
    assert main(["compile", f"{kernels}::scale", "--sig", "n=4,OP"]) == 2
    assert "NAME=VALUE" in capsys.readouterr().err
    assert main(["compile", f"{kernels}::nope"]) == 2
    assert "has no 'nope'; its kernels: scale" in capsys.readouterr().err
    assert main(["compile", f"{kernels}"]) == 2
    assert "FILE::KERNEL" in capsys.readouterr().err
    assert main(["compile", "no/such/file.py::k"]) == 2
    assert "no such file" in capsys.readouterr().err


def test_compile_reports_a_kernel_error_at_its_line(kernels, capsys):
    assert main(["compile", f"{kernels}::broken"]) == 1
    err = capsys.readouterr().err
    line = KERNELS.splitlines().index("    X[0] = no_such_name") + 1
    assert err.startswith(f"CompilationError: {kernels}:{line}:12: error: name 'no_such_name' is not defined")
    assert "Traceback" not in err


def test_compile_sass_says_what_is_missing(kernels, capsys, monkeypatch):
    import shutil
    which = shutil.which
    monkeypatch.setattr(shutil, "which", lambda name, *a, **k: None if name in ("cuobjdump", "nvdisasm")
                        else which(name, *a, **k))
    assert main(["compile", f"{kernels}::make(2.0)", "--emit", "sass"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("tiledsl compile: no SASS: asm['sass'] is not available: ")
    assert ("neither cuobjdump nor nvdisasm is on PATH" in err) or ("ptxas" in err)


def test_compile_from_the_command_line(cache_dir):
    env = dict(os.environ, TILEDSL_CACHE_DIR=str(cache_dir), PYTHONPATH=ROOT)
    r = subprocess.run([sys.executable, "-m", "tiledsl", "compile", "examples/seed_mma.py::warp_mma", "--target",
                        "sm_90", "--emit", "expanded"], capture_output=True, text=True, env=env, timeout=300,
                       cwd=ROOT)
    assert r.returncode == 0, r.stderr
    assert "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32" in r.stdout
    r = subprocess.run([sys.executable, "-m", "tiledsl", "compile", "--help"], capture_output=True, text=True,
                       env=env, timeout=300)
    assert r.returncode == 0 and "--sig NAME=VALUE" in r.stdout and "n=4096,dtype=float16" in r.stdout
