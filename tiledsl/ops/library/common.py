"""What the torch ops share: the library namespace, refusals that name the argument, and the device test.

An argument an op does not support is refused with `UnsupportedArgument` naming the op, the argument, the value
given and what is supported: nothing silently falls back or computes something else."""
NAMESPACE = "tiledsl"


class UnsupportedArgument(ValueError):
    """An argument value a tiledsl op does not support (the message names the argument and what is)."""


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
    import torch
    C = torch._C
    if torch.compiler.is_compiling() or C._is_torch_function_mode_enabled() or C._len_torch_dispatch_stack() or \
            C._are_functorch_transforms_active():
        return False
    grad = C.is_grad_enabled()
    for t in tensors:
        if t is not None and (type(t) not in (torch.Tensor, torch.nn.Parameter) or grad and t.requires_grad):
            return False
    return True
