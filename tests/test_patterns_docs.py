"""The pattern pages in docs/patterns/: each has the seed pages' sections, and its complete example runs.

A page's ```python blocks run in order as one module (written to a file so the kernels' source is readable).
Blocks whose first line is `# needs a GPU` run in the gpu-marked test on torch CUDA tensors; the rest compile
(and assemble) without a GPU. The GPU blocks also run on the CPU interpreter with a stand-in for the few torch
calls they use (from_numpy, zeros, .cuda(), .cpu(), .numpy(), cuda.synchronize), so the pages' numerical
claims are checked on every machine.
"""
import pathlib
import re
import runpy
import sys
import types

import numpy as np
import pytest

DOCS = pathlib.Path(__file__).resolve().parent.parent / "docs" / "patterns"
PAGES = ["mma", "register", "memory", "ldmatrix", "cp_async", "bulk", "policy", "atomic", "warp", "wgmma", "tma",
         "mbarrier", "cluster", "barrier"]
SECTIONS = ["## Call parameters", "## Data representation", "## Operand specification", "## Legality conditions",
            "## Code generation", "## Example"]
GPU_MARK = "# needs a GPU"


def blocks(page):
    return re.findall(r"```python\n(.*?)```", (DOCS / f"{page}.md").read_text(), re.S)


def run_page(page, tmp_path, with_gpu):
    code = [b for b in blocks(page) if with_gpu or not b.startswith(GPU_MARK)]
    path = tmp_path / f"doc_{page}.py"
    path.write_text("\n\n".join(code))
    return runpy.run_path(str(path), run_name=f"doc_{page}")


@pytest.mark.parametrize("page", PAGES)
def test_page_has_the_sections_and_a_gpu_run(page):
    text = (DOCS / f"{page}.md").read_text()
    for s in SECTIONS:
        assert s in text, f"{page}.md lacks '{s}'"
    bl = blocks(page)
    assert any(b.startswith(GPU_MARK) for b in bl) and any(not b.startswith(GPU_MARK) for b in bl)


@pytest.mark.parametrize("page", PAGES)
def test_page_example_compiles(page, tmp_path):
    ns = run_page(page, tmp_path, with_gpu=False)
    assert "ck" in ns and ns["ck"].asm["ptx"], f"{page}.md's example must compile into `ck`"


@pytest.mark.gpu
@pytest.mark.parametrize("page", PAGES)
def test_page_example_runs_on_the_gpu(page, tmp_path):
    pytest.importorskip("torch")
    run_page(page, tmp_path, with_gpu=True)


class _HostTensor(np.ndarray):
    """A numpy array that answers the torch calls the pages' GPU blocks make."""

    def cuda(self):
        return self

    def cpu(self):
        return self

    def numpy(self):
        return np.asarray(self)


def _host_torch():
    t = types.ModuleType("torch")
    for name in ("float16", "float32", "float64", "int32", "uint32", "int64"):
        setattr(t, name, getattr(np, name))
    t.from_numpy = lambda x: np.array(x, copy=True).view(_HostTensor)
    t.zeros = lambda *shape, dtype=np.float32, device=None: np.zeros(
        shape[0] if len(shape) == 1 else shape, dtype).view(_HostTensor)
    t.cuda = types.SimpleNamespace(synchronize=lambda: None)
    return t


@pytest.mark.parametrize("page", PAGES)
def test_page_example_runs_on_the_interpreter(page, tmp_path, monkeypatch):
    monkeypatch.setenv("TILEDSL_INTERPRET", "1")
    monkeypatch.setitem(sys.modules, "torch", _host_torch())
    run_page(page, tmp_path, with_gpu=True)
