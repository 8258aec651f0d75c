"""The messages of mistakes made around a kernel rather than in its body (no GPU needed): dtype names and their
aliases, a launch on a machine without a GPU, asm["sass"] without the CUDA disassembler, a list as grid or block."""
import shutil

import numpy as np
import pytest

import tiledsl
from helpers import FakeCudaArray
from tiledsl import T
from tiledsl.compiled import SassUnavailable, StageDict
from tiledsl.core import dtypes as dt

# ------------------------------------------------------------------ dtype names

ALIASES = {"f16": "float16", "fp16": "float16", "half": "float16", "bf16": "bfloat16", "f32": "float32",
           "fp32": "float32", "float": "float32", "f64": "float64", "fp64": "float64", "double": "float64",
           "i8": "int8", "i32": "int32", "u16": "uint16", "u64": "uint64"}


@pytest.mark.parametrize("alias, name", ALIASES.items())
def test_dtype_aliases_mean_their_canonical_dtype(alias, name):
    assert T.Tensor((4,), alias).dtype is dt.BY_NAME[name]
    assert T.Tensor((4,), alias).dtype.name == name           # messages and the IR show the canonical name


def test_aliases_work_inside_a_kernel():
    @tiledsl.jit(interpret=True)
    def k(A: T.Tensor((4,), "f32"), Out: T.Tensor((4,), "bf16")):
        T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=4))
        i = T.cuda.thread_id()
        r = T.alloc_local((1,), "fp16")
        r[0] = T.cast(A[i], "half")
        bits = r.view(dtype="u16")
        Out[i] = T.cast(T.cast(bits[0], "i32") * 0 + T.cast(r[0], "f32"), "bf16")
    a = np.array([1, 2, 3, 4], np.float32)
    out = np.zeros(4, np.uint16)                              # bfloat16 bits on the host
    k(a, out)
    np.testing.assert_array_equal(out, dt.bf16_bits_array(a))


@pytest.mark.parametrize("bad", ["fp8", "complex64", "float128", "int4"])
def test_an_unknown_dtype_lists_the_valid_names(bad):
    with pytest.raises(tiledsl.TiledslError) as ei:
        T.Tensor((4,), bad)
    msg = str(ei.value)
    assert msg.startswith(f"unknown dtype {bad!r}; the dtypes are bool, int8, uint8, int16")
    assert "float64 (aliases: f16/fp16/half = float16, bf16 = bfloat16, f32/fp32/float = float32" in msg


def test_an_unknown_dtype_in_a_kernel_is_reported_at_its_line():
    def k(A: T.Tensor((4,), "float32")):
        T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
        A[0] = T.cast(A[1], "Float16")
    with pytest.raises(tiledsl.CompilationError) as ei:
        tiledsl.jit(k).compile(np.zeros(4, np.float32), target="sm_90")
    msg = str(ei.value)
    assert "unknown dtype 'Float16' (dtype names are lower case: 'float16'); the dtypes are bool" in msg
    assert 'T.cast(A[1], "Float16")' in msg.splitlines()[1]


def test_a_tensor_map_names_the_valid_dtypes_too():
    with pytest.raises(tiledsl.TiledslError, match="unknown dtype 'e4m3'; the dtypes are"):
        T.TensorMap((64, 64), "e4m3", box=(64, 64))
    assert T.TensorMap((64, 64), "bf16", box=(64, 64)).dtype is dt.bfloat16


# ------------------------------------------------------------------ no GPU


@tiledsl.jit
def copy(A: T.Tensor((32,), "float32"), Out: T.Tensor((32,), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    i = T.cuda.thread_id()
    Out[i] = A[i]


def test_no_gpu_suggests_the_interpreter(monkeypatch):
    """Whatever stops the driver (here: no driver library), the error says how to run without a GPU."""
    from tiledsl.runtime import driver

    def no_driver():
        raise ImportError("libcuda.so.1: cannot open shared object file")
    monkeypatch.setitem(driver._state, "init", None)
    monkeypatch.setitem(driver._state, "ctx", {})              # (a GPU machine: no context made before either)
    monkeypatch.setattr(driver, "_drv", no_driver)
    with pytest.raises(tiledsl.LaunchError) as ei:
        copy(FakeCudaArray((32,)), FakeCudaArray((32,)))
    msg = str(ei.value)
    assert msg.startswith("no usable GPU: ImportError: libcuda.so.1")
    assert "@tiledsl.jit(interpret=True)" in msg and "TILEDSL_INTERPRET=1" in msg
    a, out = np.arange(32, dtype=np.float32), np.zeros(32, np.float32)
    tiledsl.jit(interpret=True)(copy.fn)(a, out)              # what the message suggests works
    np.testing.assert_array_equal(out, a)


# ------------------------------------------------------------------ asm["sass"]


def test_sass_without_a_disassembler_says_what_is_missing(monkeypatch):
    z = np.zeros(32, np.float32)
    ck = copy.compile(z, z, target="sm_90")
    which = shutil.which
    monkeypatch.setattr(shutil, "which", lambda name, *a, **k: None if name in ("cuobjdump", "nvdisasm")
                        else which(name, *a, **k))
    asm = StageDict(dict(ck.asm), b"\x7fELF")                  # a fresh dict: nothing disassembled yet
    assert "sass" not in asm and asm.get("sass") is None
    with pytest.raises(SassUnavailable) as ei:
        asm["sass"]
    e = ei.value
    assert isinstance(e, KeyError) and isinstance(e, tiledsl.TiledslError)
    assert str(e).startswith("asm['sass'] is not available: neither cuobjdump nor nvdisasm is on PATH: they come "
                             "with the CUDA toolkit")
    assert asm["ptx"] == ck.asm["ptx"]                          # the other stages are there as before
    with pytest.raises(KeyError) as ei:
        asm["nonsense"]
    assert type(ei.value) is KeyError


def test_sass_without_a_cubin_says_why():
    asm = StageDict({"ptx": "..."}, None)
    assert "sass" not in asm
    with pytest.raises(SassUnavailable, match="there is no cubin to disassemble: the PTX was not assembled"):
        asm["sass"]


# ------------------------------------------------------------------ grid and block


def test_a_list_as_grid_or_block_is_a_launch_error_that_says_tuple():
    for cfg in (([1], [32]), (1, [32]), ([1], 32)):
        with pytest.raises(tiledsl.LaunchError) as ei:
            copy[cfg]
        assert "write a list as a tuple, e.g. kernel[(2,), (32,)]" in str(ei.value)
    with pytest.raises(tiledsl.LaunchError, match="write a list as a tuple"):
        tiledsl.jit(interpret=True)(copy.fn)[[1], [32]](np.zeros(32, np.float32), np.zeros(32, np.float32))


def test_lists_in_launch_config_and_compile_are_tuples():
    @tiledsl.jit(interpret=True)
    def k(A: T.Tensor((2, 32), "float32")):
        T.device_entry(launch=T.cuda.LaunchConfig(grid=[2], block=[32, 1]))
        A[T.cuda.block_id(), T.cuda.thread_id()] = 1.0
    a = np.zeros((2, 32), np.float32)
    k(a)
    assert a.sum() == 64
    ck = copy.compile(np.zeros(32, np.float32), np.zeros(32, np.float32), target="sm_90", block=[32])
    assert ck.signature.block == (32, 1, 1)
