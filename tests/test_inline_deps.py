"""A global read only through @tiledsl.inline helpers, at any depth, is part of the kernel's cache key and of
every staleness check (issue 14). Failed before: the key's fast path compared only the kernel's own globals, so a
changed helper global reused the old compilation (and the steady launchers the old kernel), and the helper
fingerprint stopped at depth 8."""
import importlib.util
import textwrap

import numpy as np
import pytest

import tiledsl
from tiledsl.runtime import jit as jitmod

import launch_stubs

SRC = '''
import tiledsl
from tiledsl import T

G = 2.0
H = 1.0


@tiledsl.inline
def h5(x):
    return x * G


@tiledsl.inline
def h4(x):
    return h5(x)


@tiledsl.inline
def h3(x):
    return h4(x)


@tiledsl.inline
def h2(x):
    return h3(x)


@tiledsl.inline
def h1(x):
    return h2(x)


@tiledsl.inline
def shallow(x):
    return x + H


def deep(A: T.Tensor((4,), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    A[0] = h1(A[1])


def near(A: T.Tensor((4,), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    A[0] = shallow(A[1])
'''


def load(tmp_path, name, src=SRC):
    path = tmp_path / f"{name}.py"
    path.write_text(textwrap.dedent(src))
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def run_once(k):
    a = np.array([0, 3, 0, 0], np.float32)
    k(a)
    return float(a[0])


@pytest.mark.parametrize("kernel,glob,values", [("near", "H", (1.0, 5.0)), ("deep", "G", (2.0, 10.0))])
def test_interpreter_sees_a_helper_global_change(tmp_path, kernel, glob, values):
    mod = load(tmp_path, f"inl_{kernel}_i")
    k = tiledsl.jit(getattr(mod, kernel), interpret=True)
    first = run_once(k)
    setattr(mod, glob, values[1])
    second = run_once(k)
    want = (lambda v: 3 + v) if kernel == "near" else (lambda v: 3 * v)
    assert (first, second) == (want(values[0]), want(values[1]))


@pytest.mark.parametrize("kernel,glob", [("near", "H"), ("deep", "G")])
def test_compile_sees_a_helper_global_change(tmp_path, kernel, glob):
    mod = load(tmp_path, f"inl_{kernel}_c")
    k = tiledsl.jit(getattr(mod, kernel))
    a = np.zeros(4, np.float32)
    t1 = k.compile(a, target="sm_90").asm["tile"]
    setattr(mod, glob, 7.5)
    t2 = k.compile(a, target="sm_90").asm["tile"]
    assert "7.5" not in t1 and "7.5" in t2
    # and the disk cache: a new kernel object (a new process) with the new global gets the new code
    assert "7.5" in tiledsl.jit(getattr(mod, kernel)).compile(a, target="sm_90").asm["tile"]


def test_redefining_a_deeply_nested_helper_recompiles(tmp_path):
    mod = load(tmp_path, "inl_redef")
    k = tiledsl.jit(mod.deep, interpret=True)
    assert run_once(k) == 6.0
    other = load(tmp_path, "inl_redef_h5", "import tiledsl\nG = 2.0\n@tiledsl.inline\ndef h5(x):\n    return x - G\n")
    mod.h5 = other.h5                       # the helper four calls down is replaced
    assert run_once(k) == 1.0
    other.G = 0.5                           # and the replacement's own global is followed too
    assert run_once(k) == 2.5


def test_helpers_twelve_deep_are_fingerprinted_whole(tmp_path):
    chain = "\n".join(f"@tiledsl.inline\ndef c{i}(x):\n    return c{i + 1}(x)\n" for i in range(12))
    src = ("import tiledsl\nfrom tiledsl import T\nG = 2.0\n" + chain +
           "@tiledsl.inline\ndef c12(x):\n    return x * G\n"
           "def k(A: T.Tensor((4,), 'float32')):\n"
           "    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))\n    A[0] = c0(A[1])\n")
    mod = load(tmp_path, "inl_twelve", src)
    k = tiledsl.jit(mod.k, interpret=True)
    key1 = k.source_key()
    mod.G = 4.0
    key2 = k.source_key()
    assert key1 != key2 and run_once(k) == 12.0
    # a fresh kernel object computes the key without the fast path: the fingerprint itself must differ
    mod.G = 2.0
    k2 = tiledsl.jit(mod.k, interpret=True)
    assert k2.source_key() == key1


def test_recursive_helpers_do_not_loop_the_fingerprint(tmp_path):
    src = ("import tiledsl\nfrom tiledsl import T\n"
           "@tiledsl.inline\ndef a(x):\n    return b(x)\n@tiledsl.inline\ndef b(x):\n    return a(x)\n"
           "def k(A: T.Tensor((4,), 'float32')):\n"
           "    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))\n    A[0] = a(A[1])\n")
    mod = load(tmp_path, "inl_rec", src)
    k = tiledsl.jit(mod.k)
    assert isinstance(k.source_key(), str)
    with pytest.raises(tiledsl.CompilationError):
        k.compile(np.zeros(4, np.float32))


@pytest.mark.parametrize("native", ["0", "1"])
def test_steady_launchers_see_a_helper_global_change(tmp_path, monkeypatch, native):
    """The generated and native launchers check the helper's global too: a changed one is compiled anew."""
    drv = launch_stubs.install(monkeypatch)
    monkeypatch.setenv("TILEDSL_NATIVE_LAUNCH", native)
    mod = load(tmp_path, f"inl_steady{native}")
    k = tiledsl.jit(mod.deep)
    a = launch_stubs.ndarray((4,))
    for _ in range(jitmod.NATIVE_AFTER + 2):
        k(a)
    if native == "1":
        assert type(k._call).__name__ == "builtin_function_or_method", k.native_unsupported
    assert len(k._compiled) == 1
    mod.G = 9.0
    k(a)
    assert len(k._compiled) == 2
    (new,) = [ck for ck in k._compiled.values() if "9.0" in ck.asm["tile"]]
    assert len(drv.launches) == jitmod.NATIVE_AFTER + 3


def factory(scale):
    """Kernels of one source whose helper reads a closure value (as tiledsl/ops/gemm/mma.py's make_gemm does)."""
    @tiledsl.inline
    def scaled(x):
        return x * scale

    def k(A: tiledsl.T.Tensor((4,), "float32")):
        tiledsl.T.device_entry(launch=tiledsl.T.cuda.LaunchConfig(grid=1, block=1))
        A[0] = scaled(A[1])
    return k


def test_a_helpers_closure_values_are_in_the_key():
    """Failed before: two kernels made by one factory, differing only in a value their helper reads from its
    closure, had one key, so the second loaded the first's code from the disk cache (benchmarks/ptx_snapshot.py
    recorded gemm config (128,128,64,2,2,3,1,1), SPREAD=1, with the code of SPREAD=0)."""
    k2, k5 = tiledsl.jit(factory(2.0)), tiledsl.jit(factory(5.0))
    assert k2.source_key() != k5.source_key()
    a = np.zeros(4, np.float32)
    assert "5.0" in k5.compile(a, target="sm_90").asm["tile"] and "2.0" in k2.compile(a, target="sm_90").asm["tile"]
    for scale, want in ((2.0, 6.0), (5.0, 15.0)):
        x = np.array([0, 3, 0, 0], np.float32)
        tiledsl.jit(factory(scale), interpret=True)(x)
        assert x[0] == want



def test_a_helpers_source_is_read_once_while_unchanged(tmp_path, monkeypatch):
    """Every compile fingerprints the helpers a kernel reaches, to any depth; the source text of a helper is read
    (inspect tokenizes it) once while the function and its file are unchanged, and again for a new definition."""
    import inspect
    mod = load(tmp_path, "inl_once")
    reads = []
    real = inspect.getsource
    monkeypatch.setattr(inspect, "getsource", lambda f: reads.append(f.__name__) or real(f))
    a = np.zeros(4, np.float32)
    tiledsl.jit(mod.deep).compile(a, target="sm_90")
    first = sorted(reads)
    assert first and set(first) <= {"h1", "h2", "h3", "h4", "h5"} and len(first) == len(set(first))
    reads.clear()
    tiledsl.jit(mod.deep).compile(a, target="sm_90")
    assert reads == []
    mod.h5 = load(tmp_path, "inl_once_h5", "import tiledsl\n@tiledsl.inline\ndef h5(x):\n    return x - 1.0\n").h5
    assert "- " in tiledsl.jit(mod.deep).compile(a, target="sm_90").asm["tile"]
    assert reads == ["h5"]
