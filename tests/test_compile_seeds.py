"""Compile-only: the seed kernels through every stage, checked by ptxas (runs on any machine with ptxas)."""
import re
import shutil

import numpy as np
import pytest

import seed_fma
import seed_mma
from helpers import ptxas


def test_ptxas_is_installed():
    # The compile-only tests must run in CI: a missing ptxas is a failure, not a skip.
    assert shutil.which("ptxas"), "ptxas not found on PATH"


def mma_kernel(target="sm_90"):
    _, _, ap, bp = seed_mma.inputs()
    return seed_mma.warp_mma.compile(ap, bp, np.zeros((16, 8), np.float32), target=target)


def fma_kernel(target="sm_90"):
    a = np.zeros((4, 1), np.float32)
    return seed_fma.affine_fma.compile(a, a, target=target)


def test_seed_mma_ptx_has_exactly_two_mma_and_no_barrier_or_ldmatrix():
    ptx = mma_kernel().asm["ptx"]
    assert len(re.findall(r"mma\.sync\.aligned\.m16n8k16\.row\.col\.f32\.f16\.f16\.f32", ptx)) == 2
    assert "bar.sync" not in ptx and "barrier" not in ptx and "ldmatrix" not in ptx


def test_seed_fma_ptx_has_exactly_four_fma_and_no_multiply():
    ptx = fma_kernel().asm["ptx"]
    assert len(re.findall(r"\bfma\.rn\.f32\b", ptx)) == 4
    assert not re.search(r"\bmul(\.\w+)*\.f32\b", ptx)
    assert len(re.findall(r"\bld\.global\.f32\b", ptx)) == 4
    assert len(re.findall(r"\bst\.global\.f32\b", ptx)) == 4


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("which", ["mma", "fma"])
def test_ptxas_accepts_seed_kernels(which, arch):
    ck = (mma_kernel if which == "mma" else fma_kernel)(arch)
    r = ptxas(ck.asm["ptx"], arch)
    assert r.returncode == 0, r.stderr
    assert f".target {arch}" in ck.asm["ptx"]


def test_compile_returns_every_stage_and_metadata():
    ck = mma_kernel()
    for stage in ("tile", "expanded", "llvm", "ptx"):
        assert stage in ck.asm and ck.asm[stage]
    assert "tile.apply mma.sync" in ck.asm["tile"]
    assert ck.asm["expanded"].count("mma.sync.aligned") == 2
    assert "nvptx64-nvidia-cuda" in ck.asm["llvm"]
    assert ck.metadata.get("registers", 0) > 0


def test_expanded_seed_mma_chains_c_through_d():
    text = mma_kernel().asm["expanded"]
    lines = [ln.strip() for ln in text.splitlines() if "mma.sync" in ln]
    # first issue reads the scalar C, the second reads D's registers
    assert "float32(0.0)" in lines[0]
    assert lines[1].endswith("{dr[0], dr[1], dr[2], dr[3]};")
