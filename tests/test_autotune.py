"""tiledsl.autotune without a GPU: config checks, keys, the winners' store, failing configs, the progress line.

The device and the benchmark are injected (a fake device name and target, a benchmark that returns a time per
config), so everything but the timing itself runs here: candidates really compile (PTX and cubin), in processes.
"""
import json
import os
import warnings

import numpy as np
import pytest

import tiledsl
from tiledsl import T
from tiledsl.core.target import Target
from tiledsl.tune import store
from tiledsl.tune.autotune import Autotuner


@tiledsl.jit
def scale(A: T.Tensor((64,), "float32"), Out: T.Tensor((64,), "float32"), F: T.constexpr, R: T.constexpr):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=64))
    i = T.cuda.thread_id()
    for _ in T.unroll(R):
        Out[i] = A[i] * F


@tiledsl.jit
def big_shared(A: T.Tensor((64,), "float32"), WORDS: T.constexpr):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=64))
    s = T.alloc_shared((WORDS,), "float32")
    i = T.cuda.thread_id()
    s[i] = A[i]
    T.cuda.syncthreads()
    A[i] = s[(i + 1) % 64]


@pytest.fixture(autouse=True)
def _own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TILEDSL_CACHE_DIR", str(tmp_path / "cache"))


CONFIGS = [tiledsl.Config({"F": 2.0, "R": 1}), tiledsl.Config({"F": 2.0, "R": 2}),
           tiledsl.Config({"F": 2.0, "R": 3}, block=64)]
TIMES = {1: 0.30, 2: 0.10, 3: 0.20}


def fake_bench(calls):
    def bench(fn, warmup, rep):
        calls.append(fn)
        return 1.0
    return bench


def tuned_scale(calls, times=TIMES, **kw):
    """An autotuned `scale` whose benchmark reports TIMES[R] (read from the config being timed)."""
    t = tiledsl.autotune(configs=CONFIGS, key=["A"], do_bench=lambda fn, warmup, rep: fn(), **kw)(scale)
    orig = t._launcher

    def launcher(k, cfg, kwargs):
        orig(k, cfg, kwargs)
        return lambda *a, stream=None: (calls.append(cfg), times[cfg.constexprs["R"]])[1]
    t._launcher = launcher
    return t


def run_tune(t, a, out):
    return t.tune((a, out), {}, Target(90), "Fake GPU")


def test_config_validation():
    with pytest.raises(tiledsl.TiledslError, match="dict of constexpr"):
        tiledsl.Config([1, 2])
    with pytest.raises(tiledsl.TiledslError, match="unknown launch option 'num_stages'"):
        tiledsl.Config({}, num_stages=3)
    with pytest.raises(tiledsl.TiledslError, match="constexpr 'X' must be"):
        tiledsl.Config({"X": object()})
    with pytest.raises(tiledsl.TiledslError, match="block must be"):
        tiledsl.Config({}, block=0)
    with pytest.raises(tiledsl.TiledslError, match="not both"):
        tiledsl.Config({}, block=64, num_warps=2)
    assert tiledsl.Config({}, num_warps=4).block == 128
    assert tiledsl.Config({"A": 1}, grid=(2, 2)) == tiledsl.Config({"A": 1}, grid=(2, 2))
    with pytest.raises(tiledsl.TiledslError, match="non-empty list"):
        tiledsl.autotune(configs=[], key=["A"])
    with pytest.raises(tiledsl.TiledslError, match="list of argument names"):
        tiledsl.autotune(configs=CONFIGS, key=[1])
    with pytest.raises(tiledsl.TiledslError, match="same"):
        tiledsl.autotune(configs=[CONFIGS[0], tiledsl.Config({"F": 2.0, "R": 1})], key=["A"])
    with pytest.raises(tiledsl.TiledslError, match="key names \\['Z'\\]"):
        tiledsl.autotune(configs=CONFIGS, key=["Z"])(scale).names()
    with pytest.raises(tiledsl.TiledslError, match="not T.constexpr parameters"):
        tiledsl.autotune(configs=[tiledsl.Config({"A": 1})], key=["Out"])(scale).names()


def test_key_computation():
    t = tiledsl.autotune(configs=CONFIGS, key=["A", "n"])(tiledsl.jit(lambda_free_kernel()))
    a = np.zeros(64, np.float32)
    assert t.names() == ["A", "Out", "n"]
    assert t.key_of((a, a, 3), {}) == (((64,), "float32"), 3)
    assert t.key_of((a,), {"Out": a, "n": 5}) == (((64,), "float32"), 5)
    with pytest.raises(tiledsl.LaunchError, match="'n' is missing"):
        t.key_of((a, a), {})


def lambda_free_kernel():
    def k(A: T.Tensor((64,), "float32"), Out: T.Tensor((64,), "float32"), n: T.int32, F: T.constexpr,
          R: T.constexpr):
        T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=64))
        Out[T.cuda.thread_id()] = A[T.cuda.thread_id()] * F + n
    return k


def test_tune_picks_the_fastest_stores_it_and_prints_progress(capsys):
    a, out = np.zeros(64, np.float32), np.zeros(64, np.float32)
    calls = []
    t = tuned_scale(calls)
    win = run_tune(t, a, out)
    assert win is CONFIGS[1] and t.best_configs[(((64,), "float32"),)] is CONFIGS[1]
    assert len(calls) == 3
    err = capsys.readouterr().err
    assert "tiledsl.autotune: scale key=(((64,), 'float32'),) 3/3 configs, best 0.1000 ms" in err
    # a second tuner (a fresh process would do the same) finds the winner on disk, benchmarking nothing
    calls2 = []
    t2 = tuned_scale(calls2, times={1: 0.0, 2: 9.0, 3: 9.0})
    assert run_tune(t2, a, out) is CONFIGS[1] and calls2 == []
    # another key tunes again
    a2, out2 = np.zeros(64, np.float16), np.zeros(64, np.float16)
    assert t2.key_of((a2, out2), {}) != t2.key_of((a, out), {})


def test_stored_winner_is_per_device_and_target():
    a, out = np.zeros(64, np.float32), np.zeros(64, np.float32)
    calls = []
    run_tune(tuned_scale(calls), a, out)
    calls2 = []
    t2 = tuned_scale(calls2, times={1: 0.0, 2: 9.0, 3: 9.0})
    assert t2.tune((a, out), {}, Target(80), "Fake GPU") is CONFIGS[0] and len(calls2) == 3
    calls3 = []
    t3 = tuned_scale(calls3, times={1: 9.0, 2: 9.0, 3: 0.0})
    assert t3.tune((a, out), {}, Target(90), "Another GPU") is CONFIGS[2] and len(calls3) == 3


def entry_files():
    root = os.path.join(os.environ["TILEDSL_CACHE_DIR"], "tune")
    return [os.path.join(d, f) for d, _, fs in os.walk(root) for f in fs if f.endswith(".json")]


def test_store_round_trip_and_damaged_entries(tmp_path, monkeypatch):
    monkeypatch.setenv("TILEDSL_CACHE_DIR", str(tmp_path / "c"))
    k = store.entry_key({"a": "1"})
    assert store.load(k) is None
    store.save(k, {"config": "F=1", "ms": 0.5})
    got = store.load(k)
    assert got["config"] == "F=1" and got["ms"] == 0.5
    assert not [f for f in os.listdir(os.path.dirname(store.path(k))) if f.startswith(".tmp")]
    for damage in (b"{not json", b"[1, 2]", json.dumps({"format": 1, "key": "other", "config": "x"}).encode(),
                   b"\xff\xfe"):
        with open(store.path(k), "wb") as f:
            f.write(damage)
        with pytest.warns(UserWarning, match="discarding damaged autotune entry"):
            assert store.load(k) is None
        assert not os.path.exists(store.path(k))
    monkeypatch.setenv("TILEDSL_DISABLE_DISK_CACHE", "1")
    store.save(k, {"config": "F=1"})
    assert store.load(k) is None


def test_damaged_entry_is_retuned_not_a_crash():
    a, out = np.zeros(64, np.float32), np.zeros(64, np.float32)
    calls = []
    run_tune(tuned_scale(calls), a, out)
    [path] = entry_files()
    with open(path, "w") as f:
        f.write('{"format": 1, "key": ')
    calls2 = []
    with pytest.warns(UserWarning, match="damaged autotune entry"):
        assert run_tune(tuned_scale(calls2), a, out) is CONFIGS[1]
    assert len(calls2) == 3
    # a winner that is no longer among the configs is discarded as well
    rec = json.load(open(path))
    rec["config"] = "F=float:0x1.0p+0,R=int:7,grid=None,block=None"
    json.dump(rec, open(path, "w"))
    calls3 = []
    with pytest.warns(UserWarning, match="not one of the configs"):
        assert run_tune(tuned_scale(calls3), a, out) is CONFIGS[1]
    assert len(calls3) == 3


def test_failing_configs_are_skipped_with_their_reason(capsys):
    limit = Target(90).shared_per_block // 4
    cfgs = [tiledsl.Config({"WORDS": limit * 2}), tiledsl.Config({"WORDS": 64})]
    t = tiledsl.autotune(configs=cfgs, key=["A"], do_bench=lambda fn, warmup, rep: 1.0)(big_shared)
    a = np.zeros(64, np.float32)
    assert t.tune((a,), {}, Target(90), "Fake GPU") is cfgs[1]
    reason = t.timings[(((64,), "float32"),)][cfgs[0].fingerprint()]
    assert "CompilationError" in reason and "shared" in reason
    assert "1 skipped" in capsys.readouterr().err


def test_all_configs_failing_is_a_compilation_error_listing_each():
    limit = Target(90).shared_per_block // 4
    cfgs = [tiledsl.Config({"WORDS": limit * 2}), tiledsl.Config({"WORDS": limit * 3})]
    t = tiledsl.autotune(configs=cfgs, key=["A"], do_bench=lambda fn, warmup, rep: 1.0, pool="threads")(big_shared)
    with pytest.raises(tiledsl.CompilationError) as e:
        t.tune((np.zeros(64, np.float32),), {}, Target(90), "Fake GPU")
    msg = str(e.value)
    assert msg.count("CompilationError:") == 2 and f"WORDS': {limit * 2}" in msg and f"WORDS': {limit * 3}" in msg


def test_prune_and_a_failing_benchmark():
    a, out = np.zeros(64, np.float32), np.zeros(64, np.float32)

    def bench(fn, warmup, rep):
        return fn()
    t = tiledsl.autotune(configs=CONFIGS, key=["A"], do_bench=bench,
                         prune=lambda cfgs, args: [c for c in cfgs if c.constexprs["R"] != 2])(scale)
    orig = t._launcher

    def launcher(k, cfg, kwargs):
        orig(k, cfg, kwargs)
        if cfg.constexprs["R"] == 1:
            def boom(*a, stream=None):
                raise tiledsl.LaunchError("launch failed: out of resources")
            return boom
        return lambda *a, stream=None: 0.5
    t._launcher = launcher
    assert run_tune(t, a, out) is CONFIGS[2]
    assert "out of resources" in t.timings[(((64,), "float32"),)][CONFIGS[0].fingerprint()]


def test_interpreter_uses_the_first_config_with_a_warning():
    k = tiledsl.jit(scale.fn, interpret=True)
    t = tiledsl.autotune(configs=CONFIGS[::-1], key=["A"])(k)
    a, out = np.arange(64, dtype=np.float32), np.zeros(64, np.float32)
    with pytest.warns(UserWarning, match="using the first config"):
        t(a, out)
    np.testing.assert_array_equal(out, a * 2)
    assert t.best_config is CONFIGS[2]


def test_compile_without_a_gpu_and_a_kernel_factory():
    a, out = np.zeros(64, np.float32), np.zeros(64, np.float32)
    t = tiledsl.autotune(configs=CONFIGS, key=["A"])(scale)
    ck = t.compile(a, out, target="sm_80")
    assert ".target sm_80" in ck.asm["ptx"]
    built = []

    def factory(A, Out, R):
        built.append(R)
        return scale
    f = tiledsl.autotune(configs=[tiledsl.Config({"R": 1}), tiledsl.Config({"R": 2})], key=["A"])(factory)
    assert f.names() == ["A", "Out"] and isinstance(f, Autotuner) and f.is_factory
    with pytest.raises(tiledsl.TiledslError, match="returned"):
        tiledsl.autotune(configs=[tiledsl.Config({"R": 1})], key=["A"])(lambda A, Out, R: 3).kernel_for(
            tiledsl.Config({"R": 1}), (a, out), {})


def test_autotune_ptx_passes_ptxas():
    """The GPU test's kernel (tests/test_gpu_autotune.py) compiles and passes ptxas for every config."""
    from helpers import ptxas
    from test_gpu_autotune import CONFIGS as GPU_CONFIGS, add_kernel
    x = np.zeros(4096, np.float32)
    for cfg in GPU_CONFIGS:
        ck = add_kernel.compile(x, x, x, target="sm_90", block=cfg.block, **cfg.constexprs)
        r = ptxas(ck.asm["ptx"], "sm_90")
        assert r.returncode == 0, r.stderr


def test_gemm_example_tunes_over_at_least_8_configs():
    from tiledsl.ops.gemm import matmul as MM
    assert len(MM.tuned_gemm.configs) >= 8 and MM.tuned_gemm.names() == ["A", "B", "C"]
    a = np.zeros((256, 64), np.float16)
    c32 = np.zeros((256, 256), np.float32)
    epi = next(c for c in MM.tuned_gemm.configs if len(c.constexprs["config"]) > 10)
    with pytest.raises(tiledsl.LaunchError, match="epilogue"):
        MM.tuned_gemm.kernel_for(epi, (a, np.zeros((256, 64), np.float16), c32), {})
    with pytest.raises(tiledsl.LaunchError, match="multiples"):
        MM.tuned_gemm.kernel_for(MM.tuned_gemm.configs[0], (np.zeros((100, 64), np.float16), a, a), {})


def test_forked_workers_only_compile():
    """The kernel factory and the argument binding run in the tuning process: a forked compile worker must never
    do what may touch the GPU's driver (torch refuses CUDA in a forked child: "Cannot re-initialize CUDA")."""
    parent = os.getpid()

    def factory(A, Out, R):
        assert os.getpid() == parent, "the kernel factory ran in a forked worker"

        @tiledsl.jit
        def times(A: T.Tensor((64,), "float32"), Out: T.Tensor((64,), "float32")):
            T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=64))
            i = T.cuda.thread_id()
            Out[i] = A[i] * float(R)
        return times
    a, out = np.zeros(64, np.float32), np.zeros(64, np.float32)
    cfgs = [tiledsl.Config({"R": r}) for r in (1, 2, 3)]
    t = tiledsl.autotune(configs=cfgs, key=["A"], pool="processes")(factory)
    with warnings.catch_warnings():
        warnings.simplefilter("error")      # not "parallel compilation failed; compiling in this process"
        assert t._compile_all(cfgs, (a, out), {}, Target(80)) == {}
    # each candidate's cubin is now in the disk cache: compiling again here is a disk hit
    assert all(t._compile(c, (a, out), {}, Target(80))._compiled for c in cfgs)
