"""The Hopper GEMM with MN-major operands (a_major / b_major = "mn": A given as (K, M), B as (K, N), read as stored
through 64-column TMA boxes and wgmma's transposed shared-memory operands) on any machine: every (a_major, b_major)
exact on the interpreter for f16 and bf16 with ragged M, N and K; sm_90a assembly without spills; fp8 refused;
matmul's plan reading transposed views as stored, and the gate ("gemm_mn_major") that keeps CUDA tensors off the
path until a GPU session has run tests/test_gpu_gemm_layouts.py."""
import numpy as np
import pytest

import tiledsl
from helpers import ptxas
from tiledsl.ops import gates
from tiledsl.ops.gemm import hopper as H

MAJORS = [("k", "k"), ("k", "mn"), ("mn", "k"), ("mn", "mn")]
IDS = [f"A{a}-B{b}" for a, b in MAJORS]


def _bits(x: np.ndarray, ab: str) -> np.ndarray:
    """Host operands: float16 as it is, bfloat16 as its uint16 bits (the top half of the float32)."""
    if ab == "float16":
        return x.astype(np.float16)
    return (x.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)


def _operands(M, N, K, majors, ab, seed=0):
    """Small exact values (k/8, |k| <= 8: every product and partial sum exact in f32), A and B stored as the majors
    say: (M, K) / (N, K) K-major, (K, M) / (K, N) MN-major; and the f64 reference A @ B.T."""
    rng = np.random.default_rng(seed)
    a = rng.integers(-8, 9, (M, K)) / 8
    b = rng.integers(-8, 9, (N, K)) / 8
    sa = a if majors[0] == "k" else np.ascontiguousarray(a.T)
    sb = b if majors[1] == "k" else np.ascontiguousarray(b.T)
    return _bits(sa, ab), _bits(sb, ab), a @ b.T


@pytest.mark.parametrize("ab", ["float16", "bfloat16"])
@pytest.mark.parametrize("majors", MAJORS, ids=IDS)
def test_every_major_on_the_interpreter(majors, ab):
    """M, N and the last K tile ragged (136 x 200 x 136: two tile columns, the second 72 wide; a K tile of 8):
    the TMA unit's zero fill along either dimension of an MN-major box keeps C exact."""
    M, N, K = 136, 200, 136
    a, b, ref = _operands(M, N, K, majors, ab, seed=len(ab))
    c = np.full((M, N), -1.0, np.float32)
    k = H.make_hopper_gemm(ab, "float32", a_major=majors[0], b_major=majors[1])
    tiledsl.jit(k.fn, interpret=True)(a, b, c)
    np.testing.assert_array_equal(c, ref)


@pytest.mark.parametrize("cfg", [dict(multicast=True, tma_store=True), dict(persistent=True, bn=256, stages=3),
                                 dict(consumers=1, bn=64, stages=2)],
                         ids=["multicast-halves-of-B", "persistent-ring-turns", "one-consumer-bn64"])
def test_mn_major_variants_on_the_interpreter(cfg):
    """Both operands MN-major in the other walks: 2-CTA multicast (each block loads one 64-column box of B and
    multicasts it), the persistent grid whose three-stage ring turns over five K tiles, one consumer."""
    pytest.importorskip("tiledsl.interpreter.fibers")
    M, N, K = 264, 136, 320 if cfg.get("persistent") else 136
    a, b, ref = _operands(M, N, K, ("mn", "mn"), "float16", seed=7)
    c = np.full((M, N), -1.0, np.float32)
    k = H.make_hopper_gemm("float16", "float32", a_major="mn", b_major="mn", num_sms=2, **cfg)
    tiledsl.jit(k.fn, interpret=True)(a, b, c)
    np.testing.assert_array_equal(c, ref)


@pytest.mark.parametrize("majors", MAJORS, ids=IDS)
def test_every_major_assembles_without_spills(majors):
    """The big shapes' configuration (persistent, 128 x 256 tiles, TMA-store epilogue), bf16 in and out."""
    k = H.make_hopper_gemm("bfloat16", "bfloat16", persistent=True, bn=256, tma_store=True, a_major=majors[0],
                           b_major=majors[1])
    a, b, _ = _operands(256, 256, 512, majors, "bfloat16")
    ck = k.compile(a, b, np.zeros((256, 256), np.uint16))
    ptx = ck.asm["ptx"]
    assert "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16" in ptx and "__local_depot" not in ptx
    # an MN-major operand's stage: one TMA load per 64-column box (A: 2, B: 4), K-major: one box
    loads = ptx.count("cp.async.bulk.tensor.2d.shared::cluster.global.tile")
    assert loads == (2 if majors[0] == "mn" else 1) + (4 if majors[1] == "mn" else 1)
    r = ptxas(ptx, "sm_90a")
    assert r.returncode == 0, r.stderr
    assert ck.metadata.get("spill_stores", 0) == 0 and ck.metadata.get("spill_loads", 0) == 0


@pytest.mark.parametrize("cfg", [dict(multicast=True, persistent=True, bn=256, tma_store=True),
                                 dict(split_k=2, tma_store=True), dict(persistent=True, stream_k=True, bn=256)],
                         ids=["multicast", "split-k", "stream-k"])
def test_mn_major_walks_assemble_without_spills(cfg):
    k = H.make_hopper_gemm("float16", "float16", a_major="mn", b_major="mn", **cfg)
    a, b, _ = _operands(256, 256, 512, ("mn", "mn"), "float16")
    args = (a, b, np.zeros((256, 256), np.float16))
    if cfg.get("stream_k"):
        args += (np.zeros(k.slots, np.float32), np.zeros(k.flags, np.int32))
    ck = k.compile(*args)
    r = ptxas(ck.asm["ptx"], "sm_90a")
    assert r.returncode == 0, r.stderr
    assert ck.metadata.get("spill_stores", 0) == 0 and ck.metadata.get("spill_loads", 0) == 0


def test_fp8_refuses_mn_major():
    with pytest.raises(tiledsl.LaunchError, match="fp8 wgmma has no transpose"):
        H.make_hopper_gemm_fp8("e4m3", a_major="mn")
    with pytest.raises(tiledsl.LaunchError, match="K-major only"):
        H.make_hopper_gemm_fp8("e4m3", "e5m2", b_major="mn")


def test_mn_major_b_needs_64_column_boxes():
    with pytest.raises(tiledsl.LaunchError, match="multiple of 64"):
        H.make_hopper_gemm("float16", b_major="mn", bn=96)
    with pytest.raises(tiledsl.LaunchError, match="'k' .* or 'mn'"):
        H.make_hopper_gemm("float16", a_major="m")


def test_major_of_reads_the_strides():
    torch = pytest.importorskip("torch")
    x = torch.zeros(64, 128, dtype=torch.float16)
    assert H.major_of(x) == "k"
    assert H.major_of(x.t()) == "mn"                    # (128, 64) with stride (1, 128)
    assert H.major_of(x[:, :60].t()) == "k"             # rows 60: not a multiple of 8 (16-byte rows)
    assert H.major_of(x[:, 1:].t()) == "k"              # neither row-major nor a transposed contiguous tensor
    assert H.major_of(torch.zeros(1, 64, dtype=torch.float16)) == "k"


def test_matmul_plan_reads_transposed_views_on_the_interpreter(monkeypatch):
    """matmul's Hopper plan (route() forced to sm_90 for CPU tensors, which the gate always allows: they run on the
    interpreter) keyed and described by the majors: a = x.t(), b = y.t() read as stored, no copy."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("tiledsl.interpreter.fibers")
    from tiledsl.ops.gemm import matmul as MM
    monkeypatch.setattr(MM, "device_capability", lambda t: (9, 0))
    monkeypatch.setattr(MM, "_PLANS", {})
    rng = np.random.default_rng(3)
    x = torch.tensor(rng.integers(-8, 9, (72, 136)) / 8, dtype=torch.bfloat16)     # (K, M)
    y = torch.tensor(rng.integers(-8, 9, (72, 128)) / 8, dtype=torch.bfloat16)     # (K, N)
    a, b = x.t(), y.t()
    cfg = (128, 1, 2, 0, 1, 0)
    plan = MM.plan_of(a, b, out=torch.empty(136, 128, dtype=torch.float32), config=cfg, tune=False)
    assert plan.majors == ("mn", "mn") and "A and B MN-major" in plan.describe
    c = MM.matmul(a, b, out_dtype=torch.float32, config=cfg, tune=False)
    np.testing.assert_array_equal(c.numpy(), (a.double() @ b.double().t()).numpy())
    assert MM.plan_of(a.contiguous(), b, config=cfg, tune=False).majors == ("k", "mn")


def test_the_gate_is_verified_and_closed_by_the_environment(monkeypatch):
    import os
    assert "gemm_mn_major" in gates.GATED and os.path.exists(
        os.path.join(os.path.dirname(__file__), os.path.basename(gates.GATED["gemm_mn_major"])))
    monkeypatch.delenv("TILEDSL_ENABLE", raising=False)
    monkeypatch.delenv("TILEDSL_DISABLE", raising=False)
    assert "gemm_mn_major" in gates.VERIFIED and gates.enabled("gemm_mn_major")
    monkeypatch.setenv("TILEDSL_DISABLE", "gemm_mn_major")
    assert not gates.enabled("gemm_mn_major")


def test_a_cuda_plan_passes_the_gated_path_over(monkeypatch):
    """For CUDA tensors with the gate off, matmul copies the transposed operands K-major and says so."""
    from types import SimpleNamespace

    from tiledsl.ops.gemm import matmul as MM
    cuda, host = SimpleNamespace(is_cuda=True), SimpleNamespace(is_cuda=False)
    monkeypatch.delenv("TILEDSL_ENABLE", raising=False)
    monkeypatch.setenv("TILEDSL_DISABLE", "gemm_mn_major")
    assert MM.mn_choice(cuda, ("mn", "k")) == (MM.KK, MM.GATED_NOTE)
    assert MM.mn_choice(host, ("mn", "k")) == (("mn", "k"), "")
    monkeypatch.delenv("TILEDSL_DISABLE")
    assert MM.mn_choice(cuda, ("mn", "k")) == (("mn", "k"), "")
