"""What every launcher is: one specialization (a `KernelSignature` and its kernel loaded on a device as a
`Plan`), a grid and block, the framework and device of its arrays.

`try_launch(args, stream)` is the launcher's own attempt: it launches and returns True, or returns False without
side effects when anything is unexpected. `__call__(args, stream)` launches, deferring to `reference` (the
JITFunction's reference path: the checker, which raises the precise LaunchError, or another specialization)
when the attempt declines.
"""
from __future__ import annotations

from typing import Callable

from ...abi.signature import KernelSignature


class Launcher:
    def __init__(self, sig: KernelSignature, plan, grid, block, framework: str | None, device: int | None,
                 reference: Callable | None = None):
        self.sig = sig
        self.plan = plan
        self.grid = grid                  # three ints, a callable, or None: the kernel's own grid
        self.block = tuple(block)
        self.framework = framework
        self.device = device
        self.reference = reference

    def try_launch(self, args, stream: int | None) -> bool:
        return False

    def __call__(self, args, stream=None):
        if not self.try_launch(args, stream):
            return self.reference(args, stream)
        return None
