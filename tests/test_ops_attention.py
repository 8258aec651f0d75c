"""tiledsl.ops.scaled_dot_product_attention (tiledsl/ops/library/attention.py) without a GPU: CPU tensors run the
FlashAttention kernels on the interpreter, so the op's output and gradients are checked against torch's
F.scaled_dot_product_attention (float32 math) end to end: causal with L != S, grouped-query heads, the transposed
(non-contiguous) layout models pass, 2-d / 3-d / broadcast batch dims, zero-size dims; the refusals name the
argument; torch.library.opcheck passes for both custom ops; a module of the op compiles with fullgraph=True with no
graph break and no recompilation."""
import math

import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

import tiledsl.ops as ops  # noqa: E402
from tiledsl.ops.library import attention as A  # noqa: E402
from tiledsl.ops.library.common import UnsupportedArgument  # noqa: E402

# max abs error against float32 math, inputs ~N(0, 1): f16's and bf16's rounding of q, k, v, P and the outputs
TOL = {torch.float16: (3e-3, 1e-2), torch.bfloat16: (2.5e-2, 8e-2)}      # (out, gradients)


def _inputs(shapes, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(s, generator=g).to(dtype).requires_grad_() for s in shapes]


def _err(a, b):
    """max |a - b| (0 for empty tensors)."""
    return (a.float() - b).abs().amax().item() if a.numel() else 0.0


def _against_torch(q, k, v, grad=None, **kw):
    """Our op's out and (q, k, v) gradients beside torch's on float32 copies of the same inputs."""
    out = ops.scaled_dot_product_attention(q, k, v, **kw)
    qf, kf, vf = (t.detach().float().requires_grad_() for t in (q, k, v))
    ref = F.scaled_dot_product_attention(qf, kf, vf, **kw)
    assert out.shape == ref.shape and out.dtype == q.dtype
    if grad is None:
        grad = torch.randn(out.shape, generator=torch.Generator().manual_seed(1)).to(q.dtype)
    out.backward(grad)
    ref.backward(grad.float())
    tol_o, tol_g = TOL[q.dtype]
    assert _err(out, ref) <= tol_o
    for t, r in ((q, qf), (k, kf), (v, vf)):
        assert t.grad.shape == t.shape and t.grad.dtype == t.dtype
        assert _err(t.grad, r.grad) <= tol_g, _err(t.grad, r.grad)
    return out


@pytest.mark.parametrize("dtype, E, causal, L, S", [
    (torch.float16, 64, False, 16, 16),
    (torch.float16, 64, True, 24, 16),       # causal, L > S: top-left aligned as torch's
    (torch.bfloat16, 64, True, 16, 24),      # causal, L < S
    (torch.bfloat16, 128, False, 20, 12),    # ragged tiles, D = 128
    (torch.float16, 128, True, 8, 8),
])
def test_matches_torch_forward_and_gradients(dtype, E, causal, L, S):
    q, k, v = _inputs([(1, 2, L, E), (1, 2, S, E), (1, 2, S, E)], dtype, L + S + E)
    _against_torch(q, k, v, is_causal=causal)


def test_scale_and_grouped_query_heads():
    q, k, v = _inputs([(1, 4, 12, 64), (1, 2, 12, 64), (1, 2, 12, 64)], torch.float16, 3)
    _against_torch(q, k, v, is_causal=True, scale=0.3, enable_gqa=True)


def test_one_key_value_head_broadcasts_without_enable_gqa():
    # as torch: without enable_gqa the head dims broadcast; a single k/v head serves every query head
    q, k, v = _inputs([(2, 2, 8, 64), (2, 1, 8, 64), (2, 1, 8, 64)], torch.float16, 4)
    _against_torch(q, k, v)


def test_grouped_query_heads_need_enable_gqa():
    q, k, v = _inputs([(1, 4, 8, 64), (1, 2, 8, 64), (1, 2, 8, 64)], torch.float16, 5)
    with pytest.raises(UnsupportedArgument, match="enable_gqa=True"):
        ops.scaled_dot_product_attention(q, k, v)
    q, k, v = _inputs([(1, 4, 8, 64), (1, 3, 8, 64), (1, 3, 8, 64)], torch.float16, 5)
    with pytest.raises(UnsupportedArgument, match=r"heads \(3\) to divide query's \(4\)"):
        ops.scaled_dot_product_attention(q, k, v, enable_gqa=True)


def test_non_contiguous_inputs_as_a_model_passes_them():
    # q = x.view(B, L, H, D).transpose(1, 2): the common layout of a projection's output
    B, L, H, D = 1, 12, 2, 64
    g = torch.Generator().manual_seed(6)
    x = torch.randn(B, L, 3 * H * D, generator=g).to(torch.bfloat16).requires_grad_()
    q, k, v = (t.view(B, L, H, D).transpose(1, 2) for t in x.split(H * D, dim=-1))
    assert not q.is_contiguous()
    out = ops.scaled_dot_product_attention(q, k, v, is_causal=True)
    xf = x.detach().float().requires_grad_()
    qf, kf, vf = (t.view(B, L, H, D).transpose(1, 2) for t in xf.split(H * D, dim=-1))
    ref = F.scaled_dot_product_attention(qf, kf, vf, is_causal=True)
    gout = torch.randn(out.shape, generator=g).to(torch.bfloat16).transpose(1, 2).contiguous().transpose(1, 2)
    out.backward(gout)                        # a non-contiguous output gradient too
    ref.backward(gout.float())
    tol_o, tol_g = TOL[torch.bfloat16]
    assert (out.float() - ref).abs().max().item() <= tol_o
    assert (x.grad.float() - xf.grad).abs().max().item() <= tol_g


def test_3d_2d_and_broadcast_batch_dims():
    q, k, v = _inputs([(2, 8, 64), (2, 10, 64), (2, 10, 64)], torch.float16, 7)      # (H, L, E): no batch
    _against_torch(q, k, v, is_causal=True)
    q, k, v = _inputs([(8, 64), (8, 64), (8, 64)], torch.float16, 8)                 # (L, E)
    _against_torch(q, k, v)
    # (B0, B1, H, L, E) with key and value broadcast over B0, as torch's math
    q, k, v = _inputs([(2, 1, 2, 8, 64), (1, 1, 2, 8, 64), (1, 1, 2, 8, 64)], torch.float16, 9)
    _against_torch(q, k, v)


@pytest.mark.parametrize("qs, ks", [((1, 2, 0, 64), (1, 2, 8, 64)),      # no query rows
                                    ((1, 2, 4, 64), (1, 2, 0, 64)),      # no keys: out 0, as torch
                                    ((0, 2, 4, 64), (0, 2, 4, 64)),      # no batch
                                    ((1, 0, 4, 64), (1, 0, 4, 64))])     # no heads
def test_zero_size_dims_behave_as_torch(qs, ks):
    q, k, v = _inputs([qs, ks, ks], torch.float16, 10)
    out = _against_torch(q, k, v, is_causal=True)
    assert not out.float().isnan().any()
    o, lse = torch.ops.tiledsl.scaled_dot_product_attention_forward(q.detach(), k.detach(), v.detach())
    if ks[2] == 0:
        assert lse.shape == qs[:3] and bool((lse == -math.inf).all())


def test_lse_is_the_rows_log_sum_exp_and_not_differentiable():
    q, k, v = _inputs([(1, 2, 10, 64), (1, 2, 14, 64), (1, 2, 14, 64)], torch.float16, 11)
    out, lse = torch.ops.tiledsl.scaled_dot_product_attention_forward(q, k, v, True, 0.2)
    s = (q.detach().float() @ k.detach().float().transpose(-1, -2)) * 0.2
    s = s.masked_fill(torch.ones(10, 14, dtype=torch.bool).triu(1), -math.inf)
    assert lse.dtype == torch.float32 and (lse - torch.logsumexp(s, -1)).abs().max().item() <= 1e-3
    assert out.requires_grad and not lse.requires_grad


def test_head_dim_256_with_gradients():
    # D = 256's backward is fa3_backward's column split (the interpreter runs it for CPU tensors); bf16, GQA, causal
    q, k, v = _inputs([(1, 2, 20, 256), (1, 1, 12, 256), (1, 1, 12, 256)], torch.bfloat16, 12)
    _against_torch(q, k, v, is_causal=True, enable_gqa=True)
    q, k, v = (t.detach() for t in _inputs([(1, 1, 8, 256)] * 3, torch.float16, 12))
    out = ops.scaled_dot_product_attention(q, k, v, is_causal=True)
    ref = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=True)
    assert (out.float() - ref).abs().max().item() <= TOL[torch.float16][0]


def _refusal(match, *shapes, dtype=torch.float16, **kw):
    q, k, v = (torch.zeros(s, dtype=dtype) for s in shapes)
    with pytest.raises(UnsupportedArgument, match=match):
        ops.scaled_dot_product_attention(q, k, v, **kw)


def test_refusals_name_the_argument_and_what_is_supported():
    s = (1, 2, 8, 64)
    _refusal(r"attn_mask is not supported .* is_causal=True", s, s, s, attn_mask=torch.ones(8, 8, dtype=torch.bool))
    _refusal(r"dropout_p=0.1 is not supported; only dropout_p=0.0", s, s, s, dropout_p=0.1)
    _refusal(r"query.dtype=torch.float32 is not supported; supported dtypes: torch.float16, torch.bfloat16",
             s, s, s, dtype=torch.float32)
    _refusal(r"query.size\(-1\)=32 is not supported; supported head dims with a gradient: 64, 128, 256",
             (1, 2, 8, 32), (1, 2, 8, 32), (1, 2, 8, 32))
    _refusal(r"value.size\(-1\)=128 is not supported; value's head dim must equal query's \(64\)",
             s, s, (1, 2, 8, 128))
    _refusal(r"scale=-1.0 is not supported; a positive finite scale", s, s, s, scale=-1.0)
    _refusal(r"scale=0.0 is not supported", s, s, s, scale=0.0)
    q = torch.zeros(s, dtype=torch.float16)
    with pytest.raises(UnsupportedArgument, match=r"key.dtype=torch.bfloat16 .* share one dtype"):
        ops.scaled_dot_product_attention(q, q.bfloat16(), q)
    with pytest.raises(UnsupportedArgument, match="takes 4-d"):
        torch.ops.tiledsl.scaled_dot_product_attention_forward(q[0], q[0], q[0])
    assert issubclass(UnsupportedArgument, ValueError)


def test_opcheck_forward_and_backward_ops():
    q, k, v = _inputs([(1, 2, 12, 64), (1, 1, 16, 64), (1, 1, 16, 64)], torch.float16, 13)
    torch.library.opcheck(torch.ops.tiledsl.scaled_dot_product_attention_forward, (q, k, v), {"is_causal": True})
    q, k, v = (t.detach() for t in (q, k, v))
    out, lse = torch.ops.tiledsl.scaled_dot_product_attention_forward(q, k, v, True)
    gout = torch.randn(out.shape).to(out.dtype)
    torch.library.opcheck(torch.ops.tiledsl.scaled_dot_product_attention_backward, (gout, q, k, v, out, lse),
                          {"is_causal": True, "scale": None})


def test_public_names():
    assert ops.scaled_dot_product_attention is A.scaled_dot_product_attention
    assert "scaled_dot_product_attention" in ops.__all__
    assert hasattr(torch.ops.tiledsl, "scaled_dot_product_attention_backward")


def test_the_torch_op_has_f_sdpa_signature_and_gradients():
    """torch.ops.tiledsl.scaled_dot_product_attention is the public function (API.md): F.sdpa's arguments, by
    position and by keyword, one tensor out, differentiable, its refusals."""
    schema = torch.ops.tiledsl.scaled_dot_product_attention.default._schema
    assert [a.name for a in schema.arguments] == ["query", "key", "value", "attn_mask", "dropout_p", "is_causal",
                                                   "scale", "enable_gqa"]
    q, k, v = _inputs([(1, 4, 10, 64), (1, 2, 14, 64), (1, 2, 14, 64)], torch.float16, 14)
    out = torch.ops.tiledsl.scaled_dot_product_attention(q, k, v, None, 0.0, True, 0.2, True)
    assert isinstance(out, torch.Tensor) and out.shape == q.shape
    ref = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=True, scale=0.2, enable_gqa=True)
    assert (out.float() - ref).abs().max().item() <= TOL[torch.float16][0]
    out.float().square().sum().backward()
    grads = [t.grad.clone() for t in (q, k, v)]
    for t in (q, k, v):
        t.grad = None
    ops.scaled_dot_product_attention(q, k, v, is_causal=True, scale=0.2, enable_gqa=True).float().square().sum() \
        .backward()
    for g, t in zip(grads, (q, k, v)):
        assert torch.equal(g, t.grad)
    kw = torch.ops.tiledsl.scaled_dot_product_attention(q, k, v, is_causal=True, scale=0.2, enable_gqa=True)
    assert torch.equal(kw, out)
    with pytest.raises(UnsupportedArgument, match="dropout_p=0.5 is not supported"):
        torch.ops.tiledsl.scaled_dot_product_attention(q, k, v, dropout_p=0.5)


class _Attention(torch.nn.Module):
    """q, k, v projections (torch's linear) and the op, the layout of a transformer block."""

    def __init__(self, heads=2, dim=64):
        super().__init__()
        self.heads, self.dim = heads, dim
        self.qkv = torch.nn.Linear(heads * dim, 3 * heads * dim, dtype=torch.float16)

    def forward(self, x):
        B, L, _ = x.shape
        q, k, v = self.qkv(x).view(B, L, 3, self.heads, self.dim).permute(2, 0, 3, 1, 4)
        o = ops.scaled_dot_product_attention(q, k, v, is_causal=True)
        return o.transpose(1, 2).reshape(B, L, self.heads * self.dim)


def _compiled_run(backend):
    from torch._dynamo.testing import CompileCounterWithBackend
    from torch._dynamo.utils import counters
    torch._dynamo.reset()
    counters.clear()
    torch.manual_seed(0)
    m = _Attention()
    cnt = CompileCounterWithBackend(backend)
    cm = torch.compile(m, backend=cnt, fullgraph=True)
    for i in range(3):                           # new values each call: no recompilation
        x = torch.randn(1, 16, 128, generator=torch.Generator().manual_seed(i)).to(torch.float16)
        xc, xe = x.clone().requires_grad_(), x.clone().requires_grad_()
        yc, ye = cm(xc), m(xe)
        assert torch.equal(yc, ye)
        gc = torch.autograd.grad(yc.float().square().sum(), (xc, m.qkv.weight))
        ge = torch.autograd.grad(ye.float().square().sum(), (xe, m.qkv.weight))
        for a, b in zip(gc, ge):
            assert torch.equal(a, b)
    assert cnt.frame_count == 1, cnt.frame_count
    assert not counters["graph_break"], dict(counters["graph_break"])
    assert counters["stats"]["unique_graphs"] == 1


def test_torch_compile_fullgraph_no_graph_break_no_recompile():
    _compiled_run("aot_eager")


@pytest.mark.slow
def test_torch_compile_inductor_on_cpu():
    # inductor on CPU builds C++ for the graph around the op (about 40-100 s on two cores): slow tests only
    _compiled_run("inductor")


def test_eager_route_equals_the_dispatcher_bit_for_bit(monkeypatch):
    """An eager call autograd records runs the forward implementation inside a torch.autograd.Function and its
    backward implementation directly (common.route), never the dispatcher; out and gradients are those of the call
    through the custom op, bit for bit."""
    shapes = [(1, 2, 16, 64), (1, 1, 24, 64), (1, 1, 24, 64)]
    got = []
    for through in (False, True):
        q, k, v = _inputs(shapes, torch.float16, 3)
        if through:
            out = A.sdpa_forward(q, k, v, True, None)[0]
        else:
            monkeypatch.setattr(A, "sdpa_forward", lambda *a: pytest.fail("went through the dispatcher"))
            monkeypatch.setattr(A, "sdpa_backward", lambda *a: pytest.fail("went through the dispatcher"))
            out = ops.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        out.backward(torch.ones_like(out))
        got.append((out, q.grad, k.grad, v.grad))
        monkeypatch.undo()
    for a, b in zip(*got):
        torch.testing.assert_close(a, b, atol=0, rtol=0)


@pytest.mark.parametrize("causal", [False, True])
def test_nested_jagged_inputs_run_the_varlen_kernels(causal):
    """Nested (jagged) query, key and value as SDPA takes them, (B, H, j, E): the op packs them and runs the
    variable-length kernels; out (a nested tensor of query's layout) and the gradients of each sequence equal torch's
    dense SDPA of that sequence alone (causal: the lengths agree, so bottom-right is top-left)."""
    lens, H, HK, E = [5, 17, 1], 4, 2, 64
    g = torch.Generator().manual_seed(11)
    dense = [[torch.randn(n, h, E, generator=g).to(torch.float16) for n in lens] for h in (H, HK, HK)]

    def nested(seqs):
        nt = torch.nested.nested_tensor([s.clone() for s in seqs], layout=torch.jagged)
        return nt.transpose(1, 2).detach().requires_grad_()
    q, k, v = (nested(d) for d in dense)
    out = ops.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)
    assert out.is_nested and out.shape[1] == H
    grads = [torch.randn(n, H, E, generator=g).to(torch.float16) for n in lens]
    (out.transpose(1, 2).values().float() * torch.cat(grads).float()).sum().backward()   # (tokens, H, E)
    tol_o, tol_g = TOL[torch.float16]
    for i, n in enumerate(lens):
        qf, kf, vf = (d[i].float().transpose(0, 1).requires_grad_() for d in dense)
        ref = F.scaled_dot_product_attention(qf, kf, vf, is_causal=causal, enable_gqa=True)
        ref.backward(grads[i].float().transpose(0, 1))
        assert _err(out.unbind()[i], ref) <= tol_o
        for t, r in ((q, qf), (k, kf), (v, vf)):
            assert _err(t.grad.unbind()[i], r.grad) <= tol_g


def test_nested_mixed_with_dense_is_refused():
    q = torch.nested.nested_tensor([torch.randn(3, 2, 64).half()], layout=torch.jagged).transpose(1, 2)
    k = torch.randn(1, 2, 3, 64).half()
    with pytest.raises(UnsupportedArgument, match="torch.jagged"):
        ops.scaled_dot_product_attention(q, k, k)
