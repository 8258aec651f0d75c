"""The FA2-style attention example on the GPU: O against torch SDPA computed in float32 (max abs error <= 2e-3),
LSE against a float32 log-sum-exp, over N in {128, 1000, 4096}, D 64/128, f16/bf16, causal or not, and
grouped-query attention; the interpreter agrees with the GPU on a small case; the SASS is tensor-core code
without local memory. (tests/test_attention.py compiles every one of these kernels through ptxas on CPU CI.)"""
import math
import re

import numpy as np
import pytest

from tiledsl.ops.flash import fa2 as A
from tiledsl.ops.flash import forward as FWD

pytestmark = pytest.mark.gpu


def _reference(q, k, v, causal, scale):
    """float32 O (torch SDPA, math on float32 inputs) and LSE for (B, H, N, D) q and GQA k, v."""
    import torch
    g = q.shape[1] // k.shape[1]
    qf, kf, vf = q.float(), k.float().repeat_interleave(g, 1), v.float().repeat_interleave(g, 1)
    o = torch.nn.functional.scaled_dot_product_attention(qf, kf, vf, is_causal=causal, scale=scale)
    s = (qf @ kf.transpose(-1, -2)) * scale
    if causal:
        n, m = s.shape[-2:]
        s = s.masked_fill(torch.ones(n, m, dtype=torch.bool, device=s.device).triu(1), float("-inf"))
    return o, torch.logsumexp(s, dim=-1)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("D", [64, 128, 256])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("N", [128, 1000, 4096])
def test_attention_matches_sdpa(dtype, D, causal, N):
    torch = pytest.importorskip("torch")
    torch.manual_seed(N + D)
    dt = getattr(torch, dtype)
    B, H = (2, 4) if N < 4096 else (1, 4)
    q, k, v = (torch.randn(B, H, N, D, device="cuda", dtype=dt) for _ in range(3))
    o, lse = FWD.attention(q, k, v, causal=causal, path="fa2")
    assert o.dtype == dt and o.shape == q.shape and lse.dtype == torch.float32 and lse.shape == (B, H, N)
    ro, rl = _reference(q, k, v, causal, 1.0 / math.sqrt(D))
    tol = 2e-3
    if dtype == "bfloat16":
        # rounding the exact O to bf16 alone errs by up to half a bf16 ulp (7e-3 on causal rows near |o| = 2):
        # allow twice the rounding error of the reference itself, plus the f16 budget
        tol += 2 * (ro.to(dt).float() - ro).abs().max().item()
    assert (o.float() - ro).abs().max().item() <= tol
    assert (lse - rl).abs().max().item() <= 1e-3


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("heads", [(8, 2), (8, 1)])
def test_attention_grouped_query(causal, heads):
    torch = pytest.importorskip("torch")
    torch.manual_seed(7)
    H, HK = heads
    q = torch.randn(2, H, 1000, 128, device="cuda", dtype=torch.float16)
    k, v = (torch.randn(2, HK, 1000, 128, device="cuda", dtype=torch.float16) for _ in range(2))
    o, lse = FWD.attention(q, k, v, causal=causal, scale=0.05, path="fa2")
    ro, rl = _reference(q, k, v, causal, 0.05)
    assert (o.float() - ro).abs().max().item() <= 2e-3
    assert (lse - rl).abs().max().item() <= 1e-3


def test_attention_keys_longer_than_queries():
    torch = pytest.importorskip("torch")
    torch.manual_seed(3)
    q = torch.randn(1, 4, 300, 64, device="cuda", dtype=torch.float16)
    k, v = (torch.randn(1, 2, 1234, 64, device="cuda", dtype=torch.float16) for _ in range(2))
    o, lse = FWD.attention(q, k, v, path="fa2")
    ro, rl = _reference(q, k, v, False, 0.125)
    assert (o.float() - ro).abs().max().item() <= 2e-3 and (lse - rl).abs().max().item() <= 1e-3


def test_attention_interpreter_agrees_with_gpu():
    # the CI case (B=1, H=2, N=80, D=64): the same kernel on the interpreter and on the GPU; they differ only
    # where ex2.approx/lg2.approx do (the interpreter rounds correctly, the GPU within the ISA's bound)
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    for causal in (False, True):
        q, k, v = (rng.standard_normal((1, 2, 80, 64)).astype(np.float16) for _ in range(3))
        oi, li = FWD.attention(q, k, v, causal=causal)
        og, lg = FWD.attention(*(torch.from_numpy(x).cuda() for x in (q, k, v)), causal=causal, path="fa2")
        assert np.abs(og.cpu().numpy().astype(np.float32) - oi.astype(np.float32)).max() <= 1e-3
        assert np.abs(lg.cpu().numpy() - li).max() <= 1e-5


@pytest.mark.parametrize("D", [64, 128, 256])
def test_attention_sass_is_tensor_core_code_without_local_memory(D):
    torch = pytest.importorskip("torch")
    q = torch.empty(1, 4, 4096, D, dtype=torch.float16)
    k = A.make_attention("float16", D, True, (1, 4, 4, 4096, 4096), 1.0 / math.sqrt(D))
    sass = k.compile(q, q, q, q, torch.empty(1, 4, 4096), target="sm_90").asm.get("sass")
    if sass is None:
        pytest.skip("cuobjdump not installed")
    assert "HMMA" in sass and "LDSM" in sass and "LDGSTS" in sass and "MUFU.EX2" in sass
    assert not re.search(r"\b(STL|LDL)\b", sass)


@pytest.mark.parametrize("D", [64, 128, 256])
@pytest.mark.parametrize("causal", [False, True])
def test_attention_every_candidate_configuration(D, causal):
    torch = pytest.importorskip("torch")
    torch.manual_seed(11)
    q, k, v = (torch.randn(2, 4, 1000, D, device="cuda", dtype=torch.float16) for _ in range(3))
    ro, rl = _reference(q, k, v, causal, 1.0 / math.sqrt(D))
    for config in A.CANDIDATES[D]:
        o, lse = FWD.attention(q, k, v, causal=causal, config=config)
        assert (o.float() - ro).abs().max().item() <= 2e-3, config
        assert (lse - rl).abs().max().item() <= 1e-3, config



@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("config, target", [((4, 2, 0), "sm_80"), ((8, 1, 1), None)])
def test_attention_lazy_rescale(causal, config, target):
    # lazy=True (the rescale only when a row's max moves by more than 2^8): the reference's numbers on normal
    # inputs; with keys growing along the sequence (peaked softmax, maxima moving past the first tiles) the eager
    # kernel's error plus 2^-10 of O (a stale max leaves a row's largest probability inexact in f16)
    torch = pytest.importorskip("torch")
    torch.manual_seed(17 + causal)
    q, k, v = (torch.randn(2, 4, 4096, 128, device="cuda", dtype=torch.float16) for _ in range(3))
    scale = 1.0 / math.sqrt(128)
    ro, rl = _reference(q, k, v, causal, scale)
    o, lse = FWD.attention(q, k, v, causal=causal, config=config, path="fa2", target=target, lazy=True)
    assert (o.float() - ro).abs().max().item() <= 2e-3
    assert (lse - rl).abs().max().item() <= 1e-3
    kk = k * (1 + torch.arange(4096, device="cuda") / 300)[:, None].to(k.dtype)
    ro, rl = _reference(q, kk, v, causal, scale)
    o, lse = FWD.attention(q, kk, v, causal=causal, config=config, path="fa2", target=target, lazy=True)
    o1, _ = FWD.attention(q, kk, v, causal=causal, config=config, path="fa2", target=target, lazy=False)
    eager = (o1.float() - ro).abs().max().item()
    assert (o.float() - ro).abs().max().item() <= eager + ro.abs().max().item() / 1024
    assert (lse - rl).abs().max().item() <= 1e-3
