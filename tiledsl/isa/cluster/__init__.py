"""The cluster family: barrier.cluster, distributed shared memory through mapa, elect.sync, setmaxnreg (sm_90,
setmaxnreg sm_90a)."""
from ..family import Family
from . import pattern, semantics

FAMILY = Family("cluster", pattern.match, pattern.expand, pattern.MIN_SM, semantics.semantics,
                pattern.access_spans, requires=pattern.requires, asm=pattern.asm, arch=pattern.arch)
