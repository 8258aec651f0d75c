"""debug=True: bounds checks on every element access and tile memory operand, reported at the user's line."""
import inspect

import numpy as np
import pytest

import tiledsl
from tiledsl import T
from helpers import ptxas


def oob(A: T.Tensor(("N",), "float32"), idx: T.int32):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    A[idx + T.cuda.thread_id()] = 1.0


def line_of(fn, needle):
    lines, start = inspect.getsourcelines(fn)
    return start + next(i for i, t in enumerate(lines) if needle in t)


def test_debug_inserts_checks_that_assemble():
    ck = tiledsl.jit(oob, debug=True).compile(np.zeros(64, np.float32), 0, target="sm_90")
    assert "trap" in ck.asm["expanded"]
    assert "atom.global.cas.b32" in ck.asm["ptx"] and "exit;" in ck.asm["ptx"]
    assert ck.metadata["debug_sites"][0].startswith(f"{__file__}:{line_of(oob, 'A[idx')}")
    assert ptxas(ck.asm["ptx"], "sm_90").returncode == 0
    plain = tiledsl.jit(oob).compile(np.zeros(64, np.float32), 0, target="sm_90")
    assert "atom.global" not in plain.asm["ptx"]


def test_tiledsl_debug_is_read_when_a_specialization_is_made(monkeypatch):
    """TILEDSL_DEBUG set after the kernel was decorated still takes effect (it is part of the options' key)."""
    k = tiledsl.jit(oob)
    assert "trap" not in k.compile(np.zeros(64, np.float32), 0, target="sm_90").asm["expanded"]
    monkeypatch.setenv("TILEDSL_DEBUG", "1")
    assert "trap" in k.compile(np.zeros(64, np.float32), 0, target="sm_90").asm["expanded"]


@pytest.mark.gpu
def test_debug_catches_out_of_bounds_write_on_gpu():
    torch = pytest.importorskip("torch")
    k = tiledsl.jit(oob, debug=True)
    a = torch.zeros(40, device="cuda")
    k(a, 0)                                           # in bounds: fine
    torch.cuda.synchronize()
    with pytest.raises(tiledsl.KernelFault) as ei:
        k(a, 20)                                      # threads 20..31 write past the end
    msg = str(ei.value)
    assert f"{__file__}:{line_of(oob, 'A[idx')}" in msg
    assert "block 0" in msg and "thread " in msg
    k(a, 0)                                           # the context is still usable
    torch.cuda.synchronize()
    assert a[:32].eq(1).all()
