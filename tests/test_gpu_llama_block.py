"""examples/llama_block.py on the GPU at a small but real shape (head dim 128, grouped-query heads, an MLP of 2.75x
the hidden size): the tiledsl block's output and every weight gradient against the torch block in float32, the
decode step (paged cache) against the full forward, captured in a CUDA graph and under torch.compile."""
import pytest

torch = pytest.importorskip("torch")

from llama_block import LlamaBlock, LlamaConfig, TorchLlamaBlock, relative_error  # noqa: E402

pytestmark = pytest.mark.gpu
SMALL = LlamaConfig(hidden=1024, heads=8, kv_heads=2, head_dim=128, mlp=2816, max_positions=4096)
TOL = 2e-2
PARAMS = ("attn_norm", "qkv", "o", "mlp_norm", "gate_up", "down")


@pytest.fixture(autouse=True)
def _cuda():
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    torch.backends.cuda.matmul.allow_tf32 = False


def _step(block, x, residual, dy, dr):
    x, residual = x.detach().requires_grad_(), residual.detach().requires_grad_()
    params = dict(getattr(block, "_orig_mod", block).named_parameters())
    out, res = block(x, residual)
    grads = torch.autograd.grad((out, res), [x, residual] + [params[n] for n in PARAMS], (dy, dr))
    return [out, res, *grads]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_block_output_and_gradients_match_float32(dtype):
    ref = TorchLlamaBlock(SMALL, device="cuda", dtype=torch.float32)
    ours = LlamaBlock.from_torch(ref, dtype=dtype)
    peer = TorchLlamaBlock(SMALL, device="cuda", dtype=dtype)
    peer.load_state_dict(ours.state_dict())
    g = torch.Generator(device="cuda").manual_seed(0)
    ins = [torch.randn(2, 512, SMALL.hidden, device="cuda", generator=g) for _ in range(4)]
    want = _step(ref, *ins)
    low = [t.to(dtype) for t in ins]
    got, base = _step(ours, *low), _step(peer, *low)
    names = ["out", "residual", "d_x", "d_residual"] + [f"d_{n}" for n in PARAMS]
    for name, a, b, w in zip(names, got, base, want):
        err, torch_err = relative_error(a, w), relative_error(b, w)
        print(f"{name}: tiledsl {err:.2e}, torch {dtype} {torch_err:.2e}")
        assert err <= max(TOL, 2 * torch_err), (name, err, torch_err)


def test_block_compiles_fullgraph():
    from torch._dynamo.utils import counters
    torch._dynamo.reset()
    counters.clear()
    ours = LlamaBlock(SMALL, device="cuda")
    g = torch.Generator(device="cuda").manual_seed(1)
    ins = [torch.randn(1, 256, SMALL.hidden, device="cuda", generator=g).bfloat16() for _ in range(4)]
    compiled = torch.compile(ours, fullgraph=True)
    for a, b in zip(_step(compiled, *ins), _step(ours, *ins)):
        assert relative_error(a, b) <= 5e-3
    assert sum(counters["graph_break"].values()) == 0, dict(counters["graph_break"])
    torch._dynamo.reset()


def _prefilled(ours, x, residual, page=64):
    """The cache after decode steps of up to 16 tokens over x's tokens (B, L, hidden) but the last."""
    B, L, _ = x.shape
    k, v, table, lens = ours.new_cache(B, L + 64, page_size=page)
    table = table.flip(1).contiguous()
    with torch.no_grad():
        for lo in range(0, L - 1, 16):
            hi = min(lo + 16, L - 1)
            ours.decode(x[:, lo:hi], k, v, table, lens, residual[:, lo:hi])
            lens += hi - lo
    return k, v, table, lens


@pytest.mark.parametrize("how", ["cuda graph", "reduce-overhead"])
def test_decode_step_replayed_matches_the_full_forward(how):
    torch._dynamo.reset()
    ref = TorchLlamaBlock(SMALL, device="cuda", dtype=torch.float32)
    ours = LlamaBlock.from_torch(ref, dtype=torch.bfloat16)
    B, L = 4, 100
    g = torch.Generator(device="cuda").manual_seed(2)
    x, residual = (torch.randn(B, L, SMALL.hidden, device="cuda", generator=g) for _ in range(2))
    with torch.no_grad():
        want, want_res = ref(x, residual)
    xb, rb = x.bfloat16(), residual.bfloat16()
    k, v, table, lens = _prefilled(ours, xb, rb)
    xn, rn = xb[:, -1:].contiguous(), rb[:, -1:].contiguous()
    if how == "cuda graph":
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            ours.decode(xn, k, v, table, lens, rn)           # warm-up on the capture stream
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=s):
            out, res = ours.decode(xn, k, v, table, lens, rn)
        graph.replay()
        graph.replay()
    else:
        for t in (k, v, table, lens, xn, rn):
            torch._dynamo.mark_static_address(t)     # cudagraph trees keep inputs mutated in place only if static
        step = torch.compile(ours.decode, mode="reduce-overhead", fullgraph=True)
        for _ in range(3):
            out, res = step(xn, k, v, table, lens, rn)
    torch.cuda.synchronize()
    assert relative_error(out[:, 0], want[:, -1]) <= TOL
    assert relative_error(res[:, 0], want_res[:, -1]) <= TOL
    torch._dynamo.reset()
