"""Caches: an edited kernel or a changed global never runs stale code; the disk cache is keyed and verified."""
import os
import textwrap
import importlib.util

import numpy as np
import pytest

import tiledsl
from tiledsl import T
from tiledsl.cache import disk as cache

FACTOR = 2.0


@tiledsl.jit
def scaled(A: T.Tensor((4,), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    A[0] = A[1] * FACTOR


def ptx_constant():
    ck = scaled.compile(np.zeros(4, np.float32), target="sm_90")
    return ck, ck.asm["tile"]


def test_changed_global_recompiles(monkeypatch):
    global FACTOR
    ck1, t1 = ptx_constant()
    assert "float32(2.0)" in t1
    ck1b, _ = ptx_constant()
    assert ck1b is ck1                              # unchanged: memory cache hit
    FACTOR = 5.0
    try:
        ck2, t2 = ptx_constant()
        assert ck2 is not ck1 and "float32(5.0)" in t2
    finally:
        FACTOR = 2.0


def _load_module(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


SRC = """
import tiledsl
from tiledsl import T

@tiledsl.jit
def edited(A: T.Tensor((4,), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    A[0] = A[1] + {c}
"""


def test_edited_kernel_recompiles(tmp_path):
    path = tmp_path / "kmod.py"
    path.write_text(textwrap.dedent(SRC.format(c="1.0")))
    m1 = _load_module(path, "kmod_a")
    t1 = m1.edited.compile(np.zeros(4, np.float32), target="sm_90").asm["tile"]
    path.write_text(textwrap.dedent(SRC.format(c="7.0")))
    import linecache
    linecache.checkcache(str(path))
    m2 = _load_module(path, "kmod_b")
    t2 = m2.edited.compile(np.zeros(4, np.float32), target="sm_90").asm["tile"]
    assert "1.0" in t1 and "7.0" in t2


def test_disk_cache_roundtrip_and_damage(tmp_path, monkeypatch):
    monkeypatch.setenv("TILEDSL_CACHE_DIR", str(tmp_path / "c"))
    jf = tiledsl.jit(scaled.fn)
    ck = jf.compile(np.zeros(4, np.float32), target="sm_80")
    assert cache.info()["entries"] == 1
    jf2 = tiledsl.jit(scaled.fn)                    # a new process would look like this: empty memory cache
    ck2 = jf2.compile(np.zeros(4, np.float32), target="sm_80")
    assert getattr(ck2, "from_disk", False) and ck2.asm["ptx"] == ck.asm["ptx"]
    # damage the entry: detected by its hash, recompiled with a warning
    (d,) = [e[0] for e in cache.entries()]
    with open(os.path.join(d, "asm.json"), "ab") as f:
        f.write(b"garbage")
    jf3 = tiledsl.jit(scaled.fn)
    with pytest.warns(UserWarning, match="damaged cache entry"):
        ck3 = jf3.compile(np.zeros(4, np.float32), target="sm_80")
    assert not getattr(ck3, "from_disk", False) and ck3.asm["ptx"] == ck.asm["ptx"]
    assert cache.clear() == 1


def test_another_assembler_never_reuses_a_disk_entry(tmp_path, monkeypatch):
    """The cubin and its register report are the assembler's: another ptxas (PATH, an update in place) compiles
    anew rather than serving the entry the first one made."""
    from tiledsl.lower import ptx as backend
    real = backend.ptxas_path()
    if real is None:
        pytest.skip("no ptxas")
    monkeypatch.setenv("TILEDSL_CACHE_DIR", str(tmp_path / "c"))
    a = np.zeros(4, np.float32)
    tiledsl.jit(scaled.fn).compile(a, target="sm_80")
    assert getattr(tiledsl.jit(scaled.fn).compile(a, target="sm_80"), "from_disk", False)
    other = tmp_path / "bin" / "ptxas"
    other.parent.mkdir()
    other.write_bytes(open(real, "rb").read() + b"\0")       # a different build of the tool
    other.chmod(0o755)
    monkeypatch.setenv("PATH", f"{other.parent}{os.pathsep}{os.environ.get('PATH', '')}")
    assert backend.ptxas_path() == str(other)
    ck = tiledsl.jit(scaled.fn).compile(a, target="sm_80")
    assert not getattr(ck, "from_disk", False) and ck.metadata.get("assembler") == "ptxas"
    assert cache.info()["entries"] == 2


def test_key_depends_on_target_and_constexpr():
    @tiledsl.jit
    def kc(A: T.Tensor((4,), "float32"), C: T.constexpr):
        T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
        A[0] = A[1] * C
    a = np.zeros(4, np.float32)
    assert kc.compile(a, 2.0, target="sm_80") is not kc.compile(a, 2.0, target="sm_90")
    assert kc.compile(a, 2.0, target="sm_90") is not kc.compile(a, 3.0, target="sm_90")
    assert kc.compile(a, 2.0, target="sm_90") is kc.compile(a, 2.0, target="sm_90")


def test_cache_never_uses_pickle():
    import tiledsl.cache.disk as c
    import inspect
    assert "pickle" not in inspect.getsource(c).replace("No pickle", "")


def test_a_renamed_factory_kernel_is_served_from_disk(tmp_path, monkeypatch):
    # a factory that assigns __name__ after the def: the entry is named by the def, and the next process's
    # load must accept it (it was discarded as damaged, recompiling every TMA test kernel in every process)
    import warnings
    monkeypatch.setenv("TILEDSL_CACHE_DIR", str(tmp_path / "c"))

    def make():
        def body(X: T.Tensor((4,), "float32")):
            T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=4))
            X[T.cuda.thread_id()] = 1.0
        body.__name__ = "renamed_kernel"
        return tiledsl.jit(body)
    ck = make().compile(np.zeros(4, np.float32), target="sm_80")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ck2 = make().compile(np.zeros(4, np.float32), target="sm_80")
    assert getattr(ck2, "from_disk", False) and ck2.asm["ptx"] == ck.asm["ptx"]
