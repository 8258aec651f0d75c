"""What the torch ops share: the library namespace, refusals that name the argument, and the device test.

An argument an op does not support is refused with `UnsupportedArgument` naming the op, the argument, the value
given and what is supported: nothing silently falls back or computes something else."""
from ...core.errors import TiledslError

NAMESPACE = "tiledsl"


class UnsupportedArgument(TiledslError, ValueError):
    """An argument value a tiledsl op does not support (the message names the argument and what is). A TiledslError,
    the base of every tiledsl error (API.md), and a ValueError, as it always was."""


def refuse(op, arg, value, supported):
    raise UnsupportedArgument(f"tiledsl.ops.{op}: {arg}={value!r} is not supported; {supported}")


def qualified(name):
    """The custom op's qualified name, `tiledsl::name`."""
    return f"{NAMESPACE}::{name}"


def on_cpu(*tensors):
    """True when the op's tensors are CPU tensors (the interpreter route); refuses a mix of devices."""
    devices = {t.device for t in tensors if t is not None}
    if len(devices) > 1:
        raise UnsupportedArgument(f"tiledsl.ops: tensors on different devices {sorted(map(str, devices))}")
    return all(d.type == "cpu" for d in devices)


def direct(*tensors):
    """Whether an eager call may run the op's implementation itself instead of through the dispatcher: a
    custom_op's Python dispatch (autograd wrapper, redispatch) costs several times a small kernel's launch (the
    issue holds an eager linear to 1.5x F.linear's overhead, and the dispatch showed in attention's timings). Only
    where the dispatcher would do nothing but call that implementation: not while compiling or tracing, no
    torch-function or dispatch mode (fake tensors, make_fx, FlopCounterMode, `with torch.device(...)`), no functorch
    transform, plain tensors (no subclass), and no input that autograd would record. Anything else goes through
    torch.ops.tiledsl.<op>; the result is the same."""
    return route(*tensors) == DIRECT


DIRECT, FUNCTION, DISPATCH = "direct", "function", "dispatch"


def route(*tensors):
    """How an eager call runs its op: DIRECT (the implementation itself: see direct), FUNCTION (plain eager tensors
    that autograd records: the implementation inside a torch.autograd.Function with the op's own setup_context and
    backward, `eager_autograd`; the custom op's generated autograd wrapper redispatches through Python twice per
    call, a forward + backward's largest host cost), or DISPATCH (torch.ops.tiledsl.<op>: compiling, tracing, modes,
    subclasses, functorch). The three compute the same thing."""
    import torch
    C = torch._C
    if torch.compiler.is_compiling() or C._is_torch_function_mode_enabled() or C._len_torch_dispatch_stack() or \
            C._are_functorch_transforms_active():
        return DISPATCH
    grad = C.is_grad_enabled()
    recorded = False
    for t in tensors:
        if t is not None:
            if type(t) not in _PLAIN or t.is_meta:         # (meta: the op's fake implementation gives the result)
                return DISPATCH
            recorded = recorded or grad and t.requires_grad
    return FUNCTION if recorded else DIRECT


def call(op, impl, *args):
    """op(*args), or impl(*args) where the dispatcher would only call it (a backward formula's ops: the backward of
    an eager call runs without grad mode, so its ops take the direct route)."""
    if direct(*(a for a in args if _is_tensor(a))):
        return impl(*args)
    return op(*args)


def eager_autograd(impl, setup_context, backward, name):
    """A torch.autograd.Function's apply running impl(*inputs) forward, with the op's setup_context(ctx, inputs,
    output) and backward(ctx, *grads): what the custom op's registered autograd does, without its dispatch."""
    import torch

    def forward(*inputs):
        return impl(*inputs)

    fn = type(name, (torch.autograd.Function,), {
        "forward": staticmethod(forward),
        "setup_context": staticmethod(setup_context),
        "backward": staticmethod(backward)})
    return fn.apply


def no_double_backward(backward_op, name):
    """Give a backward op an autograd formula that refuses, naming the public op: differentiating its gradient
    (create_graph=True, then a second backward through it) is not supported, and torch's own message would name
    the internal op ("no autograd formula was registered"). Raised where the second backward reaches it."""
    def setup_context(ctx, inputs, output):
        pass

    def backward(ctx, *grads):
        raise UnsupportedArgument(f"tiledsl.ops.{name}: double backward (differentiating its gradient, as "
                                  f"torch.autograd.grad(..., create_graph=True) and a second backward do) is not "
                                  f"supported; its backward is a kernel without a gradient of its own")

    backward_op.register_autograd(backward, setup_context=setup_context)


def _is_tensor(a):
    import torch
    return isinstance(a, torch.Tensor)


def _plain_types():
    import torch
    return (torch.Tensor, torch.nn.Parameter)


_PLAIN = _plain_types()
