"""The Hopper GEMM's MN-major operands on an H100/H200 (the gated path "gemm_mn_major": a GPU session that passes
these moves it to tiledsl.ops.gates.VERIFIED): hopper_matmul with each (a_major, b_major) and matmul on transposed
views against torch (relative error <= 1e-2; ragged shapes too), the plan naming the majors, and the linear /
matmul backward (no transposed copies) against torch's autograd. tests/test_hopper_gemm_layouts.py runs the
same kernels on the interpreter and assembles them on any machine."""
import pytest

from tiledsl.ops.gemm import hopper as H

pytestmark = pytest.mark.gpu

SHAPES = [(256, 256, 512), (1000, 776, 520), (4096, 4096, 4096), (24, 4096, 1032)]
MAJORS = [("k", "k"), ("k", "mn"), ("mn", "k"), ("mn", "mn")]
IDS = [f"A{a}-B{b}" for a, b in MAJORS]


def _hopper():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("the Hopper GEMM needs sm_90 (sm_90a): an H100/H200")
    return torch


def _views(torch, M, N, K, dt, majors, seed):
    """a (M, K) and b (N, K) as the majors say: row-major, or the transpose of a contiguous (K, M) / (K, N)."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    a = torch.randn(M, K, device="cuda", dtype=dt, generator=g)
    b = torch.randn(N, K, device="cuda", dtype=dt, generator=g)
    if majors[0] == "mn":
        a = a.t().contiguous().t()
    if majors[1] == "mn":
        b = b.t().contiguous().t()
    return a, b


def _close(torch, got, want):
    err = (got.float() - want.float()).norm() / want.float().norm().clamp_min(1e-6)
    assert err <= 1e-2, f"relative error {err:.3g}"


@pytest.mark.parametrize("dt", ["float16", "bfloat16"])
@pytest.mark.parametrize("majors", MAJORS, ids=IDS)
@pytest.mark.parametrize("M,N,K", SHAPES)
def test_hopper_matmul_each_major_against_torch(M, N, K, majors, dt):
    torch = _hopper()
    dt = getattr(torch, dt)
    a, b = _views(torch, M, N, K, dt, majors, seed=M + N)
    for cfg in (dict(), dict(persistent=True, bn=256, tma_store=True), dict(persistent=True, bn=256,
                                                                           multicast=True)):
        c = H.hopper_matmul(a, b, a_major="auto", b_major="auto", **cfg)
        _close(torch, c, a.float() @ b.float().t())
    assert H.majors_for(a, b, "auto", "auto", 256, False) == majors


@pytest.mark.parametrize("majors", MAJORS[1:], ids=IDS[1:])
@pytest.mark.parametrize("M,N,K", SHAPES)
def test_matmul_reads_transposed_views_with_the_gate_on(M, N, K, majors, monkeypatch):
    torch = _hopper()
    monkeypatch.setenv("TILEDSL_ENABLE", "gemm_mn_major")
    from tiledsl.ops.gemm import matmul as MM
    a, b = _views(torch, M, N, K, torch.bfloat16, majors, seed=K)
    plan = MM.plan_of(a, b, tune=False)
    assert plan.majors[0] == majors[0] and "MN-major" in plan.describe
    _close(torch, MM.matmul(a, b, tune=False), a.float() @ b.float().t())
    _close(torch, MM.matmul(a, b), a.float() @ b.float().t())         # the tuned plan


def test_matmul_copies_with_the_gate_off(monkeypatch):
    torch = _hopper()
    monkeypatch.delenv("TILEDSL_ENABLE", raising=False)
    monkeypatch.setenv("TILEDSL_DISABLE", "gemm_mn_major")
    from tiledsl.ops.gemm import matmul as MM
    monkeypatch.setattr(MM, "_PLANS", {})          # plans made with the gate open must not serve this call
    a, b = _views(torch, 512, 256, 384, torch.float16, ("mn", "mn"), seed=1)
    plan = MM.plan_of(a, b, tune=False)
    assert plan.majors == ("k", "k") and "passed over" in plan.describe
    _close(torch, MM.matmul(a, b, tune=False), a.float() @ b.float().t())


@pytest.mark.parametrize("activation", [None, "gelu"])
@pytest.mark.parametrize("shape", [(8, 512, 1024, 768), (1, 1000, 776, 520), (2, 2048, 4096, 4096)])
def test_linear_backward_against_torch(shape, activation, monkeypatch):
    """ops.linear forward + backward with the gate on (dA = dZ @ B, dB = dZᵀ @ A through the MN-major forms)."""
    torch = _hopper()
    monkeypatch.setenv("TILEDSL_ENABLE", "gemm_mn_major")
    import tiledsl.ops as ops
    B, S, N, K = shape
    g = torch.Generator(device="cuda").manual_seed(S)
    x = torch.randn(B, S, K, device="cuda", dtype=torch.bfloat16, generator=g).requires_grad_()
    w = (torch.randn(N, K, device="cuda", dtype=torch.bfloat16, generator=g) / K ** 0.5).requires_grad_()
    bias = torch.randn(N, device="cuda", dtype=torch.bfloat16, generator=g).requires_grad_()
    dy = torch.randn(B, S, N, device="cuda", dtype=torch.bfloat16, generator=g)
    y = ops.linear(x, w, bias, activation=activation)
    gx, gw, gb = torch.autograd.grad(y, (x, w, bias), dy)
    xr, wr, br = (t.detach().float().requires_grad_() for t in (x, w, bias))
    yr = torch.nn.functional.linear(xr, wr, br)
    yr = yr if activation is None else torch.nn.functional.gelu(yr)
    rx, rw, rb = torch.autograd.grad(yr, (xr, wr, br), dy.float())
    _close(torch, y, yr)
    for got, want in ((gx, rx), (gw, rw), (gb, rb)):
        _close(torch, got, want)


def test_matmul_op_backward_against_torch(monkeypatch):
    torch = _hopper()
    monkeypatch.setenv("TILEDSL_ENABLE", "gemm_mn_major")
    import tiledsl.ops as ops
    a = torch.randn(1000, 520, device="cuda", dtype=torch.float16, requires_grad=True)
    b = torch.randn(776, 520, device="cuda", dtype=torch.float16, requires_grad=True)
    dz = torch.randn(1000, 776, device="cuda", dtype=torch.float16)
    ga, gb = torch.autograd.grad(ops.matmul(a, b), (a, b), dz)
    _close(torch, ga, dz.float() @ b.float())
    _close(torch, gb, dz.float().t() @ a.float())
