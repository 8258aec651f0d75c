"""The named-barrier family: bar.sync / bar.arrive and barrier{.cta}.sync/.arrive{.aligned} among some or all warps
of a CTA (barriers 0..15, a thread count in whole warps)."""
from ..family import Family
from . import pattern, semantics

FAMILY = Family("barrier", pattern.match, pattern.expand, pattern.min_sm, semantics.semantics,
                requires=pattern.requires)
