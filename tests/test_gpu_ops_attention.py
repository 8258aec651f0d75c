"""tiledsl.ops.scaled_dot_product_attention on the GPU (tiledsl/ops/library/attention.py): out and gradients against
torch's F.scaled_dot_product_attention in float32 at model sizes (B 2-4, H 16-32, N 1000-4096, D 64/128, causal
and not, L != S, grouped-query heads, the transposed layout); torch.library.opcheck of both ops on CUDA; no host
synchronisation in an op call; CUDA-graph capture and replay after the inputs' values change for every kernel
variant the op can run (FA3 persistent and one block per item, the dynamic walk with its counters, the FA3
backward's tail split with its workspace, FA2 forward and backward); torch.compile(mode="reduce-overhead",
fullgraph=True) of a module of the op. (tests/test_ops_attention.py runs the same op on the interpreter in CI.)"""

import pytest

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")
F = torch.nn.functional

import tiledsl.ops as ops  # noqa: E402
from tiledsl.ops.flash import backward as BWD  # noqa: E402
from tiledsl.ops.flash import fa3 as AH  # noqa: E402
from tiledsl.ops.flash import fa3_backward as ABH  # noqa: E402
from tiledsl.ops.flash import forward as FWD  # noqa: E402

GRAD_TOL = 1e-2         # ||g - ref|| / ||ref||, as tests/test_gpu_attention_backward.py


def _sm90():
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("the FA3 kernels need an sm_90 GPU")


def _rel(got, ref):
    return ((got.float() - ref).norm() / ref.norm().clamp_min(1e-30)).item()


def _out_tol(ref, dtype):
    """f16: 2e-3 max abs (tests/test_gpu_attention.py); bf16: plus twice the rounding of the exact out to bf16."""
    tol = 2e-3
    if dtype == torch.bfloat16:
        tol += 2 * (ref.to(dtype).float() - ref).abs().max().item()
    return tol


def _reference(q, k, v, gout, **kw):
    """float32 out and (q, k, v) gradients from torch's F.scaled_dot_product_attention."""
    qf, kf, vf = (t.detach().float().requires_grad_() for t in (q, k, v))
    ref = F.scaled_dot_product_attention(qf, kf, vf, **kw)
    return (ref.detach(), *torch.autograd.grad(ref, (qf, kf, vf), gout.float()))


def _qkv(seed, dtype, qs, ks, grad=True):
    g = torch.Generator(device="cuda").manual_seed(seed)
    mk = lambda s: torch.randn(s, device="cuda", dtype=dtype, generator=g).requires_grad_(grad)  # noqa: E731
    return mk(qs), mk(ks), mk(ks)


def _check(q, k, v, **kw):
    out = ops.scaled_dot_product_attention(q, k, v, **kw)
    gout = torch.randn_like(out)
    ref, *gref = _reference(q, k, v, gout, **kw)
    assert out.shape == ref.shape and out.dtype == q.dtype
    assert (out.float() - ref).abs().max().item() <= _out_tol(ref, q.dtype)
    grads = torch.autograd.grad(out, (q, k, v), gout)
    for name, g, r, x in zip("qkv", grads, gref, (q, k, v)):
        assert g.shape == x.shape and g.dtype == x.dtype and torch.isfinite(g).all(), name
        assert _rel(g, r) <= GRAD_TOL, (name, _rel(g, r))


@pytest.mark.parametrize("dtype, B, H, HK, L, S, D, causal", [
    (torch.float16, 2, 16, 16, 1024, 1024, 128, False),
    (torch.bfloat16, 2, 16, 16, 1024, 1024, 128, True),
    (torch.float16, 4, 16, 16, 2048, 2048, 64, True),
    (torch.bfloat16, 4, 16, 16, 2048, 2048, 64, False),
    (torch.bfloat16, 2, 32, 8, 4096, 4096, 128, True),         # grouped-query heads
    (torch.float16, 2, 32, 4, 4096, 4096, 64, False),
    (torch.float16, 2, 16, 4, 1000, 1000, 128, True),          # ragged
    (torch.bfloat16, 2, 16, 16, 1000, 1536, 128, True),        # causal, L < S (top-left aligned, as torch's)
    (torch.float16, 2, 16, 16, 1536, 1000, 64, True),          # causal, L > S
])
def test_matches_torch_at_model_sizes(dtype, B, H, HK, L, S, D, causal):
    q, k, v = _qkv(L + S + D + H, dtype, (B, H, L, D), (B, HK, S, D))
    _check(q, k, v, is_causal=causal, enable_gqa=HK != H)


@pytest.mark.parametrize("causal", [False, True])
def test_head_dim_256_without_gradients(causal):
    q, k, v = _qkv(7, torch.bfloat16, (2, 16, 2048, 256), (2, 8, 2048, 256), grad=False)
    with torch.no_grad():
        out = ops.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)
    ref = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=causal, enable_gqa=True)
    assert (out.float() - ref).abs().max().item() <= _out_tol(ref, q.dtype)


def test_transposed_layout_and_scale():
    # q = x.view(B, L, H, D).transpose(1, 2), as an attention block's projections give it
    B, L, H, D = 2, 1024, 16, 128
    x = torch.randn(B, L, 3 * H * D, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    q, k, v = (t.view(B, L, H, D).transpose(1, 2) for t in x.split(H * D, dim=-1))
    _check(q, k, v, is_causal=True, scale=0.05)


def test_opcheck_on_cuda():
    q, k, v = _qkv(3, torch.float16, (1, 4, 256, 128), (1, 2, 320, 128))
    torch.library.opcheck(torch.ops.tiledsl.scaled_dot_product_attention_forward, (q, k, v), {"is_causal": True})
    q, k, v = (t.detach() for t in (q, k, v))
    out, lse = torch.ops.tiledsl.scaled_dot_product_attention_forward(q, k, v, True)
    torch.library.opcheck(torch.ops.tiledsl.scaled_dot_product_attention_backward,
                          (torch.randn_like(out), q, k, v, out, lse), {"is_causal": True, "scale": None})


def test_no_host_synchronisation():
    q, k, v = _qkv(4, torch.bfloat16, (2, 16, 1024, 128), (2, 16, 1024, 128))
    for _ in range(2):              # warm-up: the kernels compile
        ops.scaled_dot_product_attention(q, k, v, is_causal=True).sum().backward()
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        out = ops.scaled_dot_product_attention(q, k, v, is_causal=True)
        out.backward(torch.ones_like(out))
    finally:
        torch.cuda.set_sync_debug_mode(0)
    torch.cuda.synchronize()


# the kernel variants the op runs, each a (name, setup(monkeypatch) -> spy dict, D, causal, shape (B, H, HK, L, S))
def _no_setup(monkeypatch):
    return {}


def _dynamic_walk(monkeypatch):
    # FA3's dynamic scheduler (config[6] = 2): blocks draw their items from two int32 counters (fa3.counters)
    dyn = (2, 128, 3, 1, 1, 0, 2)
    monkeypatch.setitem(AH.CONFIGS, 128, dyn)
    monkeypatch.setitem(AH.CAUSAL_CONFIGS, 128, dyn)
    calls = {"counters": 0}
    real = AH.counters

    def spy(q):
        calls["counters"] += 1
        return real(q)
    monkeypatch.setattr(AH, "counters", spy)
    return calls


def _tail_split(monkeypatch):
    # the FA3 backward's tail split: pieces of the last wave's items add through a workspace and counters
    monkeypatch.setattr(ABH, "TAIL_SPLIT", True)
    calls = {"workspace": 0}
    real = ABH.workspace

    def spy(kernel, a):
        calls["workspace"] += 1
        return real(kernel, a)
    monkeypatch.setattr(ABH, "workspace", spy)
    return calls


def _fa2(monkeypatch):
    monkeypatch.setattr(FWD, "_fa3_fits", lambda q, k, v: False)
    monkeypatch.setattr(BWD, "_fa3_backward_fits", lambda q, D: False)
    return {}


VARIANTS = {
    "fa3-persistent": (_no_setup, 128, False, (2, 16, 16, 1024, 1024)),
    "fa3-per-item-gqa": (_no_setup, 128, True, (2, 16, 4, 1000, 1000)),
    "fa3-d64-fa2-backward": (_no_setup, 64, True, (2, 16, 16, 1024, 1024)),
    "dynamic-walk": (_dynamic_walk, 128, True, (2, 16, 16, 2048, 2048)),
    "dynamic-walk-noncausal": (_dynamic_walk, 128, False, (2, 16, 8, 1024, 1024)),
    "tail-split": (_tail_split, 128, False, (4, 16, 16, 4096, 4096)),
    "fa2": (_fa2, 128, True, (2, 16, 4, 1000, 1000)),
}


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_cuda_graph_capture_and_replay(variant, monkeypatch):
    _sm90()
    setup, D, causal, (B, H, HK, L, S) = VARIANTS[variant]
    calls = setup(monkeypatch)
    dt = torch.bfloat16
    q, k, v = _qkv(5, dt, (B, H, L, D), (B, HK, S, D), grad=False)
    gout = torch.randn_like(q)
    fwd = torch.ops.tiledsl.scaled_dot_product_attention_forward
    bwd = torch.ops.tiledsl.scaled_dot_product_attention_backward

    def step():
        out, lse = fwd(q, k, v, causal)
        return (out, lse, *bwd(gout, q, k, v, out, lse, causal))

    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(2):          # warm-up off the capture: compile, caches
            step()
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static = step()
    for seed in (11, 12, 13):       # new values in the captured inputs, then replay
        g = torch.Generator(device="cuda").manual_seed(seed)
        for t in (q, k, v, gout):
            t.copy_(torch.randn(t.shape, device="cuda", generator=g))
        graph.replay()
        torch.cuda.synchronize()
        eager = step()
        out, lse, dq, dk, dv = static
        assert torch.equal(out, eager[0]) and torch.equal(lse, eager[1])      # the forward is deterministic
        ref, *gref = _reference(q, k, v, gout, is_causal=causal, enable_gqa=H != HK)
        assert (out.float() - ref).abs().max().item() <= _out_tol(ref, dt)
        for name, gg, ge, r in zip("qkv", (dq, dk, dv), eager[2:], gref):
            assert _rel(gg, r) <= GRAD_TOL and _rel(ge, r) <= GRAD_TOL, (name, _rel(gg, r), _rel(ge, r))
    for name, n in calls.items():
        assert n > 0, f"the {variant} variant's {name} were never asked for: the op ran another kernel"


class _Block(torch.nn.Module):
    """q, k, v projections (torch's linear) and the op, as in a transformer block."""

    def __init__(self, heads=16, dim=128):
        super().__init__()
        self.heads, self.dim = heads, dim
        self.qkv = torch.nn.Linear(heads * dim, 3 * heads * dim, device="cuda", dtype=torch.bfloat16)

    def forward(self, x):
        B, L, _ = x.shape
        q, k, v = self.qkv(x).view(B, L, 3, self.heads, self.dim).permute(2, 0, 3, 1, 4)
        o = ops.scaled_dot_product_attention(q, k, v, is_causal=True)
        return o.transpose(1, 2).reshape(B, L, self.heads * self.dim)


@pytest.mark.parametrize("variant", ["default", "dynamic-walk"])
def test_torch_compile_reduce_overhead(variant, monkeypatch):
    # dynamic-walk: the counters are made in cudagraph trees' warm-up (eager, its memory pool) and in its capture
    calls = _dynamic_walk(monkeypatch) if variant == "dynamic-walk" else {}
    from torch._dynamo.utils import counters
    torch._dynamo.reset()
    counters.clear()
    torch.manual_seed(0)
    m = _Block()
    cm = torch.compile(m, mode="reduce-overhead", fullgraph=True)
    for i in range(4):              # new values each call: recorded once, replayed after
        x = torch.randn(2, 1024, 2048, device="cuda", dtype=torch.bfloat16,
                        generator=torch.Generator(device="cuda").manual_seed(i))
        xc, xe = x.clone().requires_grad_(), x.clone().requires_grad_()
        yc = cm(xc)
        gc = torch.autograd.grad(yc.float().square().sum(), (xc, m.qkv.weight))
        ye = m(xe)
        ge = torch.autograd.grad(ye.float().square().sum(), (xe, m.qkv.weight))
        assert _rel(yc, ye.float()) <= 1e-2
        for a, b in zip(gc, ge):
            assert _rel(a, b.float()) <= 2e-2
    assert not counters["graph_break"], dict(counters["graph_break"])
    assert counters["stats"]["unique_graphs"] == 1
    assert counters["inductor"]["cudagraph_skips"] == 0
    assert all(n > 0 for n in calls.values()), calls


@pytest.mark.parametrize("causal", [False, True])
def test_nested_jagged_against_torch(causal):
    """Nested (jagged) q, k, v on the GPU: out and gradients of each sequence against torch's dense SDPA of that
    sequence in float32 (lengths 1 .. 2000, GQA 16 / 4 heads, D 128)."""
    lens, H, HK, E = [1, 130, 2000, 777], 16, 4, 128
    g = torch.Generator(device="cuda").manual_seed(5)
    dense = [[torch.randn(n, h, E, device="cuda", generator=g, dtype=torch.bfloat16) for n in lens]
             for h in (H, HK, HK)]

    def nested(seqs):
        return torch.nested.nested_tensor([s.clone() for s in seqs], layout=torch.jagged).transpose(1, 2) \
            .detach().requires_grad_()
    q, k, v = (nested(d) for d in dense)
    out = ops.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)
    grads = [torch.randn(n, H, E, device="cuda", generator=g, dtype=torch.bfloat16) for n in lens]
    (out.transpose(1, 2).values().float() * torch.cat(grads).float()).sum().backward()
    for i, n in enumerate(lens):
        qf, kf, vf = (d[i].float().transpose(0, 1).requires_grad_() for d in dense)
        ref = F.scaled_dot_product_attention(qf, kf, vf, is_causal=causal, enable_gqa=True)
        ref.backward(grads[i].float().transpose(0, 1))
        assert (out.unbind()[i].float() - ref).abs().max().item() <= _out_tol(ref, torch.bfloat16)
        for t, r in ((q, qf), (k, kf), (v, vf)):
            g = t.grad.unbind()[i]
            if r.grad.norm() > 0:
                assert _rel(g, r.grad) <= GRAD_TOL
            else:       # a one-token sequence: softmax over one key, dq exactly 0; the kernel's rounding noise only
                assert g.float().abs().max().item() <= 1e-5
