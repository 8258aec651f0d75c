"""The compilation target: the SM version, the PTX ISA version, and every hardware limit tiledsl checks.

This is the only place a default target lives (`DEFAULT_SM`) and the only place a limit is written; the front end,
the compiler, the launch checks and the launchers all ask a `Target`.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from .errors import CompilationError

DEFAULT_SM = 90          # the target of kernel.compile() and of the interpreter when nothing names one

# PTX ISA version per SM: pinned so that the installed driver accepts the module (newer SMs need newer ISAs)
PTX_VERSION = {70: 70, 75: 70, 80: 80, 86: 80, 89: 80, 90: 80, 100: 86, 120: 87}
# shared memory a block may use (bytes), per SM version
_SHARED_PER_BLOCK = {70: 98304, 75: 65536, 80: 166912, 86: 101376, 87: 166912, 89: 101376, 90: 232448}


def _at_or_below(table: dict, sm: int) -> int:
    return table.get(sm) or table[max(s for s in table if s <= sm)]


@dataclass(frozen=True)
class Target:
    """One GPU architecture. `arch_specific` is the `a` of sm_90a (features that only that SM has)."""
    sm: int = DEFAULT_SM
    arch_specific: bool = False

    # CUDA's limits, the same on every supported SM
    max_threads_per_block = 1024
    max_block = (1024, 1024, 64)
    max_grid = (2**31 - 1, 65535, 65535)
    max_registers_per_thread = 255
    max_blocks_per_sm = 32              # resident blocks; the bound of min_blocks_per_sm
    registers_per_sm = 65536
    static_shared_limit = 48 * 1024     # above this, shared memory must be dynamic (and opted into at load)
    max_named_size = 2**31 - 1          # named sizes travel as int32 parameters
    max_local_per_thread = 512 * 1024   # bytes of local memory one thread may address (CUDA's limit since sm_20)

    def __post_init__(self):
        if self.sm < 70:
            raise CompilationError(f"target sm_{self.sm} is not supported (sm_70 or newer)")

    @classmethod
    def parse(cls, target: Target | str | int | None) -> Target:
        """A Target from 'sm_90', 'sm_90a', 'compute_80', 90, an existing Target, or None (the default)."""
        if isinstance(target, Target):
            return target
        if target is None:
            return cls()
        if isinstance(target, int) and not isinstance(target, bool):
            return cls(target)
        m = re.fullmatch(r"(?:sm_|compute_)?(\d+)(a?)", str(target).strip())
        if not m:
            raise CompilationError(f"unknown target {target!r}; write e.g. 'sm_90'")
        return cls(int(m.group(1)), bool(m.group(2)))

    @property
    def name(self) -> str:
        return f"sm_{self.sm}{'a' if self.arch_specific else ''}"

    @property
    def ptx_version(self) -> int:
        return _at_or_below(PTX_VERSION, self.sm)

    @property
    def shared_per_block(self) -> int:
        return _at_or_below(_SHARED_PER_BLOCK, self.sm)

    def __str__(self) -> str:
        return self.name
