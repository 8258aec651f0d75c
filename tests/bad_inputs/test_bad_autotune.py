"""Bad input to tiledsl.autotune, tiledsl.Config and tiledsl.testing.do_bench: each a TiledslError that names
what is wrong, never an internal exception."""
import numpy as np
import pytest

import tiledsl
from tiledsl import T
from tiledsl.core.target import Target
from badcase import Case, run

TE, LE, CE = tiledsl.TiledslError, tiledsl.LaunchError, tiledsl.CompilationError


@tiledsl.jit
def k(A: T.Tensor((64,), "float32"), n: T.int32, R: T.constexpr):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=64))
    A[T.cuda.thread_id()] = A[T.cuda.thread_id()] * R + n


@tiledsl.jit
def too_big(A: T.Tensor((64,), "float32"), W: T.constexpr):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=64))
    s = T.alloc_shared((W,), "float32")
    s[T.cuda.thread_id()] = A[T.cuda.thread_id()]


A = np.zeros(64, np.float32)
GOOD = [tiledsl.Config({"R": 1}), tiledsl.Config({"R": 2})]
FAKE = dict(do_bench=lambda fn, warmup, rep: 1.0)


def tuned(configs=GOOD, key=("A",), **kw):
    return tiledsl.autotune(configs=configs, key=list(key), **dict(FAKE, **kw))


def tune(t, *args):
    return lambda: t.tune(args, {}, Target(90), "Fake GPU")


def factory_of(value):
    def factory(A, n, R):
        return value
    return factory


HUGE = Target(90).shared_per_block


CASES = [
    Case("config_not_a_dict", action=lambda: tiledsl.Config(("R", 1)), err=TE, words=("dict of constexpr",)),
    Case("config_bad_name", action=lambda: tiledsl.Config({"1x": 1}), err=TE, words=("parameter names",)),
    Case("config_bad_value", action=lambda: tiledsl.Config({"R": [1]}), err=TE, words=("constexpr 'R'", "list")),
    Case("config_unknown_option", action=lambda: tiledsl.Config({}, num_stages=2), err=TE,
         words=("unknown launch option 'num_stages'",)),
    Case("config_bad_num_warps", action=lambda: tiledsl.Config({}, num_warps=0), err=TE, words=("num_warps",)),
    Case("config_bad_block", action=lambda: tiledsl.Config({}, block=(1, 2, 3, 4)), err=TE, words=("block",)),
    Case("config_bad_grid", action=lambda: tiledsl.Config({}, grid="x"), err=TE, words=("grid",)),
    Case("autotune_no_configs", action=lambda: tiledsl.autotune(configs=[], key=["A"]), err=TE,
         words=("non-empty list",)),
    Case("autotune_configs_not_configs", action=lambda: tiledsl.autotune(configs=[{"R": 1}], key=["A"]), err=TE,
         words=("tiledsl.Config",)),
    Case("autotune_bad_key", action=lambda: tiledsl.autotune(configs=GOOD, key=[3]), err=TE,
         words=("argument names",)),
    Case("autotune_bad_warmup", action=lambda: tiledsl.autotune(configs=GOOD, key=["A"], warmup=-1), err=TE,
         words=("warmup",)),
    Case("autotune_bad_pool", action=lambda: tiledsl.autotune(configs=GOOD, key=["A"], pool="gpu"), err=TE,
         words=("pool",)),
    Case("autotune_bad_prune", action=lambda: tiledsl.autotune(configs=GOOD, key=["A"], prune=3), err=TE,
         words=("prune",)),
    Case("autotune_not_a_kernel", action=lambda: tuned()(42), err=TE, words=("decorates", "int")),
    Case("key_not_an_argument", action=lambda: tuned(key=("B",))(k).names(), err=TE,
         words=("key names ['B']", "['A', 'n']")),
    Case("config_sets_a_tensor", action=lambda: tuned([tiledsl.Config({"A": 1})])(k).names(), err=TE,
         words=("not T.constexpr parameters",)),
    Case("factory_lacks_the_name", action=lambda: tuned([tiledsl.Config({"Q": 1})])(factory_of(k)).names(),
         err=TE, words=("does not take",)),
    Case("too_many_arguments", action=lambda: tuned()(k).key_of((A, 1, 2), {}), err=LE,
         words=("takes 2 arguments",)),
    Case("key_argument_missing", action=lambda: tuned(key=("n",))(k).key_of((A,), {}), err=LE,
         words=("'n' is missing",)),
    Case("prune_returns_nothing", action=tune(tuned(prune=lambda c, a: [])(k), A, 1), err=TE,
         words=("prune returned no configs",)),
    Case("factory_returns_no_kernel", action=tune(tuned()(factory_of(None)), A, 1), err=CE,
         words=("returned NoneType", "R': 1", "R': 2")),
    Case("every_config_fails", action=tune(tuned([tiledsl.Config({"W": HUGE}), tiledsl.Config({"W": 2 * HUGE})],
                                                 pool="threads")(too_big), A), err=CE,
         words=("no config of too_big", "shared", f"'W': {HUGE}", f"'W': {2 * HUGE}")),
    Case("do_bench_bad_quantiles", action=lambda: tiledsl.testing.do_bench(lambda: None, quantiles=[2]), err=TE,
         words=("quantiles",)),
]


@pytest.mark.parametrize("case", [c.param() for c in CASES])
def test_bad_autotune(case):
    run(case)
