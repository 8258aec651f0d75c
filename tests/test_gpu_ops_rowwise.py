"""The row-wise torch ops on the GPU (issue 32): values and gradients against torch in float32 at model sizes (rows
4096-16384, hidden 4096 and 8192), ragged ones and rows too long for registers (a vocabulary's), opcheck on CUDA
tensors, CUDA-graph capture and replay after the inputs' values change (forward and backward),
torch.compile(mode="reduce-overhead")."""
import pytest

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402

import tiledsl.ops as ops  # noqa: E402

# ||out - ref|| / ||ref|| against float32 torch on the same rounded inputs: a rounding of the output dtype
REL = {torch.float16: 2e-3, torch.bfloat16: 1.2e-2}
# model sizes; ragged hidden sizes; 16384: register-held forward, long backward; then long_rows.py's kernels only
SIZES = [(4096, 4096), (16384, 8192), (4096, 1000), (4096, 4097), (8192, 17), (64, 16384), (3, 65536), (16, 151936),
         (4, 262147)]


def rel(got, want):
    assert torch.isfinite(got).all()
    want = want.float()
    return ((got.float() - want).norm() / want.norm().clamp_min(1e-30)).item()


def rand(shape, dtype, scale=1.0, shift=0.0):
    return (torch.randn(shape, device="cuda") * scale + shift).to(dtype)


def leaf(t):
    return t.detach().clone().requires_grad_(True)


def _check(op, ref_op, inputs, dtype, grad_scale=4.0):
    """op(*inputs) and its input gradients against ref_op on float32 copies."""
    a = [leaf(t) if t is not None else None for t in inputs]
    b = [leaf(t.float()) if t is not None else None for t in inputs]
    y, r = op(*a), ref_op(*b)
    assert rel(y, r) < REL[dtype], ("forward", rel(y, r))
    dy = torch.randn_like(r).to(dtype)
    y.backward(dy)
    r.backward(dy.float())
    for i, (ga, gb) in enumerate(zip(a, b)):
        if ga is not None:
            assert rel(ga.grad, gb.grad) < grad_scale * REL[dtype], ("grad", i, rel(ga.grad, gb.grad))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("rows, n", SIZES)
def test_ops_match_torch_at_model_sizes(rows, n, dtype):
    torch.manual_seed(rows + n)
    x = rand((rows, n), dtype, 2.0, 0.5)
    w, b = rand((n,), dtype, 0.5, 1.0), rand((n,), dtype, 0.2)
    _check(lambda x: ops.softmax(x, -1), lambda x: torch.softmax(x, -1), [x], dtype)
    _check(lambda x, w, b: ops.layer_norm(x, (n,), w, b, 1e-5), lambda x, w, b: F.layer_norm(x, (n,), w, b, 1e-5),
           [x, w, b], dtype)
    _check(lambda x, w: ops.rms_norm(x, w, 1e-6), lambda x, w: F.rms_norm(x, (n,), w, 1e-6), [x, w], dtype)
    res = rand((rows, n), dtype)
    y, s = ops.add_rms_norm(x, res, w, 1e-6)
    assert torch.equal(s, x + res)
    assert rel(y, F.rms_norm((x + res).float(), (n,), w.float(), 1e-6)) < REL[dtype]


def test_non_contiguous_and_leading_dims_on_the_gpu():
    x = rand((8, 4096, 4), torch.bfloat16).transpose(1, 2)            # (8, 4, 4096), rows strided
    w = rand((4096,), torch.bfloat16, 0.5, 1.0)
    _check(lambda x, w: ops.rms_norm(x, w, 1e-6), lambda x, w: F.rms_norm(x, (4096,), w, 1e-6), [x, w],
           torch.bfloat16)
    _check(lambda x: ops.softmax(x, 1), lambda x: torch.softmax(x, 1), [x], torch.bfloat16)


def test_opcheck_on_cuda():
    x = leaf(rand((64, 4096), torch.float16))
    w, b = leaf(rand((4096,), torch.float16)), leaf(rand((4096,), torch.float16))
    r = leaf(rand((64, 4096), torch.float16))
    t = torch.ops.tiledsl
    for op, args in ((t.softmax, (x, -1)), (t.layer_norm, (x, [4096], w, b, 1e-5)), (t.rms_norm, (x, w, 1e-6)),
                     (t.add_rms_norm, (x, r, w, 1e-6)), (t._layer_norm_forward, (x, [4096], w, b, 1e-5)),
                     (t._rms_norm_forward, (x, w, None)), (t._add_rms_norm_forward, (x, r, w, 1e-6))):
        torch.library.opcheck(op.default, args)


@pytest.mark.parametrize("name", ["softmax", "layer_norm", "rms_norm", "add_rms_norm"])
def test_cuda_graph_capture_and_replay_with_new_values(name):
    rows, n, dtype = 2048, 4096 + 8, torch.bfloat16
    x, res, w, b, dy = (leaf(rand((rows, n), dtype)), rand((rows, n), dtype), leaf(rand((n,), dtype, 0.5, 1.0)),
                        rand((n,), dtype), rand((rows, n), dtype))

    def step():
        if name == "softmax":
            y = ops.softmax(x, -1)
        elif name == "layer_norm":
            y = ops.layer_norm(x, (n,), w, b)
        elif name == "rms_norm":
            y = ops.rms_norm(x, w)
        else:
            y, s = ops.add_rms_norm(x, res, w, 1e-6)
            y = y + s
        gx, gw = torch.autograd.grad(y, (x, w), dy, allow_unused=True)
        return y, gx, gw if gw is not None else torch.zeros_like(w)

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):                              # compiles and loads every kernel before the capture
            step()
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        outs = step()
    for seed in range(3):
        torch.manual_seed(100 + seed)
        with torch.no_grad():
            x.copy_(rand((rows, n), dtype))
            w.copy_(rand((n,), dtype, 0.5, 1.0))
            res.copy_(rand((rows, n), dtype))
            dy.copy_(rand((rows, n), dtype))
        g.replay()
        want = step()
        torch.cuda.synchronize()
        for got, ref in zip(outs, want):
            assert torch.equal(got, ref), name


def test_compile_reduce_overhead():
    n = 4096

    def f(x, res, w):
        y, s = ops.add_rms_norm(x, res, w, 1e-6)
        return ops.softmax(ops.layer_norm(y, (n,), w, None), -1), s

    cf = torch.compile(f, fullgraph=True, mode="reduce-overhead")
    w = rand((n,), torch.float16, 0.5, 1.0)
    for i in range(4):
        x, res = rand((256, n), torch.float16), rand((256, n), torch.float16)
        got = cf(x, res, w)
        want = f(x, res, w)
        for a, b in zip(got, want):
            assert torch.equal(a, b), i
