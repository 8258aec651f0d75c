"""The memory family: ld / st between registers and global, shared or local memory."""
from ..family import Family
from . import pattern, semantics

FAMILY = Family("memory", pattern.match, pattern.expand, pattern.min_sm, semantics.semantics,
                pattern.access_spans)
