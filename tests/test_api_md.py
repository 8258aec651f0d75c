"""The public contract, API.md (the interface document outside test suites are written against), checked bullet by
bullet on the CPU.

Each test quotes the sentence it checks. Everything runs without a GPU: kernels run on the interpreter
(interpret=True, numpy arrays and CPU torch tensors) or compile for sm_90/sm_90a and go through ptxas. Where a
behaviour is covered in depth elsewhere, the check here is short and the comment names the deeper test file.
"""
import os
import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import tiledsl
from tiledsl import T
from tiledsl.layout import S, TileLayout, laneid, tx, warpid
from helpers import FakeCudaArray, ptxas

import launch_stubs
import seed_mma

torch = pytest.importorskip("torch")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LC = T.cuda.LaunchConfig


def interp(fn, **kw):
    return tiledsl.jit(fn, interpret=True, **kw)


# ===================================================================================== A kernel, end to end

def test_top_example_runs_on_the_interpreter_with_numpy_and_cpu_torch():
    """The top section's warp_mma, completed from the seed page (examples/seed_mma.py), ported by changing only
    imports and decorator; `warp_mma(ap, bp, out)` writes `out` in place."""
    a, b, ap, bp = seed_mma.inputs()
    ref = a.astype(np.float32) @ b.astype(np.float32).T
    k = interp(seed_mma.warp_mma.fn)
    out = np.zeros((16, 8), np.float32)
    k(ap, bp, out)
    np.testing.assert_allclose(out, ref, rtol=2e-4, atol=2e-4)
    tout = torch.zeros(16, 8)
    k(torch.from_numpy(ap), torch.from_numpy(bp), tout)
    np.testing.assert_allclose(tout.numpy(), ref, rtol=2e-4, atol=2e-4)


def test_fma_seed_page_kernel_with_pred_and_preserve_dst():
    """The kernel language keeps the spelling of the seed pages: the fma page's kernel (examples/seed_fma.py) runs
    as written; its call parameters pred= and preserve_dst= work as the page says."""
    import seed_fma
    a = np.arange(-2, 2, dtype=np.float32).reshape(4, 1)
    out = np.zeros((4, 1), np.float32)
    interp(seed_fma.affine_fma.fn)(a, out)
    np.testing.assert_array_equal(out, 2 * a + 1)
    out = np.full((4, 1), 7.0, np.float32)
    interp(k_fma_pred)(a, out)
    np.testing.assert_array_equal(out[:, 0], [7.0, -1.0, 1.0, 7.0])   # where pred is false dst keeps its value


def k_fma_pred(A: T.Tensor((4, 1), "float32"), Out: T.Tensor((4, 1), "float32")):
    T.device_entry(launch=LC(grid=1, block=4))
    t = T.cuda.thread_id()
    r = T.alloc_local((1,), "float32")
    r[0] = 7.0
    T.cuda.tile.apply(T.ptx["fma.rn.f32"], r, T.float32(2), A[t, 0], T.float32(1), pred=(t == 1) or (t == 2),
                      preserve_dst=True)
    Out[t, 0] = r[0]


# ===================================================================================== Host side

def k_fill(Out: T.Tensor(("n",), "float32"), v: T.float32):
    T.device_entry(launch=LC(grid=1, block=4))
    i = T.cuda.block_id(0) * T.cuda.block_dim(0) + T.cuda.thread_id(0)
    if i < Out.shape[0]:
        Out[i] = v + T.cast(i, "float32")


def test_jit_plain_and_with_options():
    """`tiledsl.jit(fn)` and `tiledsl.jit(**options)(fn)`: compile lazily on the first call for each
    specialization; options include `interpret=False`, `target=None` (e.g. "sm_90"), `debug=False`."""
    plain = tiledsl.jit(k_fill)
    assert isinstance(plain, tiledsl.JITFunction)
    with pytest.raises(tiledsl.TiledslError, match="unknown option"):
        tiledsl.jit(interpet=True)(k_fill)
    with pytest.raises(tiledsl.CompilationError, match="unknown target"):
        tiledsl.jit(target="cuda")(k_fill)
    for opts in ({}, {"interpret": False}, {"target": None}, {"target": "sm_90"}, {"debug": False},
                 {"interpret": True, "debug": True}):
        assert isinstance(tiledsl.jit(**opts)(k_fill), tiledsl.JITFunction)
    # target= is honoured by compile (ARCHITECTURE.md's `jit(target="sm_80")(f).compile(a)` bug)
    ck = tiledsl.jit(target="sm_80")(k_fill).compile(np.zeros(4, np.float32), 1.0)
    assert ".target sm_80" in ck.asm["ptx"]
    # lazily: nothing is compiled at decoration; a call compiles (on the interpreter here)
    k = tiledsl.jit(interpret=True, debug=True)(k_fill)
    out = np.zeros(4, np.float32)
    k(out, 1.0)
    np.testing.assert_array_equal(out, [1, 2, 3, 4])


def k_fill_cx(Out: T.Tensor(("n",), "float32"), v: T.float32, C: T.constexpr):
    T.device_entry(launch=LC(grid=1, block=4))
    i = T.cuda.block_id(0) * T.cuda.block_dim(0) + T.cuda.thread_id(0)
    if i < Out.shape[0]:
        Out[i] = v + T.cast(i + C, "float32")


def test_launch_config_from_body_or_subscript():
    """`kernel(*args)` launches with the body's T.device_entry(launch=...); `kernel[grid, block](*args)` sets or
    overrides it. grid and block are an int or a tuple of up to 3 ints; grid may also be a callable taking a dict
    of the bound arguments and constexprs."""
    k = interp(k_fill)
    out = np.zeros(10, np.float32)
    k(out, 0.0)                                         # body: 1 block of 4
    assert (out[4:] == 0).all() and (out[:4] == [0, 1, 2, 3]).all()
    out[:] = 0
    k[3, 4](out, 0.0)                                   # ints
    np.testing.assert_array_equal(out, np.arange(10))
    out[:] = -1
    k[(3, 1, 1), (4,)](out, 1.0)                        # tuples
    np.testing.assert_array_equal(out, np.arange(10) + 1)
    seen = {}

    def grid(meta):
        seen.update(meta)
        return ((meta["Out"].shape[0] + 3) // 4,)

    out[:] = -1
    k[grid, 4](out, 2.0)                                # a callable grid on the bound arguments
    np.testing.assert_array_equal(out, np.arange(10) + 2)
    assert set(seen) >= {"Out", "v"} and seen["v"] == 2.0
    seen.clear()
    kc = interp(k_fill_cx)
    out[:] = -1
    kc[grid, 4](out, 2.0, 5)                            # ... and constexprs
    np.testing.assert_array_equal(out, np.arange(10) + 7)
    assert seen["C"] == 5
    for g, b in (((1, 1, 1, 1), 4), (1, "4"), (lambda m: 1.5, 4), (0, 4), (1, (0,))):   # anything else: LaunchError
        with pytest.raises(tiledsl.LaunchError, match="grid and block"):
            k[g, b](out, 0.0)
    ids = np.zeros((2, 2, 64, 6), np.int32)             # an override of the body's 2-D launch with tuples
    interp(k_ids)[(1, 2), (32, 2, 1)](ids)
    assert (ids[1, 0, :, 4] == 12).all() and (ids[:, 1] == 0).all()


def test_stream_keyword_is_accepted(monkeypatch):
    """Keyword `stream=` (an int handle, or a torch/cupy stream) is optional. (On the interpreter it is accepted
    and the run is synchronous; a value the GPU path refuses is refused there too.)"""
    launch_stubs.install(monkeypatch)                   # the GPU path on the stub driver (tests/launch_stubs.py)
    k = interp(k_fill)
    out = np.zeros(4, np.float32)
    k(out, 3.0, stream=0)
    k[1, 4](out, 3.0, stream=0)
    np.testing.assert_array_equal(out, [3, 4, 5, 6])

    class FakeStream:                                   # a torch stream's spelling of its handle
        cuda_stream = 0
    k(out, 3.0, stream=FakeStream())
    # what the GPU path refuses, the interpreter refuses too (the same LaunchError)
    for bad in ("default", object(), -1, 1 << 64):
        with pytest.raises(tiledsl.LaunchError, match="stream="):
            k(out, 3.0, stream=bad)
        with pytest.raises(tiledsl.LaunchError, match="stream="):
            tiledsl.jit(k_fill)(launch_stubs.ndarray((4,), "float32"), 3.0, stream=bad)


def test_tensor_arguments_numpy_and_cpu_torch_written_in_place(monkeypatch):
    """With `interpret=True` (or `TILEDSL_INTERPRET=1`), numpy arrays and CPU torch tensors, written in place."""
    t = torch.zeros(4)
    interp(k_fill)(t, 1.0)
    assert t.tolist() == [1, 2, 3, 4]
    monkeypatch.setenv("TILEDSL_INTERPRET", "1")
    t = torch.zeros(4)
    tiledsl.jit(k_fill)(t, 5.0)
    assert t.tolist() == [5, 6, 7, 8]


def k_scalars(Out: T.Tensor((4,), "float32"), i: T.int32, f: T.float32, b: T.bool, u: T.uint32):
    T.device_entry(launch=LC(grid=1, block=1))
    Out[0] = T.cast(i, "float32")
    Out[1] = f
    Out[2] = 1.0 if b else 0.0
    Out[3] = T.cast(u, "float32")


def test_scalar_arguments_python_and_numpy():
    """Scalar arguments: Python ints, floats and bools, numpy scalars."""
    k = interp(k_scalars)
    out = np.zeros(4, np.float32)
    k(out, 3, 2.5, True, 7)
    assert out.tolist() == [3, 2.5, 1, 7]
    k(out, np.int32(-2), np.float32(0.5), np.bool_(False), np.uint32(9))
    assert out.tolist() == [-2, 0.5, 0, 9]
    k(out, np.int64(4), np.float64(1.5), False, np.uint8(1))
    assert out.tolist() == [4, 1.5, 0, 1]


def test_compile_without_gpu_stages_and_metadata():
    """`kernel.compile(*args, target="sm_90")` compiles without launching and without needing a GPU (arrays of any
    kind stand for their shape and dtype), returning a CompiledKernel with `.asm` holding at least "tile",
    "expanded", "llvm" and "ptx", plus "sass" where the CUDA tools are installed; and `.metadata` (registers,
    spills, shared-memory bytes where ptxas reports them)."""
    _, _, ap, bp = seed_mma.inputs()
    for out in (np.zeros((16, 8), np.float32), torch.zeros(16, 8), torch.empty(16, 8, device="meta"),
                FakeCudaArray((16, 8))):
        ck = seed_mma.warp_mma.compile(ap, bp, out, target="sm_90")
        assert isinstance(ck, tiledsl.CompiledKernel)
    for stage in ("tile", "expanded", "llvm", "ptx"):
        assert ck.asm[stage]
    assert "tile.apply mma.sync" in ck.asm["tile"] and ck.asm["expanded"].count("mma.sync.aligned") == 2
    md = ck.metadata
    assert md["registers"] > 0 and md["spill_stores"] == 0 and md["spill_loads"] == 0 and md["shared_bytes"] == 0
    import shutil
    if shutil.which("cuobjdump") or shutil.which("nvdisasm"):
        assert "HMMA" in ck.asm["sass"]
    else:                                   # a clear message, and a KeyError so asm.get("sass") is None
        assert "sass" not in ck.asm and ck.asm.get("sass") is None
        with pytest.raises(KeyError, match="cuobjdump|nvdisasm"):
            ck.asm["sass"]


# ----------------------------------------------------------------------------------- errors

def k_bad_syntax(A: T.Tensor((4,), "float32")):
    T.device_entry(launch=LC(grid=1, block=1))
    A[0] = undefined_name + 1  # noqa: F821


def k_bad_pattern(A: T.Tensor((4,), "float32")):
    T.device_entry(launch=LC(grid=1, block=32))
    d = T.alloc_local((4,), "float32")
    a = T.alloc_local((4,), "float32")   # A must be 32-bit packed f16 words in uint32
    b = T.alloc_local((2,), "uint32")
    T.cuda.tile.apply(T.ptx["mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"], d, a, b, T.float32(0),
                      scope="warp")


def test_error_classes_and_compilation_error_message():
    """`tiledsl.TiledslError` is the base. `tiledsl.CompilationError` ... its message holds `file:line:col`, the
    source line and a caret, and for a pattern the operand's name."""
    assert issubclass(tiledsl.CompilationError, tiledsl.TiledslError)
    assert issubclass(tiledsl.LaunchError, tiledsl.TiledslError)
    assert issubclass(tiledsl.KernelFault, tiledsl.TiledslError)
    with pytest.raises(tiledsl.CompilationError) as ei:
        tiledsl.jit(k_bad_syntax).compile(np.zeros(4, np.float32), target="sm_90")
    msg = str(ei.value)
    import inspect
    lines, start = inspect.getsourcelines(k_bad_syntax)
    line = start + 2
    assert re.search(rf"test_api_md\.py:{line}:\d+", msg), msg
    assert "undefined_name + 1" in msg and "^" in msg
    with pytest.raises(tiledsl.CompilationError) as ei:
        tiledsl.jit(k_bad_pattern).compile(np.zeros(4, np.float32), target="sm_90")
    msg = str(ei.value)
    assert re.search(r"\bA\b", msg) and "T.cuda.tile.apply" in msg and "^" in msg, msg


def test_launch_errors_before_any_launch():
    """`tiledsl.LaunchError` is raised before any launch for a bad call (argument count, dtype, shape, device,
    non-contiguous tensor, host array on the GPU path). (In depth: test_launch_errors.py,
    test_launch_contract*.py.)"""
    k = tiledsl.jit(k_fill)

    def err(*args):
        with pytest.raises(tiledsl.LaunchError) as ei:
            k(*args)
        return str(ei.value)

    assert "takes 2 arguments, got 1" in err(FakeCudaArray((4,)))
    assert "dtype float16" in err(FakeCudaArray((4,), "float16"), 1.0)
    assert "not contiguous" in err(FakeCudaArray((4,), strides=(8,)), 1.0)
    assert "host memory" in err(np.zeros(4, np.float32), 1.0)
    assert "1 dimension" in err(FakeCudaArray((2, 2)), 1.0)
    assert "dimension 3: 5 != 6" in str(pytest.raises(tiledsl.LaunchError, tiledsl.jit(k_ids),
                                                      FakeCudaArray((2, 2, 64, 5), "int32")).value)
    with pytest.raises(tiledsl.LaunchError, match="one device"):
        tiledsl.jit(k_storage)(FakeCudaArray((32, 4), "float16", device=0), FakeCudaArray((32, 2), "uint32", 1),
                               FakeCudaArray((32, 4), device=0))
    ki = interp(k_fill)
    with pytest.raises(tiledsl.LaunchError, match="float16"):
        ki(np.zeros(4, np.float16), 1.0)
    with pytest.raises(tiledsl.LaunchError, match="contiguous"):
        ki(np.zeros(8, np.float32)[::2], 1.0)


def test_cache_on_disk_and_no_stale_reuse(tmp_path):
    """Compiled code is cached in memory and on disk (TILEDSL_CACHE_DIR); a changed kernel, dependency, option or
    compiler version never reuses a stale entry. (Each fresh process here sees only the disk; in depth:
    test_cache.py, test_inline_deps.py.)"""
    (tmp_path / "kdep.py").write_text(textwrap.dedent("""
        import tiledsl
        @tiledsl.inline
        def offset(x):
            return x + OFFSET
    """))
    src = tmp_path / "kmod.py"
    body = textwrap.dedent("""
        import sys
        import numpy as np
        import tiledsl
        from tiledsl import T
        from kdep import offset
        @tiledsl.jit
        def k(A: T.Tensor((4,), "float32")):
            T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
            A[0] = offset(VALUE)
        ck = k.compile(np.zeros(4, np.float32), target="sm_90")
        print(ck.asm["ptx"].count(sys.argv[1]))
    """)
    env = dict(os.environ, TILEDSL_CACHE_DIR=str(tmp_path / "cache"), PYTHONPATH=ROOT)

    def run(value, offset):
        src.write_text(body.replace("VALUE", value))
        dep = tmp_path / "kdep.py"
        dep.write_text(re.sub(r"x \+ [\d.]+|x \+ OFFSET", f"x + {offset}", dep.read_text()))
        bits = f" {int(np.float32(float(value) + float(offset)).view(np.uint32))};"   # a float constant's bits
        r = subprocess.run([sys.executable, str(src), bits], capture_output=True, text=True, env=env, timeout=120,
                           cwd=tmp_path)
        assert r.returncode == 0, r.stderr
        return r.stdout.strip()

    assert run("1.5", "0.25") == "1"
    assert any((tmp_path / "cache").rglob("*")), "nothing written under TILEDSL_CACHE_DIR"
    assert run("1.5", "0.25") == "1"           # served from disk
    assert run("2.5", "0.25") == "1"           # the kernel edited: recompiled, not the stale 1.75
    assert run("2.5", "0.5") == "1"            # its dependency edited: recompiled, not the stale 2.75


def bad_index(A: T.Tensor((4, 4), "float32")):
    T.device_entry(launch=LC(grid=1, block=1))
    A[0] = 1.0


def bad_opcode(A: T.Tensor((4,), "float32")):
    T.device_entry(launch=LC(grid=1, block=1))
    T.cuda.tile.apply(T.ptx["foo.bar"], A)


def bad_view(A: T.Tensor((4,), "float32")):
    T.device_entry(launch=LC(grid=1, block=1))
    r = T.alloc_local((4,), "float32")
    A[0] = r.view(3, 2)[0, 0]


def bad_alloc(A: T.Tensor((4,), "float32"), n: T.int32):
    T.device_entry(launch=LC(grid=1, block=1))
    r = T.alloc_local((n,), "float32")
    A[0] = r[0]


def bad_type(A: T.Tensor((4,), "float32")):
    T.device_entry(launch=LC(grid=1, block=1))
    A[0] = "text"


def bad_scope(A: T.Tensor((4,), "float32")):
    T.device_entry(launch=LC(grid=1, block=32))
    r = T.alloc_local((4,), "float32")
    T.cuda.tile.apply(T.ptx["mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"], r, r, r, r)


@pytest.mark.parametrize("fn, words", [
    (bad_index, "single elements"), (bad_opcode, "no explicit tile pattern for foo.bar"),
    (bad_view, "needs 6 elements"), (bad_alloc, "compile-time int"), (bad_type, "cannot store str"),
    (bad_scope, "warp instruction")], ids=lambda x: getattr(x, "__name__", ""))
def test_anything_wrong_in_a_kernel_is_a_compilation_error(fn, words):
    """CompilationError is raised for anything wrong in a kernel (unsupported syntax, types, shapes, an illegal
    pattern), at the user's line. (Many more: test_errors.py, tests/bad_inputs/.)"""
    import inspect
    args = [np.zeros((4, 4) if fn is bad_index else 4, np.float32)] + ([1] if fn is bad_alloc else [])
    with pytest.raises(tiledsl.CompilationError, match=re.escape(words)) as ei:
        tiledsl.jit(fn).compile(*args, target="sm_90")
    _, start = inspect.getsourcelines(fn)
    assert re.search(rf"test_api_md\.py:{start + 2}:\d+|test_api_md\.py:{start + 3}:\d+", str(ei.value))


# ===================================================================================== Kernel language

SCALAR_TYPES = ["int32", "int64", "uint32", "uint64", "float16", "bfloat16", "float32", "float64", "bool"]
DTYPES = ["bool", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64", "float16",
          "bfloat16", "float32", "float64"]


def test_annotations_and_typed_constants():
    """Parameter annotations: T.Tensor(shape, dtype) (ints, or strings naming sizes), scalar types T.int32 ...
    T.bool, and T.constexpr. The same type names called on a value make a typed constant."""
    for name in SCALAR_TYPES:
        assert hasattr(T, name), name
    assert hasattr(T, "constexpr")

    def k(Out: T.Tensor(("n", 2), "float32"), a: T.int64, b: T.uint64, c: T.float64, d: T.float16,
          e: T.bfloat16, N: T.constexpr):
        T.device_entry(launch=LC(grid=1, block=1))
        Out[0, 0] = T.cast(a, "float32") + T.cast(b, "float32")
        Out[0, 1] = T.cast(c, "float32") + T.cast(d, "float32") + T.cast(e, "float32")
        Out[1, 0] = T.cast(T.uint32(0x3C003C00) >> 16, "float32")
        Out[1, 1] = T.float32(N) + T.cast(T.int64(1) + T.int32(1), "float32") + T.cast(T.bool(1), "float32")
    out = np.zeros((2, 2), np.float32)
    interp(k)(out, 1, 2, 0.5, 0.25, 0.125, 3)
    np.testing.assert_array_equal(out, [[3, 0.875], [0x3C00, 6]])


def k_bool_buffers(X: T.Tensor((64,), "float32"), Out: T.Tensor((64,), "bool"), Cnt: T.Tensor((64,), "int32")):
    T.device_entry(launch=LC(grid=1, block=64))
    t = T.cuda.thread_id()
    f = T.alloc_local((4,), "bool")
    sh = T.alloc_shared((64,), "bool")
    for j in T.unroll(4):
        f[j] = X[(t + j) % 64] > 0.0
    sh[t] = f[0] and not f[3]
    T.cuda.syncthreads()
    c = 0
    for j in range(64):
        if sh[j]:
            c += 1
    Out[t] = sh[(t + 1) % 64]
    Cnt[t] = c + T.cast(f[1], "int32") * 100


def test_bool_local_and_shared_buffers():
    """T.alloc_local / T.alloc_shared of "bool" (a byte an element, as bool tensors): written from comparisons,
    read in conditions and casts; a bit reinterpretation (view(dtype=)) to or from bool is refused."""
    x = np.random.default_rng(0).standard_normal(64).astype(np.float32)
    out, cnt = np.zeros(64, bool), np.zeros(64, np.int32)
    interp(k_bool_buffers)(x, out, cnt)
    f0 = x > 0
    sh = f0 & ~np.roll(f0, -3)
    assert np.array_equal(out, np.roll(sh, -1)) and np.array_equal(cnt, sh.sum() + 100 * np.roll(f0, -1))
    ck = tiledsl.jit(k_bool_buffers).compile(x, out, cnt, target="sm_90")
    assert ptxas(ck.asm["ptx"], "sm_90").returncode == 0


@pytest.mark.parametrize("dtype", DTYPES)
def test_every_dtype_string(dtype):
    """Dtype strings: "bool" "int8" ... "float64" (tensors of each, and local buffers of each, bool ones a byte an
    element; bfloat16 as torch's)."""
    def k_direct(A: T.Tensor((4,), dtype), B: T.Tensor((4,), dtype)):
        T.device_entry(launch=LC(grid=1, block=4))
        B[T.cuda.thread_id()] = A[T.cuda.thread_id()]

    def k_local(A: T.Tensor((4,), dtype), B: T.Tensor((4,), dtype)):
        T.device_entry(launch=LC(grid=1, block=4))
        r = T.alloc_local((1,), dtype)
        r[0] = A[T.cuda.thread_id()]
        B[T.cuda.thread_id()] = r[0]
    k = k_local
    if dtype == "bool":
        a, b = np.array([True, False, True, True]), np.zeros(4, bool)
        interp(k_direct)(a, b)
        assert np.array_equal(a, b)
    if dtype == "bfloat16":
        a, b = torch.tensor([1.0, -2, 3, 0.5], dtype=torch.bfloat16), torch.zeros(4, dtype=torch.bfloat16)
        interp(k)(a, b)
        assert torch.equal(a, b)
        return
    a = (np.arange(4) % 2 == 1).astype(dtype) if dtype == "bool" else np.arange(1, 5).astype(dtype)
    b = np.zeros(4, dtype)
    interp(k)(a, b)
    np.testing.assert_array_equal(a, b)
    r = ptxas(tiledsl.jit(k).compile(a, b, target="sm_90").asm["ptx"], "sm_90")
    assert r.returncode == 0, r.stderr


def k_ids(Out: T.Tensor((2, 2, 64, 6), "int32")):
    T.device_entry(launch=LC(grid=(2, 2), block=(32, 2)))
    x = T.cuda.thread_id(axis=0)
    y = T.cuda.thread_id(axis=1)
    bx = T.cuda.block_id(axis=0)
    by = T.cuda.block_id(axis=1)
    t = y * 32 + x
    Out[by, bx, t, 0] = T.cuda.lane_id()
    Out[by, bx, t, 1] = T.cuda.warp_id()
    Out[by, bx, t, 2] = T.cuda.thread_id()
    Out[by, bx, t, 3] = T.cuda.block_dim(axis=0) * 10 + T.cuda.block_dim(1)
    Out[by, bx, t, 4] = T.cuda.grid_dim(axis=0) * 10 + T.cuda.grid_dim(axis=1)
    Out[by, bx, t, 5] = T.cuda.block_id()


def test_launch_and_ids():
    """T.device_entry(launch=T.cuda.LaunchConfig(grid=..., block=...)); lane_id, warp_id, thread_id(axis=0),
    block_id(axis=0), block_dim(axis=0), grid_dim(axis=0)."""
    out = np.zeros((2, 2, 64, 6), np.int32)
    interp(k_ids)(out)
    t = np.arange(64)
    for by in range(2):
        for bx in range(2):
            o = out[by, bx]
            np.testing.assert_array_equal(o[:, 0], t % 32)
            np.testing.assert_array_equal(o[:, 1], t // 32)
            np.testing.assert_array_equal(o[:, 2], t % 32)
            assert (o[:, 3] == 322).all() and (o[:, 4] == 22).all() and (o[:, 5] == bx).all()


COL_MAJOR = TileLayout(S[(2, 2) : (1, 2)])      # (layouts are built outside kernels and named inside)


def k_storage(A: T.Tensor((32, 4), "float16"), Out: T.Tensor((32, 2), "uint32"), F: T.Tensor((32, 4), "float32")):
    T.device_entry(launch=LC(grid=1, block=32))
    lane = T.cuda.lane_id()
    sm = T.alloc_shared((32, 4), "float16", layout="default")
    for j in range(4):
        sm[lane, j] = A[lane, j]
    T.cuda.syncthreads()
    r = T.alloc_local((4,), "float16", layout="default")
    for j in range(4):
        r[j] = sm[31 - lane, j]
    w = r.view(dtype="uint32")                          # the same bits as 2 uint32 words
    Out[lane, 0] = w[0]
    Out[lane, 1] = w[1]
    q = T.alloc_local((4,), "float32")
    qv = q.view(2, 2, layout=COL_MAJOR)                 # column-major re-index of the same registers
    for i, j in T.grid(2, 2):
        qv[i, j] = T.float32(i * 10 + j)
    for j in range(4):
        F[lane, j] = q[j]


def test_storage_views_and_indexing():
    """alloc_local/alloc_shared(shape, dtype, layout="default"); buf.view(*shape, layout=...) re-indexes the same
    storage; buf.view(dtype=...) reinterprets its bits; x[i, j] reads and writes."""
    a = np.arange(128).reshape(32, 4).astype(np.float16)
    out = np.zeros((32, 2), np.uint32)
    f = np.zeros((32, 4), np.float32)
    interp(k_storage)(a, out, f)
    np.testing.assert_array_equal(out, a[::-1].copy().view(np.uint32))
    assert (f == [0, 10, 1, 11]).all()


def k_control(X: T.Tensor((8,), "int32"), Out: T.Tensor((8,), "int32"), n: T.int32):
    T.device_entry(launch=LC(grid=1, block=8))
    t = T.cuda.thread_id()
    acc = 0
    for i in range(n):                                  # runtime bound
        acc = acc + i
    for i in range(3):                                  # static bound
        acc = acc + 1
    for a, b in T.grid(2, 3):
        acc = acc + a * b
    if t == 0:
        acc = acc + 100
    elif t == 1 and not (n < 0):
        acc = acc + 200
    else:
        acc = acc + (1 if t > 4 or t == 3 else 0)
    acc = T.max(acc, X[t]) + T.min(t, 2) + T.cast(T.cast(t, "float32") * 0.5, "int32")
    Out[t] = acc * 2 - 1 if t % 2 == 0 else acc


def test_control_flow_and_arithmetic():
    """for (static or runtime bounds), T.grid, if/elif/else, `a if c else b`, arithmetic, comparisons,
    and/or/not, T.min, T.max, T.cast(x, dtype)."""
    x = np.array([0, 0, 0, 0, 0, 0, 50, 0], np.int32)
    out = np.zeros(8, np.int32)
    interp(k_control)(x, out, 4)
    exp = []
    for t in range(8):
        acc = 6 + 3 + 3 + (100 if t == 0 else 200 if t == 1 else (1 if t > 4 or t == 3 else 0))
        acc = max(acc, x[t]) + min(t, 2) + int(t * 0.5)
        exp.append(acc * 2 - 1 if t % 2 == 0 else acc)
    np.testing.assert_array_equal(out, exp)


# ----------------------------------------------------------------------------------- tile pattern families

K8_A = TileLayout(S[(1, 1, 2, 8, 4) : (2, 2, 1, 4 @ laneid, 1 @ laneid)])     # (M_rep, K_rep, 16, 4 words)
K8_B = TileLayout(S[(1, 1, 8, 4) : (1, 1, 4 @ laneid, 1 @ laneid)])           # (N_rep, K_rep, 8, 4 words)
K8_D = TileLayout(S[(1, 1, 2, 8, 4, 2) : (4, 4, 2, 4 @ laneid, 1 @ laneid, 1)])  # (M_rep, N_rep, 16, 8)


def k_mma_k8(A: T.Tensor((32, 2), "uint32"), B: T.Tensor((32, 1), "uint32"), Out: T.Tensor((32, 4), "float32"),
             OP: T.constexpr):
    T.device_entry(launch=LC(grid=1, block=32))
    lane = T.cuda.lane_id()
    ar = T.alloc_local((2,), "uint32")
    br = T.alloc_local((1,), "uint32")
    dr = T.alloc_local((4,), "float32")
    for i in range(2):
        ar[i] = A[lane, i]
    br[0] = B[lane, 0]
    av = ar.view(1, 1, 16, 4, layout=K8_A)
    bv = br.view(1, 1, 8, 4, layout=K8_B)
    dv = dr.view(1, 1, 16, 8, layout=K8_D)
    T.cuda.tile.apply(T.ptx[OP], dv, av, bv, T.float32(0), scope="warp")
    for i in range(4):
        Out[lane, i] = dr[i]


@pytest.mark.parametrize("ab", ["f16", "bf16"])
def test_mma_m16n8k8_f16_bf16_on_the_interpreter(ab):
    """At least the family `mma` (m16n8k8/k16, f16/bf16). (k16 f16 is the top example; every form, scope and
    repeat in test_patterns_compile.py / test_patterns_interpreter.py.)"""
    rng = np.random.default_rng(1)
    a = (rng.integers(-4, 5, (16, 8)) / 4).astype(np.float32)
    b = (rng.integers(-4, 5, (8, 8)) / 4).astype(np.float32)

    def bits(x):
        return x.astype(np.float16).view(np.uint16) if ab == "f16" else (x.view(np.uint32) >> 16).astype(np.uint16)
    A, B = bits(a), bits(b)
    lane = np.arange(32)
    # seed page lane maps for k8: A reg r holds row lane//4 + 8r, words lane%4; B holds row lane//4, word lane%4
    ap = np.stack([A.reshape(16, 4, 2)[lane // 4 + 8 * r, lane % 4].view(np.uint32)[:, 0] for r in range(2)], 1)
    bp = B.reshape(8, 4, 2)[lane // 4, lane % 4].view(np.uint32)
    out = np.zeros((32, 4), np.float32)
    op = f"mma.sync.aligned.m16n8k8.row.col.f32.{ab}.{ab}.f32"
    interp(k_mma_k8)(np.ascontiguousarray(ap), np.ascontiguousarray(bp), out, op)
    ref = a @ b.T
    for r in range(4):
        np.testing.assert_array_equal(out[:, r], ref[lane // 4 + 8 * (r // 2), 2 * (lane % 4) + r % 2])
    ck = tiledsl.jit(k_mma_k8).compile(ap, bp, out, op, target="sm_90")
    assert ck.asm["ptx"].count(op) == 1 and ptxas(ck.asm["ptx"], "sm_90").returncode == 0


FRAG = TileLayout(S[(4, 8, 4) : (1, 4 @ laneid, 1 @ laneid)])      # ldmatrix x4: lane owns row l//4, word l%4
LANE_ROW = TileLayout(S[(32, 1, 4) : (1 @ laneid, 4, 1)])          # a lane's 4 registers are one row


def k_families(A: T.Tensor((32, 4), "uint32"), Out: T.Tensor((32, 4), "uint32")):
    T.device_entry(launch=LC(grid=1, block=32))
    sm = T.alloc_shared((4, 8, 4), "uint32")
    T.cuda.tile.apply(T.ptx["cp.async.cg.shared.global"], sm.view(32, 1, 4), A.view(32, 1, 4), chunk_bytes=16,
                      scope="warp")
    T.cuda.tile.apply(T.ptx["cp.async.commit_group"])
    T.cuda.tile.apply(T.ptx["cp.async.wait_group"], 0)
    T.cuda.syncthreads()
    r = T.alloc_local((4,), "uint32")
    T.cuda.tile.apply(T.ptx["ldmatrix.sync.aligned.m8n8.x4.shared.b16"], r.view(4, 8, 4, layout=FRAG), sm,
                      scope="warp")
    T.cuda.tile.apply(T.ptx["add.u32"], r.view(4, 1), r.view(4, 1), T.uint32(1))    # a register instruction
    sm2 = T.alloc_shared((4, 8, 4), "uint32")
    T.cuda.tile.apply(T.ptx["stmatrix.sync.aligned.m8n8.x4.shared.b16"], sm2, r.view(4, 8, 4, layout=FRAG),
                      scope="warp")
    T.cuda.syncthreads()
    v = T.alloc_local((4,), "uint32")
    T.cuda.tile.apply(T.ptx["ld.shared.v4.b32"], v.view(32, 1, 4, layout=LANE_ROW), sm2.view(32, 1, 4), scope="warp")
    T.cuda.tile.apply(T.ptx["st.global.v4.b32"], Out.view(32, 1, 4), v.view(32, 1, 4, layout=LANE_ROW), scope="warp")


def test_cp_async_ldmatrix_register_stmatrix_ld_st():
    """The register instructions, ld/st, ldmatrix/stmatrix and cp.async (+ commit/wait): one kernel through all,
    on the interpreter and through ptxas sm_90. (Every form: test_patterns_compile.py.)"""
    a = np.arange(128, dtype=np.uint32).reshape(32, 4) * 3
    out = np.zeros((32, 4), np.uint32)
    interp(k_families)(a, out)
    np.testing.assert_array_equal(out, a + 1)
    ptx = tiledsl.jit(k_families).compile(a, out, target="sm_90").asm["ptx"]
    for op in ("cp.async.cg.shared.global", "cp.async.commit_group", "cp.async.wait_group", "ldmatrix.sync",
               "stmatrix.sync", "ld.shared.v4", "st.global.v4", "add.u32"):
        assert op in ptx, op
    r = ptxas(ptx, "sm_90")
    assert r.returncode == 0, r.stderr


def k_sync(X: T.Tensor((64,), "float32"), Out: T.Tensor((64,), "float32")):
    T.device_entry(launch=LC(grid=1, block=64))
    t = T.cuda.thread_id()
    sm = T.alloc_shared((64,), "float32")
    sm[t] = X[t]
    T.cuda.syncthreads()
    Out[t] = sm[63 - t]


def test_syncthreads():
    """Barriers: T.cuda.syncthreads() (a reversal through shared memory: without it the interpreter's race
    detector faults, below)."""
    x = np.arange(64, dtype=np.float32)
    out = np.zeros(64, np.float32)
    interp(k_sync)(x, out)
    np.testing.assert_array_equal(out, x[::-1])
    assert "bar.sync 0;" in tiledsl.jit(k_sync).compile(x, out, target="sm_90").asm["ptx"]


# ===================================================================================== Layouts

def test_tile_layout_strides_axes_owner_and_picture():
    """TileLayout(S[(shape) : (strides)]), strides as ints or `value @ axis`; axes laneid, warpid, tx. A layout can
    say where a coordinate lives (which lane, which register slot) and can be drawn as a picture of lane/register
    ownership. (In depth: test_layouts.py, test_pictures.py.)"""
    ld = seed_mma.ld                                    # the seed page's D: (1, 1, 16, 8) over 32 lanes x 4 regs
    for row in range(16):
        for col in range(8):
            own = ld.owner((0, 0, row, col), (1, 1, 16, 8))
            assert own.lane == 4 * (row % 8) + col // 2 and own.slot == 2 * (row // 8) + col % 2 and own.warp == 0
    w = TileLayout(S[(2, 4, 2) : (1 @ warpid, 1 @ laneid, 1)])
    own = w.owner((1, 3, 1), (2, 4, 2))
    assert (own.warp, own.lane, own.thread, own.slot) == (1, 3, 35, 1)
    own = TileLayout(S[(4, 2) : (1 @ tx, 1)]).owner((3, 1), (4, 2))
    assert own.thread == 3 and own.slot == 1
    svg = ld.to_svg((1, 1, 16, 8), title="D")
    assert svg.startswith("<svg") and "D" in svg
    png = ld.to_png((1, 1, 16, 8))
    assert png[:8] == b"\x89PNG\r\n\x1a\n"


# ===================================================================================== Kept from resolved issues

@pytest.mark.filterwarnings("ignore:.*first config")
def test_autotune_config_key_stacked_on_jit():
    """tiledsl.autotune(configs=[tiledsl.Config({...constexprs}, **launch_options)], key=[arg names]) stacked on
    @tiledsl.jit. (On the interpreter the first config is used, with a warning; the tuning itself:
    test_autotune.py.)"""
    @tiledsl.autotune(configs=[tiledsl.Config({"F": 3.0}, block=64), tiledsl.Config({"F": 2.0}, block=32)],
                      key=["n"])
    @tiledsl.jit(interpret=True)
    def scaled(A: T.Tensor((64,), "float32"), n: T.int32, F: T.constexpr):
        T.device_entry(launch=LC(grid=1, block=64))
        i = T.cuda.block_id() * T.cuda.block_dim() + T.cuda.thread_id()
        if i < n:
            A[i] = A[i] * F
    a = np.ones(64, np.float32)
    with pytest.warns(UserWarning, match="first config"):
        scaled(a, 64)
    np.testing.assert_array_equal(a, 3.0)


def test_do_bench_without_a_gpu_is_a_clear_error():
    """tiledsl.testing.do_bench(fn, warmup=..., rep=...) -> milliseconds (median). It times with CUDA events: on a
    machine without a GPU it raises LaunchError saying so and pointing at the interpreter."""
    from tiledsl.runtime.driver import gpu_available
    if gpu_available():
        pytest.skip("a GPU is present: test_gpu_autotune.py times for real")
    with pytest.raises(tiledsl.LaunchError, match="no usable GPU"):
        tiledsl.testing.do_bench(lambda: None, warmup=1, rep=1)


def k_print_loops(Out: T.Tensor((4,), "int32")):
    T.device_entry(launch=LC(grid=1, block=2))
    t = T.cuda.thread_id()
    i = 0
    acc = 0
    while True:
        i = i + 1
        if i % 2 == 0:
            continue
        if i > 7:
            break
        acc = acc + i
    T.device_print("t=%d acc=%d\n", t, acc)
    Out[t] = acc


def test_device_print_while_break_continue(capsys):
    """T.device_print(fmt, *values); while, break, continue in kernels."""
    out = np.zeros(4, np.int32)
    interp(k_print_loops)(out)
    assert out.tolist() == [16, 16, 0, 0]
    printed = capsys.readouterr().out
    assert "t=0 acc=16" in printed and "t=1 acc=16" in printed
    ptx = tiledsl.jit(k_print_loops).compile(out, target="sm_90").asm["ptx"]
    assert "vprintf" in ptx and ptxas(ptx, "sm_90").returncode == 0


def k_no_launch(A: T.Tensor((32,), "float32")):
    A[T.cuda.thread_id()] = 1.0


def test_no_launch_configuration_is_a_launch_error():
    """A kernel with no launch configuration anywhere raises LaunchError (never a silent 1x1 launch).
    (Every path: test_launch_required.py.)"""
    a = np.zeros(32, np.float32)
    with pytest.raises(tiledsl.LaunchError, match="no launch configuration"):
        interp(k_no_launch)(a)
    assert (a == 0).all()
    # the GPU path: a LaunchError too (here, with no GPU, the missing GPU may be named first;
    # test_launch_required.py checks the message on the stub driver)
    with pytest.raises(tiledsl.LaunchError):
        tiledsl.jit(k_no_launch)(FakeCudaArray((32,)))


def test_wgmma_and_companions_compile_for_sm_90a():
    """Hopper families at scope="warpgroup": wgmma.mma_async...m64n{N}k16.f32.{f16|bf16}.{f16|bf16} and companions
    wgmma.fence / commit_group / wait_group; target "sm_90a". (In depth: test_wgmma.py.)"""
    import wgmma_cases
    for n, ab in ((8, "f16"), (16, "bf16")):
        k, sa, sb, so = wgmma_cases.make_kernel(n, ab)
        ck = k.compile(np.zeros(sa, np.uint16), np.zeros(sb, np.uint16), np.zeros(so, np.float32),
                       target="sm_90a")
        ptx = ck.asm["ptx"]
        for op in (f"wgmma.mma_async.sync.aligned.m64n{n}k16.f32.{ab}.{ab}", "wgmma.fence.sync.aligned",
                   "wgmma.commit_group.sync.aligned", "wgmma.wait_group.sync.aligned"):
            assert op in ptx, op
        assert ".target sm_90a" in ptx
        r = ptxas(ptx, "sm_90a")
        assert r.returncode == 0, r.stderr
    with pytest.raises(tiledsl.CompilationError, match="sm_90a"):
        k.compile(np.zeros(sa, np.uint16), np.zeros(sb, np.uint16), np.zeros(so, np.float32), target="sm_90")


TMA_BOX = (16, 32)


def test_tma_parameter_names_and_cluster():
    """TMA cp.async.bulk.tensor.* with the parameter names box, coords, coord_steps, swizzle, oob_fill, mbar,
    cta_mask, cache_policy; T.cuda.LaunchConfig(..., cluster=(x, y, z)). (In depth: test_tma.py,
    test_tma_multicast.py, test_cluster.py.)"""
    from tiledsl.lang.tensormap import tma_layout
    L = tma_layout(TMA_BOX, "float16", 64)
    load = "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
    hinted, multicast = load + ".L2::cache_hint", load + ".multicast::cluster"

    @tiledsl.jit
    def k(A: T.TensorMap((64, 64), "float16", box=TMA_BOX, swizzle=None, oob_fill="nan"),
          B: T.TensorMap((64, 64), "float16", box=TMA_BOX, swizzle=64), mask: T.int32, policy: T.uint64):
        T.device_entry(launch=LC(grid=2, block=32, cluster=(2, 1, 1)))
        two = T.alloc_shared((2, 16, 32), "float16")
        tile = T.alloc_shared(TMA_BOX, "float16", layout=L)
        bar = T.alloc_shared((1,), "uint64")
        if T.cuda.thread_id() == 0:
            T.cuda.tile.apply(T.ptx["mbarrier.init.shared::cta.b64"], bar, 1)
            T.cuda.tile.apply(T.ptx["mbarrier.arrive.expect_tx.shared::cta.b64"], bar, 3 * 16 * 32 * 2)
            T.cuda.tile.apply(T.ptx[hinted], two, A, mbar=bar, coords=(0, 0),
                              coord_steps=((16, 0),), cache_policy=policy)
            T.cuda.tile.apply(T.ptx[multicast], tile, B, mbar=bar, coords=(32, 0),
                              cta_mask=mask)
    maps = (np.zeros((64, 64), np.float16), np.zeros((64, 64), np.float16))
    ck = k.compile(*maps, 3, 0, target="sm_90a")
    ptx = ck.asm["ptx"]
    assert ".multicast::cluster" in ptx and ".L2::cache_hint" in ptx and ".reqnctapercluster 2, 1, 1" in ptx
    r = ptxas(ptx, "sm_90a")
    assert r.returncode == 0, r.stderr

    # mbar= is the third operand by name: the same expansion as the positional spelling, and not both at once
    @tiledsl.jit
    def positional(A: T.TensorMap((64, 64), "float16", box=TMA_BOX), By: T.constexpr, Both: T.constexpr):
        T.device_entry(launch=LC(grid=1, block=32))
        tile = T.alloc_shared(TMA_BOX, "float16")
        bar = T.alloc_shared((1,), "uint64")
        if T.cuda.thread_id() == 0:
            if Both:
                T.cuda.tile.apply(T.ptx[load], tile, A, bar, mbar=bar, coords=(0, 0))
            elif By:
                T.cuda.tile.apply(T.ptx[load], tile, A, mbar=bar, coords=(0, 0))
            else:
                T.cuda.tile.apply(T.ptx[load], tile, A, bar, coords=(0, 0))
    by_name = positional.compile(maps[0], True, False, target="sm_90a").asm["ptx"]
    assert by_name == positional.compile(maps[0], False, False, target="sm_90a").asm["ptx"]
    with pytest.raises(tiledsl.CompilationError, match="given twice"):
        positional.compile(maps[0], False, True, target="sm_90a")


def test_matmul_attention_flash_attention_from_tiledsl_ops():
    """matmul(a, b, bias=None, activation=None, out_dtype=None) (a @ b.T (+ bias)), matmul_fp8(a, b, scale_a,
    scale_b, out_dtype=torch.bfloat16), attention(q, k, v, causal=False, scale=None) -> (O, LSE), a differentiable
    flash_attention(q, k, v, causal=False, scale=None): importable from tiledsl.ops (the example scripts keep thin
    wrappers: they import them from there)."""
    import inspect

    from tiledsl import ops
    sig = lambda f: list(inspect.signature(f).parameters)[:6]   # noqa: E731
    assert sig(ops.matmul)[:5] == ["a", "b", "bias", "activation", "out_dtype"]
    p = inspect.signature(ops.matmul_fp8).parameters
    assert list(p)[:5] == ["a", "b", "scale_a", "scale_b", "out_dtype"] and p["out_dtype"].default is torch.bfloat16
    assert sig(ops.attention)[:5] == ["q", "k", "v", "causal", "scale"]
    assert sig(ops.flash_attention)[:5] == ["q", "k", "v", "causal", "scale"]
    for script, names in (("gemm.py", ["matmul"]), ("attention.py", ["attention"]),
                          ("attention_backward.py", ["flash_attention"])):
        text = open(os.path.join(ROOT, "examples", script)).read()
        assert all(re.search(rf"from tiledsl\.ops import .*\b{n}\b", text) for n in names), script
    torch.manual_seed(0)
    a, b = torch.randn(16, 32, dtype=torch.float16), torch.randn(8, 32, dtype=torch.float16)
    bias = torch.randn(8, dtype=torch.float16)
    torch.testing.assert_close(ops.matmul(a, b, bias).float(), a.float() @ b.float().T + bias.float(), rtol=2e-2,
                               atol=2e-2)
    # f16/bf16 only: a clear error, a TiledslError (and a ValueError, as before)
    with pytest.raises(tiledsl.TiledslError, match="float32 is not supported"):
        ops.matmul(a.float(), b.float())
    a8, b8 = (torch.randn(16, 32) / 4).to(torch.float8_e4m3fn), (torch.randn(8, 32) / 4).to(torch.float8_e4m3fn)
    c8 = ops.matmul_fp8(a8, b8, torch.tensor(2.0), torch.tensor(0.5))
    assert c8.dtype == torch.bfloat16
    torch.testing.assert_close(c8.float(), a8.float() @ b8.float().T, rtol=1e-2, atol=1e-2)
    q = torch.randn(1, 2, 16, 64, dtype=torch.float16)
    o, lse = ops.attention(q, q, q, causal=True)
    ref = torch.nn.functional.scaled_dot_product_attention(q.float(), q.float(), q.float(), is_causal=True)
    torch.testing.assert_close(o.float(), ref, rtol=2e-3, atol=2e-3)
    assert lse.shape == (1, 2, 16)
    qg, qr = q.clone().requires_grad_(), q.float().requires_grad_()
    ops.flash_attention(qg, qg, qg, causal=True).float().pow(2).sum().backward()
    torch.nn.functional.scaled_dot_product_attention(qr, qr, qr, is_causal=True).pow(2).sum().backward()
    torch.testing.assert_close(qg.grad.float(), qr.grad, rtol=2e-2, atol=2e-2)


OPS_ISSUE_20 = ["linear", "matmul", "matmul_fp8", "scaled_dot_product_attention", "softmax", "layer_norm", "rms_norm",
                "add_rms_norm"]


def test_tiledsl_ops_issue_20_names_and_torch_ops():
    """tiledsl.ops: linear, matmul, matmul_fp8, scaled_dot_product_attention (F.sdpa's signature), softmax,
    layer_norm, rms_norm, add_rms_norm; each also torch.ops.tiledsl.<name>. Called on small CPU tensors."""
    import inspect

    from tiledsl import ops
    for name in OPS_ISSUE_20:
        assert callable(getattr(ops, name)), name
        assert hasattr(torch.ops.tiledsl, name), f"torch.ops.tiledsl.{name}"
    sdpa = list(inspect.signature(ops.scaled_dot_product_attention).parameters)    # F.sdpa's, as torch documents it
    assert sdpa == ["query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale", "enable_gqa"]
    torch.manual_seed(0)
    x, w = torch.randn(4, 32, dtype=torch.float16), torch.randn(8, 32, dtype=torch.float16)
    F = torch.nn.functional

    def close(a, b):
        torch.testing.assert_close(a.float(), b.float(), rtol=2e-2, atol=2e-2)
    close(ops.linear(x, w), F.linear(x, w))
    close(torch.ops.tiledsl.linear(x, w), F.linear(x, w))
    close(ops.softmax(x), torch.softmax(x, -1))
    close(torch.ops.tiledsl.softmax(x), torch.softmax(x, -1))
    close(ops.layer_norm(x, (32,)), F.layer_norm(x, (32,)))
    g = torch.randn(32, dtype=torch.float16)
    xf = x.float()
    eps = torch.finfo(x.dtype).eps                     # eps=None: F.rms_norm's default
    close(ops.rms_norm(x, g), xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * g.float())
    y, r = ops.add_rms_norm(x, x.clone(), g)
    close(r, 2 * x)
    close(y, ops.rms_norm(2 * x, g))
    q = torch.randn(1, 2, 8, 64, dtype=torch.float16)
    close(ops.scaled_dot_product_attention(q, q, q, is_causal=True), F.scaled_dot_product_attention(q, q, q,
                                                                                                     is_causal=True))


def test_issue_23_and_25_names():
    """attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, causal=False, scale=None),
    attention_decode(q, k_cache, v_cache, cache_seqlens, block_table=None, ...); grouped_mm(x, w, offsets),
    matmul_fp8_blockwise(a, b, scale_a, scale_b), quantize_fp8_blockwise(x). (The MoE/FP8 ones are sm_90
    kernels: on CPU tensors they refuse with a LaunchError naming the device.)"""
    import inspect

    from tiledsl import ops
    want = {"attention_varlen": ["q", "k", "v", "cu_seqlens_q", "cu_seqlens_k", "max_seqlen_q", "max_seqlen_k",
                                 "causal", "scale"],
            "attention_decode": ["q", "k_cache", "v_cache", "cache_seqlens", "block_table"],
            "grouped_mm": ["x", "w", "offsets"],
            "matmul_fp8_blockwise": ["a", "b", "scale_a", "scale_b"],
            "quantize_fp8_blockwise": ["x"]}
    for name, params in want.items():
        p = inspect.signature(getattr(ops, name)).parameters
        assert list(p)[:len(params)] == params, name
    p = inspect.signature(ops.attention_varlen).parameters
    assert p["causal"].default is False and p["scale"].default is None
    assert inspect.signature(ops.attention_decode).parameters["block_table"].default is None
    # on small CPU tensors: the attention forms run (checked against torch); the sm_90-only kernels refuse clearly
    F = torch.nn.functional
    torch.manual_seed(0)
    q = torch.randn(10, 2, 64, dtype=torch.float16)
    cu = torch.tensor([0, 4, 10], dtype=torch.int32)
    o, _ = ops.attention_varlen(q, q, q, cu, cu, 6, 6)
    per_seq = [q[s:e].float().transpose(0, 1) for s, e in ((0, 4), (4, 10))]
    ref = torch.cat([F.scaled_dot_product_attention(x, x, x).transpose(0, 1) for x in per_seq])
    torch.testing.assert_close(o.float(), ref, rtol=2e-3, atol=2e-3)
    qd, kc = torch.randn(2, 1, 2, 64, dtype=torch.float16), torch.randn(2, 16, 2, 64, dtype=torch.float16)
    od = ops.attention_decode(qd, kc, kc, torch.tensor([5, 16], dtype=torch.int32))
    bhld = lambda x: x.float().transpose(1, 2)       # noqa: E731
    ref = torch.cat([F.scaled_dot_product_attention(bhld(qd[b:b + 1]), bhld(kc[b:b + 1, :n]), bhld(kc[b:b + 1, :n]))
                     .transpose(1, 2) for b, n in ((0, 5), (1, 16))])
    torch.testing.assert_close(od.float(), ref, rtol=2e-3, atol=2e-3)
    with pytest.raises(tiledsl.LaunchError, match="cpu"):
        ops.quantize_fp8_blockwise(torch.randn(128, 128))
    x, w = torch.randn(8, 32, dtype=torch.float16), torch.randn(2, 16, 32, dtype=torch.float16)
    with pytest.raises(tiledsl.LaunchError, match="sm_90 GPU"):
        ops.grouped_mm(x, w, torch.tensor([3, 8], dtype=torch.int32))
    a8 = torch.zeros(128, 128).to(torch.float8_e4m3fn)
    with pytest.raises(tiledsl.LaunchError, match="sm_90 GPU"):
        ops.matmul_fp8_blockwise(a8, a8, torch.ones(128, 1), torch.ones(1, 1))


def k_math(X: T.Tensor((4,), "float32"), Out: T.Tensor((13, 4), "float32")):
    T.device_entry(launch=LC(grid=1, block=4))
    t = T.cuda.thread_id()
    x = X[t]
    Out[0, t] = T.sqrt(x)
    Out[1, t] = T.rsqrt(x, approx=True)     # PTX has only approximate forms of these: the default
    Out[2, t] = T.exp2(x, approx=True)
    Out[3, t] = T.log2(x, approx=True)
    Out[4, t] = T.exp(x, approx=True)
    Out[5, t] = T.log(x, approx=True)
    Out[6, t] = T.sin(x, approx=True)
    Out[7, t] = T.cos(x, approx=True)
    Out[8, t] = T.tanh(x, approx=True)
    Out[9, t] = T.abs(-x)
    Out[10, t] = T.min(x, 1.0)
    Out[11, t] = T.max(x, 1.0)
    Out[12, t] = T.fma(x, x, 1.0)


def k_exp2_plain(X: T.Tensor((4,), "float32"), Out: T.Tensor((13, 4), "float32")):
    T.device_entry(launch=LC(grid=1, block=4))
    Out[0, T.cuda.thread_id()] = T.exp2(X[T.cuda.thread_id()])


def test_scalar_math():
    """T.sqrt, T.rsqrt, T.exp2, T.log2, T.exp, T.log, T.sin, T.cos, T.tanh, T.abs, T.min, T.max, T.fma.
    (docs/language.md: the functions PTX has only approximately are that form, approx= may be left out; approx=False
    is a CompilationError saying so. Precision and every dtype: test_scalar_math.py.)"""
    plain = np.zeros((13, 4), np.float32)
    interp(k_exp2_plain)(np.array([0.25, 0.5, 1.5, 3.0], np.float32), plain)
    np.testing.assert_allclose(plain[0], np.exp2([0.25, 0.5, 1.5, 3.0]), rtol=1e-6)
    x = np.array([0.25, 0.5, 1.5, 3.0], np.float32)
    out = np.zeros((13, 4), np.float32)
    interp(k_math)(x, out)
    ref = [np.sqrt(x), 1 / np.sqrt(x), np.exp2(x), np.log2(x), np.exp(x), np.log(x), np.sin(x), np.cos(x),
           np.tanh(x), x, np.minimum(x, 1), np.maximum(x, 1), x * x + 1]
    np.testing.assert_allclose(out, np.array(ref), rtol=1e-5, atol=1e-6)
    assert ptxas(tiledsl.jit(k_math).compile(x, out, target="sm_90").asm["ptx"], "sm_90").returncode == 0


def test_tiledsl_layouts_module():
    """tiledsl.layouts (the named fragment layouts: mma operands, ldmatrix, wgmma, TMA tiles)."""
    import tiledsl.layouts as layouts
    assert tiledsl.layouts is layouts
    for name in ("mma_a", "mma_b", "mma_d", "ldmatrix_a", "wgmma_acc", "tma_tile"):
        assert callable(getattr(layouts, name)), name


def test_cli_compile_subprocess(tmp_path):
    """python -m tiledsl compile (a subprocess, as a user runs it)."""
    env = dict(os.environ, PYTHONPATH=ROOT, TILEDSL_CACHE_DIR=str(tmp_path))
    r = subprocess.run([sys.executable, "-m", "tiledsl", "compile",
                        os.path.join(ROOT, "examples", "seed_mma.py") + "::warp_mma", "--target", "sm_90",
                        "--emit", "ptx"], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.count("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32") == 2 and ".target sm_90" in r.stdout
    r = subprocess.run([sys.executable, "-m", "tiledsl", "compile", "nowhere.py::k"], capture_output=True,
                       text=True, env=env, timeout=120)
    assert r.returncode != 0 and "Traceback" not in r.stderr


def k_race(X: T.Tensor((64,), "float32"), Out: T.Tensor((64,), "float32")):
    T.device_entry(launch=LC(grid=1, block=64))
    t = T.cuda.thread_id()
    sm = T.alloc_shared((64,), "float32")
    sm[t] = X[t]
    Out[t] = sm[63 - t]                                 # no syncthreads: another warp's write races this read


def k_unguarded(X: T.Tensor((4,), "float32"), Out: T.Tensor((8,), "float32"), n: T.int32):
    T.device_entry(launch=LC(grid=1, block=8))
    t = T.cuda.thread_id()
    if t < n and X[t] > 0.0:
        Out[t] = 1.0
    Out[t] = Out[t] + X[t]


def test_kernel_fault_for_races_and_misreads_naming_lines():
    """Races, misreads past a short-circuit guard and register-view mismatches raise KernelFault (interpreter,
    debug mode) or CompilationError, naming the source lines involved. (In depth: tests/bad_inputs/,
    test_racecheck.py, test_short_circuit.py, test_dim_checks.py.)"""
    import inspect
    x = np.arange(64, dtype=np.float32)
    with pytest.raises(tiledsl.KernelFault) as ei:
        interp(k_race)(x, np.zeros(64, np.float32))
    msg = str(ei.value)
    _, start = inspect.getsourcelines(k_race)
    assert f"test_api_md.py:{start + 4}" in msg and f"test_api_md.py:{start + 5}" in msg, msg
    # `t < n and X[t] > 0` reads X only where the guard holds; the unguarded X[t] below reads past X's 4 elements
    with pytest.raises(tiledsl.KernelFault) as ei:
        interp(k_unguarded)(np.ones(4, np.float32), np.zeros(8, np.float32), 4)
    _, start = inspect.getsourcelines(k_unguarded)
    assert f"test_api_md.py:{start + 5}" in str(ei.value), str(ei.value)
    # a register view that does not fit the pattern: CompilationError at the apply (test above, operand A)
