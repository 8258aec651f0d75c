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
