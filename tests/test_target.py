"""One Target: spellings, limits per SM, and the target reaching every stage (front end, LLVM, assembler)."""
import numpy as np
import pytest

import tiledsl
from tiledsl import T
from tiledsl.compiler import compile_kernel
from tiledsl.core.options import Options
from tiledsl.core.target import DEFAULT_SM, Target
from tiledsl.lower import ptx as backend


@pytest.mark.parametrize("spelling, sm, arch", [
    ("sm_90", 90, False), ("sm_90a", 90, True), ("compute_80", 80, False), (" sm_86 ", 86, False),
    ("75", 75, False), (80, 80, False), (None, DEFAULT_SM, False), (Target(89), 89, False)])
def test_parse(spelling, sm, arch):
    t = Target.parse(spelling)
    assert (t.sm, t.arch_specific) == (sm, arch)
    assert t.name == f"sm_{sm}{'a' if arch else ''}" and str(t) == t.name
    assert Target.parse(t.name) == t


@pytest.mark.parametrize("bad, msg", [("sm_60", "not supported"), (61, "not supported"), ("gpu", "unknown target"),
                                      ("sm_90b", "unknown target")])
def test_parse_refuses(bad, msg):
    with pytest.raises(tiledsl.CompilationError, match=msg):
        Target.parse(bad)


def test_limits_per_sm():
    assert Target(80).shared_per_block == 166912 and Target(86).shared_per_block == 101376
    assert Target(90).shared_per_block == Target(90, True).shared_per_block == 232448
    assert Target(100).shared_per_block == 232448            # newer SMs: the newest known value at or below
    assert Target(80).ptx_version == 80 and Target(100).ptx_version == 88
    assert Target().static_shared_limit == 48 * 1024 and Target().max_block == (1024, 1024, 64)


def shared_kernel(nbytes):
    @tiledsl.jit
    def k(Out: T.Tensor((1,), "float32")):
        T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
        s = T.alloc_shared((nbytes // 4,), "float32")
        s[0] = T.float32(1)
        Out[0] = s[0]
    return k


def test_shared_limit_follows_the_target():
    k = shared_kernel(200000)            # fits sm_90's 227 KB, not sm_80's 163 KB
    with pytest.raises(tiledsl.CompilationError, match=r"at most 166912 bytes \(163 KB, sm_80\)"):
        compile_kernel(k.fn, {}, Target(80), Options(), want_cubin=False)
    ck = compile_kernel(k.fn, {}, Target(90), Options(), want_cubin=False)
    assert ck.sm == 90 and ck.target == Target(90) and ck.metadata["dynamic_shared"] > 48 * 1024
    with pytest.raises(tiledsl.CompilationError, match=r"at most 232448 bytes \(227 KB, sm_90\)"):
        compile_kernel(shared_kernel(240000).fn, {}, Target(90), Options(), want_cubin=False)


def test_block_limit_message_from_the_target():
    @tiledsl.jit
    def big(Out: T.Tensor((1,), "float32")):
        T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=(16, 16, 8)))
        Out[0] = T.float32(1)
    with pytest.raises(tiledsl.CompilationError, match=r"has 2048 threads; CUDA allows at most 1024 \(and z <= 64\)"):
        compile_kernel(big.fn, {}, Target(80), Options(), want_cubin=False)


def mma_free_kernel():
    @tiledsl.jit
    def add_one(X: T.Tensor((32,), "float32")):
        T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
        t = T.cuda.thread_id()
        X[t] = X[t] + T.float32(1)
    return add_one


@pytest.mark.parametrize("target", ["sm_80", "sm_90", "sm_90a"])
def test_ptx_names_the_target_and_assembles(target):
    t = Target.parse(target)
    ck = compile_kernel(mma_free_kernel().fn, {}, t, Options(), want_cubin=backend.ptxas_path() is not None)
    assert f".target {t.name}\n" in ck.asm["ptx"]
    if backend.ptxas_path() is not None:
        assert ck.metadata["assembler"] in ("ptxas", "nvJitLink") and ck.cubin


@pytest.mark.skipif(backend.ptxas_path() is None, reason="needs ptxas")
def test_sm_90a_assembles_with_ptxas_arch_specific(monkeypatch):
    monkeypatch.setattr(backend, "_nvjitlink", lambda: None)          # force the ptxas path
    calls = []
    real = backend.subprocess.run
    monkeypatch.setattr(backend.subprocess, "run", lambda args, **kw: calls.append(args) or real(args, **kw))
    _, ptx = backend.llvm_to_ptx(_tiny_llvm(), Target.parse("sm_90a"))
    cubin, _, tool = backend.ptx_to_cubin(ptx, Target.parse("sm_90a"))
    assert tool == "ptxas" and cubin and "-arch=sm_90a" in calls[0]


@pytest.mark.skipif(backend.ptxas_path() is None, reason="needs ptxas")
def test_ptxas_comes_before_nvjitlink(monkeypatch):
    # nvJitLink assembles PTX as relocatable code (ptxas -c), which spilled the Hopper GEMM on the H200: the
    # whole-program ptxas must be asked first, and nvJitLink only where there is no ptxas
    asked = []
    monkeypatch.setattr(backend, "_nvjitlink", lambda: asked.append("nvJitLink"))
    _, ptx = backend.llvm_to_ptx(_tiny_llvm(), Target.parse("sm_90a"))
    cubin, _, tool = backend.ptx_to_cubin(ptx, Target.parse("sm_90a"))
    assert tool == "ptxas" and cubin and asked == []
    monkeypatch.setattr(backend, "ptxas_path", lambda: None)
    assert backend.ptx_to_cubin(ptx, Target.parse("sm_90a")) == (None, {}, "driver") and asked == ["nvJitLink"]


def _tiny_llvm():
    return ('target triple = "nvptx64-nvidia-cuda"\n'
            'define ptx_kernel void @k() {\n  ret void\n}\n')


def test_arrays_do_not_matter_for_compile_only():
    k = mma_free_kernel()
    ck = k.compile(np.zeros(32, np.float32), target="sm_80")
    assert ck.sm == 80 and ".target sm_80\n" in ck.asm["ptx"]
