"""The skinny GEMM (tiledsl/ops/gemm/skinny.py; gated as `gemm_skinny`) on the H200: matmul at M 1..64 over LLM
projection sizes against torch, repeat launches bit-identical (the split sums in a fixed order), a CUDA graph captured
once and replayed on the counters the launches leave at zero, the tuner's candidate up to M = 256, and the plan with
the gate off. The GPU session that runs this file (and benchmarks/gemm_skinny.py) moves `gemm_skinny` to
gates.VERIFIED, quoting the run. tests/test_gemm_skinny.py checks the kernel on the interpreter and with ptxas."""
import pytest

from tiledsl.ops.gemm import matmul as MM
from tiledsl.ops.gemm import skinny as SKN

pytestmark = pytest.mark.gpu

LLM = [(4096, 4096), (4096, 14336), (14336, 4096), (28672, 4096), (5120, 5120), (11008, 4096), (1024, 4096)]
MS = [1, 2, 7, 8, 16, 17, 32, 33, 48, 63, 64]


@pytest.fixture
def torch(monkeypatch):
    t = pytest.importorskip("torch")
    if not t.cuda.is_available() or t.cuda.get_device_capability() != (9, 0):
        pytest.skip("the skinny kernel needs sm_90a: an H100/H200")
    monkeypatch.setenv("TILEDSL_ENABLE", "gemm_skinny")
    MM._PLANS.clear()               # plans made with the gate off must not serve these calls
    yield t
    MM._PLANS.clear()


def _inputs(torch, M, N, K, dt, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed + M + N + K)
    return (torch.randn(M, K, device="cuda", dtype=dt, generator=g),
            torch.randn(N, K, device="cuda", dtype=dt, generator=g))


def _check(torch, c, a, b, tol=1e-2):
    ref = a.float() @ b.float().T
    c = c.float()
    assert torch.isfinite(c).all()
    err = max(((c - ref).norm() / ref.norm()).item(), ((c - ref).abs().max() / ref.abs().max()).item())
    assert err <= tol, err


@pytest.mark.parametrize("N,K", LLM)
@pytest.mark.parametrize("M", MS)
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_matmul_takes_the_skinny_kernel(torch, M, N, K, dtype):
    dt = getattr(torch, dtype)
    a, b = _inputs(torch, M, N, K, dt)
    c = torch.full((M, N), float("nan"), device="cuda", dtype=dt)
    MM.matmul(a, b, out=c, tune=False)
    plan = MM.plan_of(a, b, c, tune=False)
    assert plan.path == "skinny", plan.describe
    torch.cuda.synchronize()
    _check(torch, c, a, b)


@pytest.mark.parametrize("M,N,K", [(1, 4096, 4096), (16, 4096, 14336), (64, 14336, 4096), (7, 1000, 4104)])
def test_ragged_and_f32_out(torch, M, N, K):
    a, b = _inputs(torch, M, N, K, torch.float16)
    c = SKN.skinny_matmul(a, b, torch.float32)
    torch.cuda.synchronize()
    _check(torch, c, a, b, tol=1e-3)


@pytest.mark.parametrize("config", [(16, 1, 9, 1), (16, 1, 9, 2), (16, 1, 4, 7), (16, 2, 8, 4), (16, 1, 9, 64)])
def test_repeat_launches_are_bit_identical(torch, config):
    """100 launches (whichever block of a tile arrives last, it adds the partials in split order) give one result."""
    a, b = _inputs(torch, 16, 4096, 4096, torch.bfloat16)
    first = SKN.skinny_matmul(a, b, config=config)
    for _ in range(100):
        again = SKN.skinny_matmul(a, b, config=config)
        assert torch.equal(first, again)
    _check(torch, first, a, b)


def test_cuda_graph_replay(torch):
    """Captured once, replayed 20 times on new inputs: the counters wrap to 0 at each tile's last arrival, so no
    memset between replays."""
    M, N, K = 8, 14336, 4096
    a, b = _inputs(torch, M, N, K, torch.float16)
    out = torch.empty(M, N, device="cuda", dtype=torch.float16)
    MM.matmul(a, b, out=out, tune=False)                # the plan and its workspace made before capture
    assert MM.plan_of(a, b, out, tune=False).config[3] > 1
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        MM.matmul(a, b, out=out, tune=False)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        MM.matmul(a, b, out=out, tune=False)
    for i in range(20):
        a.copy_(torch.randn(M, K, device="cuda", dtype=torch.float16))
        g.replay()
        torch.cuda.synchronize()
        _check(torch, out, a, b)


@pytest.mark.parametrize("M", [65, 128, 200, 256])
def test_the_tuner_times_it_up_to_m_256(torch, M):
    a, b = _inputs(torch, M, 4096, 4096, torch.float16)
    c = MM.matmul(a, b)
    torch.cuda.synchronize()
    _check(torch, c, a, b)
    assert MM.plan_of(a, b, c).path in ("skinny", "hopper")


def test_the_gate_off_keeps_the_hopper_plan(torch, monkeypatch):
    from tiledsl.ops import gates
    monkeypatch.delenv("TILEDSL_ENABLE")
    monkeypatch.setenv("TILEDSL_DISABLE", "gemm_skinny")
    assert not gates.enabled("gemm_skinny")
    a, b = _inputs(torch, 16, 4096, 4096, torch.float16)
    plan = MM.plan_of(a, b, tune=False)
    assert plan.path == "hopper" and "skinny kernel was passed over" in plan.describe


@pytest.mark.parametrize("M", [1, 16, 64])
@pytest.mark.parametrize("N,K", [(4096, 4096), (4096, 14336), (28672, 4096)])
def test_matmul_fp8_takes_the_skinny_kernel(torch, M, N, K):
    from tiledsl.ops.gemm import fp8 as FP8
    g = torch.Generator(device="cuda").manual_seed(M + N + K)
    a = (torch.randn(M, K, device="cuda", generator=g) / 2).to(torch.float8_e4m3fn)
    b = (torch.randn(N, K, device="cuda", generator=g) / 2).to(torch.float8_e4m3fn)
    sa, sb = torch.tensor([0.5], device="cuda"), torch.tensor([2.0], device="cuda")
    FP8._FP8_PLANS.clear()
    c = FP8.matmul_fp8(a, b, sa, sb, tune=False)
    assert FP8.fp8_plan_of(a, b, tune=False).startswith("fp8 skinny")
    torch.cuda.synchronize()
    ref = a.float() @ b.float().T
    err = ((c.float() - ref).norm() / ref.norm()).item()
    assert err <= 1e-2, err
    again = FP8.matmul_fp8(a, b, sa, sb, tune=False)
    assert torch.equal(c, again)
    FP8._FP8_PLANS.clear()
