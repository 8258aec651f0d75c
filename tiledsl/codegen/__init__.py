from .llvm import generate_llvm  # noqa: F401
