"""tiledsl.autotune on the GPU: a small kernel tuned over 3 configs, the winner right, kept on disk, and found by a
second kernel object in the same process without benchmarking. (tests/test_autotune.py compiles these configs
to PTX and runs ptxas on them without a GPU.)"""
import json
import os

import numpy as np
import pytest

import tiledsl
from tiledsl import T

pytestmark = pytest.mark.gpu


@tiledsl.jit
def add_kernel(X: T.Tensor(("N",), "float32"), Y: T.Tensor(("N",), "float32"), Out: T.Tensor(("N",), "float32"),
               PER: T.constexpr):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=N // 256 // PER, block=256))  # noqa: F821
    base = (T.cuda.block_id() * T.cuda.block_dim() + T.cuda.thread_id()) * PER
    for j in T.unroll(PER):
        Out[base + j] = X[base + j] + Y[base + j]


# block= overrides the body's 256 threads: each config covers N with grid * block * PER elements
CONFIGS = [tiledsl.Config({"PER": 1}, block=256, grid=lambda a: a["X"].shape[0] // 256),
           tiledsl.Config({"PER": 2}, block=128, grid=lambda a: a["X"].shape[0] // 256),
           tiledsl.Config({"PER": 4}, block=64, grid=lambda a: a["X"].shape[0] // 256)]


def test_tune_three_configs_persist_and_reuse(capsys, monkeypatch, tmp_path):
    torch = pytest.importorskip("torch")
    monkeypatch.setenv("TILEDSL_CACHE_DIR", str(tmp_path))     # only this test's tuning records
    n = 1 << 20
    x = torch.randn(n, device="cuda")
    y = torch.randn(n, device="cuda")
    out = torch.empty_like(x)
    benched = []

    def bench(fn, warmup, rep):
        benched.append(fn)
        return tiledsl.testing.do_bench(fn, warmup=5, rep=20)
    t = tiledsl.autotune(configs=CONFIGS, key=["X"], do_bench=bench)(add_kernel)
    t(x, y, out)
    torch.cuda.synchronize()
    assert torch.equal(out, x + y)
    assert len(benched) == 3 and t.best_config in CONFIGS
    assert "3/3 configs" in capsys.readouterr().err
    root = os.path.join(os.environ["TILEDSL_CACHE_DIR"], "tune")
    files = [os.path.join(d, f) for d, _, fs in os.walk(root) for f in fs if f.endswith(".json")]
    assert len(files) == 1
    rec = json.load(open(files[0]))
    assert rec["config"] == t.best_config.fingerprint() and rec["name"] == "add_kernel"
    # a second kernel object (a new JITFunction of the same source): the store answers, nothing is benchmarked
    benched2 = []
    t2 = tiledsl.autotune(configs=CONFIGS, key=["X"], do_bench=lambda fn, warmup, rep: benched2.append(fn) or 1.0)(
        tiledsl.jit(add_kernel.fn))
    out.zero_()
    t2(x, y, out)
    torch.cuda.synchronize()
    assert benched2 == [] and t2.best_config == t.best_config
    assert torch.equal(out, x + y)
    # the launch after tuning runs the winner again (no second tuning), on another key it tunes again
    t(x[: n // 2], y[: n // 2], out[: n // 2])
    assert len(benched) == 6


def test_do_bench_median_and_quantiles():
    torch = pytest.importorskip("torch")
    a = torch.randn(1 << 22, device="cuda")
    ms = tiledsl.testing.do_bench(lambda: a.mul_(1.0), warmup=5, rep=20)
    assert 0 < ms < 10
    q = tiledsl.testing.do_bench(lambda: a.mul_(1.0), warmup=5, rep=20, quantiles=[0.2, 0.5, 0.8])
    assert len(q) == 3 and q[0] <= q[1] <= q[2]
    assert tiledsl.testing.do_bench(lambda: a.mul_(1.0), rep=5, flush_l2=False) > 0
