"""Launch bounds: T.cuda.LaunchConfig(max_registers=, min_blocks_per_sm=) become .maxnreg / .minnctapersm."""
import numpy as np
import pytest

import tiledsl
from tiledsl import T
from helpers import ptxas


def make(regs=None, blocks=None):
    @tiledsl.jit
    def many_live(X: T.Tensor((256, 64), "float32"), Y: T.Tensor((256,), "float32")):
        T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=256, max_registers=regs,
                                                  min_blocks_per_sm=blocks))
        t = T.cuda.thread_id()
        r = T.alloc_local((64,), "float32")
        for i in T.unroll(64):
            r[i] = X[t, i]
        s = 0.0
        for i in T.unroll(64):
            s = s + r[i] * r[63 - i]
        Y[t] = s
    return many_live


def test_register_cap_reaches_ptxas():
    x, y = np.ones((256, 64), np.float32), np.zeros(256, np.float32)
    free = make().compile(x, y, target="sm_90")
    capped = make(32, 2).compile(x, y, target="sm_90")
    ptx = capped.asm["ptx"]
    assert ".maxnreg 32" in ptx and ".minnctapersm 2" in ptx
    assert ptxas(ptx, "sm_90").returncode == 0
    assert capped.metadata["registers"] <= 32 < free.metadata["registers"]
    assert "max_registers=32 min_blocks_per_sm=2" in capped.asm["tile"]
    tiledsl.jit(make(32).fn, interpret=True)(x, y)          # the interpreter runs it unchanged
    assert (y == 64).all()


@pytest.mark.parametrize("regs,blocks,msg", [(300, None, "max_registers must be a compile-time int from 24"),
                                             (None, 0, "min_blocks_per_sm must be"),
                                             (128, 4, "need 131072 registers")])
def test_bad_bounds_name_the_line(regs, blocks, msg):
    with pytest.raises(tiledsl.CompilationError, match=msg) as e:
        make(regs, blocks).compile(np.ones((256, 64), np.float32), np.zeros(256, np.float32), target="sm_90")
    assert "test_launch_bounds.py" in str(e.value) and "LaunchConfig" in str(e.value)
