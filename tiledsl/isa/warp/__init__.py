"""The warp collectives family: shfl.sync, vote.sync, redux.sync, match.sync and activemask (thread instructions
whose lanes exchange values; every lane named in membermask must execute them together)."""
from ..family import Family
from . import pattern, semantics

FAMILY = Family("warp", pattern.match, pattern.expand, pattern.min_sm, semantics.semantics, pattern.access_spans,
                asm=pattern.asm)
