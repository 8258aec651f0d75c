"""What every tiledsl.ops torch op does with inputs off the common path (CPU, the interpreter): meta tensors give
the fake implementation's result, a second-order gradient is refused naming the public op, arguments that are not
tensors or not what torch takes are refused naming the argument, and the defaults are torch's."""
import pytest
import torch
import torch.nn.functional as F

import tiledsl.ops as ops
from tiledsl.ops.library.common import UnsupportedArgument

H = torch.float16


def _meta(*shape, dtype=H):
    return torch.empty(shape, dtype=dtype, device="meta")


@pytest.mark.parametrize("name, call, shapes", [
    ("softmax", lambda: ops.softmax(_meta(4, 64)), [(4, 64)]),
    ("linear", lambda: ops.linear(_meta(3, 4, 64), _meta(8, 64)), [(3, 4, 8)]),
    ("matmul", lambda: ops.matmul(_meta(4, 64), _meta(8, 64)), [(4, 8)]),
    ("layer_norm", lambda: ops.layer_norm(_meta(4, 64), (64,)), [(4, 64)]),
    ("rms_norm", lambda: ops.rms_norm(_meta(4, 64)), [(4, 64)]),
    ("add_rms_norm", lambda: ops.add_rms_norm(_meta(4, 64), _meta(4, 64)), [(4, 64), (4, 64)]),
    ("sdpa", lambda: ops.scaled_dot_product_attention(_meta(1, 2, 16, 64), _meta(1, 2, 16, 64),
                                                      _meta(1, 2, 16, 64)), [(1, 2, 16, 64)]),
])
def test_meta_tensors_give_shapes_without_running(name, call, shapes):
    out = call()
    out = out if isinstance(out, tuple) else (out,)
    assert [tuple(t.shape) for t in out] == shapes and all(t.device.type == "meta" for t in out)


@pytest.mark.parametrize("name, f", [
    ("softmax", lambda x: ops.softmax(x)),
    ("layer_norm", lambda x: ops.layer_norm(x, (64,))),
    ("rms_norm \\(and add_rms_norm\\)", lambda x: ops.rms_norm(x)),
    ("rms_norm \\(and add_rms_norm\\)", lambda x: ops.add_rms_norm(x, x)[0]),
    ("silu_mul", lambda x: ops.silu_mul(x)),
])
def test_double_backward_is_refused_naming_the_op(name, f):
    x = torch.randn(4, 64, dtype=H, requires_grad=True)
    g, = torch.autograd.grad(f(x).float().square().sum(), x, create_graph=True)
    with pytest.raises(UnsupportedArgument, match=f"tiledsl.ops.{name}: double backward"):
        g.float().sum().backward()


def test_linear_double_backward_still_works():
    x = torch.randn(4, 16, dtype=H, requires_grad=True)
    w = torch.randn(8, 16, dtype=H)
    g, = torch.autograd.grad(ops.linear(x, w).float().square().sum(), x, create_graph=True)
    g.float().sum().backward()
    assert x.grad is not None and x.grad.shape == x.shape


def test_arguments_that_are_not_tensors_or_not_torchs_are_refused():
    x = torch.randn(4, 64, dtype=H)
    with pytest.raises(UnsupportedArgument, match="residual must be a torch.Tensor, got NoneType"):
        ops.add_rms_norm(x, None)
    with pytest.raises(UnsupportedArgument, match="query must be a torch.Tensor, got NoneType"):
        ops.scaled_dot_product_attention(None, x, x)
    for dim in ((0, 1), 1.0, True):
        with pytest.raises(UnsupportedArgument, match="dim=.* one int dimension"):
            ops.softmax(x, dim)
    with pytest.raises(IndexError, match="dim=7 is out of range for a 0-D input"):
        ops.softmax(torch.tensor(1.0, dtype=H), 7)
    assert ops.softmax(torch.tensor(1.0, dtype=H), -1) == 1
    with pytest.raises(UnsupportedArgument, match="bias.dtype=torch.bfloat16"):
        ops.linear(x, torch.randn(8, 64, dtype=H), torch.randn(8, dtype=torch.bfloat16))
    assert ops.linear(x, torch.randn(8, 64, dtype=H), torch.randn(8)).dtype == H     # float32 bias: documented


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_rms_norm_default_eps_is_float32s(dtype):
    """eps=None is torch's default: float32's epsilon for half inputs (the type it computes in)."""
    x = torch.full((2, 64), 1e-3, dtype=dtype)
    ref = F.rms_norm(x.float(), (64,), eps=torch.finfo(torch.float32).eps)
    assert (ops.rms_norm(x).float() - ref).abs().max() < 2e-2
    assert (ops.add_rms_norm(x, torch.zeros_like(x))[0].float() - ref).abs().max() < 2e-2
