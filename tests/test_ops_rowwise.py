"""The row-wise torch ops (issue 32): tiledsl.ops.softmax, layer_norm, rms_norm, add_rms_norm on CPU tensors, which
run the GPU kernels on the interpreter: values and gradients against torch's ops in float32 (float16 and bfloat16,
ragged row lengths, leading dims, non-contiguous inputs, zero-size dims), torch.library.opcheck, the refusals, and
torch.compile(fullgraph=True) with no graph break and no recompilation. The kernels pass ptxas for sm_90 at model
sizes. (tests/test_gpu_ops_rowwise.py runs them on the GPU.)"""
import numpy as np
import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402

import tiledsl.ops as ops  # noqa: E402
from helpers import ptxas  # noqa: E402
from tiledsl.ops.library.common import UnsupportedArgument  # noqa: E402

DTYPES = (torch.float16, torch.bfloat16)
# the op's error against float32 torch on the same (rounded) inputs: about a rounding of the output dtype
TOL = {torch.float16: 4e-3, torch.bfloat16: 3e-2}


def close(got, want, dtype, scale=1.0):
    want = want.float()
    err = (got.float() - want).abs().max().item() if want.numel() else 0.0
    bound = TOL[dtype] * scale * max(1.0, want.abs().max().item() if want.numel() else 0.0)
    assert got.shape == want.shape and err <= bound, (err, bound)


def leaf(t):
    return t.detach().clone().requires_grad_(True)


def _input(shape, dtype, seed, contiguous=True):
    g = torch.Generator().manual_seed(seed)
    if contiguous:
        return (torch.randn(shape, generator=g) * 2 + 0.5).to(dtype)
    # a transposed view of the same values: not contiguous, same shape
    return (torch.randn(tuple(reversed(shape)), generator=g) * 2 + 0.5).to(dtype).permute(
        *reversed(range(len(shape))))


SHAPES = [((4, 17), True), ((3, 300), True), ((2, 3, 64), False), ((5, 1), True), ((2, 6), False)]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape, contiguous", SHAPES)
def test_softmax_matches_torch(dtype, shape, contiguous):
    x = _input(shape, dtype, 1, contiguous)
    for dim in (-1, 0):
        xa, xb = leaf(x), leaf(x.float())
        y = ops.softmax(xa, dim)
        ref = torch.softmax(xb, dim)
        close(y, ref, dtype)
        dy = _input(shape, dtype, 2)
        y.backward(dy)
        ref.backward(dy.float())
        close(xa.grad, xb.grad, dtype, 2)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape, contiguous", SHAPES)
def test_layer_norm_matches_torch(dtype, shape, contiguous):
    x = _input(shape, dtype, 3, contiguous)
    n = shape[-1]
    w, b = _input((n,), dtype, 4), _input((n,), dtype, 5)
    for affine in (True, False):
        xa, xb = leaf(x), leaf(x.float())
        wa, ba = (leaf(w), leaf(b)) if affine else (None, None)
        wb, bb = (leaf(w.float()), leaf(b.float())) if affine else (None, None)
        y = ops.layer_norm(xa, (n,), wa, ba, 1e-5)
        ref = F.layer_norm(xb, (n,), wb, bb, 1e-5)
        close(y, ref, dtype)
        dy = _input(shape, dtype, 6)
        y.backward(dy)
        ref.backward(dy.float())
        close(xa.grad, xb.grad, dtype, 4)
        if affine:
            close(wa.grad, wb.grad, dtype, 2)
            close(ba.grad, bb.grad, dtype, 2)


def test_layer_norm_over_two_trailing_dims():
    x = _input((3, 4, 5), torch.float16, 7)
    w, b = _input((4, 5), torch.float16, 8), _input((4, 5), torch.float16, 9)
    xa, wa, ba = leaf(x), leaf(w), leaf(b)
    xb, wb, bb = leaf(x.float()), leaf(w.float()), leaf(b.float())
    y = ops.layer_norm(xa, (4, 5), wa, ba)
    ref = F.layer_norm(xb, (4, 5), wb, bb)
    close(y, ref, torch.float16)
    y.sum().backward()
    ref.sum().backward()
    for got, want in ((xa, xb), (wa, wb), (ba, bb)):
        close(got.grad, want.grad, torch.float16, 4)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape, contiguous", SHAPES)
def test_rms_norm_matches_torch(dtype, shape, contiguous):
    x = _input(shape, dtype, 10, contiguous)
    n = shape[-1]
    w = _input((n,), dtype, 11)
    for weighted, eps in ((True, 1e-6), (False, None)):
        xa, xb = leaf(x), leaf(x.float())
        wa, wb = (leaf(w), leaf(w.float())) if weighted else (None, None)
        y = ops.rms_norm(xa, wa, eps)
        ref = F.rms_norm(xb, (n,), wb, torch.finfo(torch.float32).eps if eps is None else eps)
        close(y, ref, dtype)
        dy = _input(shape, dtype, 12)
        y.backward(dy)
        ref.backward(dy.float())
        close(xa.grad, xb.grad, dtype, 4)
        if weighted:
            close(wa.grad, wb.grad, dtype, 2)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape, contiguous", SHAPES)
def test_add_rms_norm_matches_torch(dtype, shape, contiguous):
    x, r = _input(shape, dtype, 13, contiguous), _input(shape, dtype, 14)
    n = shape[-1]
    w = _input((n,), dtype, 15)
    xa, ra, wa = leaf(x), leaf(r), leaf(w)
    y, s = ops.add_rms_norm(xa, ra, wa, 1e-6)
    assert torch.equal(s, x + r)                         # the sum, rounded to the dtype as torch's
    sb, wb = leaf((x + r).float()), leaf(w.float())
    ref = F.rms_norm(sb, (n,), wb, 1e-6)
    close(y, ref, dtype)
    dy, ds = _input(shape, dtype, 16), _input(shape, dtype, 17)
    torch.autograd.backward((y, s), (dy, ds))
    ref.backward(dy.float())
    want = sb.grad + ds.float()
    close(xa.grad, want, dtype, 4)
    close(ra.grad, want, dtype, 4)
    close(wa.grad, wb.grad, dtype, 2)


@pytest.mark.parametrize("shape", [(0, 17), (3, 0), (2, 0, 8)])
def test_zero_size_dims_behave_as_torch(shape):
    x = leaf(torch.zeros(shape, dtype=torch.float16))
    n = shape[-1]
    w, b = leaf(torch.ones(n, dtype=torch.float16)), leaf(torch.zeros(n, dtype=torch.float16))
    outs = [ops.softmax(x, -1), ops.layer_norm(x, (n,), w, b), ops.rms_norm(x, w), *ops.add_rms_norm(x, x, w)]
    for o in outs:
        assert o.shape == x.shape and o.dtype == x.dtype
    sum(o.float().sum() for o in outs).backward()
    assert x.grad.shape == x.shape and w.grad.shape == (n,) and b.grad.shape == (n,)
    assert not w.grad.any() and not b.grad.any()


def test_softmax_of_a_single_element_and_a_scalar():
    assert torch.equal(ops.softmax(torch.tensor([3.0], dtype=torch.float16)), torch.ones(1, dtype=torch.float16))
    assert torch.equal(ops.softmax(torch.tensor(3.0, dtype=torch.bfloat16), 0), torch.tensor(1.0, dtype=torch.bfloat16))


def test_the_ops_are_torch_ops():
    assert ops.softmax.__module__ == "tiledsl.ops.library.rowwise"
    for name in ("softmax", "layer_norm", "rms_norm", "add_rms_norm"):
        assert hasattr(torch.ops.tiledsl, name), name
    x = _input((2, 8), torch.float16, 20)
    assert torch.equal(torch.ops.tiledsl.rms_norm(x, None, 1e-6), ops.rms_norm(x, None, 1e-6))


# ---------------------------------------------------------------------------------------------------------------
# opcheck: schema, fake tensors, autograd registration, AOT dispatch

def _opcheck_cases():
    x = _input((3, 17), torch.float16, 30)
    xb = _input((2, 2, 12), torch.bfloat16, 31)
    w, b = _input((17,), torch.float16, 32), _input((17,), torch.float16, 33)
    r = _input((3, 17), torch.float16, 34)
    g = leaf
    return [
        ("softmax", (g(x), -1)), ("softmax", (g(xb), 1)),
        ("layer_norm", (g(x), [17], g(w), g(b), 1e-5)), ("layer_norm", (g(xb), [12], None, None, 1e-5)),
        ("_layer_norm_forward", (g(x), [17], g(w), g(b), 1e-5)),
        ("rms_norm", (g(x), g(w), 1e-6)), ("rms_norm", (g(xb), None, None)),
        ("_rms_norm_forward", (g(x), g(w), 1e-6)),
        ("add_rms_norm", (g(x), g(r), g(w), 1e-6)), ("_add_rms_norm_forward", (g(x), g(r), g(w), None)),
        ("_softmax_backward", (x, r, -1)),
        ("_rms_norm_backward", (r, x, w, torch.rand(3) + 0.5, None)),
        ("_rms_norm_backward", (r, x, w, torch.rand(3) + 0.5, x)),
        ("_layer_norm_backward", (r, x, [17], w, torch.randn(3), torch.rand(3) + 0.5)),
    ]


@pytest.mark.parametrize("case", range(len(_opcheck_cases())))
def test_opcheck(case):
    name, args = _opcheck_cases()[case]
    torch.library.opcheck(getattr(torch.ops.tiledsl, name).default, args)


# ---------------------------------------------------------------------------------------------------------------
# refusals

def test_unsupported_dtypes_are_refused_naming_the_argument():
    x32 = torch.randn(2, 8)
    x16 = x32.half()
    cases = [
        (lambda: ops.softmax(x32), "softmax: x.dtype=torch.float32"),
        (lambda: ops.layer_norm(x32, (8,)), "layer_norm: x.dtype=torch.float32"),
        (lambda: ops.layer_norm(x16, (8,), torch.ones(8)), "layer_norm: weight.dtype=torch.float32"),
        (lambda: ops.layer_norm(x16, (8,), None, torch.zeros(8, dtype=torch.bfloat16)), "bias.dtype=torch.bfloat16"),
        (lambda: ops.rms_norm(x32), "rms_norm: x.dtype=torch.float32"),
        (lambda: ops.rms_norm(x16, torch.ones(8)), "rms_norm: weight.dtype=torch.float32"),
        (lambda: ops.add_rms_norm(x16, x32), "add_rms_norm: residual.dtype=torch.float32"),
        (lambda: ops.softmax(torch.zeros(2, 8, dtype=torch.float64)), "x.dtype=torch.float64"),
    ]
    for call, what in cases:
        with pytest.raises(UnsupportedArgument, match="supported: ") as e:
            call()
        assert what in str(e.value), str(e.value)


@pytest.mark.parametrize("n", [300, 1000, 7])
def test_long_rows_take_the_multi_pass_kernels(monkeypatch, n):
    """Rows longer than the registers hold (rows.MAX_ROW) take long_rows.py's kernels: here with the threshold
    lowered, so that they run on the interpreter against torch (tiles of 32 threads, the row in several tiles)."""
    from tiledsl.ops.library import rowwise
    monkeypatch.setattr(rowwise, "LONG_ROW", 4)
    assert rowwise.long_row(n)
    dtype = torch.bfloat16
    x, r = _input((3, n), dtype, 60), _input((3, n), dtype, 61)
    w, b = _input((n,), dtype, 62), _input((n,), dtype, 63)
    dy = _input((3, n), dtype, 64)
    cases = [
        (lambda x, w, b: ops.softmax(x, -1), lambda x, w, b: torch.softmax(x, -1)),
        (lambda x, w, b: ops.layer_norm(x, (n,), w, b), lambda x, w, b: F.layer_norm(x, (n,), w, b)),
        (lambda x, w, b: ops.rms_norm(x, w, 1e-6), lambda x, w, b: F.rms_norm(x, (n,), w, 1e-6)),
        (lambda x, w, b: sum(ops.add_rms_norm(x, r, w, 1e-6)),
         lambda x, w, b: F.rms_norm(x + r.float(), (n,), w, 1e-6) + x + r.float()),
    ]
    for ours, theirs in cases:
        a, c = [leaf(t) for t in (x, w, b)], [leaf(t.float()) for t in (x, w, b)]
        y, ref = ours(*a), theirs(*c)
        close(y, ref, dtype, 2)
        y.backward(dy)
        ref.backward(dy.float())
        for u, v in zip(a, c):
            if v.grad is not None:
                close(u.grad, v.grad, dtype, 4)


@pytest.mark.parametrize("long", [False, True])
def test_softmax_of_rows_with_minus_inf_and_a_growing_max(monkeypatch, long):
    """Masked-out (-inf) entries, a row that is -inf but for two values, a max that grows along the row (the long
    kernel's running max rescales its sum) and one that shrinks."""
    from tiledsl.ops.library import rowwise
    monkeypatch.setattr(rowwise, "LONG_ROW", 4 if long else None)
    n = 1000
    x = torch.linspace(-30, 30, n).repeat(4, 1)
    x[1] = x[1].flip(0)
    x[2] = -float("inf")
    x[2, 500], x[2, 999] = 3.0, 2.0
    x[3, ::3] = -float("inf")
    x = x.half()
    y = ops.softmax(x)
    assert not y.isnan().any()
    close(y, torch.softmax(x.float(), -1), torch.float16)


def test_which_rows_take_the_long_kernels():
    from tiledsl.ops.library import rowwise
    assert not rowwise.long_row(32768) and rowwise.long_row(32769)
    assert not rowwise.long_row(16384, backward=True) and rowwise.long_row(16385, backward=True)


def test_mismatched_shapes_raise_as_torch():
    x = torch.zeros(2, 8, dtype=torch.float16)
    with pytest.raises(RuntimeError, match="normalized_shape"):
        ops.layer_norm(x, (4,))
    with pytest.raises(RuntimeError, match="weight of shape"):
        ops.layer_norm(x, (8,), torch.ones(4, dtype=torch.float16))
    with pytest.raises(RuntimeError, match="residual of shape"):
        ops.add_rms_norm(x, torch.zeros(2, 4, dtype=torch.float16))
    with pytest.raises(IndexError, match="dim=2"):
        ops.softmax(x, 2)


# ---------------------------------------------------------------------------------------------------------------
# torch.compile

class Block(torch.nn.Module):
    def __init__(self, n):
        super().__init__()
        self.w = torch.nn.Parameter(torch.rand(n, dtype=torch.float16) + 0.5)
        self.b = torch.nn.Parameter(torch.randn(n, dtype=torch.float16) * 0.1)

    def forward(self, x, res):
        y, s = ops.add_rms_norm(x, res, self.w, 1e-6)
        z = ops.layer_norm(ops.softmax(y, -1) * 4, (y.shape[-1],), self.w, self.b)
        return ops.rms_norm(z + s, self.w) , s


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_compile_fullgraph_no_break_no_recompile(backend):
    from torch._dynamo.utils import counters
    torch._dynamo.reset()
    counters.clear()
    m = Block(20)
    cm = torch.compile(m, fullgraph=True, backend=backend, dynamic=False)
    for seed in range(3):                          # only the values change
        x, res = leaf(_input((3, 20), torch.float16, 40 + seed)), _input((3, 20), torch.float16, 50 + seed)
        xe = leaf(x)
        y, s = cm(x, res)
        (y.float().sum() + s.float().square().sum()).backward()
        ye, se = m(xe, res)
        assert torch.equal(y, ye) and torch.equal(s, se)
        gw = m.w.grad.clone()
        m.zero_grad()
        (ye.float().sum() + se.float().square().sum()).backward()
        assert torch.equal(x.grad, xe.grad)
        if backend == "aot_eager":
            assert torch.equal(gw, m.w.grad)
        else:       # inductor sums the weight's three gradient terms in float32, eager in float16: a rounding apart
            torch.testing.assert_close(gw, m.w.grad, rtol=2e-3, atol=2e-3)
        m.zero_grad()
    assert sum(counters["graph_break"].values()) == 0, dict(counters["graph_break"])
    assert counters["stats"]["unique_graphs"] == 1, dict(counters["stats"])
    assert sum(counters["recompiles"].values()) == 0 if "recompiles" in counters else True


# ---------------------------------------------------------------------------------------------------------------
# compile-only: the kernels through ptxas for sm_90 at model sizes and ragged ones

@pytest.mark.parametrize("n", [151936, 262147])
def test_long_row_kernels_pass_ptxas_for_sm_90(n):
    from tiledsl.ops.rowwise import long_rows
    x, v = torch.zeros(2, n, dtype=torch.bfloat16), torch.zeros(n, dtype=torch.bfloat16)
    st, part = torch.zeros(2), torch.zeros(2, n)
    for ck in (long_rows.make_long_softmax(n, "bfloat16").compile(x, x, target="sm_90"),
               long_rows.make_long_softmax(n, "bfloat16", backward=True).compile(x, x, x, target="sm_90"),
               long_rows.make_long_layer_norm_forward(n, "bfloat16").compile(x, v, v, x, st, st, 1e-5, target="sm_90"),
               long_rows.make_long_layer_norm_backward(n, "bfloat16").compile(x, v, x, st, st, x, part, part,
                                                                              target="sm_90"),
               long_rows.make_long_rms_norm_forward(n, "bfloat16", fused_add=True).compile(x, x, v, x, x, st, 1e-5,
                                                                                          target="sm_90"),
               long_rows.make_long_rms_norm_backward(n, "bfloat16", add_grad=True).compile(x, v, x, st, x, x, part,
                                                                                          target="sm_90")):
        r = ptxas(ck.asm["ptx"], "sm_90")
        assert r.returncode == 0, r.stderr
        assert ck.metadata.get("spill_stores", 0) == 0, ck.metadata


@pytest.mark.parametrize("n", [4096, 8192, 1000, 4097, 17])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_kernels_pass_ptxas_for_sm_90(n, dtype):
    from tiledsl.ops.rowwise import norms, softmax_rows
    tdt = getattr(torch, dtype)
    x, v = torch.zeros(8, n, dtype=tdt), torch.zeros(n, dtype=tdt)
    st, part = torch.zeros(8), torch.zeros(2, n)
    compiled = [
        softmax_rows.make_softmax_forward(n, dtype).compile(x, x, target="sm_90"),
        softmax_rows.make_softmax_backward(n, dtype).compile(x, x, x, target="sm_90"),
        norms.make_layer_norm_forward(n, dtype).compile(x, v, v, x, st, st, 1e-5, target="sm_90"),
        norms.make_layer_norm_backward(n, dtype).compile(x, v, x, st, st, x, part, part, target="sm_90"),
        norms.make_rms_norm_forward(n, dtype).compile(x, v, x, st, 1e-5, target="sm_90"),
        norms.make_rms_norm_forward(n, dtype, fused_add=True).compile(x, x, v, x, x, st, 1e-5, target="sm_90"),
        norms.make_rms_norm_backward(n, dtype).compile(x, v, x, st, x, part, target="sm_90"),
        norms.make_rms_norm_backward(n, dtype, add_grad=True).compile(x, v, x, st, x, x, part, target="sm_90"),
    ]
    for ck in compiled:
        r = ptxas(ck.asm["ptx"], "sm_90")
        assert r.returncode == 0, r.stderr
        if n % 8 == 0:
            assert "ld.global.v4.b32" in ck.asm["ptx"]         # 16-byte vectors where the row allows them
        if n in (4096, 8192):
            assert ck.metadata.get("spill_stores", 0) == 0, ck.metadata


def test_eager_routes_equal_the_dispatcher_bit_for_bit():
    """An eager call autograd records runs the implementation inside a torch.autograd.Function (common.route);
    its outputs and gradients are those of the call through torch.ops.tiledsl, bit for bit."""
    x, r = _input((3, 40), torch.float16, 5), _input((3, 40), torch.float16, 6)
    w, b = _input((40,), torch.float16, 7), _input((40,), torch.float16, 8)
    dy = _input((3, 40), torch.float16, 9)
    cases = {
        "softmax": (lambda x, r, w, b: ops.softmax(x, -1), lambda x, r, w, b: torch.ops.tiledsl.softmax(x, -1)),
        "layer_norm": (lambda x, r, w, b: ops.layer_norm(x, (40,), w, b),
                       lambda x, r, w, b: torch.ops.tiledsl.layer_norm(x, [40], w, b)),
        "rms_norm": (lambda x, r, w, b: ops.rms_norm(x, w, 1e-5),
                     lambda x, r, w, b: torch.ops.tiledsl.rms_norm(x, w, 1e-5)),
        "add_rms_norm": (lambda x, r, w, b: sum(ops.add_rms_norm(x, r, w, 1e-5)),
                         lambda x, r, w, b: sum(torch.ops.tiledsl.add_rms_norm(x, r, w, 1e-5)))}
    for name, (eager, dispatched) in cases.items():
        got = []
        for fn in (eager, dispatched):
            ins = [leaf(t) for t in (x, r, w, b)]
            y = fn(*ins)
            y.backward(dy)
            got.append([y] + [t.grad for t in ins])
        assert "Backward" in type(eager(*[leaf(t) for t in (x, r, w, b)]).grad_fn).__name__, name
        for a, e in zip(*got):
            if e is None:
                assert a is None, name
            else:
                torch.testing.assert_close(a, e, atol=0, rtol=0, msg=name)
