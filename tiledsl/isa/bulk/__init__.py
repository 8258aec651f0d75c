"""The bulk-copy family: cp.async.bulk through the tensor memory accelerator, mbarriers and their fences (sm_90)."""
from ..family import Family
from . import pattern, semantics

FAMILY = Family("bulk", pattern.match, pattern.expand, pattern.MIN_SM, semantics.semantics,
                pattern.access_spans, asm=pattern.asm)
