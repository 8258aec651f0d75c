"""The attention backward on the GPU (the FA2-style kernel, and the FA3-style one of path="fa3" at D = 64, 128, 256): dq, dk,
dv against torch autograd through SDPA computed in float32 (relative error ||d - ref|| / ||ref|| <= 1e-2) over N in
{1000, 1024}, D 64/128, f16/bf16, causal or not, and grouped-query attention; the FlashAttention autograd Function
trains a small loss to the same gradients; the interpreter agrees with the GPU on a small case; the SASS is
tensor-core code without local memory.
(tests/test_attention_backward.py and tests/test_attention_backward_hopper.py compile these kernels through ptxas on
CPU CI.)"""
import math
import re

import numpy as np
import pytest

from tiledsl.ops.flash import backward as BWD
from tiledsl.ops.flash import fa2_backward as AB
from tiledsl.ops.flash import forward as FWD

pytestmark = pytest.mark.gpu

TOL = 1e-2


def _reference_grads(q, k, v, do, causal, scale):
    """float32 (dq, dk, dv): torch autograd through SDPA (math on float32 inputs); GQA's k/v heads repeated inside
    the graph, so their gradients are summed over the query heads they serve."""
    import torch
    g = q.shape[1] // k.shape[1]
    qf, kf, vf = (x.detach().float().requires_grad_() for x in (q, k, v))
    o = torch.nn.functional.scaled_dot_product_attention(qf, kf.repeat_interleave(g, 1), vf.repeat_interleave(g, 1),
                                                         is_causal=causal, scale=scale)
    return torch.autograd.grad(o, (qf, kf, vf), do.float())


def _rel(got, ref):
    return ((got.float() - ref).norm() / ref.norm()).item()


def _check(dtype, B, H, HK, N, NK, D, causal, scale=None, seed=0, warps=None, path="fa2", **fa3):
    torch = pytest.importorskip("torch")
    torch.manual_seed(seed)
    dt = getattr(torch, dtype)
    q = torch.randn(B, H, N, D, device="cuda", dtype=dt)
    k, v = (torch.randn(B, HK, NK, D, device="cuda", dtype=dt) for _ in range(2))
    do = torch.randn(B, H, N, D, device="cuda", dtype=dt)
    o, lse = FWD.attention(q, k, v, causal=causal, scale=scale)
    dq, dk, dv = BWD.attention_backward(q, k, v, o, lse, do, causal=causal, scale=scale, warps=warps, path=path,
                                        **fa3)
    sc = 1.0 / math.sqrt(D) if scale is None else scale
    ref = _reference_grads(q, k, v, do, causal, sc)
    for name, g, r, x in zip("qkv", (dq, dk, dv), ref, (q, k, v)):
        assert g.dtype == dt and g.shape == x.shape, name
        assert torch.isfinite(g).all(), name
        assert _rel(g, r) <= TOL, (name, _rel(g, r))


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("D", [64, 128])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("N", [1000, 1024])
def test_backward_matches_torch_autograd(dtype, D, causal, N):
    _check(dtype, 2, 4, 4, N, N, D, causal, seed=N + D)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("heads", [(8, 2), (8, 1)])
def test_backward_grouped_query(dtype, causal, heads):
    # dk/dv of a k/v head summed over its query heads (float32 red.global.add, then the cast kernel)
    _check(dtype, 2, *heads, 1000, 1000, 128, causal, scale=0.05, seed=7)


@pytest.mark.parametrize("D", [64, 128])
@pytest.mark.parametrize("causal", [False, True])
def test_backward_with_4_warps(D, causal):
    # the other block size (64 key rows) that benchmarks/attention.py --bwd-warps 4,8 times
    _check("bfloat16", 1, 4, 2, 1000, 1000, D, causal, seed=13, warps=4)
    _check("float16", 2, 4, 4, 1024, 1024, D, causal, seed=14, warps=4)


@pytest.mark.parametrize("D", [64, 128])
@pytest.mark.parametrize("causal", [False, True])
def test_backward_keys_longer_than_queries(D, causal):
    # causal is top-left aligned (as torch's is_causal): the key blocks past the last query get zero dK, dV
    _check("float16", 1, 4, 2, 300, 1234, D, causal, seed=3)


def test_backward_benchmark_shape():
    # the benchmark's N = 4096 shape at D = 128 (B*N = 16384 tokens, H*D = 2048), causal
    _check("bfloat16", 4, 16, 16, 4096, 4096, 128, True, seed=11)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("N", [1000, 1024, 64, 130])
@pytest.mark.parametrize("D", [64, 128, 256])
def test_fa3_backward_matches_torch_autograd(dtype, causal, N, D):
    # the FA3-style kernel (tiledsl/ops/flash/fa3_backward.py: TMA + wgmma): whole and ragged tiles
    _check(dtype, 2, 4, 4, N, N, D, causal, seed=N + 1, path="fa3")


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("heads", [(8, 2), (8, 1)])
@pytest.mark.parametrize("D", [64, 128, 256])
def test_fa3_backward_grouped_query(dtype, causal, heads, D):
    _check(dtype, 2, *heads, 1000, 1000, D, causal, scale=0.05, seed=8, path="fa3")


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("n, nk", [(300, 1234), (1234, 300)])
@pytest.mark.parametrize("D", [64, 128, 256])
def test_fa3_backward_unequal_lengths(causal, n, nk, D):
    # causal top-left aligned: key blocks past the last query walk no query tile and store zero dK, dV
    _check("float16", 1, 4, 2, n, nk, D, causal, seed=4, path="fa3")


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("shape", [(2, 4, 2, 1000, 1000), (1, 4, 4, 4096, 4096), (1, 2, 2, 300, 1234)])
def test_fa3_backward_d256_dq_overlap(causal, shape):
    # D = 256 with the second dQ block issued while the first runs (dq_overlap; off by default until this passes)
    _check("bfloat16", *shape, 256, causal, seed=3, path="fa3", dq_overlap=True)


@pytest.mark.parametrize("mode", [True, "own"])
@pytest.mark.parametrize("dq_overlap", [False, True])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("shape", [(2, 4, 2, 1000, 1000), (1, 4, 4, 4096, 4096), (1, 2, 2, 300, 1234),
                                   (1, 2, 2, 1234, 300)])
def test_fa3_backward_d256_score_split(causal, shape, dq_overlap, mode):
    # D = 256 with each consumer's scores over half the tile's queries, P^T and dS^T read from shared memory by
    # dV's and dK's wgmmas (score_split; "own": the consumer's own half from its registers; off by default until
    # this passes)
    _check("bfloat16", *shape, 256, causal, seed=5, path="fa3", score_split=mode, dq_overlap=dq_overlap)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("shape", [(2, 4, 2, 1000, 1000), (1, 4, 4, 4096, 4096), (1, 2, 2, 300, 1234),
                                   (1, 2, 2, 1234, 300)])
def test_fa3_backward_d64_dq_combine(causal, shape):
    # D = 64 with consumer 0's partial dQ added to consumer 1's in shared memory, one reduction a tile (dq_combine;
    # off by default until this passes)
    _check("bfloat16", *shape, 64, causal, seed=6, path="fa3", dq_combine=True)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("D, H", [(64, 32), (128, 16), (256, 8)])
def test_fa3_backward_benchmark_shape(causal, D, H):
    # the plain grid (tail_split=False: one block per item); and with tma_kv at D = 64
    _check("bfloat16", 4, H, H, 4096, 4096, D, causal, seed=12, path="fa3", tail_split=False)
    if D == 64:
        _check("bfloat16", 4, H, H, 4096, 4096, D, causal, seed=12, path="fa3", tail_split=False, tma_kv=True)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("shape", [(4, 16, 16, 4096, 4096), (1, 16, 16, 16384, 16384)], ids=["4k", "16k"])
def test_fa3_tail_split_matches_torch_autograd(dtype, causal, shape):
    # tiledsl/ops/flash/fa3_backward.py's tail split: the last partial wave's items spread over every SM, a
    # split item's dK and dV summed by its last piece from the others' workspace slots; twice (the counters
    # are back at zero for the second launch, on the same workspace)
    for seed in (13, 14):
        _check(dtype, *shape, 128, causal, seed=seed, path="fa3", tail_split=True)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("shape, scale", [((2, 8, 2, 1000, 1000), 0.05), ((3, 7, 7, 1000, 1000), None),
                                          ((1, 4, 2, 1234, 300), None)], ids=["gqa", "ragged", "gqa-unequal"])
@pytest.mark.parametrize("sms", [132, 5])
def test_fa3_tail_split_ragged_and_grouped(causal, shape, scale, sms):
    # ragged query and key tails, GQA (pieces add into the float32 accumulators), and a small grid of 5 split
    # blocks (items in several pieces)
    _check("float16", *shape, 128, causal, scale=scale, seed=5, path="fa3", tail_split=True, sms=sms)


def test_fa3_tail_split_dk_dv_are_deterministic():
    # whichever piece of a split item finishes last, it adds the pieces' sums in the same order (dq is not: its
    # float32 bulk reductions land in L2 in any order)
    torch = pytest.importorskip("torch")
    torch.manual_seed(3)
    q, k, v, do = (torch.randn(4, 16, 4096, 128, device="cuda", dtype=torch.bfloat16) for _ in range(4))
    o, lse = FWD.attention(q, k, v)
    first = BWD.attention_backward(q, k, v, o, lse, do, path="fa3", tail_split=True)
    for _ in range(3):
        again = BWD.attention_backward(q, k, v, o, lse, do, path="fa3", tail_split=True)
        assert torch.equal(first[1], again[1]) and torch.equal(first[2], again[2])


def test_backward_path_none_takes_fa3_at_d64_and_d128():
    # path=None on the H200: fa3 for D = 64 and 128 (the same gradients as path="fa3")
    torch = pytest.importorskip("torch")
    torch.manual_seed(1)
    for D, want in ((128, "fa3"), (64, "fa3")):
        q, k, v, do = (torch.randn(1, 2, 256, D, device="cuda", dtype=torch.float16) for _ in range(4))
        o, lse = FWD.attention(q, k, v)
        got = BWD.attention_backward(q, k, v, o, lse, do)
        ref = BWD.attention_backward(q, k, v, o, lse, do, path=want)
        for g, r in zip(got, ref):
            assert torch.equal(g, r) or _rel(g, r.float()) <= 1e-3


@pytest.mark.parametrize("causal", [False, True])
def test_flash_attention_autograd_function(causal):
    # the Function in a small training step: a loss of O, its gradients through FlashAttention.backward against
    # float32 autograd of SDPA; O itself against the forward; gradients only for the inputs that ask for them
    torch = pytest.importorskip("torch")
    torch.manual_seed(5)
    q = torch.randn(2, 4, 333, 64, device="cuda", dtype=torch.float16, requires_grad=True)
    k = torch.randn(2, 2, 333, 64, device="cuda", dtype=torch.float16, requires_grad=True)
    v = torch.randn(2, 2, 333, 64, device="cuda", dtype=torch.float16, requires_grad=True)
    w = torch.randn(2, 4, 333, 64, device="cuda", dtype=torch.float16)
    o = BWD.flash_attention(q, k, v, causal=causal, scale=0.2)
    assert "FlashAttention" in type(o.grad_fn).__name__
    assert torch.equal(o.detach(), FWD.attention(q.detach(), k.detach(), v.detach(), causal=causal, scale=0.2)[0])
    (o.float() * w.float()).sum().backward()
    ref = _reference_grads(q, k, v, w, causal, 0.2)
    for name, x, r in zip("qkv", (q, k, v), ref):
        assert x.grad is not None and x.grad.shape == x.shape, name
        assert _rel(x.grad, r) <= TOL, (name, _rel(x.grad, r))
    # only q asks for a gradient: k and v get none, q's is the same
    q2 = q.detach().clone().requires_grad_()
    o2 = BWD.flash_attention(q2, k.detach(), v.detach(), causal=causal, scale=0.2)
    (g,) = torch.autograd.grad(o2, (q2,), w)
    assert _rel(g, ref[0]) <= TOL


def test_flash_attention_directional_derivative():
    # a gradcheck-like test of the Function: <grad, u> against the float64 change of the loss along u
    torch = pytest.importorskip("torch")
    torch.manual_seed(9)
    shape = (1, 2, 200, 64)
    q, k, v = (torch.randn(shape, device="cuda", dtype=torch.float16, requires_grad=True) for _ in range(3))
    w = torch.randn(shape, device="cuda", dtype=torch.float16)
    o = BWD.flash_attention(q, k, v, causal=True)
    grads = torch.autograd.grad((o.float() * w.float()).sum(), (q, k, v))

    def loss64(q_, k_, v_):
        o_ = torch.nn.functional.scaled_dot_product_attention(q_, k_, v_, is_causal=True)
        return (o_ * w.double()).sum()

    base = [x.detach().double() for x in (q, k, v)]
    eps = 1e-4
    for i, g in enumerate(grads):
        u = torch.randn(shape, device="cuda", dtype=torch.float64)
        plus = [b + eps * u if j == i else b for j, b in enumerate(base)]
        minus = [b - eps * u if j == i else b for j, b in enumerate(base)]
        fd = ((loss64(*plus) - loss64(*minus)) / (2 * eps)).item()
        an = (g.double() * u).sum().item()
        assert abs(an - fd) <= 1e-2 * max(1.0, abs(fd)), (i, an, fd)


def test_backward_interpreter_agrees_with_gpu():
    # the CI case (B=1, H=2, N=40, D=64, GQA over one k/v head): the same kernels on the interpreter and on the GPU;
    # they differ where ex2.approx does and in the order of the float32 dQ/dK/dV atomic adds
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    for causal in (False, True):
        q, do = (rng.standard_normal((1, 2, 40, 64)).astype(np.float16) for _ in range(2))
        k, v = (rng.standard_normal((1, 1, 40, 64)).astype(np.float16) for _ in range(2))
        o, lse = FWD.attention(q, k, v, causal=causal)
        gi = BWD.attention_backward(q, k, v, o, lse, do, causal=causal)
        cu = [torch.from_numpy(x).cuda() for x in (q, k, v, o, lse, do)]
        gg = BWD.attention_backward(*cu, causal=causal)
        for a, b in zip(gi, gg):
            b = b.cpu().numpy().astype(np.float64)
            assert np.linalg.norm(a.astype(np.float64) - b) <= 2e-3 * np.linalg.norm(b)


@pytest.mark.parametrize("D", [64, 128])
@pytest.mark.parametrize("causal", [False, True])
def test_backward_sass_is_tensor_core_code_without_local_memory(D, causal):
    torch = pytest.importorskip("torch")
    shape = (1, 4, 4, 4096, 4096)
    NP = 4096
    q = torch.empty(1, 4, 4096, D, dtype=torch.float16)
    st = torch.empty(4, NP)
    k = AB.make_attention_backward("float16", D, causal, shape, 1.0 / math.sqrt(D))
    sass = k.compile(q, q, q, q, st, st, torch.empty(4 * 4096, D), q, q, 4096, target="sm_90").asm.get("sass")
    if sass is None:
        pytest.skip("cuobjdump not installed")
    assert "HMMA" in sass and "LDSM" in sass and "LDGSTS" in sass and "MUFU.EX2" in sass and "RED" in sass
    assert not re.search(r"\b(STL|LDL)\b", sass)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("n, nk", [(1000, 1000), (4096, 4096), (300, 1234), (1234, 300)])
def test_fa3_tma_kv_is_bit_for_bit(dtype, causal, n, nk):
    # tma_kv: dK and dV through K's and V's buffers and the TMA store (which drops key rows past N_kv): the same
    # bits as the st.global epilogue, and within the reference's bounds
    torch = pytest.importorskip("torch")
    _check(dtype, 2, 4, 4, n, nk, 128, causal, seed=n + nk, path="fa3", tma_kv=True)
    torch.manual_seed(n + nk + 1)
    dt = getattr(torch, dtype)
    q, do = (torch.randn(2, 4, n, 128, device="cuda", dtype=dt) for _ in range(2))
    k, v = (torch.randn(2, 4, nk, 128, device="cuda", dtype=dt) for _ in range(2))
    o, lse = FWD.attention(q, k, v, causal=causal)
    g0 = BWD.attention_backward(q, k, v, o, lse, do, causal=causal, path="fa3", tma_kv=False)
    g1 = BWD.attention_backward(q, k, v, o, lse, do, causal=causal, path="fa3", tma_kv=True)
    # dK and dV bit for bit; dQ is summed in L2 by bulk reductions from every key block, in whatever order they
    # land, so two runs of the same kernel differ in its last bits (measured: up to 1.2e-4 in session 29)
    assert torch.equal(g0[1], g1[1]) and torch.equal(g0[2], g1[2])
    assert _rel(g1[0], g0[0].float()) <= 1e-3
