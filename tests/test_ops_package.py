"""The kernels are a package (issue 32, step 1): tiledsl.ops exposes API.md's names and its builders, loaded lazily
(importing it imports neither torch nor a kernel module); nothing under tiledsl/ touches sys.path; `import tiledsl`
stays torch-free and does not load tiledsl.ops; the example scripts and the device helpers of tiledsl.lib import
from the package."""
import json
import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
API_NAMES = ("matmul", "matmul_fp8", "attention", "flash_attention")      # API.md: "importable from tiledsl.ops"
BUILDERS = ("make_gemm", "make_hopper_gemm", "make_hopper_gemm_fp8", "make_attention", "make_attention_hopper",
            "make_attention_fp8", "make_attention_backward", "make_attention_backward_hopper", "make_softmax",
            "make_layernorm")


def _child(code):
    """Run code in a fresh interpreter with this checkout's tiledsl first; its last stdout line as JSON."""
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=str(ROOT / "tests"))
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_ops_exposes_the_api_names_and_the_builders():
    import tiledsl.ops as ops
    for name in API_NAMES + BUILDERS:
        assert name in ops.__all__ and name in dir(ops), name
        assert callable(getattr(ops, name)), name
    with pytest.raises(AttributeError, match="no_such_op"):
        ops.no_such_op                                      # noqa: B018
    from tiledsl.ops.flash.backward import flash_attention
    from tiledsl.ops.gemm.matmul import matmul
    assert ops.matmul is matmul and ops.flash_attention is flash_attention


def test_importing_tiledsl_loads_neither_torch_nor_the_ops():
    r = _child("import json, sys, tiledsl; from tiledsl import T; "
               "print(json.dumps(sorted(m for m in sys.modules if m == 'torch' or m.startswith('tiledsl.ops'))))")
    assert r == [], r


def test_importing_the_ops_and_their_builders_needs_no_torch():
    # a CPU-only user without torch builds and compiles the kernels: the host functions import torch when called.
    # The torch ops (homes under library/: torch.library custom ops) are torch's by nature and left out
    r = _child("import json, sys, tiledsl.ops as ops; loaded = sorted(m for m in sys.modules "
               "if m.startswith('tiledsl.ops.')); [getattr(ops, n) for n in ops.__all__ "
               "if not ops._HOMES[n].startswith('library.')]; "
               "import tiledsl.lib.reductions, tiledsl.lib.producer, tiledsl.lib.staging, tiledsl.lib.exp2_fma; "
               "print(json.dumps({'before': loaded, 'torch': 'torch' in sys.modules}))")
    assert r == {"before": [], "torch": False}, r


def test_no_module_of_the_package_touches_sys_path():
    offenders = [str(p.relative_to(ROOT)) for p in (ROOT / "tiledsl").rglob("*.py") if "sys.path" in p.read_text()]
    assert offenders == [], offenders


def test_module_state_is_read_from_its_home(monkeypatch):
    """The switches a user or a test sets live in the module that reads them."""
    from tiledsl.ops.flash import fa2
    from tiledsl.ops.gemm import hopper_plan
    big = (256, 2, 4, 1, 1, 0)
    assert hopper_plan.stream_k_helps(big, 4096, 14336)
    monkeypatch.setattr(hopper_plan, "STREAM_K", False)
    assert not hopper_plan.stream_k_helps(big, 4096, 14336)
    monkeypatch.setattr(fa2, "LAZY", False)
    shape = (1, 1, 1, 64, 64)
    assert fa2.make_attention("float16", 64, False, shape, 0.125, (4, 1, 1)) is \
        fa2.make_attention("float16", 64, False, shape, 0.125, (4, 1, 1), lazy=False)


def test_examples_run_on_the_package(capsys):
    """The scripts that had a main() keep it, as thin callers of tiledsl.ops (here their CPU paths)."""
    import gemm as example_gemm                 # examples/gemm.py (tests/conftest.py puts examples/ on the path)
    import softmax as example_softmax           # examples/softmax.py
    assert example_gemm.make_gemm is __import__("tiledsl.ops", fromlist=["make_gemm"]).make_gemm
    example_softmax.main([])
    assert "max error" in capsys.readouterr().out
