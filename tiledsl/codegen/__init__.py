"""Expanded tile IR to LLVM IR."""
from .llvm import generate_llvm

__all__ = ["generate_llvm"]
