"""Issue 32's install check: `pip install .` into a fresh virtual environment outside the checkout, then a user's
one-liner runs `ops.linear` and `ops.scaled_dot_product_attention` on CPU tensors (the interpreter) and, where a GPU
is present, on CUDA tensors; tiledsl is imported from the environment, not from the checkout.

The new environment sees this one's packages (torch, numpy, llvmlite, cuda-python) through a .pth line, so the test
needs no network for them; the build itself runs without isolation where setuptools >= 77 is present (the GPU
machine has no network), else in pip's isolated build (which fetches setuptools)."""
import os
import subprocess
import sys
import sysconfig
import venv

import pytest

from test_packaging import _copy_tree

pytestmark = pytest.mark.slow

USER_CODE = """
import json, torch, tiledsl, tiledsl.ops as ops
out = {"tiledsl": tiledsl.__file__}
devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
for dev in devices:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(3, 5, 32, generator=g).to(dev, torch.float16)
    w = torch.randn(24, 32, generator=g).to(dev, torch.float16)
    y = ops.linear(x, w)
    ref = torch.nn.functional.linear(x.float(), w.float())
    q, k, v = (torch.randn(1, 2, 16, 64, generator=g).to(dev, torch.float16) for _ in range(3))
    o = ops.scaled_dot_product_attention(q, k, v, is_causal=True)
    ro = torch.nn.functional.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=True)
    out[dev] = [float((y.float() - ref).abs().max()), float((o.float() - ro).abs().max())]
print(json.dumps(out))
"""


def _setuptools_recent():
    try:
        import setuptools
    except ImportError:
        return False
    return tuple(int(x) for x in setuptools.__version__.split(".")[:2]) >= (77, 0)


def test_pip_install_into_a_fresh_venv_runs_linear_and_sdpa(tmp_path):
    pytest.importorskip("torch")
    src = tmp_path / "src"
    _copy_tree(src)
    env_dir = tmp_path / "env"
    venv.create(env_dir, with_pip=True)
    py = env_dir / "bin" / "python"
    site = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    # this environment's packages, after the new one's own (a .pth line appends; no .pth of theirs is run, so this
    # checkout's editable tiledsl stays out)
    outer = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    with open(os.path.join(site, "outer.pth"), "w") as f:
        f.write("\n".join(sorted(outer)) + "\n")
    # the wheel is built here (setuptools >= 77 without isolation: the GPU machine has no network), then installed
    dist = tmp_path / "dist"
    if _setuptools_recent():
        code = "import sys; from setuptools import build_meta as b; print(b.build_wheel(sys.argv[1]))"
        r = subprocess.run([sys.executable, "-c", code, str(dist)], cwd=src, capture_output=True, text=True)
    else:
        r = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(dist), str(src)],
                           capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    (wheel,) = [p for p in os.listdir(dist) if p.endswith(".whl")]
    r = subprocess.run([str(py), "-m", "pip", "install", "-q", "--no-deps", str(dist / wheel)],
                       capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    work = tmp_path / "elsewhere"
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    r = subprocess.run([str(py), "-c", USER_CODE], capture_output=True, text=True, cwd=work, env=env, timeout=900)
    assert r.returncode == 0, r.stderr[-4000:]
    import json
    got = json.loads(r.stdout.strip().splitlines()[-1])
    assert got["tiledsl"].startswith(site), got["tiledsl"]
    for dev in ("cpu", "cuda"):
        if dev not in got:
            continue
        err_linear, err_sdpa = got[dev]
        assert err_linear < 5e-2 and err_sdpa < 1e-2, (dev, err_linear, err_sdpa)
