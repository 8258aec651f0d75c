"""matmul (tiledsl/ops/gemm/matmul.py) on the H200: it takes the Hopper path (tuned and heuristic configurations) for
the benchmark's six shapes, f16 and bf16, within 1e-2 of torch in fp32 (sampled rows for the big shapes); ragged shapes
(4095 x 4097 x 4093: K % 8 != 0, the padded mma.sync path; 4095 x 4097 x 4096: the Hopper path with plain stores); bias
and the activations; matmul_fp8 at 1024^3 within 5e-2. tests/test_gemm_hopper_route.py compiles every configuration
these can pick and assembles it with ptxas on any machine."""
import pytest

from tiledsl.ops.gemm import fp8 as FP8
from tiledsl.ops.gemm import hopper_plan as HP
from tiledsl.ops.gemm import matmul as MM

pytestmark = pytest.mark.gpu

SHAPES = [(1024, 1024, 1024), (2048, 2048, 2048), (4096, 4096, 4096), (8192, 8192, 8192),
          (16384, 4096, 4096), (4096, 14336, 4096)]


def _hopper():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("the Hopper path needs sm_90: an H100/H200")
    return torch


def _inputs(torch, M, N, K, dt, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed + M + N + K)
    return (torch.randn(M, K, device="cuda", dtype=dt, generator=g),
            torch.randn(N, K, device="cuda", dtype=dt, generator=g))


def _check(torch, c, a, b, rows=None, post=None, tol=1e-2):
    """c against fp32 torch on all rows, or on `rows` sampled rows (the big shapes)."""
    if rows is not None and rows < a.shape[0]:
        idx = torch.randperm(a.shape[0], device="cuda")[:rows]
        a, c = a[idx], c[idx]
    ref = a.float() @ b.float().T
    if post is not None:
        ref = post(ref)
    c = c.float()
    assert torch.isfinite(c).all()
    err = max(((c - ref).norm() / ref.norm()).item(), ((c - ref).abs().max() / ref.abs().max()).item())
    assert err <= tol, err


@pytest.mark.parametrize("M,N,K", SHAPES)
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_matmul_takes_the_hopper_path(M, N, K, dtype):
    torch = _hopper()
    dt = getattr(torch, dtype)
    a, b = _inputs(torch, M, N, K, dt)
    c = torch.full((M, N), float("nan"), device="cuda", dtype=dt)
    MM.matmul(a, b, out=c)
    plan = MM.plan_of(a, b, c)
    assert plan.path == "hopper" and plan.describe.startswith("hopper"), plan.describe
    torch.cuda.synchronize()
    _check(torch, c, a, b, rows=None if M * N <= 2048 * 2048 else 512)


@pytest.mark.parametrize("M,N,K", SHAPES[:3])
def test_heuristic_configuration(M, N, K):
    torch = _hopper()
    a, b = _inputs(torch, M, N, K, torch.float16, seed=1)
    c = MM.matmul(a, b, tune=False)
    assert "(heuristic)" in MM.plan_of(a, b, c, tune=False).describe
    _check(torch, c, a, b, rows=512)


@pytest.mark.parametrize("cfg", HP.HOPPER_CONFIGS)
def test_every_candidate_configuration(cfg):
    torch = _hopper()
    a, b = _inputs(torch, 1000, 1504, 776, torch.bfloat16, seed=2)
    c = MM.matmul(a, b, config=cfg)
    _check(torch, c, a, b)


def test_ragged_k_takes_the_padded_mma_path():
    torch = _hopper()
    M, N, K = 4095, 4097, 4093
    a, b = _inputs(torch, M, N, K, torch.float16)
    c = MM.matmul(a, b)
    assert MM.plan_of(a, b, c).path == "mma-padded"
    assert c.shape == (M, N)
    _check(torch, c, a, b, rows=512)


@pytest.mark.parametrize("dtype,out", [("float16", None), ("bfloat16", "float32")])
def test_ragged_m_n_take_the_hopper_path(dtype, out):
    torch = _hopper()
    M, N, K = 4095, 4097, 4096
    dt = getattr(torch, dtype)
    a, b = _inputs(torch, M, N, K, dt)
    c = MM.matmul(a, b, out_dtype=getattr(torch, out) if out else None)
    assert MM.plan_of(a, b, c).path == "hopper" and c.dtype == (getattr(torch, out) if out else dt)
    _check(torch, c, a, b, rows=512)


@pytest.mark.parametrize("activation", [None, "relu", "gelu", "silu"])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_bias_and_activation(activation, dtype):
    torch = _hopper()
    F = torch.nn.functional
    dt = getattr(torch, dtype)
    M, N, K = 1024, 2048, 512
    a, b = _inputs(torch, M, N, K, dt, seed=3)
    bias = torch.randn(N, device="cuda", dtype=dt)
    act = {None: lambda t: t, "relu": torch.relu, "gelu": F.gelu, "silu": F.silu}[activation]
    c = MM.matmul(a, b, bias=bias, activation=activation)
    _check(torch, c, a, b, post=lambda r: act(r + bias.float()))


def test_callable_activation():
    torch = _hopper()
    a, b = _inputs(torch, 512, 512, 256, torch.float16, seed=4)
    c = MM.matmul(a, b, activation=lambda t: t.mul_(0.5))
    _check(torch, c, a, b, post=lambda r: 0.5 * r)


def test_matmul_fp8_1024():
    torch = _hopper()
    n = 1024
    a32, b32 = _inputs(torch, n, n, n, torch.float32, seed=5)
    a, b = a32.to(torch.float8_e4m3fn), b32.to(torch.float8_e4m3fn)
    sa = torch.tensor([0.5], device="cuda")
    sb = torch.tensor([2.0], device="cuda")
    c = FP8.matmul_fp8(a, b, sa, sb)
    assert c.dtype == torch.bfloat16 and c.shape == (n, n)
    ref = (a.float() @ b.float().T) * (sa * sb)
    err = ((c.float() - ref).norm() / ref.norm()).item()
    assert err <= 5e-2, err
    bias = torch.randn(n, device="cuda", dtype=torch.bfloat16)
    c2 = FP8.matmul_fp8(a, b, sa, sb, bias=bias)
    ref2 = ref + bias.float()
    assert ((c2.float() - ref2).norm() / ref2.norm()).item() <= 5e-2
