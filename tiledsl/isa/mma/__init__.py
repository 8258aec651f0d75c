"""The mma family: warp-level mma.sync on f16/bf16 with f32 accumulators."""
from ..family import Family
from . import pattern, semantics

FAMILY = Family("mma", pattern.match, pattern.expand, pattern.min_sm, semantics.semantics)
