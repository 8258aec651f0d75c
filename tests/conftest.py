import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# this checkout's tiledsl first; examples/ for the teaching examples the tests import as modules (seed_mma, seed_fma,
# reduce, histogram, and the scripts whose main() they run); the kernels themselves are tiledsl.ops's
for p in (ROOT, os.path.join(ROOT, "examples")):
    if p not in sys.path:
        sys.path.insert(0, p)


SLOW_ENV = "TILEDSL_SLOW_TESTS"


def pytest_addoption(parser):
    parser.addoption("--runslow", action="store_true", default=False,
                     help=f"also run the tests marked slow (or set {SLOW_ENV}=1; .ci/run does)")
    parser.addoption("--shard", default=None, metavar="I/K",
                     help="run only the collected tests whose position is I modulo K (0 <= I < K): K processes "
                          "with shards 0/K .. K-1/K run a long GPU file side by side (benchmarks/gpu_session.sh)")


def _shard(config):
    """(I, K) of --shard I/K, or None."""
    text = config.getoption("--shard")
    if not text:
        return None
    try:
        i, k = (int(x) for x in text.split("/"))
    except ValueError:
        raise pytest.UsageError(f"--shard {text!r}: expected I/K with integers 0 <= I < K") from None
    if not 0 <= i < k:
        raise pytest.UsageError(f"--shard {text!r}: expected I/K with 0 <= I < K")
    return i, k


def _run_slow(config) -> bool:
    """Slow tests run with --runslow, TILEDSL_SLOW_TESTS=1, or a -m expression that names the marker."""
    return (config.getoption("--runslow") or os.environ.get(SLOW_ENV, "").strip().lower() in ("1", "true", "yes")
            or "slow" in (config.getoption("-m") or ""))


def _has_gpu() -> bool:
    from tiledsl.runtime.driver import gpu_available
    return gpu_available()


def pytest_collection_modifyitems(config, items):
    # the default run stays fast: the slow tests (GEMM exactness on the interpreter, long hypothesis searches,
    # the cache stress, the bounded fuzz run) are skipped unless asked for
    # (slow_tests.py lists more: the heaviest members of parametrized families, each keeping a representative)
    shard = _shard(config)
    if shard is not None:
        i, k = shard
        config.hook.pytest_deselected(items=[t for n, t in enumerate(items) if n % k != i])
        items[:] = [t for n, t in enumerate(items) if n % k == i]
    from slow_tests import is_slow
    for item in items:
        if "slow" not in item.keywords and is_slow(item.nodeid):
            item.add_marker(pytest.mark.slow)
    if not _run_slow(config):
        skip_slow = pytest.mark.skip(reason=f"slow: run with --runslow or {SLOW_ENV}=1")
        for item in items:
            if "slow" in item.keywords:
                item.add_marker(skip_slow)
    if _has_gpu():
        return
    skip = pytest.mark.skip(reason="no NVIDIA GPU on this machine")
    for item in items:
        if "gpu" in item.keywords or "multigpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("TILEDSL_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "tiledsl-cache"))
