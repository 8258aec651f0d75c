"""The disk cache under concurrency and damage.

- 8 processes compiling the same kernel at the same moment into one TILEDSL_CACHE_DIR all succeed, agree on the
  code, and leave exactly one valid entry (no temporary folders behind).
- Truncated, corrupted and foreign entries (a meta.json from another key, a missing file, a missing meta.json)
  are detected, reported with a warning where the entry is damaged, recompiled, and replaced by a valid entry.
- 8 Python threads compiling identical and distinct kernels at once get the same asm as a serial compile.
"""
import hashlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import textwrap
import threading
import time
import warnings

import numpy as np
import pytest

import tiledsl
from tiledsl.cache import disk as cache

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

KERNELS = '''
import tiledsl
from tiledsl import T


@tiledsl.jit
def scale(A: T.Tensor((4, 1), "float32"), Out: T.Tensor((4, 1), "float32"), C: T.constexpr):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    r = T.alloc_local((4, 1), "float32")
    T.cuda.tile.apply(T.ptx["ld.global.f32"], r, A)
    T.cuda.tile.apply(T.ptx["fma.rn.f32"], r, r, T.float32(C), T.float32(1))
    T.cuda.tile.apply(T.ptx["st.global.f32"], Out, r)


@tiledsl.jit
def addmul(A: T.Tensor((8,), "float32"), n: T.int32):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    for i in range(n):
        A[i % 8] = A[(i + 1) % 8] * 3.0 + 1.0
'''

WORKER = r'''
import hashlib, importlib.util, json, os, sys, time
import numpy as np
spec = importlib.util.spec_from_file_location("kmod", sys.argv[1])
mod = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mod)
open(sys.argv[2] + ".ready", "w").close()
deadline = time.time() + 60
while not os.path.exists(sys.argv[3]):          # everyone starts compiling at the same moment
    if time.time() > deadline:
        sys.exit("no go signal")
    time.sleep(0.002)
a = np.zeros((4, 1), np.float32)
ck = mod.scale.compile(a, a, 2.0, target="sm_90")
print(json.dumps({"ptx": hashlib.sha256(ck.asm["ptx"].encode()).hexdigest(), "key": ck.key,
                  "from_disk": bool(getattr(ck, "from_disk", False))}))
'''


@pytest.fixture
def kernels(tmp_path):
    path = tmp_path / "cachekernels.py"
    path.write_text(KERNELS)
    return str(path)


def load_module(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def only_entry(key=None):
    es = cache.entries()
    assert len(es) == 1, es
    d = es[0][0]
    if key is not None:
        assert os.path.basename(d) == key
    return d


def no_temp_folders():
    root = os.environ["TILEDSL_CACHE_DIR"]
    for sub in os.listdir(root):
        p = os.path.join(root, sub)
        if os.path.isdir(p):
            assert not [x for x in os.listdir(p) if x.startswith(".tmp-")], os.listdir(p)


# ------------------------------------------------------------------------------------------------ processes

@pytest.mark.slow
def test_eight_processes_compile_the_same_kernel_at_once(tmp_path, kernels, monkeypatch):
    cdir = tmp_path / "shared-cache"
    monkeypatch.setenv("TILEDSL_CACHE_DIR", str(cdir))
    worker = tmp_path / "worker.py"
    worker.write_text(WORKER)
    go = tmp_path / "go"
    env = dict(os.environ, TILEDSL_CACHE_DIR=str(cdir),
               PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.pop("TILEDSL_DISABLE_DISK_CACHE", None)
    procs = []
    for i in range(8):
        tag = str(tmp_path / f"w{i}")
        procs.append((tag, subprocess.Popen([sys.executable, str(worker), kernels, tag, str(go)], env=env,
                                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)))
    deadline = time.time() + 120
    while not all(os.path.exists(tag + ".ready") for tag, _ in procs):
        assert time.time() < deadline, "workers did not start"
        assert all(p.poll() is None for _, p in procs), [p.communicate() for _, p in procs if p.poll() is not None]
        time.sleep(0.01)
    go.write_text("go")
    results = []
    for _, p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        results.append(json.loads(out.strip().splitlines()[-1]))
    assert len({r["ptx"] for r in results}) == 1
    assert len({r["key"] for r in results}) == 1
    # exactly one entry, whole and valid, and it holds the code every process produced
    key = results[0]["key"]
    d = only_entry(key)
    no_temp_folders()
    entry = cache.load(key)
    assert entry is not None and entry["key"] == key
    asm = json.loads(entry["data"]["asm.json"].decode())
    assert hashlib.sha256(asm["ptx"].encode()).hexdigest() == results[0]["ptx"]
    assert set(os.listdir(d)) >= {"meta.json", "asm.json"}
    # and a ninth compile (a new process would look like this) is served from it
    mod = load_module(kernels, "cachekernels_after")
    a = np.zeros((4, 1), np.float32)
    ck = mod.scale.compile(a, a, 2.0, target="sm_90")
    assert getattr(ck, "from_disk", False) and ck.key == key


# ------------------------------------------------------------------------------------------------ damage

def fresh_compile(kernels, name, c=2.0):
    """Compile `scale` with an empty memory cache, the way a new process would."""
    mod = load_module(kernels, name)
    a = np.zeros((4, 1), np.float32)
    return mod.scale.compile(a, a, c, target="sm_80")


def truncate(d, name):
    p = os.path.join(d, name)
    data = open(p, "rb").read()
    with open(p, "wb") as f:
        f.write(data[:len(data) // 2])


def corrupt(d, name):
    p = os.path.join(d, name)
    data = bytearray(open(p, "rb").read())
    data[len(data) // 2] ^= 0xFF
    with open(p, "wb") as f:
        f.write(bytes(data))


def remove(d, name):
    os.remove(os.path.join(d, name))


def garbage_meta(d, name):
    with open(os.path.join(d, "meta.json"), "w") as f:
        f.write("{not json")


def wrong_format(d, name):
    p = os.path.join(d, "meta.json")
    meta = json.load(open(p))
    meta["format"] = 999
    json.dump(meta, open(p, "w"))


def files_not_a_dict(d, name):
    p = os.path.join(d, "meta.json")
    meta = json.load(open(p))
    meta["files"] = ["asm.json"]
    json.dump(meta, open(p, "w"))


DAMAGE = [
    ("truncated_asm", truncate, "asm.json"),
    ("truncated_cubin", truncate, "kernel.cubin"),
    ("corrupted_asm", corrupt, "asm.json"),
    ("corrupted_cubin", corrupt, "kernel.cubin"),
    ("missing_asm", remove, "asm.json"),
    ("missing_cubin", remove, "kernel.cubin"),
    ("truncated_meta", truncate, "meta.json"),
    ("garbage_meta", garbage_meta, None),
    ("other_format", wrong_format, None),
    ("files_not_a_dict", files_not_a_dict, None),
]


@pytest.mark.parametrize("damage,name", [(d[1], d[2]) for d in DAMAGE], ids=[d[0] for d in DAMAGE])
def test_damaged_entry_is_detected_and_recompiled(tmp_path, kernels, monkeypatch, damage, name):
    monkeypatch.setenv("TILEDSL_CACHE_DIR", str(tmp_path / "c"))
    ck = fresh_compile(kernels, "ck_first")
    d = only_entry(ck.key)
    if name == "kernel.cubin" and not os.path.exists(os.path.join(d, name)):
        pytest.skip("no cubin in the entry (no ptxas)")
    damage(d, name)
    with pytest.warns(UserWarning, match="damaged cache entry"):
        ck2 = fresh_compile(kernels, "ck_second")
    assert not getattr(ck2, "from_disk", False)
    assert ck2.asm["ptx"] == ck.asm["ptx"]
    # the damaged entry was replaced by a valid one that the next compile uses, without a warning
    only_entry(ck.key)
    assert cache.load(ck.key) is not None
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ck3 = fresh_compile(kernels, "ck_third")
    assert getattr(ck3, "from_disk", False) and ck3.asm["ptx"] == ck.asm["ptx"]


def test_foreign_meta_from_another_key_is_detected(tmp_path, kernels, monkeypatch):
    monkeypatch.setenv("TILEDSL_CACHE_DIR", str(tmp_path / "c"))
    ck2 = fresh_compile(kernels, "fm_a", c=2.0)
    ck3 = fresh_compile(kernels, "fm_b", c=3.0)
    assert ck2.key != ck3.key and len(cache.entries()) == 2
    d2, d3 = cache._dir(ck2.key), cache._dir(ck3.key)
    # the whole entry of C=3 copied under the key of C=2: its hashes match, but it belongs to another key
    shutil.rmtree(d2)
    shutil.copytree(d3, d2)
    with pytest.warns(UserWarning, match="damaged cache entry"):
        again = fresh_compile(kernels, "fm_c", c=2.0)
    assert not getattr(again, "from_disk", False)
    assert again.asm["ptx"] == ck2.asm["ptx"] != ck3.asm["ptx"]
    assert json.load(open(os.path.join(d2, "meta.json")))["key"] == ck2.key


def test_entry_without_meta_is_recompiled_and_replaced(tmp_path, kernels, monkeypatch):
    monkeypatch.setenv("TILEDSL_CACHE_DIR", str(tmp_path / "c"))
    ck = fresh_compile(kernels, "nm_a")
    d = only_entry(ck.key)
    remove(d, "meta.json")
    with pytest.warns(UserWarning, match="damaged cache entry"):
        ck2 = fresh_compile(kernels, "nm_b")
    assert not getattr(ck2, "from_disk", False) and ck2.asm["ptx"] == ck.asm["ptx"]
    # the half entry must not block the cache forever: the next compile is served from disk
    ck3 = fresh_compile(kernels, "nm_c")
    assert getattr(ck3, "from_disk", False)
    no_temp_folders()


# ------------------------------------------------------------------------------------------------ threads

def test_eight_threads_compile_identical_and_distinct_kernels(tmp_path, kernels, monkeypatch):
    monkeypatch.setenv("TILEDSL_DISABLE_DISK_CACHE", "1")
    a = np.zeros((4, 1), np.float32)
    b = np.zeros(8, np.float32)
    ref_mod = load_module(kernels, "thr_ref")
    ref = {c: ref_mod.scale.compile(a, a, c, target="sm_90").asm for c in (1.0, 2.0, 3.0, 5.0)}
    ref["addmul"] = ref_mod.addmul.compile(b, 3, target="sm_90").asm

    mod = load_module(kernels, "thr_run")           # one module: identical kernels share a JITFunction
    others = [load_module(kernels, f"thr_other{i}") for i in range(2)]
    jobs = [
        ("same", lambda: mod.scale.compile(a, a, 2.0, target="sm_90"), 2.0),
        ("same", lambda: mod.scale.compile(a, a, 2.0, target="sm_90"), 2.0),
        ("same", lambda: mod.scale.compile(a, a, 2.0, target="sm_90"), 2.0),
        ("c1", lambda: mod.scale.compile(a, a, 1.0, target="sm_90"), 1.0),
        ("c3", lambda: others[0].scale.compile(a, a, 3.0, target="sm_90"), 3.0),
        ("c5", lambda: others[1].scale.compile(a, a, 5.0, target="sm_90"), 5.0),
        ("addmul", lambda: mod.addmul.compile(b, 3, target="sm_90"), "addmul"),
        ("addmul2", lambda: others[0].addmul.compile(b, 7, target="sm_90"), "addmul"),
    ]
    barrier = threading.Barrier(len(jobs))
    results, errors = [None] * len(jobs), []

    def run(i, fn):
        try:
            barrier.wait(timeout=30)
            results[i] = fn()
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append((i, e))

    threads = [threading.Thread(target=run, args=(i, job[1])) for i, job in enumerate(jobs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors, errors
    for (tag, _, want), ck in zip(jobs, results):
        for stage in ("tile", "expanded", "llvm", "ptx"):
            assert ck.asm[stage] == ref[want][stage], (tag, stage)
    same = [ck for (tag, _, _), ck in zip(jobs, results) if tag == "same"]
    assert all(ck is same[0] for ck in same)        # one compile, shared by the three callers
    assert results[3] is not same[0] and results[3].asm["ptx"] != same[0].asm["ptx"]
