"""What a new user gets from the README (issue 14): the sdist carries the whole test suite, the examples, the
benchmarks and the docs; the wheel carries tiledsl.ops and tiledsl.lib (issue 32: the kernels are a package, not
scripts); the LICENSE that pyproject names exists, in PEP 639's form; the benchmark scripts print usage instead of
crashing and report the assembler's real spill keys. Each failed before."""
import os
import shutil
import subprocess
import sys
import tarfile
import tomllib
import zipfile

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def pyproject():
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        return tomllib.load(f)


def test_license_file_and_pep639_metadata():
    with open(os.path.join(ROOT, "LICENSE")) as f:
        text = f.read()
    assert "Apache License" in text and "Version 2.0, January 2004" in text and "END OF TERMS AND CONDITIONS" in text
    proj = pyproject()
    assert proj["project"]["license"] == "Apache-2.0" and proj["project"]["license-files"] == ["LICENSE"]
    # the SPDX string form needs setuptools 77 (PEP 639); the build requirement says so
    (req,) = [r for r in proj["build-system"]["requires"] if r.startswith("setuptools")]
    assert req.replace(" ", "") == "setuptools>=77"


def _copy_tree(dst):
    """The source tree as a fresh clone has it (no caches, no build outputs)."""
    skip = {".git", "__pycache__", ".pytest_cache", ".hypothesis", "build", "dist", ".venv", ".ci-venv"}
    shutil.copytree(ROOT, dst, ignore=lambda d, names: [n for n in names if n in skip or n.endswith(".egg-info")])


def test_sdist_ships_the_whole_test_suite_examples_benchmarks_and_docs(tmp_path):
    setuptools = pytest.importorskip("setuptools")
    if tuple(int(x) for x in setuptools.__version__.split(".")[:2]) < (77, 0):
        pytest.skip("the build requires setuptools>=77")
    src = tmp_path / "src"
    _copy_tree(src)
    out = tmp_path / "dist"
    code = ("import sys; from setuptools import build_meta as b; print(b.build_sdist(sys.argv[1]))")
    r = subprocess.run([sys.executable, "-c", code, str(out)], cwd=src, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    (name,) = os.listdir(out)
    with tarfile.open(out / name) as t:
        names = {n.split("/", 1)[1] for n in t.getnames() if "/" in n}
    for want in ("LICENSE", "tests/conftest.py", "tests/helpers.py", "tests/launch_stubs.py",
                 "tests/bad_inputs/conftest.py", "tests/bad_inputs/badcase.py", "examples/gemm.py",
                 "benchmarks/ptx_snapshot.py", "docs/architecture.md", "tiledsl/ops/gemm/mma.py",
                 "tiledsl/lib/reductions.py"):
        assert want in names, want
    assert not any("__pycache__" in n or n.endswith(".pyc") for n in names)



PACKAGED = ("tiledsl/ops/__init__.py", "tiledsl/ops/device.py", "tiledsl/ops/gemm/matmul.py", "tiledsl/ops/gemm/mma.py",
            "tiledsl/ops/gemm/hopper.py", "tiledsl/ops/gemm/hopper_kernel.py", "tiledsl/ops/gemm/schedule_model.py",
            "tiledsl/ops/flash/forward.py", "tiledsl/ops/flash/backward.py", "tiledsl/ops/flash/fa3.py",
            "tiledsl/ops/flash/fa3_parts.py", "tiledsl/ops/rowwise/softmax.py", "tiledsl/lib/__init__.py",
            "tiledsl/lib/reductions.py", "tiledsl/lib/producer.py", "tiledsl/lib/staging.py", "tiledsl/lib/exp2_fma.py")


def test_wheel_carries_the_ops_and_lib_packages(tmp_path):
    setuptools = pytest.importorskip("setuptools")
    if tuple(int(x) for x in setuptools.__version__.split(".")[:2]) < (77, 0):
        pytest.skip("the build requires setuptools>=77")
    src = tmp_path / "src"
    _copy_tree(src)
    out = tmp_path / "dist"
    code = ("import sys; from setuptools import build_meta as b; print(b.build_wheel(sys.argv[1]))")
    r = subprocess.run([sys.executable, "-c", code, str(out)], cwd=src, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    (name,) = [n for n in os.listdir(out) if n.endswith(".whl")]
    with zipfile.ZipFile(out / name) as z:
        names = set(z.namelist())
    for want in PACKAGED:
        assert want in names, want
    assert not any(n.startswith(("examples/", "tests/", "benchmarks/")) for n in names)

def test_sass_dump_without_arguments_prints_usage():
    r = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "sass_dump.py")], capture_output=True,
                       text=True, cwd=ROOT)
    assert r.returncode == 2 and r.stderr.startswith("usage: python benchmarks/sass_dump.py OUT BM"), r.stderr
    assert "Traceback" not in r.stderr


def test_mma_ceiling_reports_the_spill_keys_the_assembler_writes(monkeypatch, capsys):
    from tiledsl.lower import ptx as backend
    if backend.ptxas_path() is None:
        pytest.skip("spill counts come from ptxas")
    sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
    try:
        import mma_ceiling
    finally:
        sys.path.remove(os.path.join(ROOT, "benchmarks"))
    monkeypatch.setattr(mma_ceiling, "CASES", [(4, 2, 4)])
    assert mma_ceiling.main(["--no-gpu", "--iters", "8"]) == 0
    out = capsys.readouterr().out
    assert "spill stores 0 B, spill loads 0 B" in out and "None" not in out, out
