"""Compile options: frozen, so a kernel's options can be hashed into its cache key and never change under it."""
from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Options:
    """What, besides the source and the target, shapes the compiled code.

    debug: a bounds check before every memory access (KernelFault at the user's line; slower).
    allow_spills: compile a kernel with a local tile larger than a thread's registers (otherwise refused before
        ptxas runs: passes/register_budget.py).
    """
    debug: bool = False
    allow_spills: bool = False

    def key(self) -> str:
        """A stable text for the cache key: every field, by name."""
        return ",".join(f"{k}={v!r}" for k, v in sorted(asdict(self).items()))
