"""The skinny GEMM (tiledsl/ops/gemm/skinny_kernel.py, skinny.py: swap-AB, split-K, last-arriver sum) on any
machine: exact results on the fibered interpreter (M 1..64, ragged N and K, K not a multiple of the K tile, split
counts 1 .. more than the K tiles), bit-identical repeat launches on counters left as the last launch left them (a
CUDA graph replayed with no memset), ptxas -arch=sm_90a without spills, the configuration heuristic, and the gate
(`gemm_skinny`) matmul's plan asks before it takes the kernel for a CUDA tensor. The schedule model's checks of the
walk are in test_gemm_schedule.py; tests/test_gpu_gemm_skinny.py runs it on the H200."""
import numpy as np
import pytest

import tiledsl
from tiledsl.ops import gates
from tiledsl.ops.gemm import hopper_plan as HP
from tiledsl.ops.gemm import skinny as SKN
from helpers import ptxas
from test_hopper_gemm import _as_float, _host_out, _inputs, _round_bf16

ARRIVE = "atom.acq_rel.gpu.global.inc.u32"


def _want(ref, out):
    """The exact sums rounded once to C's type (the inputs are multiples of 1/8: every sum exact in f32)."""
    if out == "bfloat16":
        return _as_float(_round_bf16(ref), out)
    return ref.astype(np.float16 if out == "float16" else np.float32).astype(np.float64)


def _launch(k, a, b, c, W=None, F=None):
    run = tiledsl.jit(k.fn, interpret=True)
    if k.splits > 1:
        run(a, b, c, W, F)
    else:
        run(a, b, c)


@pytest.mark.parametrize("M,N,K,ab,out,cfg", [
    # one split: N ragged (72 = 64 + 8), K ragged (136 = 2 x 64 + 8)
    (1, 72, 136, "float16", "float32", (8, 1, 4, 1)),
    # 16 K tiles over 3 splits (6, 6, 4) through 4 stages: each split's ring turns
    (7, 200, 1000, "float16", "float16", (8, 1, 4, 3)),
    (16, 64, 520, "bfloat16", "bfloat16", (16, 1, 3, 2)),
    # two consumer warpgroups (128-row tiles), M = 33 in an n40 wgmma, N ragged
    (33, 130, 392, "float16", "float32", (40, 2, 3, 2)),
    # more splits than K tiles: 4 K tiles over 5 splits, the last with none (it contributes zeros)
    (64, 72, 200, "bfloat16", "bfloat16", (64, 1, 2, 5))],
    ids=["m1-one-split", "m7-ring-turns", "m16-bf16", "m33-two-consumers", "m64-splits-past-k"])
def test_skinny_on_the_interpreter_is_exact(M, N, K, ab, out, cfg):
    """Exact against the f32 sums; the counters back at 0 after each launch, and a second launch on them (no reset,
    the workspace left dirty) gives the same bits."""
    pytest.importorskip("tiledsl.interpreter.fibers")
    a, b, ref = _inputs(M, N, K, ab, seed=M + N + K)
    k = SKN.make_skinny_gemm(ab, out, *cfg)
    W = np.full(k.slots(N), np.nan, np.float32)
    F = np.zeros(k.counters(N), np.int32)
    first = None
    for _ in range(2):
        c = _host_out(M, N, out)
        c[...] = 1                                  # every element of C is written
        _launch(k, a, b, c, W, F)
        np.testing.assert_array_equal(_as_float(c, out), _want(ref, out))
        assert not F.any()
        if first is not None:
            assert first.tobytes() == c.tobytes()
        first = c.copy()


def test_split_sums_are_bit_reproducible():
    """Values whose sums round (normal f16): the last arriver adds the partials in split order, so two launches give
    the same bits, close to the f32 reference."""
    pytest.importorskip("tiledsl.interpreter.fibers")
    M, N, K = 5, 64, 776
    rng = np.random.default_rng(3)
    a = rng.standard_normal((M, K)).astype(np.float16)
    b = rng.standard_normal((N, K)).astype(np.float16)
    k = SKN.make_skinny_gemm("float16", "float32", 8, 1, 4, 4)
    W = np.zeros(k.slots(N), np.float32)
    F = np.zeros(k.counters(N), np.int32)
    outs = []
    for _ in range(2):
        c = np.zeros((M, N), np.float32)
        _launch(k, a, b, c, W, F)
        outs.append(c)
    assert outs[0].tobytes() == outs[1].tobytes()
    np.testing.assert_allclose(outs[0], a.astype(np.float32) @ b.astype(np.float32).T, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("ab,out,cfg", [("float16", "float16", (8, 1, 10, 2)), ("bfloat16", "bfloat16", (64, 1, 6, 4)),
                                        ("float16", "float32", (16, 1, 9, 1)), ("float16", "float16", (64, 2, 4, 2)),
                                        ("bfloat16", "float16", (256, 1, 4, 2))])
def test_compiles_for_sm90a_without_spills(ab, out, cfg):
    k = SKN.make_skinny_gemm(ab, out, *cfg)
    M, N, K = min(cfg[0], 64), 4096, 4096
    args = [_host_out(M, K, ab), _host_out(N, K, ab), _host_out(M, N, out)]
    if k.splits > 1:
        args += [np.zeros(k.slots(N), np.float32), np.zeros(k.counters(N), np.int32)]
    ck = k.compile(*args)
    ptx = ck.asm["ptx"]
    assert ".target sm_90a" in ptx and "__local_depot" not in ptx
    t = {"float16": "f16", "bfloat16": "bf16"}[ab]
    assert f"wgmma.mma_async.sync.aligned.m64n{cfg[0]}k16.f32.{t}.{t}" in ptx
    assert (ARRIVE in ptx) == (cfg[3] > 1)
    r = ptxas(ptx, "sm_90a", verbose=True)
    assert r.returncode == 0, r.stderr
    assert "C7518" not in r.stderr and "C7517" not in r.stderr     # no wgmma serialised
    assert ck.metadata.get("spill_stores", 0) == 0 and ck.metadata.get("spill_loads", 0) == 0


@pytest.mark.parametrize("M,N,K", [(1, 4096, 4096), (16, 4096, 4096), (1, 4096, 14336), (64, 14336, 4096),
                                   (32, 28672, 4096), (8, 1024, 64), (64, 5120, 5120), (200, 4096, 4096)])
def test_the_heuristic_covers_m_and_spreads_the_weight_over_the_sms(M, N, K):
    mp, cons, stages, splits = SKN.choose_skinny(M, N, K, 132)
    assert mp >= M and mp % 8 == 0 and mp - M < 8
    ktiles, tiles = -(-K // 64), -(-N // (64 * cons))
    kh = -(-ktiles // splits)
    assert (splits - 1) * kh < ktiles                               # no split without a K tile
    assert tiles * splits >= min(132 * 0.9, tiles * ktiles)         # every SM reads the weight, where K allows
    assert SKN.make_skinny_gemm("float16", "float16", mp, cons, stages, splits)


def test_make_refuses_what_it_does_not_build():
    for kw in (dict(mp=12), dict(mp=264), dict(mp=192, consumers=2), dict(consumers=3), dict(stages=1),
               dict(splits=0), dict(mp=64, consumers=2, stages=20), dict(activation="tanh"),
               dict(bias="bfloat16")):
        with pytest.raises(tiledsl.LaunchError, match="skinny gemm"):
            SKN.make_skinny_gemm("float16", "float16", **kw)
    with pytest.raises(tiledsl.LaunchError, match="float16/bfloat16"):
        SKN.make_skinny_gemm("e4m3", "bfloat16")


# ------------------------------------------------------------------------------------------------- plan and gate
def _operands(M, N, K):
    torch = pytest.importorskip("torch")
    g = torch.Generator().manual_seed(M * N + K)
    a = (torch.randint(-8, 9, (M, K), generator=g) / 8).half()
    b = (torch.randint(-8, 9, (N, K), generator=g) / 8).half()
    return torch, a, b


def _as_cuda(torch, t):
    """t claiming to be a CUDA tensor: the plan is made (not launched) as for a device tensor."""
    class OnDevice(torch.Tensor):
        @property
        def is_cuda(self):
            return True
    return torch.Tensor._make_subclass(OnDevice, t)


def test_the_gate_is_registered():
    assert gates.GATED["gemm_skinny"] == "tests/test_gpu_gemm_skinny.py"


def test_a_cuda_plan_passes_the_gated_kernel_over_and_says_so(monkeypatch):
    torch, a, b = _operands(16, 4096, 4096)
    out = torch.empty(16, 4096, dtype=torch.float16)
    monkeypatch.setenv("TILEDSL_DISABLE", "gemm_skinny")
    assert not gates.enabled("gemm_skinny")
    plan = HP.hopper_plan(_as_cuda(torch, a), _as_cuda(torch, b), out, None, False, 132)
    assert plan.path == "hopper" and "skinny kernel was passed over: gated (gemm_skinny" in plan.describe
    monkeypatch.delenv("TILEDSL_DISABLE")
    monkeypatch.setenv("TILEDSL_ENABLE", "gemm_skinny")
    plan = HP.hopper_plan(_as_cuda(torch, a), _as_cuda(torch, b), out, None, False, 132)
    assert plan.path == "skinny" and plan.describe.startswith("skinny swap-AB 64x16 tiles (m64n16)")
    assert plan.config == SKN.choose_skinny(16, 4096, 4096, 132)
    # past M = 64 the heuristic keeps the Hopper configurations (the skinny kernel is a tuning candidate there)
    out = torch.empty(65, 4096, dtype=torch.float16)
    a65 = torch.zeros(65, 4096, dtype=torch.float16)
    assert HP.hopper_plan(_as_cuda(torch, a65), _as_cuda(torch, b), out, None, False, 132).path == "hopper"


def test_a_cpu_plan_runs_the_skinny_kernel_with_its_fused_epilogue():
    pytest.importorskip("tiledsl.interpreter.fibers")
    torch, a, b = _operands(7, 136, 200)
    out = torch.empty(7, 136, dtype=torch.float16)
    plan = HP.hopper_plan(a, b, out, None, False, 132)
    assert plan.path == "skinny"
    bias = (torch.arange(136) / 8 - 8).half()
    plan.run(a, b, out, bias, "relu")
    want = torch.relu(a.double() @ b.double().T + bias.double()).half()
    assert torch.equal(out, want)
    c = SKN.skinny_matmul(a, b, config=(8, 1, 4, 3))
    assert torch.equal(c, (a.double() @ b.double().T).half())
    # a callable activation: the plain kernel, then torch
    plan.run(a, b, out, None, lambda t: t.mul_(2))
    assert torch.equal(out, (2 * (a.double() @ b.double().T)).half())


@pytest.mark.parametrize("act,bias,out,split", [("gelu", "float32", "float32", 3), ("silu", None, "float32", 1),
                                                ("relu", "float16", "float16", 2), (None, "float32", "float32", 2)])
def test_fused_bias_and_activation_on_the_interpreter(act, bias, out, split):
    """bias[n] is added to C's column n (an accumulator row of the swapped product), then the activation (epilogue.py's
    math), by the last arriver with split-K; ragged N (the bias index clamped to N - 1 past it)."""
    pytest.importorskip("tiledsl.interpreter.fibers")
    from tiledsl.ops.gemm.epilogue import reference
    M, N, K = 9, 100, 264
    a, b, ref = _inputs(M, N, K, seed=31)
    bv = (np.random.default_rng(31).integers(-16, 17, N) / 4).astype(np.float32 if bias == "float32" else np.float16)
    k = SKN.make_skinny_gemm("float16", out, 16, 1, 3, split, bias=bias, activation=act)
    c = np.full((M, N), -7.0, np.float32 if out == "float32" else np.float16)
    args = [a, b, c] + ([bv] if bias else [])
    if split > 1:
        args += [np.zeros(k.slots(N), np.float32), np.zeros(k.counters(N), np.int32)]
    tiledsl.jit(k.fn, interpret=True)(*args)
    want = reference(ref + (bv.astype(np.float64) if bias else 0.0), act)
    tol = 1e-5 if out == "float32" else 1e-3                 # (f16 C: the exact sums rounded once)
    np.testing.assert_allclose(c.astype(np.float64), want, rtol=tol, atol=tol)
    ck = k.compile(*args)
    r = ptxas(ck.asm["ptx"], "sm_90a")
    assert r.returncode == 0 and ck.metadata.get("spill_stores", 0) == 0


# ------------------------------------------------------------------------------------------------------------ FP8
@pytest.mark.parametrize("M,N,K,at,bt,out,cfg", [
    (5, 72, 400, "e4m3", "e4m3", "float32", (8, 1, 3, 2)),          # K ragged in 128-element tiles (3 + 16)
    (16, 130, 256, "e4m3", "e5m2", "float32", (16, 2, 2, 1)),
    (33, 64, 1024, "e5m2", "e4m3", "bfloat16", (40, 1, 4, 3))],      # 8 K tiles over 3 splits, the ring turning
    ids=["e4m3-split2", "mixed-two-consumers", "e5m2-bf16-split3"])
def test_fp8_on_the_interpreter_is_exact(M, N, K, at, bt, out, cfg):
    """FP8 codes (every product and sum exact in f32), scales 0.25 and 2 applied once to the sum."""
    pytest.importorskip("tiledsl.interpreter.fibers")
    from wgmma_cases import decode_fp8, fp8_codes
    rng = np.random.default_rng(M + K)
    a = rng.choice(fp8_codes(at), (M, K)).astype(np.uint8)
    b = rng.choice(fp8_codes(bt), (N, K)).astype(np.uint8)
    sa, sb = np.array([0.25], np.float32), np.array([2.0], np.float32)
    k = SKN.make_skinny_gemm_fp8(at, bt, out, *cfg)
    c = _host_out(M, N, out)
    args = [a, b, c, sa, sb]
    if k.splits > 1:
        args += [np.zeros(k.slots(N), np.float32), np.zeros(k.counters(N), np.int32)]
    tiledsl.jit(k.fn, interpret=True)(*args)
    ref = (decode_fp8(a, at) @ decode_fp8(b, bt).T) * 0.5
    np.testing.assert_array_equal(_as_float(c, out), _want(ref, out))
    ck = k.compile(*args)
    assert f"m64n{cfg[0]}k32.f32.{bt}.{at}" in ck.asm["ptx"]
    assert ptxas(ck.asm["ptx"], "sm_90a").returncode == 0
    assert ck.metadata.get("spill_stores", 0) == 0


def test_fp8_through_torch_on_the_host():
    """skinny_matmul_fp8 with torch FP8 tensors on the CPU (the interpreter), the scales as tensors."""
    pytest.importorskip("tiledsl.interpreter.fibers")
    torch = pytest.importorskip("torch")
    g = torch.Generator().manual_seed(5)
    a = (torch.randint(-8, 9, (3, 256), generator=g) / 8).to(torch.float8_e4m3fn)
    b = (torch.randint(-8, 9, (80, 256), generator=g) / 8).to(torch.float8_e4m3fn)
    sa, sb = torch.tensor([0.5]), torch.tensor([4.0])
    c = SKN.skinny_matmul_fp8(a, b, sa, sb, torch.float32, config=(8, 1, 2, 2))
    assert torch.equal(c, (a.float() @ b.float().T) * 2)


def test_a_small_weight_on_a_gpu_keeps_the_hopper_path(monkeypatch):
    """Below skinny.MIN_WEIGHT_BYTES of weight the launch's fixed cost decides: CUDA tensors keep the Hopper path
    (host tensors, on the interpreter, still take the skinny kernel: its tests need small shapes)."""
    torch, a, b = _operands(16, 256, 256)
    out = torch.empty(16, 256, dtype=torch.float16)
    monkeypatch.delenv("TILEDSL_DISABLE", raising=False)
    assert not SKN.worth_it(256, 256, "float16", _as_cuda(torch, a))
    assert SKN.worth_it(256, 256, "float16", a)
    assert SKN.worth_it(4096, 4096, "float16", _as_cuda(torch, a))
    plan = HP.hopper_plan(_as_cuda(torch, a), _as_cuda(torch, b), out, None, False, 132)
    assert plan.path == "hopper"
