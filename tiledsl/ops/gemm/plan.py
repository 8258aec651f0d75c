"""What the GEMM entry points share: the `Plan` matmul keeps per key, the dtype names of torch's dtypes, and the
torch epilogue (bias, then activation) for the paths whose kernel does not fuse it."""
import tiledsl

DTYPES = {"torch.float16": "float16", "torch.bfloat16": "bfloat16", "torch.float32": "float32"}


class Plan:
    """What matmul runs for one key: `run(a, b, out, bias, activation)`, and `describe` (path and configuration).
    majors: how run reads a and b: "k" (matmul hands it contiguous operands) or "mn" (the transposed views as
    given, hopper_plan's MN-major kernel)."""
    __slots__ = ("run", "describe", "path", "config", "majors")

    def __init__(self, run, describe, path, config, majors=("k", "k")):
        self.run, self.describe, self.path, self.config, self.majors = run, describe, path, config, majors

    def __repr__(self) -> str:
        return f"<matmul plan: {self.describe}>"


def device_capability(t):
    """(major, minor) of tensor t's CUDA device, None for a host tensor."""
    if not getattr(t, "is_cuda", False):
        return None
    import torch
    return tuple(torch.cuda.get_device_capability(t.device))


def size_of(dtype: str) -> int:
    return 4 if dtype == "float32" else 2


def host_epilogue(out, bias, activation):
    """out += bias, then the activation, by torch in place (the paths whose kernel does not fuse them)."""
    if bias is not None:
        out += bias
    if activation is not None:
        activate(out, activation)


def activate(out, activation):
    import torch
    fns = {"relu": torch.relu_, "gelu": lambda t: t.copy_(torch.nn.functional.gelu(t)),
           "silu": lambda t: torch.nn.functional.silu(t, inplace=True)}
    f = fns.get(activation) if isinstance(activation, str) else activation if callable(activation) else None
    if f is None:
        raise tiledsl.LaunchError(f"activation is one of {sorted(fns)} or a callable, got {activation!r}")
    r = f(out)
    if r is not None and r is not out:
        out.copy_(r)
