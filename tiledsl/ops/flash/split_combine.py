"""Split-KV decoding's combine, inside the split kernels (ragged.py's and decode_kernel.py's decode entries with
splits > 1): the last-arriver pattern of gemm/skinny_kernel.py, so a split decode is one launch, not two.

Every block (split s, query block qb) of (sequence b, kv head) writes its float32 partial O and LSE, then one thread
increments the group's counter F[(b * H_kv + kvh) * NQB + qb] with `atom.acq_rel.gpu.global.inc.u32` of limit
NS - 1 (release: the block's partial stores, ordered before it by the block barrier, are visible to whoever acquires
the counter after it). The block that reads NS - 1 back arrived last: every other split's partials are out, so it
combines the NS partials of its rows, in split order (the same order, so the same bits, whichever block is last),
and writes O and LSE. `inc` wraps the counter to 0 in that same atomic, so the next launch (a CUDA graph replay
included) starts from zeros with no memset. No block ever waits for another: a block that is not last leaves.

Why not a second kernel: at batch 1 (8 kv heads, 27 splits of a 32k context) the combine launch cost 3 us of kernel
and a launch gap on top of a 46 us read (H100, session 39), about a tenth of the call.
"""
import tiledsl
from tiledsl import T

from .common import LOG2E, NEG

ARRIVE = "atom.acq_rel.gpu.global.inc.u32"
_BIG = 2 ** 31 - 1


@tiledsl.inline
def arrived_last(F, ctr, NS, tid, flag):
    """1 in every thread of the block that arrived last (the NS-th) on counter F[ctr], else 0. Called by all the
    block's threads after their partial stores; flag: an int32 (1,) shared buffer."""
    T.cuda.syncthreads()                 # every thread's partial stores before thread 0's release
    if tid == 0:
        old = T.alloc_local((1,), "uint32")
        T.cuda.tile.apply(T.ptx[ARRIVE], old, F.view(dtype="uint32")[ctr:ctr + 1], NS - 1)
        flag[0] = 1 if T.cast(old[0], "int32") == NS - 1 else 0
    T.cuda.syncthreads()                 # every thread's partial loads after thread 0's acquire
    return flag[0]


@tiledsl.inline
def combine_row(WO, WL, O, LSE, row, R, NS, lane, D, dtype):
    """Row `row` of the (B * Lq * H) output rows from the NS float32 partials (WO (NS, B, Lq, H, D), WL (NS, B, Lq,
    H): split s's rows follow the R rows of the splits before it), by one warp, D / 32 values a lane: O = sum_s
    w_s O_s / sum_s w_s with w_s = exp(LSE_s - max), LSE = max + log(sum_s w_s); a split that saw no key (LSE -inf)
    weighs 0, a row no split saw gets O = 0 and LSE = -inf. (D // 32 written out, not named: the callers expand
    this inside a runtime loop, where a name assigned becomes a loop variable and stops being a constant.)"""
    gP = WO.view(_BIG // D, D)
    gL = WL.view(_BIG)
    mx = gL[row]
    for sp in T.unroll(1, NS):
        mx = T.max(mx, gL[sp * R + row])
    acc = T.alloc_local((D // 32,), "float32")
    for e in T.unroll(D // 32):
        acc[e] = 0.0
    den = 0.0
    for sp in T.unroll(NS):
        ls = gL[sp * R + row]
        w = T.exp2((ls - mx) * LOG2E, approx=True) if ls != NEG else 0.0
        den = den + w
        for e in T.unroll(D // 32):
            acc[e] = acc[e] + w * gP[sp * R + row, lane * (D // 32) + e]
    inv = 1.0 / den if den > 0.0 else 0.0
    gO = O.view(_BIG // D, D)
    for e in T.unroll(D // 32):
        gO[row, lane * (D // 32) + e] = T.cast(acc[e] * inv, dtype)
    if lane == 0:
        LSE.view(_BIG)[row] = mx + T.log(den, approx=True) if den > 0.0 else NEG
