"""The policy family: createpolicy, the L2 eviction policies that .L2::cache_hint forms take (sm_80)."""
from ..family import Family
from . import pattern, semantics

FAMILY = Family("policy", pattern.match, pattern.expand, pattern.MIN_SM, semantics.semantics)
