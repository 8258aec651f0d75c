"""tiledsl: GPU kernels in plain Python with explicit tile patterns (mma.sync, fma, ld/st, ...)."""
from .core.version import __version__  # noqa: E402

from .core.errors import CompilationError, KernelFault, LaunchError, TiledslError  # noqa: E402
from .lang.language import T  # noqa: E402
from .runtime.jit import JITFunction, jit  # noqa: E402
from .lang.inline import inline  # noqa: E402

__all__ = ["jit", "inline", "JITFunction", "CompiledKernel", "T", "layout", "TiledslError", "CompilationError",
           "LaunchError", "KernelFault", "__version__", "Config", "autotune", "testing", "layouts"]


def __getattr__(name):
    # The compiler stages load on first use, so `import tiledsl` stays fast.
    if name == "CompiledKernel":
        from .compiled import CompiledKernel
        return CompiledKernel
    if name == "Config":
        from .tune.config import Config
        return Config
    if name == "autotune":
        from .tune.autotune import autotune
        return autotune
    if name in ("layout", "layouts"):   # (import the IR modules: a process served from the disk cache never needs them)
        import importlib
        return importlib.import_module("." + name, __name__)
    if name == "testing":
        import importlib        # (not `from . import testing`: its hasattr check would come back here)
        return importlib.import_module(".testing", __name__)
    raise AttributeError(f"module 'tiledsl' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(__all__))
