"""Arrays and scalars that are not what they look like, refused with the same LaunchError on every launch path
(issue 14): another byte order, a field of a structured array, object/datetime dtypes, numpy bools, floats out of
range for their parameter. Each failed before (a '>f4' array was read as float32, a field with 6-byte strides as
a contiguous array, 1e300 became inf in a float32 slot, `np.True_` was "must be a bool, got bool")."""
import numpy as np
import pytest

import tiledsl
from tiledsl import T
from test_launch_contract import PATHS, Path, _message, good, kern

import launch_stubs


def odd(path, shape, dtype="float32", byte_strides=None):
    """An array of `shape` on the path's side (host numpy for the interpreter, a fake device array otherwise) with
    a dtype spelled `dtype` (any numpy spelling) and optional byte strides."""
    d = np.dtype(dtype)
    if path.name == "interpreter":
        if byte_strides is not None:
            rec = np.zeros(shape, [("a", "i2"), ("b", d)])      # a packed record: field b has 6-byte strides
            return rec["b"]
        return np.zeros(shape, d)
    a = launch_stubs.ndarray(shape, d, strides=byte_strides)
    return a


def args_with(path, A=None, f=None):
    args = list(good(path.arr)[0])
    if A is not None:
        args[0] = A
    if f is not None:
        args[-1] = f
    return args


CASES = [
    ("big-endian float32", lambda p: args_with(p, A=odd(p, (2, 4), ">f4")),
     "argument 'A' has non-native byte order (dtype >f4)"),
    ("field of a packed record", lambda p: args_with(p, A=odd(p, (2, 4), byte_strides=(24, 6))),
     "argument 'A' has byte strides (24, 6) that are not multiples of its 4-byte element"),
    ("object dtype", lambda p: args_with(p, A=odd(p, (2, 4), object)),
     "argument 'A' has dtype object (an unsupported dtype), but the kernel declares float32"),
    ("datetime dtype", lambda p: args_with(p, A=odd(p, (2, 4), "M8[s]")),
     "argument 'A' has dtype datetime64[s] (an unsupported dtype)"),
    ("timedelta dtype", lambda p: args_with(p, A=odd(p, (2, 4), "m8[ms]")),
     "argument 'A' has dtype timedelta64[ms] (an unsupported dtype)"),
    ("complex dtype", lambda p: args_with(p, A=odd(p, (2, 4), "c8")),
     "argument 'A' has dtype complex64 (an unsupported dtype)"),
    ("float32 given 1e300", lambda p: args_with(p, f=1e300),
     "argument 'f' = 1e+300 is out of range for float32 (largest finite value 3.4028234663852886e+38)"),
    ("float32 given -1e39", lambda p: args_with(p, f=-1e39), "'f' = -1e+39 is out of range for float32"),
    ("float32 given a huge int", lambda p: args_with(p, f=10**400),
     "argument 'f' = an int of 1329 bits is out of range for float32"),
    ("numpy bool for a float", lambda p: args_with(p, f=np.True_),
     "argument 'f' is a bool (numpy.bool), but the kernel declares float32"),
    ("numpy float64 out of range for float32", lambda p: args_with(p, f=np.float64(1e40)),
     "out of range for float32"),
]


@pytest.mark.parametrize("name,make,phrase", CASES, ids=[c[0] for c in CASES])
def test_odd_arrays_and_scalars_give_one_error_on_every_path(name, make, phrase, monkeypatch):
    msgs = {}
    for p in PATHS:
        with monkeypatch.context() as mp:
            path = Path(p, mp)
            msgs[p] = _message(path, kern, lambda k, a: k(*make(path)))
    assert phrase in msgs["reference"], msgs
    assert all(m == msgs["reference"] for m in msgs.values()), msgs


def test_numpy_int_beyond_digit_limit_is_named_not_printed():
    """An int past Python's int->str digit limit must not turn the message itself into a ValueError."""
    k = tiledsl.jit(kern, interpret=True)
    a = np.zeros((2, 4), np.float32)
    with pytest.raises(tiledsl.LaunchError, match=r"'n' = an int of \d+ bits does not fit in int32"):
        k(a, a.copy(), 10**5000, 1, 1, 1, 1.0)


def test_extreme_but_representable_floats_are_accepted():
    """The largest finite float32 and values that round to it still launch; inf and NaN are passed as given."""
    k = tiledsl.jit(kern, interpret=True)
    for f in (3.4028234663852886e38, 3.4028235e38, float("inf"), -float("inf")):
        a, b = np.zeros((2, 4), np.float32), np.zeros((2, 4), np.float32)
        k(a, b, 0, 1, 1, 1, f)
        assert b[0, 0] == np.float32(f)
    a, b = np.zeros((2, 4), np.float32), np.zeros((2, 4), np.float32)
    k(a, b, 0, 1, 1, 1, float("nan"))
    assert np.isnan(b[0, 0])


def half_kernels():
    def h16(Out: T.Tensor((1,), "float16"), x: T.float16):
        T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
        Out[0] = x

    def hb16(Out: T.Tensor((1,), "bfloat16"), x: T.bfloat16):
        T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
        Out[0] = x
    return h16, hb16


def test_half_precision_parameters_refuse_overflow():
    h16, hb16 = half_kernels()
    k16 = tiledsl.jit(h16, interpret=True)
    out = np.zeros(1, np.float16)
    k16(out, 65504.0)
    assert out[0] == np.float16(65504)
    k16(out, 65519.0)                               # rounds down to 65504
    assert out[0] == np.float16(65504)
    with pytest.raises(tiledsl.LaunchError, match=r"'x' = 65520\.0 is out of range for float16 \(largest finite "
                                                  r"value 65504\.0\)"):
        k16(out, 65520.0)
    kb = tiledsl.jit(hb16, interpret=True)
    bits = np.zeros(1, np.uint16)                   # (numpy has no bfloat16: uint16 carries the bits)
    kb(bits, 3.3895313892515355e38)                 # bfloat16's largest finite value
    assert bits[0] == 0x7F7F
    with pytest.raises(tiledsl.LaunchError, match="out of range for bfloat16"):
        kb(bits, 3.4e38)


def bool_kernel(Out: T.Tensor((1,), "int32"), b: T.bool):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    if b:
        Out[0] = 7
    else:
        Out[0] = 3


def test_numpy_bool_is_a_bool():
    """Failed before: `argument 'b' must be a bool, got bool` for np.True_."""
    k = tiledsl.jit(bool_kernel, interpret=True)
    out = np.zeros(1, np.int32)
    k(out, np.True_)
    assert out[0] == 7
    k(out, np.False_)
    assert out[0] == 3
    with pytest.raises(tiledsl.LaunchError, match=r"argument 'b' must be a bool, got numpy.float64"):
        k(out, np.float64(1.0))


def test_numpy_bool_is_a_bool_on_the_gpu_reference_path(monkeypatch):
    drv = launch_stubs.install(monkeypatch)
    k = tiledsl.jit(bool_kernel)
    k(launch_stubs.ndarray((1,), "int32"), np.True_)
    assert len(drv.launches) == 1
    with pytest.raises(tiledsl.LaunchError, match=r"'b' must be a bool, got str"):
        k(launch_stubs.ndarray((1,), "int32"), "yes")


@pytest.mark.parametrize("path", ["reference", "interpreter"])
def test_read_only_output_is_refused(path, monkeypatch):
    """The kernel stores to B: a read-only B is refused by name; a read-only A (only read) is fine.
    (generated/native: their arrays are torch or cupy, which have no read-only arrays; an array interface that
    says read-only is framework 'cai', which always takes the reference path)"""
    p = Path(path, monkeypatch)

    def ro(a):
        if isinstance(a, np.ndarray):
            a.flags.writeable = False
        else:
            a.__cuda_array_interface__["data"] = (a.__cuda_array_interface__["data"][0], True)   # says read-only
        return a
    k = p.kernel(kern)
    args = list(good(p.arr)[0])
    args[1] = ro(args[1])
    with pytest.raises(tiledsl.LaunchError) as ei:
        k(*args)
    assert str(ei.value) == (f"argument 'B' is read-only ({'numpy' if path == 'interpreter' else 'cupy'} array "
                             f"with its writeable flag off), but the kernel stores to it; pass a writable array "
                             f"(e.g. a copy)")
    args = list(good(p.arr)[0])
    args[0] = ro(args[0])
    k(*args)


def test_written_flags_come_from_the_kernel():
    ck = tiledsl.jit(kern).compile(np.zeros((2, 4), np.float32), np.zeros((2, 4), np.float32), 1, 1, 1, 1, 1.0)
    assert [(q.name, q.written) for q in ck.signature.params][:2] == [("A", False), ("B", True)]
