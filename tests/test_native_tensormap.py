"""The native launcher (runtime/launchers/native.py) for T.TensorMap parameters and clustered launches, on the CPU:
stub driver entry points record what they were given (the 128 bytes of each map slot; the CUlaunchConfig and its
cluster attribute), with hand-made specs and through the JIT on tests/launch_stubs.py's driver and fake cupy."""
import ctypes
import struct
import threading

import numpy as np
import pytest

import tiledsl
from tiledsl.runtime import tensormap
from tiledsl.runtime.launchers import native

pytestmark = pytest.mark.skipif(not native.available(), reason="native launchers need CPython with a GIL")

LAUNCH_T = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, *[ctypes.c_uint] * 7, ctypes.c_void_p, ctypes.c_void_p,
                            ctypes.c_void_p)
LAUNCH_EX_T = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)
CTX_T = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p)
MISSING = object()
F16 = object()


class Attr(ctypes.Structure):
    """CUlaunchAttribute as cuda.h declares it: the id, padding to 8 bytes, a 64-byte value union."""
    _fields_ = [("id", ctypes.c_uint32), ("pad", ctypes.c_uint32), ("x", ctypes.c_uint32), ("y", ctypes.c_uint32),
                ("z", ctypes.c_uint32), ("rest", ctypes.c_uint8 * 52)]


class Config(ctypes.Structure):
    """CUlaunchConfig as cuda.h declares it."""
    _fields_ = [("gridDimX", ctypes.c_uint), ("gridDimY", ctypes.c_uint), ("gridDimZ", ctypes.c_uint),
                ("blockDimX", ctypes.c_uint), ("blockDimY", ctypes.c_uint), ("blockDimZ", ctypes.c_uint),
                ("sharedMemBytes", ctypes.c_uint), ("hStream", ctypes.c_void_p),
                ("attrs", ctypes.POINTER(Attr)), ("numAttrs", ctypes.c_uint)]


def read_params(params, slots):
    pp = ctypes.cast(params, ctypes.POINTER(ctypes.c_void_p))
    out = []
    for k, ty in enumerate(slots):
        if ty == "map":
            assert pp[k] % 64 == 0                      # the kernel's .param .align 64
            out.append(ctypes.string_at(pp[k], 128))
        else:
            out.append({"i64": ctypes.c_int64, "i32": ctypes.c_int32}[ty].from_address(pp[k]).value)
    return out


class Driver:
    """Stub cuLaunchKernel / cuLaunchKernelEx: record the parameters (map slots as their 128 bytes)."""

    def __init__(self, slots):
        self.slots, self.launches = slots, []
        self._l = LAUNCH_T(self._launch)
        self._x = LAUNCH_EX_T(self._launch_ex)
        self._c = CTX_T(lambda p: 0)
        self.addrs = {n: ctypes.cast(f, ctypes.c_void_p).value for n, f in
                      (("cuLaunchKernel", self._l), ("cuLaunchKernelEx", self._x), ("cuCtxGetCurrent", self._c),
                       ("cuCtxSetCurrent", self._c))}

    def _launch(self, f, gx, gy, gz, bx, by, bz, shared, stream, params, extra):
        self.launches.append({"grid": (gx, gy, gz), "params": read_params(params, self.slots)})
        return 0

    def _launch_ex(self, cfg, f, params, extra):
        c = Config.from_address(cfg)
        attrs = [bytes(c.attrs[k]) for k in range(c.numAttrs)]
        self.launches.append({"grid": (c.gridDimX, c.gridDimY, c.gridDimZ),
                              "block": (c.blockDimX, c.blockDimY, c.blockDimZ), "shared": c.sharedMemBytes,
                              "stream": c.hStream, "attrs": attrs, "f": f, "params": read_params(params, self.slots)})
        return 0


class Arr:
    def __init__(self, shape, ptr, dtype=F16):
        self.shape, self.ptr, self.dtype, self.is_cuda = shape, ptr, dtype, True

    def is_contiguous(self):
        return True

    def data_ptr(self):
        return self.ptr

    def dim(self):                  # (a 1-D tensor's extent is read with dim() and numel())
        return len(self.shape)

    def numel(self):
        return int(np.prod(self.shape))


class Map:
    """A stand-in TensorMapType: what MapMemo needs (the cache-key tail)."""
    def key(self):
        return ("float16", (16, 32), 64, "zero", None)


def fake_bytes(ptr, shape):
    return struct.pack("<16Q", ptr, *shape, *[0xAB] * (14 - len(shape)), 0xCD)


def make_maps(cluster=None):
    """A launcher for (A: map (M, N), B: map (M, N), out: tensor (M, N)) with hand-made memos."""
    tensormap.clear()
    m = Map()
    memos = [native.MapMemo(m, 0, 2), native.MapMemo(m, 0, 2)]
    args = [(0, "tensormap", (0, F16, ("M", "N"), memos[0].native)),
            (1, "tensormap", (1, F16, ("M", "N"), memos[1].native)), (2, "tensor", (2, F16, ("M", "N")))]
    slots = ["map", "map", "i64", "i32", "i32"]
    drv = Driver(slots)
    fn = lambda: None  # noqa: E731
    spec = {"framework": "torch", "device": 0, "multi": False, "args": args, "slots": slots,
            "sizes": [(3, "M"), (4, "N")], "block": (32, 1, 1), "shared": 0, "handle": 0xF00, "ctx": 0xC0,
            "fn": fn, "code": fn.__code__, "deps": [], "missing": MISSING, "array_type": Arr,
            "stream_fn": lambda dev: 0x57, "grid": [4, 4, 1], "maps": [(0, memos[0]), (1, memos[1])]}
    if cluster:
        attr = native.cluster_attribute(cluster)
        spec.update(cluster=cluster, cluster_attr_buf=attr, cluster_attr=ctypes.addressof(attr))
    fb = []

    def fallback(*a, **k):                 # the Python path: checks, encodes into the cache, launches
        fb.append(a)
        if not all(isinstance(x, Arr) and x.dtype is F16 and x.shape == a[2].shape for x in a):
            raise ValueError("refused")   # (the checker's LaunchError)
        for x in a[:2]:
            tensormap._cache[(0, x.ptr, tuple(x.shape), m.key())] = fake_bytes(x.ptr, x.shape)
        return "python path"
    launch, _ = native.build(spec, fallback, None, drv.addrs)
    return launch, drv, fb, memos


def test_memo_is_aligned_and_misses_until_refreshed():
    m = native.MapMemo(Map(), 0, 3)
    assert m.addr % 64 == 0 and m.stride % 64 == 0 and m.key() == (0, (-1, -1, -1))
    assert not m.refresh(0x1000, (2, 3, 4))
    tensormap.clear()
    tensormap._cache[(0, 0x1000, (2, 3, 4), Map().key())] = b"\x11" * 128
    assert m.refresh(0x1000, (2, 3, 4))
    assert m.key() == (0x1000, (2, 3, 4)) and m.map_bytes() == b"\x11" * 128
    assert ctypes.string_at(m.addr, 128) == b"\x11" * 128
    tensormap.clear()


def test_a_map_misses_once_per_tensor_then_launches_natively_with_its_bytes():
    launch, drv, fb, memos = make_maps()
    a, b, out = Arr((50, 120), 0x10000), Arr((50, 120), 0x20000), Arr((50, 120), 0x30000)
    assert launch(a, b, out) == "python path" and len(fb) == 1 and drv.launches == []
    assert memos[0].key() == (0x10000, (50, 120))          # refreshed after the Python path
    for _ in range(3):
        assert launch(a, b, out) is None
    assert len(fb) == 1 and len(drv.launches) == 3
    assert drv.launches[-1]["params"] == [fake_bytes(0x10000, (50, 120)), fake_bytes(0x20000, (50, 120)), 0x30000,
                                          50, 120]
    b2 = Arr((50, 120), 0x40000)                           # a new data pointer: one miss, then hits
    assert launch(a, b2, out) == "python path" and len(fb) == 2
    assert launch(a, b2, out) is None and len(fb) == 2
    assert drv.launches[-1]["params"][1] == fake_bytes(0x40000, (50, 120))
    a3, b3, o3 = Arr((60, 120), 0x10000), Arr((60, 120), 0x40000), Arr((60, 120), 0x30000)
    assert launch(a3, b3, o3) == "python path"             # same pointers, new extents: the map differs
    assert launch(a3, b3, o3) is None and drv.launches[-1]["params"][0] == fake_bytes(0x10000, (60, 120))
    tensormap.clear()


def test_double_buffers_alternate_without_misses_and_a_fifth_tensor_evicts_round_robin():
    launch, drv, fb, memos = make_maps()
    a, out = Arr((50, 120), 0x10000), Arr((50, 120), 0x30000)
    bs = [Arr((50, 120), 0x100000 * (k + 1)) for k in range(5)]
    launch(a, bs[0], out)
    launch(a, bs[1], out)
    assert len(fb) == 2
    for k in range(6):                                   # ping-pong: both are entries now
        assert launch(a, bs[k % 2], out) is None
        assert drv.launches[-1]["params"][1] == fake_bytes(bs[k % 2].ptr, (50, 120))
    assert len(fb) == 2
    for b in bs[2:]:                                      # the 5th distinct tensor replaces the oldest entry
        launch(a, b, out)
    assert len(fb) == 5 and {memos[1].key(w)[0] for w in range(4)} == {b.ptr for b in bs[1:]}
    assert launch(a, bs[0], out) == "python path"
    tensormap.clear()


def test_threads_refreshing_memos_never_launch_another_tensors_map():
    launch, drv, fb, memos = make_maps()
    per = {t: (Arr((50, 120), 0x1000000 * (t + 1)), Arr((50, 120), 0x1000000 * (t + 1) + 0x10000),
               Arr((50, 120), 0x1000000 * (t + 1) + 0x20000)) for t in range(8)}

    def work(t):
        for _ in range(300):
            launch(*per[t])
    th = [threading.Thread(target=work, args=(t,)) for t in range(8)]
    [x.start() for x in th]
    [x.join() for x in th]
    assert len(drv.launches) + len(fb) == 2400 and drv.launches
    owner = {v[2].ptr: v for v in per.values()}
    for rec in drv.launches:
        a, b, out = owner[rec["params"][2]]
        assert rec["params"][:2] == [fake_bytes(a.ptr, (50, 120)), fake_bytes(b.ptr, (50, 120))]
    tensormap.clear()


def test_maps_and_a_cluster_together():
    launch, drv, fb, memos = make_maps(cluster=(2, 2, 1))
    a, b, out = Arr((50, 120), 0x10000), Arr((50, 120), 0x20000), Arr((50, 120), 0x30000)
    assert launch(a, b, out) == "python path"
    assert launch(a, b, out) is None and len(fb) == 1
    rec = drv.launches[-1]
    assert rec["grid"] == (4, 4, 1) and rec["attrs"] == [bytes(native.cluster_attribute((2, 2, 1)))]
    assert rec["params"] == [fake_bytes(0x10000, (50, 120)), fake_bytes(0x20000, (50, 120)), 0x30000, 50, 120]
    tensormap.clear()


def test_a_bad_map_argument_takes_the_python_path_without_touching_the_memo():
    launch, drv, fb, memos = make_maps()
    a, b, out = Arr((50, 120), 0x10000), Arr((50, 120), 0x20000), Arr((50, 120), 0x30000)
    launch(a, b, out)
    before = memos[0].map_bytes()
    n = len(drv.launches)
    for bad in (Arr((50, 120), 0x10000, dtype=object()), Arr((50, 121), 0x10000), Arr((50,), 0x10000), None):
        with pytest.raises(ValueError, match="refused"):
            launch(bad, b, out)
    assert len(drv.launches) == n and memos[0].map_bytes() == before
    tensormap.clear()


def test_cluster_attribute_bytes():
    raw = bytes(native.cluster_attribute((2, 3, 1)))
    assert len(raw) == 72 and ctypes.sizeof(Attr) == 72 and ctypes.sizeof(Config) == 56
    a = Attr.from_buffer_copy(raw)
    assert (a.id, a.x, a.y, a.z) == (4, 2, 3, 1) and not any(a.rest) and a.pad == 0


def make_cluster(grid):
    slots = ["i64", "i32"]
    drv = Driver(slots)
    attr = native.cluster_attribute((2, 1, 1))
    fn = lambda: None  # noqa: E731
    spec = {"framework": "torch", "device": 0, "multi": False, "slots": slots, "sizes": [(1, "n")],
            "args": [(0, "tensor", (0, F16, ("n",)))], "block": (64, 1, 1), "shared": 256, "handle": 0xF00,
            "ctx": 0xC0, "fn": fn, "code": fn.__code__, "deps": [], "missing": MISSING, "array_type": Arr,
            "stream_fn": lambda dev: 0x57, "grid": grid, "cluster": (2, 1, 1), "cluster_attr_buf": attr,
            "cluster_attr": ctypes.addressof(attr)}
    fb = []
    launch, text = native.build(spec, lambda *a, **k: fb.append(a) or "python path", None, drv.addrs)
    return launch, drv, fb, text


def test_a_clustered_launch_goes_through_cuLaunchKernelEx_with_the_attribute():
    launch, drv, fb, text = make_cluster([("floordiv", ("var", "n"), 64), 1, 1])
    x = Arr((256,), 0x9000)
    assert launch(x) is None and fb == []
    rec = drv.launches[-1]
    assert rec["grid"] == (4, 1, 1) and rec["block"] == (64, 1, 1) and rec["shared"] == 256
    assert rec["stream"] == 0x57 and rec["f"] == 0xF00 and rec["params"] == [0x9000, 256]
    assert rec["attrs"] == [bytes(native.cluster_attribute((2, 1, 1)))]
    assert launch(Arr((192,), 0x9000)) == "python path"    # 3 blocks: not a whole number of clusters
    assert len(drv.launches) == 1 and len(fb) == 1


# -- through the JIT: the stub driver of tests/launch_stubs.py and tests/test_tma.py's stub encoder

def _jit_setup(monkeypatch, tmp_path):
    from test_tma import stub_setup
    return stub_setup(monkeypatch, tmp_path)


def _native_recorder(drv, monkeypatch, slots):
    """Point the native entry points of `drv` at a Driver that reads the parameter block."""
    rec = Driver(slots)
    monkeypatch.setattr(native, "driver_addresses", lambda: rec.addrs)
    return rec


def test_jit_two_map_kernel_launches_natively_with_the_reference_bytes(monkeypatch, tmp_path):
    import launch_stubs
    from test_tma import copy_kernel, reference_bytes
    from tiledsl.runtime.launchers import reference
    drv, calls = _jit_setup(monkeypatch, tmp_path)
    packed = []
    real = reference.launch
    monkeypatch.setattr(reference, "launch", lambda plan, values, *a: (real(plan, values, *a), packed.append(
        [bytes(s) if isinstance(s, reference.TensorMapSlot) else None for s in plan.slots])))
    k, pshape = copy_kernel(2, (16, 32), "float16", 64, grid=(4, 4, 1))
    rec = _native_recorder(drv, monkeypatch, ["map", "map", "i64", "i32", "i32"])
    a = launch_stubs.ndarray((50, 120), "float16", ptr=0x7F0000010000)
    b = launch_stubs.ndarray((50, 120), "float16", ptr=0x7F0000020000)
    out = launch_stubs.ndarray(pshape, "float16", ptr=0x7F0000030000)
    for _ in range(6):
        k(a, b, out)
    assert k.native_unsupported is None
    assert type(k._call).__name__ == "builtin_function_or_method"
    # calls 1-3 take the Python launchers (the native one is built after the third); the 4th meets an empty memo
    # (one miss per launcher and tensor), the 5th and 6th launch natively
    assert len(rec.launches) == 2
    assert [c["globalAddress"] for c in calls] == [0x7F0000010000, 0x7F0000020000]     # encoded once each
    ref_maps = packed[0][:2]
    assert rec.launches[-1]["params"][:2] == ref_maps == [reference_bytes(calls[0]), reference_bytes(calls[1])]
    assert rec.launches[-1]["params"][2:] == [0x7F0000030000, 50, 120]
    # a new output map tensor: encoded once by the Python path, then native hits again
    n_native = len(rec.launches)
    b2 = launch_stubs.ndarray((50, 120), "float16", ptr=0x7F0000040000)
    for _ in range(3):
        k(a, b2, out)
    assert [c["globalAddress"] for c in calls][2:] == [0x7F0000040000]
    assert len(rec.launches) == n_native + 2                     # one miss, then two native launches
    assert rec.launches[-1]["params"][1] == reference_bytes(calls[2])
    tensormap.clear()


def test_jit_native_two_map_kernel_raises_the_same_launch_errors(monkeypatch, tmp_path):
    import launch_stubs
    from test_tma import copy_kernel
    drv, _ = _jit_setup(monkeypatch, tmp_path)
    k, pshape = copy_kernel(2, (16, 32), "float16", 64, grid=(4, 4, 1))
    rec = _native_recorder(drv, monkeypatch, ["map", "map", "i64", "i32", "i32"])
    out = launch_stubs.ndarray(pshape, "float16")
    good = launch_stubs.ndarray((50, 120), "float16")
    for _ in range(6):
        k(good, good, out)
    assert type(k._call).__name__ == "builtin_function_or_method" and len(rec.launches) == 2
    with pytest.raises(tiledsl.LaunchError, match="argument 'A' has dtype float32"):
        k(launch_stubs.ndarray((50, 120), "float32"), good, out)
    with pytest.raises(tiledsl.LaunchError, match="argument 'A' .* stride of 202 bytes"):
        k(launch_stubs.ndarray((50, 101), "float16"), launch_stubs.ndarray((50, 101), "float16"), out)
    with pytest.raises(tiledsl.LaunchError, match="argument 'A' starts at address 0x7f0000000008"):
        k(launch_stubs.ndarray((50, 120), "float16", ptr=0x7F0000000008), good, out)
    with pytest.raises(tiledsl.LaunchError, match="argument 'A' is not contiguous"):
        k(launch_stubs.ndarray((50, 120), "float16", strides=(2, 100)), good, out)
    n = len(rec.launches)
    k(good, good, out)
    assert len(rec.launches) == n + 1                           # the memo survived the refusals
    tensormap.clear()


def test_jit_cluster_kernel_launches_natively(monkeypatch, tmp_path):
    import cluster_kernels as K
    import launch_stubs
    from tiledsl.runtime import driver
    drv, _ = _jit_setup(monkeypatch, tmp_path)
    python_ex = []
    monkeypatch.setattr(driver, "launch_clustered", lambda *a: python_ex.append(a) or (0,))
    rec = _native_recorder(drv, monkeypatch, ["i64"])
    k = tiledsl.jit(K.exchange.fn)
    out = launch_stubs.ndarray((8, 64), "uint32", ptr=0x7F0000050000)
    for _ in range(4):
        k(out)
    assert k.native_unsupported is None and type(k._call).__name__ == "builtin_function_or_method"
    assert rec.launches and all(r["grid"] == (4, 1, 1) and r["block"] == (64, 1, 1) for r in rec.launches)
    assert rec.launches[-1]["attrs"] == [bytes(native.cluster_attribute((2, 1, 1)))]
    assert rec.launches[-1]["params"] == [0x7F0000050000]
    assert python_ex and all(a[3] == (2, 1, 1) for a in python_ex)      # the first launches, through Python
    with pytest.raises(tiledsl.LaunchError, match="not a whole number of clusters"):
        k[(3, 1, 1), (64, 1, 1)](out)


def test_the_gpu_kernels_assemble():
    """tests/test_gpu_native_hopper.py's kernels compile and pass ptxas for sm_90."""
    from helpers import ptxas
    from test_gpu_native_hopper import KERNELS
    for kern, arrays in KERNELS():
        ptx = kern.compile(*arrays, target="sm_90").asm["ptx"]
        assert ptxas(ptx, "sm_90").returncode == 0, kern.fn.__name__


def test_benchmark_reports_the_launcher_of_each_row():
    import importlib.util
    import pathlib
    path = pathlib.Path(__file__).resolve().parent.parent / "benchmarks" / "launch.py"
    spec = importlib.util.spec_from_file_location("bench_launch_rows", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.launcher_of(lambda: None) == "Python"
    assert mod.launcher_of(len) == "native"
    bench = mod.Bench(None)
    bench.rounds = {"raw cuLaunchKernel": [1.0, 1.0], "tiledsl kernel(...), torch, 2 tensor maps": [1.2, 1.2]}
    bench.which = {"tiledsl kernel(...), torch, 2 tensor maps": lambda: mod.launcher_of(len)}
    text = mod.table({"raw cuLaunchKernel": 1.0, "tiledsl kernel(...), torch, 2 tensor maps": 1.2}, [], bench)
    assert "| tiledsl kernel(...), torch, 2 tensor maps | native | 1.20 | 1.20 | – |" in text
    assert "| raw cuLaunchKernel | – | 1.00 | 1.00 | – |" in text


def test_torch_tensors_for_maps():
    """Real (CPU) torch tensors through the map path: the refresh reads data_ptr() and shape as torch gives them."""
    torch = pytest.importorskip("torch")
    tensormap.clear()
    m = Map()
    memo = native.MapMemo(m, -1, 1)
    slots = ["map", "i64"]
    drv = Driver(slots)
    fn = lambda: None  # noqa: E731
    spec = {"framework": "torch", "device": -1, "multi": True, "slots": slots, "sizes": [], "block": (32, 1, 1),
            "args": [(0, "tensormap", (0, torch.float16, (256,), memo.native)),
                     (1, "tensor", (1, torch.float16, (256,)))],
            "shared": 0, "handle": 1, "ctx": 2, "fn": fn, "code": fn.__code__, "deps": [], "missing": MISSING,
            "array_type": torch.Tensor, "stream_fn": lambda d: 0, "grid": [1, 1, 1], "maps": [(0, memo)]}
    fb = []

    def fallback(*a, **k):
        fb.append(a)
        tensormap._cache[(-1, a[0].data_ptr(), tuple(a[0].shape), m.key())] = fake_bytes(a[0].data_ptr(), (256,))
    launch, _ = native.build(spec, fallback, None, drv.addrs)
    x, y = torch.zeros(256, dtype=torch.float16), torch.zeros(256, dtype=torch.float16)
    launch(x, y)
    launch(x, y)
    assert len(fb) == 1 and drv.launches[-1]["params"] == [fake_bytes(x.data_ptr(), (256,)), y.data_ptr()]
    launch(torch.zeros(256), y)                          # float32: the Python path
    launch(torch.zeros(512, dtype=torch.float16)[::2], y)          # not contiguous
    assert len(fb) == 3 and len(drv.launches) == 1
    tensormap.clear()
