"""The compilation target: the SM version, the PTX ISA version, and every hardware limit tiledsl checks.

This is the only place a default target lives (`DEFAULT_SM`) and the only place a limit is written; the front end,
the compiler, the launch checks and the launchers all ask a `Target`.
"""
from __future__ import annotations

import numbers
import re
from dataclasses import dataclass

from .errors import CompilationError

DEFAULT_SM = 90          # the target of kernel.compile() and of the interpreter when nothing names one

# PTX ISA version per SM: pinned so that the installed driver accepts the module (newer SMs need newer ISAs)
PTX_VERSION = {70: 70, 75: 70, 80: 80, 86: 80, 89: 80, 90: 80, 100: 88, 120: 88}
# the SMs a user may name (a device reporting another capability is still taken as it is)
KNOWN_SM = frozenset({70, 72, 75, 80, 86, 87, 89, 90, 100, 101, 103, 110, 120, 121})
# shared memory a block may use (bytes), per SM version
_SHARED_PER_BLOCK = {70: 98304, 75: 65536, 80: 166912, 86: 101376, 87: 166912, 89: 101376, 90: 232448}


def _limit(m: int) -> str:
    return f"2^{m.bit_length()}-1" if m > 2**20 and (m + 1) & m == 0 else str(m)


def _at_or_below(table: dict, sm: int) -> int:
    return table.get(sm) or table[max(s for s in table if s <= sm)]


@dataclass(frozen=True)
class Target:
    """One GPU architecture. `arch_specific` is the `a` of sm_90a (features that only that SM has). `chosen`: the
    target was picked by tiledsl (no target named: the device's SM, or DEFAULT_SM), so a kernel that uses an
    arch-specific family (wgmma) compiles for that SM's arch-specific target instead (`for_kernel_needing`); a
    target the user named is kept as named, and such a kernel is refused on it."""
    sm: int = DEFAULT_SM
    arch_specific: bool = False
    chosen: bool = False

    # CUDA's limits, the same on every supported SM
    max_threads_per_block = 1024
    max_block = (1024, 1024, 64)
    max_grid = (2**31 - 1, 65535, 65535)
    max_registers_per_thread = 255
    max_blocks_per_sm = 32              # resident blocks; the bound of min_blocks_per_sm
    registers_per_sm = 65536
    static_shared_limit = 48 * 1024     # above this, shared memory must be dynamic (and opted into at load)
    max_named_size = 2**31 - 1          # named sizes travel as int32 parameters
    max_cluster_size = 8                # blocks in a portable cluster (sm_90)
    max_local_per_thread = 512 * 1024   # bytes of local memory one thread may address (CUDA's limit since sm_20)

    def __post_init__(self):
        if not isinstance(self.sm, int) or isinstance(self.sm, bool) or not isinstance(self.arch_specific, bool):
            raise CompilationError(f"a target's SM is an int, e.g. Target(90); got {self.sm!r}"
                                   f"{'' if isinstance(self.arch_specific, bool) else f' ({self.arch_specific!r})'}")
        if self.sm < 70:
            raise CompilationError(f"target sm_{self.sm} is not supported (sm_70 or newer)")

    @classmethod
    def grid_problem(cls, grid) -> str | None:
        """Why CUDA refuses a grid of three positive ints (None when it does not); the one text of this error, in
        the front end (the line of T.device_entry) and at every launch."""
        if any(v > m for v, m in zip(grid, cls.max_grid)):
            limits = ", ".join(_limit(m) for m in cls.max_grid)
            return f"grid {tuple(grid)} exceeds the device's limits ({limits})"
        return None

    @classmethod
    def block_problem(cls, block) -> str | None:
        """Why CUDA refuses a block of three positive ints (None when it does not)."""
        n = block[0] * block[1] * block[2]
        if n > cls.max_threads_per_block or any(b > m for b, m in zip(block, cls.max_block)):
            return (f"block {tuple(block)} has {n} threads; CUDA allows at most {cls.max_threads_per_block} "
                    f"(and z <= {cls.max_block[2]})")
        return None

    @classmethod
    def parse(cls, target: Target | str | int | None) -> Target:
        """A Target from 'sm_90', 'sm_90a', 'compute_80', 90, an existing Target, or None (the default)."""
        if isinstance(target, Target):
            return target
        if target is None:
            return cls()
        if isinstance(target, numbers.Integral) and type(target).__name__ not in ("bool", "bool_"):
            sm, arch = int(target), False
            if not 0 <= sm < 10000:
                raise CompilationError("unknown target: an SM number is e.g. 90 (sm_90)")
        elif isinstance(target, str):
            m = re.fullmatch(r"(?:sm_|compute_)?([0-9]{1,4})(a?)", target.strip())
            if not m:
                raise CompilationError(f"unknown target {target[:40]!r}; write e.g. 'sm_90'")
            sm, arch = int(m.group(1)), bool(m.group(2))
        else:       # True, 9.0, a list...: not a spelling of a target (bool is an int, but not an SM)
            shown = repr(target) if len(repr(target)) <= 40 else type(target).__name__
            raise CompilationError(f"unknown target {shown} ({type(target).__name__}); write e.g. 'sm_90' or 90")
        t = cls(sm)                              # (refuses SMs below sm_70)
        if sm not in KNOWN_SM:
            raise CompilationError(f"unknown target sm_{sm}; tiledsl knows "
                                   f"{', '.join(f'sm_{s}' for s in sorted(KNOWN_SM))}")
        if arch and sm < 90:
            raise CompilationError(f"target sm_{sm}a does not exist: architecture-specific targets start at sm_90a")
        return cls(sm, arch) if arch else t

    @classmethod
    def default(cls, sm: int | None = None) -> Target:
        """The target tiledsl picks when none is named: `sm` (a device's capability) or DEFAULT_SM, marked chosen."""
        return cls(DEFAULT_SM if sm is None else sm, chosen=True)

    @property
    def name(self) -> str:
        return f"sm_{self.sm}{'a' if self.arch_specific else ''}"

    @property
    def key(self) -> str:
        """The target's part of a cache key: a chosen sm_90 may compile as sm_90a, a named one never does."""
        return self.name + (" (chosen)" if self.chosen else "")

    def admits_arch_specific(self, sm: int) -> bool:
        """Can a kernel needing sm_{sm}a compile for this target (it is sm_{sm}a, or a chosen sm_{sm})?"""
        return self.sm == sm and (self.arch_specific or self.chosen)

    def as_arch_specific(self) -> Target:
        """This SM's arch-specific target (sm_90 -> sm_90a), for a chosen target whose kernel needs it."""
        return Target(self.sm, True)

    @property
    def ptx_version(self) -> int:
        return _at_or_below(PTX_VERSION, self.sm)

    @property
    def shared_per_block(self) -> int:
        return _at_or_below(_SHARED_PER_BLOCK, self.sm)

    def __str__(self) -> str:
        return self.name
