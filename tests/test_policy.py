"""createpolicy: a policy register for the .L2::cache_hint forms (ld, st, cp.async); checked, assembled, and run
by the interpreter, where hints change no result."""
import re

import numpy as np
import pytest

import tiledsl
from tiledsl import T
from tiledsl.isa.policy import pattern as P
from tiledsl.isa.family import Refusal
from helpers import ptxas

OPCODES = ["createpolicy.fractional.L2::evict_last.b64", "createpolicy.fractional.L2::evict_first.b64",
           "createpolicy.fractional.L2::evict_normal.L2::evict_unchanged.b64",
           "createpolicy.fractional.L2::evict_unchanged.L2::evict_first.b64"]


def make(opcode, frac):
    @tiledsl.jit
    def hinted_copy(A: T.Tensor((32, 4), "uint32"), Out: T.Tensor((32, 4), "uint32"), f: T.float32):
        T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
        lane = T.cuda.lane_id()
        pol = T.alloc_local((1,), "uint64")
        if frac == "runtime":
            T.cuda.tile.apply(T.ptx[opcode], pol, f)
        elif frac is None:
            T.cuda.tile.apply(T.ptx[opcode], pol)
        else:
            T.cuda.tile.apply(T.ptx[opcode], pol, frac)
        sm = T.alloc_shared((32, 4), "uint32")
        T.cuda.tile.apply(T.ptx["cp.async.cg.shared.global.L2::cache_hint"], sm.view(32, 1, 4), A.view(32, 1, 4),
                          chunk_bytes=16, cache_policy=pol[0], scope="warp")
        T.cuda.tile.apply(T.ptx["cp.async.wait_all"])
        r = T.alloc_local((4,), "uint32")
        T.cuda.tile.apply(T.ptx["ld.global.L2::cache_hint.v4.u32"], r, A[lane, 0:4], cache_policy=pol[0])
        for i in T.unroll(4):
            Out[lane, i] = sm[lane, i] ^ r[i] ^ A[lane, i]
    return hinted_copy


@pytest.mark.parametrize("opcode", OPCODES)
@pytest.mark.parametrize("frac", [None, 0.5, "runtime"])
def test_policy_feeds_cache_hints(opcode, frac):
    a = np.arange(128, dtype=np.uint32).reshape(32, 4)
    k = make(opcode, frac)
    ck = k.compile(a, a, 0.25, target="sm_90")
    ptx = ck.asm["ptx"]
    tail = {None: r";", 0.5: r", 0f3F000000;", "runtime": r", %[rf]\d+;"}[frac]
    assert re.search(re.escape(opcode) + r"\s+%rd\d+" + tail, ptx), ptx
    assert ptxas(ptx, "sm_90").returncode == 0
    out = np.zeros_like(a)
    tiledsl.jit(k.fn, interpret=True)(a, out, 0.25)
    np.testing.assert_array_equal(out, a)          # the hints change nothing


@pytest.mark.parametrize("opcode,msg", [("createpolicy.fractional.L2::evict_sometimes.b64", "unknown eviction"),
                                        ("createpolicy.fractional.L2::evict_last.L2::evict_last.b64",
                                         "unknown eviction"),
                                        ("createpolicy.range.L2::evict_last.b64", "no explicit tile pattern")])
def test_unknown_forms_are_refused(opcode, msg):
    assert isinstance(P.match(opcode), Refusal) and msg in P.match(opcode).message


@pytest.mark.parametrize("frac,dtype,msg", [(1.5, "uint64", r"fraction 1\.5 is outside \(0, 1\]"),
                                            (0.5, "uint32", "64-bit integer register")])
def test_bad_operands_name_the_line(frac, dtype, msg):
    @tiledsl.jit
    def k(Out: T.Tensor((1,), "uint32")):
        T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
        pol = T.alloc_local((1,), dtype)
        T.cuda.tile.apply(T.ptx["createpolicy.fractional.L2::evict_last.b64"], pol, frac)
    with pytest.raises(tiledsl.CompilationError, match=msg) as e:
        k.compile(np.zeros(1, np.uint32), target="sm_90")
    assert "test_policy.py" in str(e.value)
