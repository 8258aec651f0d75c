"""The cp.async family: asynchronous global -> shared copies of 4, 8 or 16 bytes and their groups (sm_80)."""
from ..family import Family
from . import pattern, semantics

FAMILY = Family("cp_async", pattern.match, pattern.expand, pattern.MIN_SM, semantics.semantics,
                pattern.access_spans)
