"""One launch contract: the same bad calls through every launch path give the same LaunchError text.

Paths: the reference launcher (a specialization's first call), the generated Python launcher and the native one
(each warmed into its steady state with good calls first, then fed the bad call), and the interpreter. The GPU
paths run on a stub driver with fake cupy device arrays (tests/launch_stubs.py), so no GPU is needed.
"""
import json

import numpy as np
import pytest

import tiledsl
from tiledsl import T
from tiledsl.abi.signature import KernelSignature
from tiledsl.runtime import jit as jitmod
from tiledsl.runtime.launchers import native, native_ir

import launch_stubs


def kern(A: T.Tensor(("M", 4), "float32"), B: T.Tensor(("M", 4), "float32"), n: T.int32, u64: T.uint64,
         u32: T.uint32, i64: T.int64, f: T.float32):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=M, block=32))  # noqa: F821 - M is the named size
    B[0, 0] = A[0, 0] + T.cast(n, "float32") + f


def kern_cx(A: T.Tensor((4,), "float32"), c: T.constexpr):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    A[0] = 1.0


PATHS = ["reference", "generated", "native", "interpreter"]


def good(arr):
    return (arr((2, 4)), arr((2, 4)), 1, 1, 1, 1, 1.0), {}


def huge(arr):
    return arr((2**31, 4), huge=True)


def noncontig(arr):
    return arr((2, 4), transposed=True)


# (name, call, expected phrase); call(k, arr) performs the bad call on kernel `k` with the path's arrays
def _call(args, kw=None):
    return lambda k, arr: k(*args(arr), **(kw or {}))


CASES = [
    ("too many arguments", lambda k, a: k(*good(a)[0], 5), "takes 7 arguments, got 8"),
    ("unexpected keyword", lambda k, a: k(*good(a)[0], zz=1), "got an unexpected argument 'zz'"),
    ("two values for one argument", lambda k, a: k(a((2, 4)), A=a((2, 4))), "got two values for argument 'A'"),
    ("missing argument", lambda k, a: k(*good(a)[0][:-1]), "is missing argument 'f'"),
    ("missing keyword argument", lambda k, a: k(*good(a)[0][:2], n=1, u64=1, u32=1, i64=1), "missing argument 'f'"),
    ("not an array", lambda k, a: k(3, *good(a)[0][1:]), "'A' must be an array"),
    ("wrong dtype", lambda k, a: k(a((2, 4), "float16"), *good(a)[0][1:]), "has dtype float16"),
    ("wrong ndim", lambda k, a: k(a((8,)), *good(a)[0][1:]), "(2 dimensions)"),
    ("wrong static extent", lambda k, a: k(a((2, 5)), a((2, 5)), *good(a)[0][2:]), "dimension 1: 5 != 4"),
    ("named sizes disagree", lambda k, a: k(a((2, 4)), a((3, 4)), *good(a)[0][2:]), "size 'M' is 2"),
    ("named size beyond int32", lambda k, a: k(huge(a), huge(a), *good(a)[0][2:]), "does not fit in int32"),
    ("not contiguous", lambda k, a: k(noncontig(a), *good(a)[0][1:]), "is not contiguous (strides (1, 2))"),
    ("grid evaluates to 0", lambda k, a: k(a((0, 4)), a((0, 4)), *good(a)[0][2:]), "evaluates to 0"),
    ("bool for an int", lambda k, a: k(*good(a)[0][:2], True, 1, 1, 1, 1.0), "'n' is a bool"),
    ("float for an int", lambda k, a: k(*good(a)[0][:2], 1.5, 1, 1, 1, 1.0), "must be an integer (int32)"),
    ("int32 out of range", lambda k, a: k(*good(a)[0][:2], 2**31, 1, 1, 1, 1.0), "does not fit in int32"),
    # (int8/int16 scalar parameters are refused at compile time, so their range has no launch to reach)
    ("uint64 negative", lambda k, a: k(*good(a)[0][:2], 1, -1, 1, 1, 1.0), "'u64' = -1 does not fit in uint64"),
    ("uint64 out of range", lambda k, a: k(*good(a)[0][:2], 1, 2**64, 1, 1, 1.0), "does not fit in uint64"),
    ("uint32 negative", lambda k, a: k(*good(a)[0][:2], 1, 1, -1, 1, 1.0), "'u32' = -1 does not fit in uint32"),
    ("int64 out of range", lambda k, a: k(*good(a)[0][:2], 1, 1, 1, 2**63, 1.0), "does not fit in int64"),
    ("non-number for a float", lambda k, a: k(*good(a)[0][:-1], "x"), "'f' must be a number (float32)"),
    ("bool for a float", lambda k, a: k(*good(a)[0][:-1], True), "'f' is a bool"),
    ("grid beyond the limits", lambda k, a: k[(2**31, 1, 1), 32](*good(a)[0]), "(2^31-1, 65535, 65535)"),
    ("grid y beyond the limits", lambda k, a: k[(1, 65536), 32](*good(a)[0]), "exceeds the device's limits"),
    ("block beyond the limits", lambda k, a: k[1, 2048](*good(a)[0]), "CUDA allows at most 1024"),
    ("block z beyond the limits", lambda k, a: k[1, (1, 1, 65)](*good(a)[0]), "(and z <= 64)"),
    ("zero grid", lambda k, a: k[0, 32](*good(a)[0]), "must be positive, got 0"),
    ("negative block", lambda k, a: k[1, -4](*good(a)[0]), "must be positive, got -4"),
    ("bad grid type", lambda k, a: k[1.5, 32](*good(a)[0]), "take an int or a tuple of up to 3 ints"),
    ("four-dimensional block", lambda k, a: k[1, (1, 1, 1, 1)](*good(a)[0]), "up to 3 ints"),
    ("not grid and block", lambda k, a: k[1](*good(a)[0]), "launch with kernel[grid, block](*args)"),
]


class Path:
    """One launch path: how its arrays are made and a kernel warmed into that path's state."""

    def __init__(self, name, monkeypatch):
        self.name = name
        self.drv = None
        if name == "interpreter":
            return
        if name == "native" and not native.available():
            pytest.skip("native launchers need CPython with a GIL")
        self.drv = launch_stubs.install(monkeypatch)
        monkeypatch.setenv("TILEDSL_NATIVE_LAUNCH", "0" if name == "generated" else "1")

    def arr(self, shape, dtype="float32", device=0, huge=False, transposed=False):
        if self.name == "interpreter":
            if huge:
                return np.lib.stride_tricks.as_strided(np.zeros(1, dtype), shape=shape, strides=(0, 0))
            if transposed:
                return np.zeros(shape[::-1], dtype).T
            return np.zeros(shape, dtype)
        itemsize = np.dtype(dtype).itemsize
        strides = (itemsize, shape[0] * itemsize) if transposed else None
        return launch_stubs.ndarray(shape, dtype, device=device, strides=strides)

    def kernel(self, fn):
        k = tiledsl.jit(fn, interpret=self.name == "interpreter")
        if self.name in ("generated", "native"):
            args = good(self.arr)[0] if fn is kern else (self.arr((4,)), 3)
            for _ in range(jitmod.NATIVE_AFTER + 1):
                k(*args)
            assert k._steady, "the good calls left a generated steady launcher"
            native_now = type(k._call).__name__ == "builtin_function_or_method"
            assert native_now == (self.name == "native" and fn is kern), (self.name, k.native_unsupported)
        return k


def _message(path, fn, call):
    k = path.kernel(fn)
    n = len(path.drv.launches) if path.drv else 0
    with pytest.raises(tiledsl.LaunchError) as ei:
        call(k, path.arr)
    if path.drv:
        assert len(path.drv.launches) == n, "a bad call launched"
    return str(ei.value)


@pytest.mark.parametrize("name,call,phrase", CASES, ids=[c[0] for c in CASES])
def test_the_same_bad_call_gives_the_same_error_on_every_path(name, call, phrase, monkeypatch):
    msgs = {}
    for p in PATHS:
        with monkeypatch.context() as mp:
            msgs[p] = _message(Path(p, mp), kern, call)
    assert phrase in msgs["reference"], msgs
    assert all(m == msgs["reference"] for m in msgs.values()), msgs


@pytest.mark.parametrize("path", PATHS)
def test_constexpr_that_cannot_be_fingerprinted(path, monkeypatch):
    # (a kernel with constexprs keeps the generated launcher: the native one covers tensor and scalar
    # parameters only, so on the "native" path this is the generated launcher's state)
    msg = _message(Path(path, monkeypatch), kern_cx, lambda k, a: k(a((4,)), object()))
    assert msg == ("constexpr argument 'c' must be an int, float, bool, str, dtype, layout or tuple of those, "
                   "got object")


# Cases that cannot apply to every path, with the reason.
GPU_PATHS = ["reference", "generated", "native"]


@pytest.mark.parametrize("path", GPU_PATHS)
def test_host_array_on_a_gpu_path(path, monkeypatch):
    """(the interpreter runs on host arrays: there this call is good)"""
    p = Path(path, monkeypatch)
    msg = _message(p, kern, lambda k, a: k(np.zeros((2, 4), np.float32), *good(a)[0][1:]))
    assert msg.startswith("argument 'A' is in host memory (numpy); launching on the GPU needs a CUDA array")


@pytest.mark.parametrize("path", ["reference", "generated"])
def test_arrays_on_two_devices(path, monkeypatch):
    """(host arrays have no device: the interpreter has nothing to compare; the native launcher exists only in
    one-device processes, where a second device's array cannot be made, and with several devices it is not
    built: there the generated launcher is the steady path, tested here)"""
    msg = _message(Path(path, monkeypatch), kern, lambda k, a: k(a((2, 4)), a((2, 4), device=1), *good(a)[0][2:]))
    assert msg == ("argument 'B' is on device 1 but earlier arguments are on device 0; all arrays must be on one "
                   "device")


def test_device_array_on_the_interpreter():
    """(the GPU paths take device arrays: there this call is good)"""
    k = tiledsl.jit(kern, interpret=True)
    with pytest.raises(tiledsl.LaunchError) as ei:
        k(launch_stubs.ndarray((2, 4)), np.zeros((2, 4), np.float32), 1, 1, 1, 1, 1.0)
    assert str(ei.value) == ("argument 'A' is a CUDA array; the interpreter runs on host memory (numpy arrays or "
                             "CPU torch tensors)")


def test_torch_tensors_whose_memory_is_not_their_values_are_refused():
    """A sparse tensor (no data pointer), a lazy negation view (torch applies the sign on read), a meta tensor on
    the interpreter (no data): LaunchError naming the argument, not torch's own error from deep inside."""
    torch = pytest.importorskip("torch")
    k = tiledsl.jit(kern, interpret=True)
    rest = (1, 1, 1, 1, 1.0)
    cases = [(torch.zeros(2, 4).to_sparse(), "argument 'A' has layout torch.sparse_coo; kernels take dense"),
             (torch._neg_view(torch.ones(2, 4)), "argument 'A' is a lazy negated or conjugated view"),
             (torch.zeros(2, 4, device="meta"), "argument 'A' is on the meta device; the interpreter runs on CPU")]
    for a, message in cases:
        with pytest.raises(tiledsl.LaunchError, match=message):
            k(a, torch.zeros(2, 4), *rest)


def test_every_path_launches_the_good_call(monkeypatch):
    for name in ("reference", "generated", "native"):
        with monkeypatch.context() as mp:
            p = Path(name, mp)
            k = p.kernel(kern)
            k(*good(p.arr)[0])
            how = {"native": "native"}.get(name, "python")
            assert p.drv.launches[-1] == (how, (2, 1, 1), (32, 1, 1), 0)
    a, b = np.ones((2, 4), np.float32), np.zeros((2, 4), np.float32)
    tiledsl.jit(kern, interpret=True)(a, b, 2, 1, 1, 1, 0.5)
    assert b[0, 0] == 3.5


def test_native_layout_self_test_failure_keeps_the_generated_launcher(monkeypatch):
    """When the self-test cannot prove CPython's layouts, no native code reads them: the generated launcher
    stays, and the kernel says why."""
    if not native.available():
        pytest.skip("native launchers need CPython with a GIL")
    drv = launch_stubs.install(monkeypatch)
    monkeypatch.setenv("TILEDSL_NATIVE_LAUNCH", "1")
    monkeypatch.setattr(native_ir, "_layout", {})
    monkeypatch.setattr(native_ir, "_probe_layout", lambda: "ob_type is not at offset 8 (forced by the test)")
    k = tiledsl.jit(kern)
    p = Path.__new__(Path)
    p.name = "generated"
    args = good(p.arr)[0]
    for _ in range(jitmod.NATIVE_AFTER + 3):
        k(*args)
        k[2, 32](*args)
    assert type(k._call).__name__ != "builtin_function_or_method"
    assert type(k[2, 32]).__name__ != "builtin_function_or_method"
    assert k.native_unsupported == "ob_type is not at offset 8 (forced by the test)"
    assert {x[0] for x in drv.launches} == {"python"}
    assert native_ir.direct(str, "upper") is None         # nothing reads a descriptor record either


def test_layout_self_test_passes_here():
    if not native.available():
        pytest.skip("native launchers need CPython with a GIL")
    assert native_ir._probe_layout() is None


def test_signature_round_trips_through_the_disk_format():
    ck = tiledsl.jit(kern).compile(np.zeros((5, 4), np.float32), np.zeros((5, 4), np.float32), 1, 1, 1, 1, 1.0)
    sig = ck.signature
    assert [s.name for s in sig.slots] == ["A", "B", "n", "u64", "u32", "i64", "f", "M"]
    assert [s.ctype for s in sig.slots] == ["uint64", "uint64", "int32", "uint64", "uint32", "int64", "float32",
                                            "int32"]
    assert sig.grid == (("var", "M"), 1, 1) and sig.block == (32, 1, 1)
    assert KernelSignature.from_data(json.loads(json.dumps(sig.to_data()))) == sig


def fma1(A: T.Tensor((32,), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    i = T.cuda.thread_id(0)
    A[i] = A[i] * 2.0


def test_compile_uses_the_kernels_own_target():
    """Failed before: jit(target="sm_80")(f).compile(a) compiled for sm_90 (compile's default won)."""
    a = np.zeros(32, np.float32)
    assert tiledsl.jit(target="sm_80")(fma1).compile(a).sm == 80
    assert ".target sm_80" in tiledsl.jit(target="sm_80")(fma1).compile(a).asm["ptx"]
    assert tiledsl.jit(target="sm_80")(fma1).compile(a, target="sm_86").sm == 86
    assert tiledsl.jit(fma1).compile(a).sm == 90
