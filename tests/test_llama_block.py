"""examples/llama_block.py at the tiny config on CPU tensors (the ops' kernels on the interpreter): the tiledsl
block against the torch block in float32 (output, residual and every weight gradient), the decode step against
the full forward, and the block under torch.compile(fullgraph=True) with no graph break.

Tolerance: relative Frobenius error 2e-2 (issue 36's bf16 bar), and no worse than twice the torch block's own
error in the same dtype (so a kernel that loses precision torch keeps shows even below the bar)."""
import pytest

torch = pytest.importorskip("torch")

from llama_block import TINY, LlamaBlock, TorchLlamaBlock, relative_error  # noqa: E402

TOL = 2e-2
PARAMS = ("attn_norm", "qkv", "o", "mlp_norm", "gate_up", "down")


def _loss_grads(block, x, residual, dy, dr):
    out, res = block(x, residual)
    params = dict(getattr(block, "_orig_mod", block).named_parameters())       # (a compiled module's are prefixed)
    grads = torch.autograd.grad((out, res), [params[n] for n in PARAMS], (dy, dr))
    return out, res, dict(zip(PARAMS, grads))


def _inputs(B, L, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    x, residual, dy, dr = (torch.randn(B, L, TINY.hidden, generator=g) for _ in range(4))
    return x, residual, dy, dr


@pytest.mark.parametrize("dtype", [torch.bfloat16, pytest.param(torch.float16, marks=pytest.mark.slow)])
def test_block_output_and_weight_gradients_match_torch(dtype):
    ref = TorchLlamaBlock(TINY, dtype=torch.float32)
    ours = LlamaBlock.from_torch(ref, dtype=dtype)
    peer = TorchLlamaBlock(TINY, dtype=dtype)
    peer.load_state_dict(ours.state_dict())
    x, residual, dy, dr = _inputs(1, 16, dtype)
    want = _loss_grads(ref, x, residual, dy, dr)
    low = [t.to(dtype) for t in (x, residual, dy, dr)]
    got = _loss_grads(ours, *low)
    base = _loss_grads(peer, *low)
    names = ["out", "residual"] + [f"d{n}" for n in PARAMS]
    flat = lambda r: [r[0], r[1], *r[2].values()]                       # noqa: E731
    for name, g, b, w in zip(names, flat(got), flat(base), flat(want)):
        assert g.dtype == dtype and g.shape == w.shape, name
        err, torch_err = relative_error(g, w), relative_error(b, w)
        assert err <= max(TOL, 2 * torch_err), (name, err, torch_err)


def test_first_layer_without_residual():
    ref = TorchLlamaBlock(TINY, dtype=torch.float32)
    ours = LlamaBlock.from_torch(ref, dtype=torch.bfloat16)
    x = _inputs(2, 8, torch.float32, seed=1)[0]
    with torch.no_grad():
        out, res = ours(x.bfloat16())
        want, want_res = ref(x)
    assert relative_error(out, want) <= TOL and relative_error(res, want_res) <= TOL


def test_decode_steps_match_the_full_forward():
    """Prefill 7 tokens through one decode step (Lq = 7, causal among themselves, from an empty cache), then one
    token: each step's outputs equal the full causal forward's at those positions; the torch block's decode agrees."""
    ref = TorchLlamaBlock(TINY, dtype=torch.float32)
    ours = LlamaBlock.from_torch(ref, dtype=torch.bfloat16)
    B, L = 2, 8
    x, residual = _inputs(B, L, torch.float32, seed=2)[:2]
    with torch.no_grad():
        want, want_res = ref(x, residual)
        k, v, table, lens = ours.new_cache(B, 40, page_size=16)
        table = table.flip(1).contiguous()                           # pages out of order
        outs = []
        for lo, hi in ((0, 7), (7, 8)):
            xs, rs = x[:, lo:hi].bfloat16(), residual[:, lo:hi].bfloat16()
            outs.append(ours.decode(xs, k, v, table, lens, rs))
            lens += hi - lo
        out = torch.cat([o for o, _ in outs], 1)
        res = torch.cat([r for _, r in outs], 1)
        assert relative_error(out, want) <= TOL and relative_error(res, want_res) <= TOL
        assert relative_error(out[:, -1], want[:, -1]) <= TOL
        # the torch block's decode (its own float32 cache) gives the same function
        k32, v32, table32, lens32 = ref.new_cache(B, 40, page_size=16)
        tout = []
        for lo, hi in ((0, 7), (7, 8)):
            tout.append(ref.decode(x[:, lo:hi], k32, v32, table32, lens32, residual[:, lo:hi])[0])
            lens32 += hi - lo
        assert relative_error(torch.cat(tout, 1), want) <= 1e-5


def test_block_compiles_fullgraph_without_graph_breaks():
    from torch._dynamo.utils import counters
    torch._dynamo.reset()
    counters.clear()
    ref = TorchLlamaBlock(TINY, dtype=torch.float32)
    ours = LlamaBlock.from_torch(ref, dtype=torch.bfloat16)
    x, residual, dy, dr = (t.bfloat16() for t in _inputs(1, 8, torch.float32, seed=3))
    compiled = torch.compile(ours, backend="aot_eager", fullgraph=True)
    got = _loss_grads(compiled, x, residual, dy, dr)
    want = _loss_grads(ours, x, residual, dy, dr)
    for g, w in zip([got[0], got[1], *got[2].values()], [want[0], want[1], *want[2].values()]):
        assert relative_error(g, w) <= 1e-3
    decode = torch.compile(ours.decode, backend="aot_eager", fullgraph=True)
    k, v, table, lens = ours.new_cache(1, 16, page_size=16)
    out, _ = decode(x[:, :2], k, v, table, lens, residual[:, :2])
    assert k[0, :2].abs().sum() > 0, "the compiled decode step wrote the cache"
    assert counters["stats"]["unique_graphs"] == 2, dict(counters["stats"])
    assert sum(counters["graph_break"].values()) == 0, dict(counters["graph_break"])
    torch._dynamo.reset()


def test_bad_config_is_refused():
    from llama_block import LlamaConfig
    with pytest.raises(ValueError, match="kv_heads"):
        LlamaConfig(heads=6, kv_heads=4)


def test_bad_shapes_are_refused():
    ours = LlamaBlock(TINY)
    with pytest.raises(ValueError, match="RoPE tables"):
        ours(torch.zeros(1, TINY.max_positions + 1, TINY.hidden, dtype=torch.bfloat16))
    k, v, table, lens = ours.new_cache(1, 32, page_size=16)
    with pytest.raises(ValueError, match="1 to 16 new tokens"):
        ours.decode(torch.zeros(1, 17, TINY.hidden, dtype=torch.bfloat16), k, v, table, lens)
