"""The atomic family: atom and red, read-modify-write of one global or shared element per thread."""
from ..family import Family
from . import pattern, semantics

FAMILY = Family("atomic", pattern.match, pattern.expand, pattern.min_sm, semantics.semantics,
                pattern.access_spans)
