"""The seed examples on the GPU, on torch tensors and on cupy arrays, with the seeds' tolerances."""
import importlib

import pytest

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("example", ["seed_mma", "seed_fma"])
@pytest.mark.parametrize("framework", ["torch", "cupy"])
def test_seed_example(example, framework, capsys):
    pytest.importorskip(framework)
    mod = importlib.import_module(example)
    mod.main(["--cupy"] if framework == "cupy" else [])
    out = capsys.readouterr().out
    assert "OK on the GPU" in out
