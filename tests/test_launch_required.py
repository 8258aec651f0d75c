"""No silent launch (issue 15): a kernel with neither T.device_entry(launch=...) nor kernel[grid, block] raises
LaunchError saying how to give one, on every path (the reference launcher, after the kernel's generated and
native launchers were warmed with kernel[grid, block] calls, and the interpreter). compile() needs no launch.
The GPU paths run on the stub driver (tests/launch_stubs.py), as in tests/test_launch_contract.py."""
import numpy as np
import pytest

import tiledsl
from tiledsl import T
from tiledsl.abi.signature import KernelSignature
from tiledsl.runtime import jit as jitmod
from tiledsl.runtime.launchers import native

import launch_stubs


def bare(A: T.Tensor((32,), "float32"), n: T.int32):
    t = T.cuda.thread_id()
    A[t] = T.cast(n, "float32")


def with_entry(A: T.Tensor((32,), "float32"), n: T.int32):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    A[T.cuda.thread_id()] = T.cast(n, "float32")


WORDS = ("has no launch configuration", "kernel[grid, block]", "T.device_entry(launch=")


def _check(e):
    for w in WORDS:
        assert w in str(e), str(e)


@pytest.mark.parametrize("warm", ["reference", "generated", "native"])
def test_gpu_paths_refuse_a_call_without_a_launch(warm, monkeypatch):
    if warm == "native" and not native.available():
        pytest.skip("native launchers need CPython with a GIL")
    drv = launch_stubs.install(monkeypatch)
    monkeypatch.setenv("TILEDSL_NATIVE_LAUNCH", "1" if warm == "native" else "0")
    k = tiledsl.jit(bare)
    a = launch_stubs.ndarray((32,), "float32")
    if warm != "reference":
        for _ in range(jitmod.NATIVE_AFTER + 2):     # kernel[grid, block] is a launch: it works, and warms up
            k[1, 32](a, 3)
        assert len(drv.launches) == jitmod.NATIVE_AFTER + 2 and drv.launches[-1][1:3] == ((1, 1, 1), (32, 1, 1))
    n = len(drv.launches)
    for _ in range(2):                                # the first call and a repeated one
        with pytest.raises(tiledsl.LaunchError) as ei:
            k(a, 3)
        _check(ei.value)
    assert len(drv.launches) == n, "a call without a launch configuration launched"


def test_interpreter_refuses_a_call_without_a_launch():
    k = tiledsl.jit(bare, interpret=True)
    a = np.zeros(32, np.float32)
    with pytest.raises(tiledsl.LaunchError) as ei:
        k(a, 3)
    _check(ei.value)
    assert (a == 0).all()
    k[1, 32](a, 3)                                    # with a launch it runs
    assert (a == 3).all()


def test_interpreter_env_switch_refuses_too(monkeypatch):
    monkeypatch.setenv("TILEDSL_INTERPRET", "1")
    with pytest.raises(tiledsl.LaunchError) as ei:
        tiledsl.jit(bare)(np.zeros(32, np.float32), 3)
    _check(ei.value)


def test_compile_without_a_launch_is_fine_and_the_signature_says_so():
    ck = tiledsl.jit(bare).compile(np.zeros(32, np.float32), 3, target="sm_90")
    assert ck.asm["ptx"] and ck.signature.launch_given is False
    assert KernelSignature.from_data(ck.signature.to_data()) == ck.signature
    ck2 = tiledsl.jit(with_entry).compile(np.zeros(32, np.float32), 3, target="sm_90")
    assert ck2.signature.launch_given is True


def test_a_kernel_with_its_own_launch_still_runs_plainly():
    a = np.zeros(32, np.float32)
    tiledsl.jit(with_entry, interpret=True)(a, 5)
    assert (a == 5).all()


def test_an_old_cache_entry_without_the_flag_is_not_a_signature():
    data = tiledsl.jit(bare).compile(np.zeros(32, np.float32), 3, target="sm_90").signature.to_data()
    del data["launch_given"]
    with pytest.raises(ValueError):
        KernelSignature.from_data(data)
