"""tiledsl.ops.gates: a path built without a GPU stays off for CUDA tensors until a GPU session verifies it."""
import pytest

from tiledsl.ops import gates


@pytest.fixture
def a_gated_path(monkeypatch):
    monkeypatch.setitem(gates.GATED, "demo_path", "tests/test_gpu_demo.py")
    monkeypatch.delenv("TILEDSL_ENABLE", raising=False)
    monkeypatch.delenv("TILEDSL_DISABLE", raising=False)
    return "demo_path"


def test_a_gated_path_is_off_by_default(a_gated_path):
    assert not gates.enabled(a_gated_path)


@pytest.mark.parametrize("value", ["demo_path", "other, demo_path", "all"])
def test_the_environment_opts_in(a_gated_path, monkeypatch, value):
    monkeypatch.setenv("TILEDSL_ENABLE", value)
    assert gates.enabled(a_gated_path)


def test_a_verified_path_needs_no_opt_in(a_gated_path, monkeypatch):
    monkeypatch.setattr(gates, "VERIFIED", frozenset({a_gated_path}))
    assert gates.enabled(a_gated_path)


@pytest.mark.parametrize("value", ["demo_path", "other,demo_path", "all"])
def test_the_environment_keeps_a_verified_path_off(a_gated_path, monkeypatch, value):
    monkeypatch.setattr(gates, "VERIFIED", frozenset({a_gated_path}))
    monkeypatch.setenv("TILEDSL_ENABLE", "all")
    monkeypatch.setenv("TILEDSL_DISABLE", value)
    assert not gates.enabled(a_gated_path)
    monkeypatch.setenv("TILEDSL_DISABLE", "other")
    assert gates.enabled(a_gated_path)


def test_an_unknown_name_is_refused():
    with pytest.raises(KeyError, match="unknown gated path"):
        gates.enabled("no_such_path")


def test_every_gated_path_names_its_gpu_tests():
    for name, tests in gates.GATED.items():
        assert tests.startswith("tests/test_gpu_"), name


def test_the_module_lists_the_gpu_tests_to_run():
    import subprocess
    import sys
    out = subprocess.run([sys.executable, "-m", "tiledsl.ops.gates"], capture_output=True, text=True, check=True)
    assert out.stdout.split() == sorted(set(gates.GATED.values()))


def test_a_host_tensor_may_always_take_a_gated_path(a_gated_path):
    class Tensor:
        def __init__(self, cuda):
            self.is_cuda = cuda
    assert gates.allows(a_gated_path, Tensor(False))
    assert not gates.allows(a_gated_path, Tensor(True))
