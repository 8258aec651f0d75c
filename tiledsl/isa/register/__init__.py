"""The register family: arithmetic, mov and cvt on registers, one thread instruction each."""
from ..family import Family
from . import pattern, semantics

FAMILY = Family("register", pattern.match, pattern.expand, pattern.min_sm, semantics.semantics)
