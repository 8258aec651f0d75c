"""Expanded tile IR to LLVM IR."""
from .stmts import generate_llvm

__all__ = ["generate_llvm"]
