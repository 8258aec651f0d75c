"""Bad calls of the FA3-style Hopper attention (tiledsl/ops/flash/fa3.py) and of attention(path=...): each is a
LaunchError naming what is wrong (or, for a named sm_90 target, a CompilationError naming sm_90a), never an
internal exception."""
import numpy as np
import pytest

from tiledsl.ops.flash import fa3 as AH
from tiledsl.ops.flash import forward as FWD
import tiledsl
from badcase import Case, run

L = tiledsl.LaunchError


def z(*shape, dtype=np.float16):
    return np.zeros(shape, dtype)


def call(*args, **kw):
    return lambda: AH.attention_hopper(*args, **kw)


def make(*args, **kw):
    return lambda: AH.make_attention_hopper(*args, **kw)


def named_sm90():
    # one block an item (the long sequences' default: no walk counters to pass); 64 queries would take a walk
    k = AH.make_attention_hopper("float16", 64, False, (1, 1, 1, 64, 64), 0.125, config=AH.CONFIGS[64])
    q = z(1, 64, 64)
    k.compile(q, q, q, z(1, 1, 64, 64), z(1, 1, 64, dtype=np.float32), target="sm_90")


CASES = [
    Case("head_dim_96", action=call(z(1, 1, 16, 96), z(1, 1, 16, 96), z(1, 1, 16, 96)), err=L,
         words=("head dims 64, 128, 256", "got 96")),
    Case("float32_inputs", action=call(*(z(1, 1, 16, 64, dtype=np.float32),) * 3), err=L,
         words=("float16 and bfloat16",)),
    Case("kv_heads_do_not_divide", action=call(z(1, 3, 16, 64), z(1, 2, 16, 64), z(1, 2, 16, 64)), err=L,
         words=("heads",)),
    Case("k_and_q_head_dims_differ", action=call(z(1, 1, 16, 64), z(1, 1, 16, 128), z(1, 1, 16, 128)), err=L,
         words=("D=64",)),
    Case("negative_scale", action=call(z(1, 1, 16, 64), z(1, 1, 16, 64), z(1, 1, 16, 64), scale=-0.5), err=L,
         words=("positive finite scale",)),
    Case("make_float32", action=make("float32", 64, False, (1, 1, 1, 16, 16), 0.125), err=L,
         words=("float16 and bfloat16, not float32",)),
    Case("config_too_short", action=make("float16", 64, False, (1, 1, 1, 16, 16), 0.125, (2, 128)), err=L,
         words=("(consumers, BN, stages, overlap[, pingpong[, poly[, persistent[, early_k[, lazy[, align[, "
                "tma_o[, double_q]]]]]]]]])",)),
    Case("config_ping_pong_one_consumer", action=make("float16", 64, False, (1, 1, 1, 16, 16), 0.125,
                                                      (1, 128, 2, 1, 1)), err=L,
         words=("1 takes at least 2 consumers",)),
    Case("config_four_consumers", action=make("float16", 64, False, (1, 1, 1, 16, 16), 0.125, (4, 128, 2, 1)),
         err=L, words=("1 to 3 consumers",)),
    Case("config_one_stage", action=make("float16", 64, False, (1, 1, 1, 16, 16), 0.125, (2, 128, 1, 1)), err=L,
         words=("at least 2 stages",)),
    Case("config_odd_bn", action=make("float16", 64, False, (1, 1, 1, 16, 16), 0.125, (2, 104, 2, 1)), err=L,
         words=("BN a multiple of 16",)),
    Case("config_over_shared_memory", action=make("float16", 256, False, (1, 1, 1, 16, 16), 0.0625,
                                                  (2, 256, 2, 1)), err=L, words=("bytes of shared memory",)),
    Case("config_poly_not_whole_columns", action=make("float16", 64, False, (1, 1, 1, 16, 16), 0.125,
                                                      (2, 128, 4, 1, 1, 6)), err=L,
         words=("poly = 6", "multiple of 4 from 0 to 64")),
    Case("config_poly_over_bn_half", action=make("float16", 64, False, (1, 1, 1, 16, 16), 0.125,
                                                 (2, 64, 4, 1, 1, 36)), err=L,
         words=("poly = 36", "BN / 2 = 32", "from 0 to 32")),
    Case("config_poly_negative", action=make("float16", 64, False, (1, 1, 1, 16, 16), 0.125, (2, 128, 4, 1, 1, -4)),
         err=L, words=("poly = -4",)),
    Case("config_lazy_two", action=make("float16", 64, False, (1, 1, 1, 16, 16), 0.125,
                                        (2, 128, 4, 1, 1, 0, 0, 0, 2)), err=L,
         words=("lazy = 2", "only when a row's max moves")),
    Case("config_align_two", action=make("float16", 64, True, (1, 1, 1, 16, 16), 0.125,
                                         (2, 128, 4, 1, 1, 0, 0, 0, 1, 2)), err=L,
         words=("align = 2", "ends at row N")),
    Case("config_too_long", action=make("float16", 64, True, (1, 1, 1, 16, 16), 0.125,
                                        (2, 128, 4, 1, 1, 0, 0, 0, 1, 0, 0, 0, 0)), err=L,
         words=("[, double_q]]]]]]]]])",)),
    Case("config_double_q_two", action=make("float16", 64, False, (1, 1, 1, 16, 16), 0.125,
                                            (2, 128, 4, 1, 1, 0, 1, 0, 1, 0, 0, 2)), err=L,
         words=("double_q = 2", "the next item's Q loaded while this one runs")),
    Case("config_double_q_one_block_an_item", action=make("float16", 64, False, (1, 1, 1, 16, 16), 0.125,
                                                          (2, 128, 4, 1, 1, 0, 0, 0, 1, 0, 0, 1)), err=L,
         words=("double_q takes the persistent walk",)),
    Case("config_tma_o_two", action=make("float16", 64, False, (1, 1, 1, 16, 16), 0.125,
                                         (2, 128, 4, 1, 1, 0, 0, 0, 1, 0, 2)), err=L,
         words=("tma_o = 2", "through shared memory and the TMA store")),
    Case("path_unknown", action=lambda: FWD.attention(z(1, 1, 16, 64), z(1, 1, 16, 64), z(1, 1, 16, 64), path="fa4"),
         err=L, words=("path must be 'fa2', 'fa3' or None", "'fa4'")),
    Case("named_sm90_target", action=named_sm90, err=tiledsl.CompilationError, words=("sm_90a",)),
]


@pytest.mark.parametrize("case", [c.param() for c in CASES])
def test_bad_attention_hopper(case):
    run(case)
