"""The FA3 forward's Q-buffer protocol on its persistent walks, as a model: the producer's thread and the consumer
warps of one block, run under random schedules with mbarriers as PTX defines them (a phase completes when its
arrivals are in; try_wait.parity(P) passes once the phase of parity P has completed, i.e. while the barrier's
completed-phase count has the other parity). The parities are the kernel's own: fa3_parts' q_phase and q_free_phase
(their Python bodies, called with integers). Checked for one and two Q buffers (double_q), walks of 1 to 12 items
and 1 to 8 consumer warps: no deadlock, no Q load issued into a buffer that a warp still reads, and every warp
reads the Q (and, on the dynamic walk, the item number) of its own item. A test breaks the protocol on purpose (two
buffers waited for with one buffer's parity, or not waited for) to show the model catches it."""
import random

import pytest

from tiledsl.ops.flash.fa3_parts import forward_parts


def _parts(qbufs):
    return forward_parts(shape=(1, 1, 1, 64, 64), D=64, BN=64, STG=2, CONS=2, boxes=1, step=((0, 0, 64),),
                         tx_q=0, tx_kv=0, causal=False, mma_s="", mma_o="", trans_v=True, cvt_o="", overlap=1,
                         pingpong=0, p_regs=None, to_p=None, producer_regs=24, grid=1, qbufs=qbufs)


class Barrier:
    """An mbarrier: `count` arrivals complete a phase."""

    def __init__(self, count):
        self.count, self.pending, self.phases = count, count, 0

    def arrive(self):
        self.pending -= 1
        assert self.pending >= 0
        if self.pending == 0:
            self.phases, self.pending = self.phases + 1, self.count

    def passes(self, parity):
        return self.phases % 2 != parity


def run_walk(items, warps, qbufs, q_phase, q_free_phase, rng):
    """One schedule of a block's walk; returns None, or what went wrong."""
    qbar = [Barrier(1) for _ in range(qbufs)]
    qfree = [Barrier(warps) for _ in range(qbufs)]
    content = [None] * qbufs            # which item's Q (and number) a buffer holds
    readers = [set() for _ in range(qbufs)]
    in_flight = []                      # issued loads: (buffer, item)
    # the producer: for each item wait for its buffer's release, then issue the load; a load lands later
    prod = {"k": 0}
    cons = [{"k": 0, "reading": False} for _ in range(warps)]

    def steps():
        out = []
        k = prod["k"]
        if k < items and qfree[k % qbufs].passes(q_free_phase(k)):
            out.append(("issue", None))
        if in_flight:
            out.append(("land", None))
        for w, c in enumerate(cons):
            k = c["k"]
            if k >= items:
                continue
            b = k % qbufs
            if c["reading"] or qbar[b].passes(q_phase(k)):
                out.append(("warp", w))
        return out

    while True:
        ready = steps()
        if not ready:
            if prod["k"] == items and all(c["k"] == items for c in cons) and not in_flight:
                return None
            return f"deadlock: producer at item {prod['k']}, warps at {[c['k'] for c in cons]}"
        what, w = rng.choice(ready)
        if what == "issue":
            k = prod["k"]
            b = k % qbufs
            if readers[b]:
                return f"item {k}'s Q load issued into buffer {b} while warps {sorted(readers[b])} read it"
            in_flight.append((b, k))
            prod["k"] = k + 1
        elif what == "land":
            b, k = in_flight.pop(0)
            content[b] = k
            qbar[b].arrive()
        else:
            c = cons[w]
            k = c["k"]
            b = k % qbufs
            if not c["reading"]:
                # Q's barrier passed: the warp reads the buffer (its S = Q K^T) over later steps
                if content[b] != k:
                    return f"warp {w} read item {content[b]}'s Q for item {k}"
                c["reading"] = True
                readers[b].add(w)
            else:
                # its last S has retired: the warp releases the buffer (qfree) and moves to the next item
                if content[b] != k:
                    return f"buffer {b} changed under warp {w} (item {k})"
                c["reading"] = False
                readers[b].discard(w)
                qfree[b].arrive()
                c["k"] = k + 1


@pytest.mark.parametrize("qbufs", [1, 2])
def test_q_buffer_protocol_holds(qbufs):
    parts = _parts(qbufs)
    q_phase, q_free_phase = parts.q_phase.fn, parts.q_free_phase.fn
    rng = random.Random(qbufs)
    for items in range(1, 13):
        for warps in (1, 4, 8):
            for _ in range(60):
                err = run_walk(items, warps, qbufs, q_phase, q_free_phase, rng)
                assert err is None, (items, warps, err)


def test_the_model_catches_a_broken_protocol():
    # two buffers with the producer waiting on one buffer's parity ((k + 1) % 2, the last item's release): it
    # waits for a phase its buffer does not complete (deadlock); with no wait at all it overwrites a buffer that a
    # warp still reads, or a warp reads another item's Q
    q_phase = _parts(2).q_phase.fn
    rng = random.Random(7)

    def errors(q_free_phase):
        return {run_walk(items, warps, 2, q_phase, q_free_phase, rng) for items in range(1, 13)
                for warps in (1, 4) for _ in range(30)} - {None}
    assert any(e.startswith("deadlock") for e in errors(_parts(1).q_free_phase.fn))
    assert any("issued into buffer" in e or "read item" in e or "changed under" in e for e in errors(lambda k: 1))
