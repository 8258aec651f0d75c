"""The elementwise ops of the Llama block (tiledsl/ops/library/elementwise.py, decode.py) on CPU tensors through the
interpreter: values and gradients against torch in float32, torch.library.opcheck, and the refusals."""
import pytest

torch = pytest.importorskip("torch")

import tiledsl.ops as ops  # noqa: E402
from tiledsl.ops.library.common import UnsupportedArgument  # noqa: E402

F = torch.nn.functional


def _rel(got, want):
    return ((got.float() - want.float()).norm() / want.float().norm().clamp_min(1e-30)).item()


def _torch_rope(x, cos, sin, positions):
    """x (B, L, heads, D) rotated (rotate-half) at positions (B, L), float32."""
    D = x.shape[-1]
    c = cos[positions.long()][:, :, None, :].repeat(1, 1, 1, 2)
    s = sin[positions.long()][:, :, None, :].repeat(1, 1, 1, 2)
    rot = torch.cat([-x[..., D // 2:], x[..., :D // 2]], -1)
    return x * c + rot * s


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("n", [24, 5])
def test_silu_mul_values_and_gradient(dtype, n):
    g = torch.Generator().manual_seed(0)
    x = (torch.randn(2, 3, 2 * n, generator=g) * 3).to(dtype).requires_grad_()
    dy = torch.randn(2, 3, n, generator=g).to(dtype)
    y = ops.silu_mul(x)
    (dx,) = torch.autograd.grad(y, x, dy)
    xf = x.detach().float().requires_grad_()
    gate, up = xf.chunk(2, -1)
    yf = F.silu(gate) * up
    (dxf,) = torch.autograd.grad(yf, xf, dy.float())
    assert y.shape == (2, 3, n) and y.dtype == dtype
    assert _rel(y, yf) < 5e-3
    assert _rel(dx, dxf) < 5e-3


def test_silu_mul_opcheck_and_refusals():
    x = torch.randn(3, 16).to(torch.bfloat16).requires_grad_()
    torch.library.opcheck(torch.ops.tiledsl.silu_mul.default, (x,))
    with pytest.raises(UnsupportedArgument, match="gate_up.dtype"):
        ops.silu_mul(torch.randn(2, 8))
    with pytest.raises(ValueError, match=r"\(\*, 2n\)"):
        ops.silu_mul(torch.randn(2, 7).half())
    big = torch.empty(1, dtype=torch.half).expand(2 ** 20, 2 ** 11 + 2)      # 2^31 + 2^21 elements, no memory
    with pytest.raises(UnsupportedArgument, match="32-bit"):
        ops.silu_mul(big)


@pytest.mark.parametrize("dtype, H, HK", [(torch.bfloat16, 4, 2), (torch.float16, 4, 2),
                                          (torch.bfloat16, 3, 1)])     # (5 heads in all: one head a block)
def test_qkv_rope_values_and_gradient(dtype, H, HK):
    B, L, D = 2, 3, 64
    g = torch.Generator().manual_seed(1)
    cos, sin = ops.rope_tables(32, D, 500000.0)
    qkv = torch.randn(B, L, (H + 2 * HK) * D, generator=g).to(dtype).requires_grad_()
    pos = torch.tensor([[0, 1, 2], [9, 17, 30]], dtype=torch.int32)
    q, k, v = ops.qkv_rope(qkv, cos, sin, pos, H, HK)
    assert q.shape == (B, H, L, D) and k.shape == v.shape == (B, HK, L, D)
    dq, dk, dv = (torch.randn(t.shape, generator=g).to(dtype) for t in (q, k, v))
    (dx,) = torch.autograd.grad((q, k, v), qkv, (dq, dk, dv))
    xf = qkv.detach().float().requires_grad_()
    parts = xf.view(B, L, H + 2 * HK, D)
    r = _torch_rope(parts[:, :, :H + HK], cos, sin, pos)
    qf, kf, vf = r[:, :, :H].transpose(1, 2), r[:, :, H:].transpose(1, 2), parts[:, :, H + HK:].transpose(1, 2)
    (dxf,) = torch.autograd.grad((qf, kf, vf), xf, (dq.float(), dk.float(), dv.float()))
    for got, want in ((q, qf), (k, kf), (v, vf), (dx, dxf)):
        assert _rel(got, want) < 5e-3
    # an unused output (no gradient reaches v) gives zeros for its slice
    (dx2,) = torch.autograd.grad(ops.qkv_rope(qkv, cos, sin, pos, H, HK)[0].sum(), qkv)
    assert dx2.view(B, L, H + 2 * HK, D)[:, :, H:].abs().max() == 0


def test_qkv_rope_opcheck_and_refusals():
    B, L, H, HK, D = 1, 2, 2, 1, 4
    cos, sin = ops.rope_tables(8, D, 10000.0)
    qkv = torch.randn(B, L, (H + 2 * HK) * D).half().requires_grad_()
    pos = torch.arange(L, dtype=torch.int32)[None]
    torch.library.opcheck(torch.ops.tiledsl.qkv_rope.default, (qkv, cos, sin, pos, H, HK))
    with pytest.raises(UnsupportedArgument, match="positions"):
        ops.qkv_rope(qkv, cos, sin, pos.long(), H, HK)
    with pytest.raises(UnsupportedArgument, match="cos"):
        ops.qkv_rope(qkv, cos.half(), sin, pos, H, HK)
    with pytest.raises(ValueError, match="divide"):
        ops.qkv_rope(qkv, cos, sin, pos, 3, 2)


def test_qkv_rope_paged_writes_the_cache():
    B, L, H, HK, D, P = 2, 2, 2, 1, 64, 16
    g = torch.Generator().manual_seed(2)
    cos, sin = ops.rope_tables(64, D, 500000.0)
    qkv = torch.randn(B, L, (H + 2 * HK) * D, generator=g).half()
    kc = torch.zeros(6, P, HK, D, dtype=torch.half)
    vc = torch.zeros_like(kc)
    bt = torch.tensor([[3, 1], [5, 0]], dtype=torch.int32)
    lens = torch.tensor([15, 3], dtype=torch.int32)                 # sequence 0 crosses a page
    pos = lens[:, None] + torch.arange(L, dtype=torch.int32)
    q = ops.qkv_rope_paged(qkv, cos, sin, lens, kc, vc, bt, H, HK)
    qr, kr, vr = ops.qkv_rope(qkv, cos, sin, pos, H, HK)
    assert torch.equal(q, qr.transpose(1, 2))
    for b in range(B):
        for i in range(L):
            p = int(pos[b, i])
            page, row = int(bt[b, p // P]), p % P
            assert torch.equal(kc[page, row], kr[b, :, i]) and torch.equal(vc[page, row], vr[b, :, i])
    with pytest.raises(UnsupportedArgument, match="cache_seqlens"):
        ops.qkv_rope_paged(qkv, cos, sin, pos, kc, vc, bt, H, HK)
    torch.library.opcheck(torch.ops.tiledsl.qkv_rope_paged.default, (qkv, cos, sin, lens, kc, vc, bt, H, HK),
                          test_utils=("test_schema", "test_faketensor"))


def test_attention_decode_op_matches_sdpa():
    B, H, HK, D, P = 2, 2, 1, 64, 16
    g = torch.Generator().manual_seed(3)
    kc = torch.randn(4, P, HK, D, generator=g).half()
    vc = torch.randn(4, P, HK, D, generator=g).half()
    bt = torch.tensor([[2, 0], [1, 3]], dtype=torch.int32)
    lens = torch.tensor([20, 7], dtype=torch.int32)
    q = torch.randn(B, 1, H, D, generator=g).half()
    out = torch.ops.tiledsl.attention_decode(q, kc, vc, lens, bt)
    for b in range(B):
        n = int(lens[b])
        k = kc[bt[b].long()].reshape(-1, HK, D)[:n].float().transpose(0, 1)
        v = vc[bt[b].long()].reshape(-1, HK, D)[:n].float().transpose(0, 1)
        want = F.scaled_dot_product_attention(q[b].float().transpose(0, 1), k, v, enable_gqa=True)
        assert _rel(out[b].transpose(0, 1), want) < 5e-3
    with pytest.raises(UnsupportedArgument, match="cache_seqlens"):
        torch.ops.tiledsl.attention_decode(q, kc, vc, lens.long(), bt)
    torch.library.opcheck(torch.ops.tiledsl.attention_decode.default, (q, kc, vc, lens, bt, False, None),
                          test_utils=("test_schema", "test_faketensor"))


# ------------------------------------------------------------------ the GPU kernels compile (no GPU needed)

@pytest.mark.parametrize("n, backward", [(14336, False), (14336, True), (5, False)])
def test_silu_mul_kernels_pass_ptxas(n, backward):
    from helpers import ptxas
    from tiledsl.ops.elementwise.swiglu import make_silu_mul
    kern = make_silu_mul(n, "bfloat16", backward)
    gu, y = torch.empty(8, n, dtype=torch.bfloat16), torch.empty(4, n, dtype=torch.bfloat16)
    args = (gu, y, gu) if backward else (gu, y)
    r = ptxas(kern.compile(*args, target="sm_90").asm["ptx"], "sm_90", verbose=True)
    assert r.returncode == 0, r.stderr
    assert "0 bytes spill stores" in r.stderr, r.stderr


@pytest.mark.parametrize("layout, backward", [("bhld", False), ("bhld", True), ("paged", False)])
def test_qkv_rope_kernels_pass_ptxas(layout, backward):
    from helpers import ptxas
    from tiledsl.ops.elementwise.rope import make_qkv_rope
    B, L, H, HK, D = 2, 3, 32, 8, 128
    bf = torch.bfloat16
    kern = make_qkv_rope(H, HK, D, "bfloat16", layout, backward)
    qkv = torch.empty(B, L, (H + 2 * HK) * D, dtype=bf)
    pos = torch.zeros(B, L, dtype=torch.int32)
    cs = torch.empty(64, D // 2)
    if backward:
        args = (torch.empty(B, H, L, D, dtype=bf), torch.empty(B, HK, L, D, dtype=bf),
                torch.empty(B, HK, L, D, dtype=bf), pos, cs, cs, qkv)
    elif layout == "bhld":
        args = (qkv, pos, cs, cs, torch.empty(B, H, L, D, dtype=bf), torch.empty(B, HK, L, D, dtype=bf),
                torch.empty(B, HK, L, D, dtype=bf))
    else:
        cache = torch.empty(10, 64, HK, D, dtype=bf)
        args = (qkv, pos[:, 0].contiguous(), cs, cs, torch.empty(B, L, H, D, dtype=bf), cache, cache,
                torch.zeros(B, 5, dtype=torch.int32))
    r = ptxas(kern.compile(*args, target="sm_90").asm["ptx"], "sm_90", verbose=True)
    assert r.returncode == 0, r.stderr
