"""The GPU pattern tests (test_gpu_patterns.py) on the CPU interpreter: every expansion they exercise (mma repeats,
fma rounding, packed fma, predication, vectors, ldmatrix/stmatrix lane addressing, cp.async tails) runs lane by
lane against the same exact references, without a GPU."""
import pytest

import test_gpu_patterns as gpu

globals().update({name: fn for name, fn in vars(gpu).items() if name.startswith("test_")})


@pytest.fixture(autouse=True)
def _on_interpreter(monkeypatch):
    monkeypatch.setattr(gpu, "ON_INTERPRETER", True)
