"""The wgmma family: warpgroup-level asynchronous MMA from registers and shared-memory descriptors (sm_90a)."""
from ..family import Family
from . import pattern, semantics

FAMILY = Family("wgmma", pattern.match, pattern.expand, pattern.MIN_SM, semantics.semantics, pattern.access_spans,
                asm=pattern.asm, arch=pattern.arch)
