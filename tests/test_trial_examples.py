"""The kernels of issue 34's new-user trial, written with scalar math, tiledsl.lib and the reference pages
(examples/add_rms_norm.py, first_below.py, tuned_gelu.py; the fourth, the ldmatrix + mma.sync GEMM, is
examples/mma_gemm.py, tested in test_layouts.py): each runs its main (the interpreter here, the GPU where there is
one: marked gpu below), and compiles through ptxas for sm_90."""
import numpy as np
import pytest

from helpers import ptxas

import add_rms_norm
import first_below
import tuned_gelu


@pytest.mark.parametrize("example", [add_rms_norm, first_below, tuned_gelu])
def test_main_runs(example, capsys):
    example.main()                       # it asserts its result against a reference itself
    out = capsys.readouterr().out
    assert "CPU interpreter" in out or "on the GPU" in out, out


def test_add_rms_norm_compiles_for_sm90():
    x = np.zeros((4, 4096), np.float16)
    ck = add_rms_norm.make(4096).compile(x, x, np.zeros(4096, np.float16), x, x, 1e-5, target="sm_90")
    r = ptxas(ck.asm["ptx"], "sm_90")
    assert r.returncode == 0, r.stderr


def test_first_below_compiles_for_sm90():
    ck = first_below.first_below.compile(np.zeros(1 << 20, np.float32), 0.0, np.zeros(1, np.int32),
                                         target="sm_90")
    r = ptxas(ck.asm["ptx"], "sm_90")
    assert r.returncode == 0, r.stderr
    assert "red.global.min.s32" in ck.asm["ptx"]


def test_tuned_gelu_candidates_compile_for_sm90():
    x = np.zeros(1 << 16, np.float16)
    for cfg in ({"V": 2, "B": 128}, {"V": 8, "B": 512}):
        ck = tuned_gelu.gelu.fn.compile(x, x, target="sm_90", **cfg)       # the autotuner's kernel, one candidate
        r = ptxas(ck.asm["ptx"], "sm_90")
        assert r.returncode == 0, r.stderr
        assert "tanh.approx.f32" in ck.asm["ptx"]


@pytest.mark.gpu
@pytest.mark.parametrize("example", [add_rms_norm, first_below, tuned_gelu])
def test_main_on_the_gpu(example, capsys):
    from tiledsl.runtime.driver import gpu_available
    if not gpu_available():
        pytest.skip("no NVIDIA GPU on this machine")
    example.main()
    assert "on the GPU" in capsys.readouterr().out
