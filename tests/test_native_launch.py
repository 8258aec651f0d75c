"""The native launcher (runtime/launchers/native.py) on the CPU: the driver's entry points are stubs that record what they
were given, and the arrays are plain Python objects (or CPU torch tensors) with the attributes the launcher reads.
"""
import ctypes
import threading

import pytest

from tiledsl.runtime.launchers import native

pytestmark = pytest.mark.skipif(not native.available(), reason="native launchers need CPython with a GIL")

LAUNCH_T = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, *[ctypes.c_uint] * 7, ctypes.c_void_p, ctypes.c_void_p,
                            ctypes.c_void_p)
CTX_T = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p)
MISSING = object()
F32, I32 = object(), object()      # stand-ins for dtype objects: the launcher compares identities


class Arr:
    def __init__(self, shape, dtype=F32, ptr=0x1000, contiguous=True, cuda=True):
        self.shape, self.dtype, self.ptr, self.contiguous, self.is_cuda = shape, dtype, ptr, contiguous, cuda

    def is_contiguous(self):
        return self.contiguous

    def data_ptr(self):
        return self.ptr

    def dim(self):                   # (torch's; the launcher reads a 1-D tensor's extent with dim() and numel())
        return len(self.shape)

    def numel(self):
        n = 1
        for s in self.shape:
            n *= s
        return n


class Driver:
    """Stub cuLaunchKernel / cuCtx*: records launches; `codes` are the results of the next launches."""

    def __init__(self, slots):
        self.slots, self.launches, self.codes, self.ctx_set = slots, [], [], []
        self._l = LAUNCH_T(self._launch)
        self._g = CTX_T(lambda p: 0)
        self._s = CTX_T(lambda c: self.ctx_set.append(c) or 0)
        self.addrs = {n: ctypes.cast(f, ctypes.c_void_p).value for n, f in
                      (("cuLaunchKernel", self._l), ("cuCtxGetCurrent", self._g), ("cuCtxSetCurrent", self._s))}

    def _launch(self, f, gx, gy, gz, bx, by, bz, shared, stream, params, extra):
        pp = ctypes.cast(params, ctypes.POINTER(ctypes.c_void_p))
        vals = []
        for k, ty in enumerate(self.slots):
            c = {"i64": ctypes.c_int64, "i32": ctypes.c_int32, "float": ctypes.c_float, "i16": ctypes.c_int16,
                 "i8": ctypes.c_int8, "double": ctypes.c_double}[ty]
            vals.append(c.from_address(pp[k]).value)
        self.launches.append({"f": f, "grid": (gx, gy, gz), "block": (bx, by, bz), "shared": shared,
                              "stream": stream, "params": vals})
        return self.codes.pop(0) if self.codes else 0


def make(args, slots, sizes=(), grid=(1, 1, 1), deps=(), multi=False):
    drv = Driver(slots)
    fn = lambda: None  # noqa: E731  (the kernel's Python function: its __code__ is checked)
    spec = {"framework": "torch", "device": 0, "multi": multi, "args": args, "slots": list(slots),
            "sizes": list(sizes), "block": (128, 1, 1), "shared": 4096, "handle": 0xF00, "ctx": 0xC0,
            "fn": fn, "code": fn.__code__, "deps": list(deps), "missing": MISSING, "array_type": Arr,
            "stream_fn": lambda dev: 0x5700 + dev, "grid": list(grid)}
    fallbacks = []

    def fallback(*a, **k):
        fallbacks.append((a, k))
        return "python path"

    def raiser(code):
        raise RuntimeError(f"driver error {code}")
    launcher, ir_text = native.build(spec, fallback, raiser, drv.addrs)
    return launcher, drv, fallbacks, ir_text


def four():
    return [(i, "tensor", (i, F32, (256,))) for i in range(4)], ["i64"] * 4


def test_launches_with_the_arrays_pointers_and_the_stream():
    args, slots = four()
    launch, drv, fb, _ = make(args, slots)
    xs = [Arr((256,), ptr=0x1000 * (i + 1)) for i in range(4)]
    assert launch(*xs) is None
    assert drv.launches == [{"f": 0xF00, "grid": (1, 1, 1), "block": (128, 1, 1), "shared": 4096, "stream": 0x5700,
                             "params": [0x1000, 0x2000, 0x3000, 0x4000]}]
    assert fb == []


@pytest.mark.parametrize("bad", [
    lambda: Arr((256,), dtype=I32), lambda: Arr((255,)), lambda: Arr((256, 1)), lambda: Arr((256,), contiguous=False),
    lambda: Arr((256,), cuda=False), lambda: object(), lambda: None,
])
def test_anything_unexpected_takes_the_python_path(bad):
    args, slots = four()
    launch, drv, fb, _ = make(args, slots)
    xs = [Arr((256,)) for _ in range(3)] + [bad()]
    assert launch(*xs) == "python path"
    assert drv.launches == [] and len(fb) == 1 and fb[0][1] == {}


def test_wrong_count_and_keywords_take_the_python_path():
    args, slots = four()
    launch, drv, fb, _ = make(args, slots)
    xs = [Arr((256,)) for _ in range(4)]
    assert launch(*xs[:3]) == "python path"
    assert launch(*xs, stream=7) == "python path"
    assert fb[-1] == (tuple(xs), {"stream": 7}) and drv.launches == []


def test_scalars_sizes_and_grid_expressions():
    args = [(0, "tensor", (0, F32, ("n",))), (1, "tensor", (1, F32, ("n",))), (2, "scalar", (2, "int32", "k")),
            (3, "scalar", (3, "float32", "alpha"))]
    slots = ["i64", "i64", "i32", "float", "i32"]
    grid = [("floordiv", ("add", ("var", "n"), 127), 128), ("mod", ("var", "k"), 3), 1]
    launch, drv, fb, _ = make(args, slots, sizes=[(4, "n")], grid=grid)
    a, b = Arr((1000,), ptr=0xA000), Arr((1000,), ptr=0xB000)
    assert launch(a, b, 5, 0.5) is None
    assert drv.launches[-1]["params"] == [0xA000, 0xB000, 5, 0.5, 1000]
    assert drv.launches[-1]["grid"] == (8, 2, 1)
    assert launch(a, b, 7, 2) is None                    # an int for a float parameter
    assert drv.launches[-1]["params"][3] == 2.0 and drv.launches[-1]["grid"] == (8, 1, 1)
    n = len(drv.launches)
    for bad in [(a, Arr((999,)), 5, 0.5),               # n disagrees between the arrays
                (a, b, 2**31, 0.5), (a, b, True, 0.5),   # out of int32, a bool
                (a, b, 5, "x"), (a, b, 3, 0.5)]:         # not a number; grid y = 3 % 3 = 0
        assert launch(*bad) == "python path"
    assert len(drv.launches) == n and len(fb) == 5


def test_python_floor_semantics_and_overflow_in_grids():
    args = [(0, "scalar", (0, "int64", "k"))]
    grid = [("add", ("floordiv", ("var", "k"), 4), 10), ("add", ("mod", ("var", "k"), 4), 1),
            ("mul", ("var", "k"), ("var", "k"))]
    launch, drv, fb, _ = make(args, ["i64"], grid=grid)
    assert launch(-5) is None                            # -5 // 4 = -2, -5 % 4 = 3, as in Python
    assert fb == [] and drv.launches[-1]["grid"] == (8, 4, 25)
    assert launch(2**40) == "python path"                # k*k overflows int64: Python decides


def test_driver_errors_raise_and_a_missing_context_is_set_once():
    args, slots = four()
    launch, drv, fb, _ = make(args, slots)
    xs = [Arr((256,)) for _ in range(4)]
    drv.codes = [201, 0]
    assert launch(*xs) is None
    assert drv.ctx_set == [0xC0] and len(drv.launches) == 2
    drv.codes = [700]
    with pytest.raises(RuntimeError, match="driver error 700"):
        launch(*xs)


def test_changed_globals_take_the_python_path():
    g = {"N": 256}
    args, slots = four()
    launch, drv, fb, _ = make(args, slots, deps=[(g, "N", g["N"]), (g, "GONE", MISSING)])
    xs = [Arr((256,)) for _ in range(4)]
    assert launch(*xs) is None
    g["GONE"] = 1
    assert launch(*xs) == "python path"
    del g["GONE"]
    g["N"] = 512
    assert launch(*xs) == "python path"
    assert len(drv.launches) == 1


def test_threads_launch_without_mixing_arguments():
    args, slots = four()
    launch, drv, fb, _ = make(args, slots)
    per = {t: [Arr((256,), ptr=(t + 1) * 0x10000 + i) for i in range(4)] for t in range(8)}

    def work(t):
        for _ in range(200):
            launch(*per[t])
    th = [threading.Thread(target=work, args=(t,)) for t in range(8)]
    [x.start() for x in th]
    [x.join() for x in th]
    assert len(drv.launches) == 1600
    for rec in drv.launches:
        base = rec["params"][0] & ~0xF
        assert rec["params"] == [base + i for i in range(4)]


def test_torch_tensors_through_their_c_getters():
    torch = pytest.importorskip("torch")
    assert native.direct(torch.Tensor, "data_ptr") is not None
    assert native.direct(torch.Tensor, "dtype")[0] == "get"
    args = [(i, "tensor", (i, torch.float32, (16,))) for i in range(2)]
    drv = Driver(["i64", "i64"])
    fn = lambda: None  # noqa: E731
    spec = {"framework": "torch", "device": -1, "multi": True, "args": args, "slots": ["i64", "i64"], "sizes": [],
            "block": (32, 1, 1), "shared": 0, "handle": 1, "ctx": 2, "fn": fn, "code": fn.__code__, "deps": [],
            "missing": MISSING, "array_type": torch.Tensor, "stream_fn": lambda d: 0, "grid": [1, 1, 1]}
    fb = []
    launch, _ = native.build(spec, lambda *a, **k: fb.append(a), None, drv.addrs)
    x, y = torch.zeros(16), torch.ones(16)               # CPU tensors: get_device() is -1, the spec's device
    launch(x, y)
    assert drv.launches[-1]["params"] == [x.data_ptr(), y.data_ptr()]
    launch(x, torch.zeros(32)[::2])
    launch(x, torch.zeros(16, dtype=torch.float64))
    assert len(fb) == 2 and len(drv.launches) == 1
    spec["also_types"] = [torch.nn.Parameter]            # weights: Parameters launch natively too
    launch2, _ = native.build(spec, lambda *a, **k: fb.append(a), None, drv.addrs)
    w = torch.nn.Parameter(torch.ones(16))
    launch2(x, w)
    assert drv.launches[-1]["params"] == [x.data_ptr(), w.data_ptr()] and len(fb) == 2


def test_many_launchers_share_one_engine():
    """Launchers are modules of one process-wide engine: adding one keeps the earlier ones working."""
    args, slots = four()
    built = [make(args, slots) for _ in range(20)]
    xs = [Arr((256,), ptr=0x1000 * (i + 1)) for i in range(4)]
    for launch, drv, fb, _ in built:
        assert launch(*xs) is None and drv.launches[-1]["params"] == [0x1000, 0x2000, 0x3000, 0x4000]
    assert len(native._jit) and native._jit["n"] >= 20
