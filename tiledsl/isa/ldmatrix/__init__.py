"""The ldmatrix family: ldmatrix / stmatrix, m8n8 b16 matrices between shared memory and warp registers."""
from ..family import Family
from . import pattern, semantics

FAMILY = Family("ldmatrix", pattern.match, pattern.expand, pattern.min_sm, semantics.semantics,
                pattern.access_spans, requires=pattern.requires)
