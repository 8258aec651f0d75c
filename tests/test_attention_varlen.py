"""attention_varlen (tiledsl/ops/flash/varlen.py, ragged.py's kernel in mode "varlen") without a GPU: packed ragged
batches (lengths 0, 1 and up to 40, len_q != len_k, GQA, bottom-right causal) match a per-sequence float64 reference
on the interpreter, rows that see no key are 0 / -inf, bad calls are refused naming the argument, and the GPU
configurations compile through ptxas (sm_80, sm_90) without spills. tests/test_gpu_attention_varlen_decode.py runs
them on the GPU."""
import math

import numpy as np
import pytest

import tiledsl
from tiledsl.ops.flash import ragged as R
from tiledsl.ops.flash import varlen as VL
from helpers import ptxas


def _packed(rng, lq, lk, H, HK, D=64):
    cuq = np.concatenate([[0], np.cumsum(lq)]).astype(np.int32)
    cuk = np.concatenate([[0], np.cumsum(lk)]).astype(np.int32)
    q = rng.standard_normal((int(cuq[-1]), H, D)).astype(np.float16)
    k = rng.standard_normal((int(cuk[-1]), HK, D)).astype(np.float16)
    v = rng.standard_normal((int(cuk[-1]), HK, D)).astype(np.float16)
    return q, k, v, cuq, cuk


def _check(o, lse, ro, rl):
    assert np.abs(o.astype(np.float64) - ro).max() <= 2e-3
    assert np.array_equal(np.isinf(lse), np.isinf(rl))
    fin = np.isfinite(rl)
    assert np.abs(lse[fin] - rl[fin]).max() <= 1e-4


@pytest.mark.parametrize("causal, heads, lq, lk, config", [
    (False, (2, 1), [5, 0, 33], [5, 3, 40], (2, 1, 1)),       # an empty query sequence, GQA over one kv head
    (True, (2, 1), [5, 0, 33], [5, 3, 40], (2, 1, 1)),        # bottom-right: len_k > len_q
    (True, (4, 2), [1, 40, 17], [1, 40, 17], (2, 1, 1)),      # len_q == len_k: the usual triangle, a 1-token one
    (True, (2, 2), [20, 7], [6, 30], (1, 2, 0)),              # len_q > len_k: the first 14 rows see no key
    (False, (3, 3), [9, 12], [0, 70], (2, 1, 1)),             # no key at all (0 / -inf), two key tiles
])
def test_varlen_on_the_interpreter(causal, heads, lq, lk, config):
    rng = np.random.default_rng(sum(lq) + sum(lk) + causal)
    H, HK = heads
    q, k, v, cuq, cuk = _packed(rng, lq, lk, H, HK)
    o, lse = VL.attention_varlen(q, k, v, cuq, cuk, max(lq), max(lk), causal=causal, scale=0.3, config=config)
    assert o.shape == q.shape and o.dtype == np.float16 and lse.shape == (H, q.shape[0]) and lse.dtype == np.float32
    ro, rl = VL.reference_varlen(q, k, v, cuq, cuk, causal=causal, scale=0.3)
    _check(o, lse, ro, rl)
    if causal and lq == [20, 7]:
        assert (o[:14] == 0).all() and np.isneginf(lse[:, :14]).all()


def test_varlen_matches_the_dense_kernel_per_sequence():
    # each sequence alone through forward.attention (fa2, top-left causal; len_q == len_k, so the same mask)
    from tiledsl.ops.flash import forward as FWD
    rng = np.random.default_rng(3)
    lens = [23, 40]
    q, k, v, cuq, cuk = _packed(rng, lens, lens, 2, 1)
    o, lse = VL.attention_varlen(q, k, v, cuq, cuk, 40, 40, causal=True, scale=0.3, config=(2, 1, 1), lazy=False)
    for b in range(2):
        s, e = cuq[b], cuq[b + 1]
        do, dl = FWD.attention(q[None, s:e].transpose(0, 2, 1, 3), k[None, s:e].transpose(0, 2, 1, 3),
                               v[None, s:e].transpose(0, 2, 1, 3), causal=True, scale=0.3, config=(2, 1, 1),
                               path="fa2", lazy=False)
        assert np.array_equal(o[s:e], do[0].transpose(1, 0, 2)) and np.array_equal(lse[:, s:e], dl[0])


def test_varlen_default_scale_and_an_oversized_max_seqlen():
    # max_seqlen_q above the longest sequence only adds blocks that return at once
    rng = np.random.default_rng(4)
    q, k, v, cuq, cuk = _packed(rng, [3, 18], [3, 18], 1, 1)
    o, lse = VL.attention_varlen(q, k, v, cuq, cuk, 100, 100, config=(1, 1, 1))
    ro, rl = VL.reference_varlen(q, k, v, cuq, cuk)
    _check(o, lse, ro, rl)


def test_varlen_refuses_bad_inputs():
    rng = np.random.default_rng(5)
    q, k, v, cuq, cuk = _packed(rng, [3, 5], [3, 5], 2, 1)
    call = VL.attention_varlen
    with pytest.raises(tiledsl.LaunchError, match="cu_seqlens_q must start at 0, never decrease"):
        call(q, k, v, np.array([0, 5, 3], np.int32), cuk, 5, 5)
    with pytest.raises(tiledsl.LaunchError, match="cu_seqlens_k .* end at the total 8"):
        call(q, k, v, cuq, np.array([0, 3, 7], np.int32), 5, 5)
    with pytest.raises(tiledsl.LaunchError, match="cu_seqlens_q must be a 1-D int32"):
        call(q, k, v, cuq.astype(np.int64), cuk, 5, 5)
    with pytest.raises(tiledsl.LaunchError, match="same B \\+ 1"):
        call(q, k, v, cuq, np.array([0, 8], np.int32), 5, 8)
    with pytest.raises(tiledsl.LaunchError, match="below the longest"):
        call(q, k, v, cuq, cuk, 4, 5)
    with pytest.raises(tiledsl.LaunchError, match="max_seqlen_q must be a non-negative int"):
        call(q, k, v, cuq, cuk, -1, 5)
    with pytest.raises(tiledsl.LaunchError, match="must divide"):
        call(q[:, :2], np.repeat(k, 3, 1), np.repeat(v, 3, 1), cuq, cuk, 5, 5)
    with pytest.raises(tiledsl.LaunchError, match=r"packed \(tokens, heads, D\)"):
        call(q[None], k, v, cuq, cuk, 5, 5)
    with pytest.raises(tiledsl.LaunchError, match="head dims 64, 128 and 256"):
        call(q[..., :32], k[..., :32], v[..., :32], cuq, cuk, 5, 5)
    with pytest.raises(tiledsl.LaunchError, match="float16 and bfloat16"):
        call(q.astype(np.float32), k.astype(np.float32), v.astype(np.float32), cuq, cuk, 5, 5)


def _varlen_ptx(dtype, D, causal, H, HK, arch, config=None):
    torch = pytest.importorskip("torch")      # bfloat16 arguments (the CPU build suffices)
    dt = getattr(torch, dtype)
    kern = R.make_ragged("varlen", dtype, D, causal, H, HK, D ** -0.5, config)
    q, kv = torch.empty((100, H, D), dtype=dt), torch.empty((90, HK, D), dtype=dt)
    cu = torch.zeros(3, dtype=torch.int32)
    return kern.compile(q, kv, kv, q, torch.empty((H, 100)), cu, cu, target=arch).asm["ptx"]


@pytest.mark.parametrize("D", [64, 128, 256])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("dtype, arch", [("float16", "sm_90"), ("bfloat16", "sm_80")])
def test_varlen_kernels_pass_ptxas_without_spills(D, causal, dtype, arch):
    # the GPU test's configurations (GQA 32 / 8 heads): the kernels the GPU runs, through ptxas -v
    ptx = _varlen_ptx(dtype, D, causal, 32, 8, arch)
    for op in ("mma.sync.aligned.m16n8k16", "ldmatrix.sync.aligned.m8n8.x4.trans", "cp.async.cg.shared.global"):
        assert op in ptx, op
    r = ptxas(ptx, arch, verbose=True)
    assert r.returncode == 0, r.stderr
    assert "0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads" in r.stderr, r.stderr


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("causal", [False, True])
def test_varlen_sm90_config_passes_ptxas_without_spills(dtype, causal):
    # varlen.SM90_CONFIGS: the configuration an sm_90 GPU runs at D = 128
    ptx = _varlen_ptx(dtype, 128, causal, 32, 8, "sm_90", VL.SM90_CONFIGS[128])
    r = ptxas(ptx, "sm_90", verbose=True)
    assert r.returncode == 0, r.stderr
    assert "0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads" in r.stderr, r.stderr


def test_varlen_sm90_config_on_the_interpreter():
    rng = np.random.default_rng(12)
    q, k, v, cuq, cuk = _packed(rng, [3, 40], [50, 40], 2, 1, D=128)
    o, lse = VL.attention_varlen(q, k, v, cuq, cuk, 40, 50, causal=True, scale=0.1, config=VL.SM90_CONFIGS[128])
    ro, rl = VL.reference_varlen(q, k, v, cuq, cuk, causal=True, scale=0.1)
    _check(o, lse, ro, rl)


# ------------------------------------------------------------------------------------------------ backward
from tiledsl.ops.flash import varlen_backward as VB  # noqa: E402


@pytest.mark.parametrize("causal, heads, lq, lk, warps", [
    (True, (2, 1), [5, 0, 33, 20], [5, 3, 40, 6], 4),     # GQA (float32 atomics), empty, len_q > len_k (dead rows)
    (False, (2, 2), [5, 0, 33, 20], [5, 3, 40, 6], 4),    # dK, dV stored in place; keys no query sees are 0
    (True, (2, 2), [1, 70], [1, 70], 8),                  # the usual triangle over 3 query tiles, 8 warps
])
def test_varlen_backward_on_the_interpreter(causal, heads, lq, lk, warps):
    rng = np.random.default_rng(sum(lq) + 7 * causal)
    H, HK = heads
    q, k, v, cuq, cuk = _packed(rng, lq, lk, H, HK)
    do = rng.standard_normal(q.shape).astype(np.float16)
    o, lse = VL.attention_varlen(q, k, v, cuq, cuk, max(lq), max(lk), causal=causal, scale=0.3, config=(2, 1, 1))
    grads = VB.attention_varlen_backward(q, k, v, o, lse, do, cuq, cuk, max(lq), max(lk), causal=causal, scale=0.3,
                                         warps=warps)
    refs = VB.reference_varlen_backward(q, k, v, do, cuq, cuk, causal=causal, scale=0.3)
    for g, r, x in zip(grads, refs, (q, k, v)):
        assert g.shape == x.shape and g.dtype == np.float16
        assert not np.isnan(g).any()
        assert np.linalg.norm(g - r) / np.linalg.norm(r) <= 1e-2
        assert np.abs(g - r).max() <= 1e-2


def grad_error_ok(got, ref, rtol=1e-2, atol=1e-4):
    """A gradient's error, one sequence's rows: ||got - ref|| <= rtol ||ref|| + atol sqrt(size) (an RMS floor of
    atol: the 2-norm relative error alone is undefined where the exact gradient is 0, as dq and dk of a 1-token
    sequence are)."""
    got, ref = np.asarray(got, np.float64), np.asarray(ref, np.float64)
    return np.linalg.norm(got - ref) <= rtol * np.linalg.norm(ref) + atol * math.sqrt(ref.size)


@pytest.mark.parametrize("causal, heads", [(False, (2, 2)), (True, (4, 1))])
def test_varlen_backward_per_sequence_with_a_one_token_sequence(causal, heads):
    # GPU run 1 of test_varlen_backward_matches_autograd failed all 8 cases at sequence 2, the 1-token one: its
    # softmax is a constant 1, so dq and dk are exactly 0 (dS = P (dP - rowsum(dO * O)) with O = V), and the test's
    # ||got - ref|| / max(||ref||, 1e-6) divided the kernel's 1e-7 rounding noise by 1e-6. The kernel is right; the
    # per-sequence check needs an absolute floor (grad_error_ok). Here the GPU's path at D = 128: the forward in the
    # sm_90 configuration, the default 4-warp backward, per sequence.
    rng = np.random.default_rng(3 + causal)
    H, HK = heads
    lens = [30, 20, 1, 45]
    q, k, v, cuq, cuk = _packed(rng, lens, lens, H, HK, D=128)
    do = rng.standard_normal(q.shape).astype(np.float16)
    o, lse = VL.attention_varlen(q, k, v, cuq, cuk, max(lens), max(lens), causal=causal,
                                 config=VL.SM90_CONFIGS[128])
    grads = VB.attention_varlen_backward(q, k, v, o, lse, do, cuq, cuk, max(lens), max(lens), causal=causal)
    refs = VB.reference_varlen_backward(q, k, v, do, cuq, cuk, causal=causal)
    for b in range(len(lens)):
        s, e = int(cuq[b]), int(cuq[b + 1])
        for name, g, r in zip("qkv", grads, refs):
            assert not np.isnan(g[s:e]).any(), (b, name)
            assert grad_error_ok(g[s:e], r[s:e]), (b, name)
    s = int(cuq[2])
    for g, r in zip(grads[:2], refs[:2]):              # the 1-token sequence: exact 0, the kernel's noise only
        assert not r[s].any() and np.abs(g[s]).max() <= 1e-5
    if H == HK:
        np.testing.assert_array_equal(grads[2][s], do[s])  # and dv = P^T dO = dO


def _backward_ptx(dtype, D, causal, H, HK, arch):
    torch = pytest.importorskip("torch")
    dt = getattr(torch, dtype)
    kern = VB.make_varlen_backward(dtype, D, causal, H, HK, D ** -0.5)
    q, kv = torch.empty((100, H, D), dtype=dt), torch.empty((90, HK, D), dtype=dt)
    st = torch.empty((2, H, 64))
    acc = torch.empty((90, HK, D)) if H != HK else kv
    cu = torch.zeros(3, dtype=torch.int32)
    return kern.compile(q, kv, kv, q, st, st, torch.empty((100, H, D)), acc, acc, cu, cu, target=arch).asm["ptx"]


@pytest.mark.parametrize("D", [64, 128])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("heads", [(32, 8), (16, 16)])
def test_varlen_backward_kernels_pass_ptxas_without_spills(D, causal, heads):
    ptx = _backward_ptx("bfloat16", D, causal, *heads, "sm_90")
    r = ptxas(ptx, "sm_90", verbose=True)
    assert r.returncode == 0, r.stderr
    assert "0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads" in r.stderr, r.stderr


def test_varlen_names_in_tiledsl_ops():
    import tiledsl.ops as ops
    for name in ("attention_varlen", "attention_decode", "attention_varlen_backward", "flash_attention_varlen",
                 "attention_jagged"):
        assert name in ops.__all__ and callable(getattr(ops, name)), name


def test_jagged_tensors_pack_and_unpack(monkeypatch):
    # attention_jagged's conversions (torch nested jagged tensors, CPU): packed (T, H, D) values and int32 offsets
    # in both layouts, and the result back in q's layout; the kernel call itself replaced by the float64 reference
    torch = pytest.importorskip("torch")
    off = torch.tensor([0, 3, 3, 10])                  # lengths 3, 0, 7
    vals = [torch.randn(10, h, 64, dtype=torch.float16) for h in (2, 1, 1)]
    seen = {}

    def fake(q, k, v, cuq, cuk, mq, mk, causal=False, scale=None):
        seen.update(shapes=(q.shape, k.shape), cu=cuq.tolist(), dtype=cuq.dtype, m=(mq, mk))
        o, lse = VL.reference_varlen(q.numpy(), k.numpy(), v.numpy(), cuq.numpy(), cuk.numpy(), causal, scale)
        return torch.from_numpy(o.astype(np.float16)), torch.from_numpy(lse)
    monkeypatch.setattr(VL, "attention_varlen", fake)
    for sdpa_layout in (False, True):
        nts = [torch.nested.nested_tensor_from_jagged(x, off) for x in vals]
        if sdpa_layout:
            nts = [x.transpose(1, 2) for x in nts]
        out = VL.attention_jagged(*nts, causal=True)
        assert seen["shapes"] == ((10, 2, 64), (10, 1, 64)) and seen["cu"] == [0, 3, 3, 10]
        assert seen["dtype"] == torch.int32 and seen["m"] == (7, 7)
        assert out.is_nested and out._ragged_idx == (2 if sdpa_layout else 1)
        packed = out.values().transpose(0, 1) if sdpa_layout else out.values()
        ro, _ = VL.reference_varlen(*(x.numpy() for x in vals), off.numpy(), off.numpy(), True)
        assert np.abs(packed.float().numpy() - ro).max() <= 1e-3
    with pytest.raises(tiledsl.LaunchError, match="torch.jagged"):
        VL.attention_jagged(vals[0], vals[1], vals[2])
