"""The TMA tensor-copy family: cp.async.bulk.tensor loads, stores and prefetches through a tensor map, and the
bulk async-groups that order the stores (sm_90)."""
from ..family import Family
from . import pattern, semantics

FAMILY = Family("tma", pattern.match, pattern.expand, pattern.MIN_SM, semantics.semantics,
                pattern.access_spans, asm=pattern.asm)
