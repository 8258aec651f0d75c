"""The GEMM torch ops (tiledsl/ops/library/gemm.py) on the GPU: torch.library.opcheck on CUDA tensors; results
against torch for tiny, ragged, zero-size and larger shapes, bias and activations, any leading dims, non-contiguous
inputs; autograd against torch; CUDA-graph capture and replay after the inputs' values change, for every GEMM variant
(persistent, stream-K over the last partial wave, stream-K at a decode-sized M, split-K, 2-CTA multicast, one tile per
block, mma.sync, mma.sync on padded operands, FP8); torch.compile (fullgraph, default backend; mode="reduce-overhead");
and the eager op call's host overhead against F.linear's (the issue's target: at most 1.5x).
tests/test_ops_gemm.py runs the same ops on the interpreter (CPU tensors) in CI."""
import statistics
import time

import pytest

pytestmark = pytest.mark.gpu


def _cuda():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch sees no CUDA device")
    import tiledsl.ops.library  # noqa: F401  (registers torch.ops.tiledsl.*, as touching an op name does)
    return torch


def _hopper():
    torch = _cuda()
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("needs sm_90: an H100/H200")
    return torch


def _rand(torch, *shape, dtype=None, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    return torch.randn(*shape, device="cuda", generator=g).to(dtype or torch.float16)


def _ref(a, b, bias=None, activation=None):
    import torch.nn.functional as F
    z = a.float() @ b.float().T
    if bias is not None:
        z = z + bias.float()
    return {None: lambda t: t, "relu": F.relu, "gelu": F.gelu, "silu": F.silu}[activation](z)


def _close(torch, got, want, tol=2e-2):
    """got within tol of want, relative to want's largest magnitude (sums over K of unit normals grow as sqrt K)."""
    got, want = got.float(), want.float()
    assert got.shape == want.shape and torch.isfinite(got).all()
    scale = max(1.0, want.abs().max().item()) if want.numel() else 1.0
    err = (got - want).abs().max().item() if got.numel() else 0.0
    assert err <= tol * scale, f"max error {err} against {scale}"


# ------------------------------------------------------------------ opcheck

def test_opcheck_on_cuda():
    torch = _cuda()
    a, b, bias = _rand(torch, 100, 64), _rand(torch, 72, 64, seed=1), _rand(torch, 72, seed=2)
    torch.library.opcheck(torch.ops.tiledsl.matmul.default, (a, b))
    torch.library.opcheck(torch.ops.tiledsl.matmul.default,
                          (a.requires_grad_(), b.requires_grad_(), bias.requires_grad_(), "gelu", torch.float32))
    x = _rand(torch, 2, 3, 64).requires_grad_()
    torch.library.opcheck(torch.ops.tiledsl.linear.default, (x, b, bias, "silu"))


def test_opcheck_fp8_on_cuda():
    torch = _hopper()
    from test_ops_gemm import FP8_OPCHECK     # opcheck's test_schema cannot compare float8 tensors (see there)
    a = _rand(torch, 100, 64).to(torch.float8_e4m3fn)
    b = _rand(torch, 72, 64, seed=1).to(torch.float8_e4m3fn)
    one = torch.ones((), device="cuda")
    torch.library.opcheck(torch.ops.tiledsl.matmul_fp8.default, (a, b, one, one), test_utils=FP8_OPCHECK)
    torch.library.opcheck(torch.ops.tiledsl.matmul_fp8.default,
                          (a, b, torch.rand(100, 1, device="cuda"), torch.rand(1, 72, device="cuda")),
                          test_utils=FP8_OPCHECK)


def test_transposed_operands_tune_without_a_warning(monkeypatch):
    """A transposed view that the gate keeps K-major (copied per call) is copied for the tuning too: the tuner once
    timed its candidates on the view itself, each refused ('B is not contiguous'), and warned."""
    import warnings
    torch = _hopper()
    from tiledsl.ops.gemm import matmul as MM
    monkeypatch.setenv("TILEDSL_DISABLE", "gemm_mn_major")      # the gate closed: the views are copied K-major
    monkeypatch.setattr(MM, "_PLANS", {})
    a, b = _rand(torch, 104, 80), _rand(torch, 80, 72, seed=1).t()      # b (72, 80), strides (1, 72)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = torch.ops.tiledsl.matmul(a, b)
        got2 = torch.ops.tiledsl.matmul(a.t().contiguous().t(), b)
    _close(torch, got, _ref(a, b))
    _close(torch, got2, _ref(a, b))


# ------------------------------------------------------------------ results

SHAPES = [(1, 8, 8), (1, 4096, 4096), (7, 13, 24), (16, 24, 40), (100, 200, 96), (257, 129, 64), (64, 64, 7),
          (1000, 1000, 1000), (513, 1000, 4104), (4095, 4097, 4093), (2048, 2048, 2048)]


@pytest.mark.parametrize("M,N,K", SHAPES)
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_matmul_matches_torch(M, N, K, dtype):
    torch = _cuda()
    dt = getattr(torch, dtype)
    a, b = _rand(torch, M, K, dtype=dt), _rand(torch, N, K, dtype=dt, seed=1)
    import tiledsl.ops as ops
    _close(torch, ops.matmul(a, b), _ref(a, b))


@pytest.mark.parametrize("M,N,K", [(0, 64, 64), (64, 0, 64), (64, 64, 0), (0, 0, 0)])
def test_zero_size(M, N, K):
    torch = _cuda()
    import tiledsl.ops as ops
    a, b, bias = _rand(torch, M, K), _rand(torch, N, K, seed=1), _rand(torch, N, seed=2)
    _close(torch, ops.matmul(a, b, bias, "gelu"), _ref(a, b, bias, "gelu"))
    assert ops.linear(_rand(torch, 3, 0, K), b).shape == (3, 0, N)


@pytest.mark.parametrize("activation", [None, "relu", "gelu", "silu"])
@pytest.mark.parametrize("out_dtype", [None, "float32"])
def test_bias_activation_and_out_dtype(activation, out_dtype):
    torch = _cuda()
    import tiledsl.ops as ops
    od = None if out_dtype is None else getattr(torch, out_dtype)
    a, b, bias = _rand(torch, 300, 256), _rand(torch, 136, 256, seed=1), _rand(torch, 136, seed=2)
    c = ops.matmul(a, b, bias, activation, od)
    assert c.dtype == (od or torch.float16)
    _close(torch, c, _ref(a, b, bias, activation))


def test_linear_leading_dims_and_non_contiguous():
    torch = _cuda()
    import torch.nn.functional as F

    import tiledsl.ops as ops
    x = _rand(torch, 4, 96, 5).transpose(1, 2)             # (4, 5, 96), not contiguous
    w = _rand(torch, 160, 192, seed=1)[:, ::2]             # (160, 96), not contiguous
    b = _rand(torch, 160, seed=2)
    _close(torch, ops.linear(x, w, b), F.linear(x.float(), w.float(), b.float()))
    _close(torch, ops.linear(x[0, 0], w), F.linear(x[0, 0].float(), w.float()))


@pytest.mark.parametrize("activation", [None, "relu", "gelu", "silu"])
def test_linear_backward_matches_torch(activation):
    torch = _cuda()
    import torch.nn.functional as F

    import tiledsl.ops as ops
    x = _rand(torch, 3, 100, 256).requires_grad_()
    w, b = _rand(torch, 192, 256, seed=1).requires_grad_(), _rand(torch, 192, seed=2).requires_grad_()
    xr, wr, br = (t.detach().float().requires_grad_() for t in (x, w, b))
    g = _rand(torch, 3, 100, 192, seed=3)
    ops.linear(x, w, b, activation).backward(g)
    act = {None: lambda t: t, "relu": F.relu, "gelu": F.gelu, "silu": F.silu}[activation]
    act(F.linear(xr, wr, br)).backward(g.float())
    for got, want in ((x.grad, xr.grad), (w.grad, wr.grad), (b.grad, br.grad)):
        _close(torch, got, want)


@pytest.mark.parametrize("rowwise", [False, True])
def test_matmul_fp8_matches_torch(rowwise):
    torch = _hopper()
    import tiledsl.ops as ops
    M, N, K = 1000, 1024, 512
    a = _rand(torch, M, K).to(torch.float8_e4m3fn)
    b = _rand(torch, N, K, seed=1).to(torch.float8_e4m3fn)
    if rowwise:
        sa, sb = torch.rand(M, 1, device="cuda") + 0.5, torch.rand(1, N, device="cuda") + 0.5
    else:
        sa, sb = torch.tensor(0.5, device="cuda"), torch.tensor(2.0, device="cuda")
    bias = _rand(torch, N, seed=2, dtype=torch.bfloat16)
    c = ops.matmul_fp8(a, b, sa, sb, bias=bias)
    _close(torch, c, (a.float() @ b.float().T) * sa * sb + bias.float(), tol=3e-2)


# ------------------------------------------------------------------ CUDA graphs, every variant

def _graph_replays(torch, run, inputs, want, tol=2e-2):
    """Warm run (tunes, compiles, makes the stream's workspaces) on a side stream, capture on that stream, then
    three replays after writing new values into the inputs in place: each result against want(*inputs)."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(2):
            run(*inputs)
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=s):
        out = run(*inputs)
    for trial in range(3):
        g = torch.Generator(device="cuda").manual_seed(100 + trial)
        for t in inputs:
            if t.is_floating_point() and t.element_size() > 1:
                t.copy_(torch.randn(t.shape, device="cuda", generator=g).to(t.dtype))
        graph.replay()
        torch.cuda.synchronize()
        _close(torch, out, want(*inputs), tol)
    return out


# (name, M, N, K, matmul config=, what plan_of(...).describe must say)
VARIANTS = [("persistent", 2048, 2048, 1024, (256, 2, 4, 1, 1, 0), "persistent"),
            ("stream-K", 4096, 14336, 1024, (256, 2, 4, 1, 1, 0, 1, 1), "stream-K"),   # 13.6 waves of 128x256
            ("stream-K small M", 16, 4096, 4096, (128, 1, 8, 1, 1, 0, 1, 1), "stream-K"),
            ("split-K", 1024, 1024, 1024, (128, 2, 4, 0, 1, 0, 2), "split-K"),
            ("multicast", 2048, 2048, 1024, (256, 2, 4, 1, 1, 1), "multicast"),
            ("tile per block", 1000, 1000, 512, (128, 2, 4, 0, 1, 0), "hopper 128x128")]


@pytest.mark.parametrize("name,M,N,K,config,says", VARIANTS, ids=[v[0] for v in VARIANTS])
def test_cuda_graph_replay_hopper_variants(name, M, N, K, config, says):
    torch = _hopper()
    import tiledsl.ops as ops
    a, b = _rand(torch, M, K), _rand(torch, N, K, seed=1)
    c = torch.empty(M, N, device="cuda", dtype=torch.float16)
    assert says in ops.plan_of(a, b, c, config=config).describe
    _graph_replays(torch, lambda a, b: ops.matmul(a, b, out=c, config=config), [a, b], _ref)


@pytest.mark.parametrize("activation", [None, "gelu"])
def test_cuda_graph_replay_of_the_op(activation):
    """The op path as a user calls it (the tuned plan of the shape), with a fused bias + activation."""
    torch = _cuda()
    import tiledsl.ops as ops
    x, w, b = _rand(torch, 96, 512), _rand(torch, 768, 512, seed=1), _rand(torch, 768, seed=2)
    _graph_replays(torch, lambda x, w, b: ops.linear(x, w, b, activation), [x, w, b],
                   lambda x, w, b: _ref(x, w, b, activation))


def test_cuda_graph_replay_mma_sync_and_padded():
    torch = _cuda()
    import tiledsl.ops as ops
    from tiledsl.ops.gemm import mma as MMA
    a, b = _rand(torch, 256, 256), _rand(torch, 256, 256, seed=1)
    c = torch.empty(256, 256, device="cuda", dtype=torch.float16)
    cfg = MMA.PREFERRED[3]
    assert "mma.sync" in ops.plan_of(a, b, c, config=cfg).describe
    _graph_replays(torch, lambda a, b: ops.matmul(a, b, out=c, config=cfg), [a, b], _ref)
    a2, b2 = _rand(torch, 100, 61), _rand(torch, 70, 61, seed=1)      # K % 8 != 0: padded mma.sync
    assert "padded" in ops.plan_of(a2, b2).describe
    _graph_replays(torch, lambda a, b: ops.matmul(a, b), [a2, b2], _ref)


@pytest.mark.parametrize("rowwise", [False, True])
def test_cuda_graph_replay_fp8(rowwise):
    torch = _hopper()
    import tiledsl.ops as ops
    M, N, K = 1000, 1024, 512
    a16, b16 = _rand(torch, M, K), _rand(torch, N, K, seed=1)
    a, b = a16.to(torch.float8_e4m3fn), b16.to(torch.float8_e4m3fn)
    sa = torch.rand(M, 1, device="cuda") + 0.5 if rowwise else torch.tensor(0.5, device="cuda")
    sb = torch.rand(1, N, device="cuda") + 0.5 if rowwise else torch.tensor(2.0, device="cuda")

    def run(a16, b16):
        a.copy_(a16.to(torch.float8_e4m3fn))
        b.copy_(b16.to(torch.float8_e4m3fn))
        return ops.matmul_fp8(a, b, sa, sb)
    _graph_replays(torch, run, [a16, b16], lambda *_: (a.float() @ b.float().T) * sa * sb, tol=3e-2)


def test_no_host_synchronisation_after_the_first_call():
    """torch's sync debug mode raises on any synchronising torch call (.item(), a device-to-host copy, a stream
    synchronize) inside the ops' steady calls: the plain, fused, stream-K, padded and FP8 (per-tensor and per-row)
    paths, each after its first (tuning) call."""
    torch = _cuda()
    import tiledsl.ops as ops
    x, w, b = _rand(torch, 96, 512), _rand(torch, 768, 512, seed=1), _rand(torch, 768, seed=2)
    a2, b2 = _rand(torch, 100, 61), _rand(torch, 70, 61, seed=1)
    big_a, big_b = _rand(torch, 4096, 1024), _rand(torch, 14336, 1024, seed=1)
    c = torch.empty(4096, 14336, device="cuda", dtype=torch.float16)
    calls = [lambda: ops.linear(x, w, b, "gelu"), lambda: ops.matmul(x, w), lambda: ops.matmul(a2, b2),
             lambda: ops.matmul(big_a, big_b, out=c, config=(256, 2, 4, 1, 1, 0, 1, 1))]
    if torch.cuda.get_device_capability() == (9, 0):
        a8, b8 = x.to(torch.float8_e4m3fn), w.to(torch.float8_e4m3fn)
        one = torch.ones((), device="cuda")
        sa, sb = torch.rand(96, 1, device="cuda"), torch.rand(1, 768, device="cuda")
        calls += [lambda: ops.matmul_fp8(a8, b8, one, one), lambda: ops.matmul_fp8(a8, b8, sa, sb)]
    for call in calls:
        call()
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for call in calls:
            call()
    finally:
        torch.cuda.set_sync_debug_mode("default")
    torch.cuda.synchronize()


# ------------------------------------------------------------------ torch.compile

def _mlp(torch):
    import tiledsl.ops as ops

    class MLP(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w1 = torch.nn.Parameter(_rand(torch, 512, 256, seed=10) * 0.1)
            self.b1 = torch.nn.Parameter(_rand(torch, 512, seed=11))
            self.w2 = torch.nn.Parameter(_rand(torch, 256, 512, seed=12) * 0.1)
            self.b2 = torch.nn.Parameter(_rand(torch, 256, seed=13))

        def forward(self, x):
            return ops.linear(ops.linear(x, self.w1, self.b1, "relu"), self.w2, self.b2, "gelu")
    return MLP()


@pytest.mark.parametrize("mode", [None, "reduce-overhead"])
def test_compiled_mlp(mode, monkeypatch):
    """fullgraph, default (inductor) backend; 0 graph breaks, 0 recompiles over 3 calls with new values, outputs
    and gradients equal to the eager ops' (reduce-overhead: CUDA graphs of the forward and the backward)."""
    torch = _cuda()
    from torch._dynamo.utils import counters
    torch._dynamo.reset()
    counters.clear()
    model = _mlp(torch)
    compiled = torch.compile(model, fullgraph=True, mode=mode)
    monkeypatch.setattr(torch._dynamo.config, "error_on_recompile", True)
    for i in range(3):
        x = _rand(torch, 4, 64, 256, seed=100 + i).requires_grad_()
        xe = x.detach().clone().requires_grad_()
        y = compiled(x)
        ye = model(xe)
        _close(torch, y, ye, 1e-3)
        g = _rand(torch, 4, 64, 256, seed=200 + i)
        grads = torch.autograd.grad(y, [x, *model.parameters()], g)
        grads_e = torch.autograd.grad(ye, [xe, *model.parameters()], g)
        for got, want in zip(grads, grads_e):
            _close(torch, got, want, 1e-3)
    assert counters["stats"]["unique_graphs"] == 1
    assert sum(counters["graph_break"].values()) == 0, dict(counters["graph_break"])
    torch._dynamo.reset()


# ------------------------------------------------------------------ launch overhead

def test_eager_linear_overhead_within_1_5x_of_f_linear():
    """ops.linear at a small shape (the GPU time far below the host time): the eager call's host cost against
    F.linear's, both with a bias, median of interleaved rounds (benchmarks/launch.py prints the same rows)."""
    torch = _cuda()
    import torch.nn.functional as F

    import tiledsl.ops as ops
    x, w, b = _rand(torch, 16, 256), _rand(torch, 256, 256, seed=1), _rand(torch, 256, seed=2)
    paths = {"ops.linear": lambda: ops.linear(x, w, b), "F.linear": lambda: F.linear(x, w, b)}
    for fn in paths.values():
        for _ in range(200):
            fn()
    torch.cuda.synchronize()
    times = {k: [] for k in paths}
    for _ in range(7):
        for k, fn in paths.items():
            t = time.perf_counter()
            for _ in range(2000):
                fn()
            times[k].append((time.perf_counter() - t) / 2000)
            torch.cuda.synchronize()
    ratio = statistics.median(a / b for a, b in zip(times["ops.linear"], times["F.linear"]))
    us = {k: statistics.median(v) * 1e6 for k, v in times.items()}
    print(f"host us per call: {us}, ratio {ratio:.2f}")
    assert ratio <= 1.5, f"ops.linear {us['ops.linear']:.1f} us against F.linear {us['F.linear']:.1f} us"
