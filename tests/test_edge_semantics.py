"""The scalar edge cases of tests/edge_kernels.py on the interpreter against their references, and through ptxas
for sm_90 with every store still there (an out-of-range shift made LLVM delete them)."""
import numpy as np
import pytest

import tiledsl
from edge_kernels import CASES
from helpers import ptxas


@pytest.mark.parametrize("name,fn,make,ref", CASES, ids=[c[0] for c in CASES])
def test_interpreter_matches_reference(name, fn, make, ref):
    args = make()
    tiledsl.jit(fn, interpret=True)(*args)
    want = ref(*make())[0]
    got = args[-2] if name == "division" else args[-1]
    np.testing.assert_array_equal(got, want)
    if name == "division":                  # float16 / int is float16, the quotient correctly rounded
        a, h = args[0], args[2]
        np.testing.assert_array_equal(args[-1], (h.astype(np.float64) / (a % 7 + 1)).astype(np.float16))


@pytest.mark.parametrize("name,fn,make,ref", CASES, ids=[c[0] for c in CASES])
def test_ptx_keeps_every_store_and_assembles(name, fn, make, ref):
    ck = tiledsl.jit(fn).compile(*make(), target="sm_90")
    ptx = ck.asm["ptx"]
    stores = {"shifts": 10, "division": 2, "ranges": 5}[name]
    assert ptx.count("st.global") == stores, ptx
    r = ptxas(ptx, "sm_90")
    assert r.returncode == 0, r.stderr


def test_division_promotes_to_the_float_operand():
    ck = tiledsl.jit(CASES[1][1]).compile(*CASES[1][2](), target="sm_90")
    assert "cvt.rn.f64.s32" in ck.asm["ptx"] and "cvt.rn.f32.s32" not in ck.asm["ptx"]
