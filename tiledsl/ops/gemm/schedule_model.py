"""A host model of the Hopper GEMM's schedule: who runs which tile's K steps, who publishes partial sums, who waits
for whom, and whether every wait is served, for any shape, SM count and configuration. It runs the kernel's own
walk arithmetic (schedule.py's `@tiledsl.inline` helpers, executed here on Python integers)
with the constants the builder chose for the kernel (`kernel.walk`), so it checks what the GPU executes.

`check(kernel, M, N, K)` returns None when the schedule is sound, else a sentence naming what is wrong:

* every output tile inside C is computed over all of its K tiles exactly once (the pieces' K ranges partition it)
  and stored by exactly one block (split-K: each column slice by exactly one rank);
* every piece runs at least one K step (a piece of none would release a ring stage it never filled);
* every partial sum a block publishes goes to its own workspace row and is added by exactly one finisher, and a
  finisher waits exactly for the blocks that ran the rest of its tile (a wait for a block that publishes nothing
  never ends: the hang of issue 31);
* no wait can starve: blocks wait only for blocks of a lower ticket (the kernel's blocks take tickets in dispatch
  order, so those have started), or for blocks of their own cluster (co-scheduled by the hardware); and a replay
  with one block resident at a time, in ticket order (the least concurrency a GPU can give), finishes;
* multicast pairs walk the same K steps (each stage is released in both blocks).

`matmul` asks `check` before it launches a configuration and falls back where it refuses (hopper_plan.py's
_schedule_checked).
"""
import builtins
import types

from . import schedule


class _HostT:
    """The `T` names the walk helpers use, on Python integers."""
    min = staticmethod(builtins.min)
    max = staticmethod(builtins.max)


def host(helper):
    """A `@tiledsl.inline` helper (or a plain function written the same way) as a host function on integers."""
    fn = getattr(helper, "fn", helper)
    g = dict(fn.__globals__, T=_HostT)
    return types.FunctionType(fn.__code__, g, fn.__name__, fn.__defaults__, fn.__closure__)


HELPERS = {name: host(getattr(schedule, name)) for name in
           ("tile_origin", "stream_k_walk", "piece", "exchange", "split_k_share", "skinny_block", "skinny_slot",
            "skinny_limit", "skinny_is_last")}
MIN_SHARE = schedule.MIN_SHARE


class Block:
    """One block's part of the launch: its cluster, its pieces (tile, klo, khi in the tile's K tiles), what it
    publishes and the blocks it waits for, in the order it runs them."""
    __slots__ = ("ticket", "cluster", "pieces", "events")

    def __init__(self, ticket, cluster):
        self.ticket, self.cluster, self.pieces, self.events = ticket, cluster, [], []


def grid_of(w: dict, M: int, N: int) -> int:
    """The launch's grid width, as the kernel's LaunchConfig computes it (stream-K: every SM's block)."""
    BM, BNT, MC, CL = w["BM"], w["BNT"], w["MC"], w["CL"]
    if w["SKW"]:
        return w["SMS"]
    return min(w["SMS"], CL * ((M + MC * BM - 1) // (MC * BM)) * ((N + BNT - 1) // BNT))


def blocks(w: dict, M: int, N: int, K: int, h=HELPERS, min_share=MIN_SHARE) -> list:
    """Every block's walk for C (M x N) over K, replayed with the helpers `h` (the kernel's, or a variant to test the
    model with)."""
    BM, BNT, KT, MC, SK, CL, GM, SKW = (w[k] for k in ("BM", "BNT", "KT", "MC", "SK", "CL", "GM", "SKW"))
    ntm, ntn = (M + MC * BM - 1) // (MC * BM), (N + BNT - 1) // BNT
    ktiles = (K + KT - 1) // KT
    grid = grid_of(w, M, N)
    G = grid // CL
    out = []
    for b in range(grid):
        bid, rank = b // CL, b % CL
        blk = Block(b, bid if CL > 1 else b)
        if SK > 1:
            k0, nk = h["split_k_share"](rank, ktiles, SK)
            mrank = 0
        else:
            k0, nk, mrank = 0, ktiles, rank
        mine, ndp, tdp, skt, units, lo, hi, l_t = h["stream_k_walk"](bid, G, ntm * ntn, nk, SKW, min_share)
        for ti in range(mine):
            tile, klo, khi = h["piece"](ti, bid, G, nk, ndp, lo, hi, SKW)
            row0, col0 = h["tile_origin"](tile, ntm, ntn, GM, MC, mrank, BM, BNT)
            blk.pieces.append((row0, col0, k0 + klo, k0 + khi, tile))
            pub, fin, store, jlo, jhi = h["exchange"](tile, klo, khi, nk, ntm * ntn, G, min_share, bid,
                                                      SKW) if SKW else \
                (0, 0, 1, 0, 0)
            if SK > 1:
                # every rank stages the others' columns and arrives on each peer's barrier, then waits for its own
                blk.events.append(("split", bid, rank))
            if pub:
                # the kernel writes the partial sums to workspace row ticket + ti - ndp (an address kept in the
                # loop: one base and compile-time offsets) and raises the flag of its ticket
                blk.events.append(("publish", b, (row0, col0), b + ti - ndp))
            if fin:
                for j in range(jlo, jhi):
                    blk.events.append(("wait", j, (row0, col0)))
            if store:
                blk.events.append(("store", (row0, col0, rank if SK > 1 else 0)))
        out.append(blk)
    return out


def check(kernel_or_walk, M: int, N: int, K: int, h=HELPERS, min_share=MIN_SHARE):
    """None if the schedule of this kernel over C (M x N), K is sound, else what is wrong (see the module's list)."""
    w = getattr(kernel_or_walk, "walk", kernel_or_walk)
    if min(M, N, K) < 1:
        return None                     # matmul never launches an empty product
    if w.get("kind") == "skinny":
        return check_skinny(w, M, N, K, h)
    bl = blocks(w, M, N, K, h, min_share)
    BM, BNT, KT, MC, SK = (w[k] for k in ("BM", "BNT", "KT", "MC", "SK"))
    ktiles = (K + KT - 1) // KT
    where = f"{M}x{N}x{K} over {len(bl)} blocks"
    # coverage: K ranges per tile inside C, and stores
    ranges, stores = {}, {}
    for blk in bl:
        for row0, col0, k_lo, k_hi, _ in blk.pieces:
            if k_hi <= k_lo and SK == 1:
                return f"{where}: block {blk.ticket} has a piece of tile ({row0}, {col0}) with no K step"
            if row0 < M and col0 < N:
                ranges.setdefault((row0, col0), []).append((k_lo, k_hi))
        for ev in blk.events:
            if ev[0] == "store" and ev[1][0] < M and ev[1][1] < N:
                stores[ev[1]] = stores.get(ev[1], 0) + 1
    want = {(r, c) for r in range(0, M, BM) for c in range(0, N, BNT)}
    if set(ranges) != want:
        miss = sorted(want - set(ranges))[:3]
        return f"{where}: tiles {miss or sorted(set(ranges) - want)[:3]} are not covered as C's tiles"
    for t, rs in ranges.items():
        rs.sort()
        pos = 0
        for lo, hi in rs:
            if hi <= lo:
                continue                # a split-K rank past the last K tile: it contributes zeros
            if lo != pos:
                return f"{where}: tile {t}'s K tiles {rs} do not partition 0 .. {ktiles - 1}"
            pos = hi
        if pos != ktiles:
            return f"{where}: tile {t}'s K tiles {rs} do not reach {ktiles}"
        for s in range(SK):
            if stores.get(t + (s,), 0) != 1:
                return f"{where}: tile {t} slice {s} is stored {stores.get(t + (s,), 0)} times"
    return _check_waits(bl, where) or _check_pairs(bl, w, where) or _replay(bl, where)


def _check_waits(bl, where):
    """Each published partial is waited for by exactly one block, for the same tile; each wait has its publisher;
    every wait points to a lower ticket or into the waiter's cluster; each partial goes to its publisher's row."""
    published = {}
    for blk in bl:
        for ev in blk.events:
            if ev[0] == "publish":
                if ev[1] in published:
                    return f"{where}: block {ev[1]} publishes twice into one workspace row"
                published[ev[1]] = ev[2]
    taken = {}
    for blk in bl:
        for ev in blk.events:
            if ev[0] != "wait":
                continue
            j, tile = ev[1], ev[2]
            if j not in published:
                return f"{where}: block {blk.ticket} waits for block {j}, which publishes nothing (it never returns)"
            if published[j] != tile:
                return f"{where}: block {blk.ticket} adds block {j}'s partial sums of tile {published[j]} to {tile}"
            if j >= blk.ticket and bl[j].cluster != blk.cluster:
                return f"{where}: block {blk.ticket} waits for block {j}, a later ticket, which may never be resident"
            taken[j] = taken.get(j, 0) + 1
    for j in published:
        if taken.get(j, 0) != 1:
            return f"{where}: block {j}'s partial sums are added {taken.get(j, 0)} times (its flag stays up)"
    for blk in bl:
        for ev in blk.events:
            if ev[0] == "publish" and ev[3] != ev[1]:
                return f"{where}: block {ev[1]} writes its partial sums to workspace row {ev[3]} (the piece is not " \
                       f"its first stream-K piece) but raises its own flag"
    return None


def _check_pairs(bl, w, where):
    """Multicast pairs release each stage in both blocks: both walk the same K steps of the same tile column."""
    if w["MC"] == 1:
        return None
    for i in range(0, len(bl) - 1, 2):
        a = [(c, lo, hi) for _, c, lo, hi, _ in bl[i].pieces]
        b = [(c, lo, hi) for _, c, lo, hi, _ in bl[i + 1].pieces]
        if a != b:
            return f"{where}: the multicast pair {i}, {i + 1} walks different K steps"
    return None


def _replay(bl, where):
    """Run the blocks one resident at a time in ticket order (clusters together): every wait must be served."""
    done = set()
    order = {}
    for blk in bl:
        order.setdefault(blk.cluster, []).append(blk)
    for cluster in order.values():            # a cluster's blocks run together; clusters one after another
        for blk in cluster:
            for ev in blk.events:
                if ev[0] == "publish":
                    done.add(ev[1])
        for blk in cluster:
            for ev in blk.events:
                if ev[0] == "wait" and ev[1] not in done:
                    return f"{where}: with one block resident at a time, block {blk.ticket} waits for block " \
                           f"{ev[1]} forever"
    return None


# ------------------------------------------------------------------------------------------------ the skinny walk
def skinny_blocks(w: dict, N: int, K: int, h=HELPERS) -> list:
    """The skinny kernel's blocks (skinny_kernel.py; grid = tiles x S, as its LaunchConfig): each as (tile, split,
    k0, nk), from the kernel's own skinny_block."""
    BM, KT, S = w["BM"], w["KT"], w["S"]
    ktiles = (K + KT - 1) // KT
    return [h["skinny_block"](bid, S, ktiles) for bid in range(S * ((N + BM - 1) // BM))]


# arrival orders the replay tries: the blocks of a tile reach their counter in any order (none waits for another)
ORDERS = {"in order": lambda bl: bl, "reversed": lambda bl: bl[::-1],
          "interleaved": lambda bl: bl[1::2] + bl[0::2], "rotated": lambda bl: bl[len(bl) // 2:] + bl[:len(bl) // 2]}


def check_skinny(w: dict, M: int, N: int, K: int, h=HELPERS, launches: int = 2):
    """None if the skinny walk over C (M x N), K is sound, else what is wrong:

    * the tiles' splits partition the K tiles (a split past the end has none and contributes zeros), each block's
      workspace slot is its own (no two blocks write one), and its counter is a tile of C;
    * the walk has no wait at all: a block writes its partial sums, arrives on its tile's counter (atom.inc of limit
      skinny_limit(S): the model applies the hardware's wrap) and, if skinny_is_last says so, sums and stores;
      otherwise it leaves. So no residency or dispatch order can starve a block;
    * for every arrival order in ORDERS, and for `launches` launches one after another on the same counters (a CUDA
      graph replayed, no memset between): exactly one block per tile is last, it is the tile's S-th arrival (so
      every slot it reads, skinny_slot(tile, 0 .. S - 1), was written and released before), the slots it reads are
      those its tile's splits wrote, each tile of C is stored exactly once, and every counter is back at 0."""
    BM, KT, S = w["BM"], w["KT"], w["S"]
    ktiles = (K + KT - 1) // KT
    tiles = (N + BM - 1) // BM
    bl = skinny_blocks(w, N, K, h)
    where = f"skinny {M}x{N}x{K} over {len(bl)} blocks (S={S})"
    ranges, writer = {}, {}
    for b, (tile, split, k0, nk) in enumerate(bl):
        if not 0 <= tile < tiles:
            return f"{where}: block {b} runs tile {tile}, outside C's {tiles} tiles"
        ranges.setdefault(tile, []).append((k0, k0 + nk))
        if S > 1:
            slot = h["skinny_slot"](tile, split, S)
            if slot in writer or not 0 <= slot < tiles * S:
                return f"{where}: block {b} writes workspace slot {slot} (taken, or outside the workspace)"
            writer[slot] = (tile, b)
    for tile in range(tiles):
        pos = 0
        for lo, hi in sorted(ranges.get(tile, [])):
            if hi <= lo:
                continue
            if lo != pos:
                return f"{where}: tile {tile}'s K tiles {sorted(ranges[tile])} do not partition 0 .. {ktiles - 1}"
            pos = hi
        if pos != ktiles:
            return f"{where}: tile {tile}'s K tiles {sorted(ranges.get(tile, []))} do not reach {ktiles}"
    if S == 1:
        return None                     # one block a tile: it stores its tile, nothing is shared
    limit = h["skinny_limit"](S)
    by_tile = {}
    for b, (tile, _, _, _) in enumerate(bl):
        by_tile.setdefault(tile, []).append(b)
    for name, order in ORDERS.items():
        counter = {t: 0 for t in by_tile}
        for launch in range(launches):
            written = set()
            stores = {}
            for tile, members in by_tile.items():
                for b in order(members):
                    written.add(h["skinny_slot"](tile, bl[b][1], S))       # the partial sums, then the arrival
                    old = counter[tile]
                    counter[tile] = 0 if old >= limit else old + 1          # atom.inc's wrap
                    if h["skinny_is_last"](old, S) != 1:
                        continue
                    reads = [h["skinny_slot"](tile, j, S) for j in range(S)]
                    if any(r not in written or writer.get(r, (None,))[0] != tile for r in reads):
                        return f"{where}, {name}, launch {launch + 1}: block {b} is last on tile {tile} but " \
                               f"reads slots {reads}, not all written by its tile's splits before it"
                    stores[tile] = stores.get(tile, 0) + 1
            for tile in by_tile:
                if stores.get(tile, 0) != 1:
                    return f"{where}, {name}, launch {launch + 1}: tile {tile} is stored {stores.get(tile, 0)} " \
                           f"times (its counter was {counter[tile]} after the launch before)"
            if any(counter.values()):
                return f"{where}, {name}, launch {launch + 1}: counters left at " \
                       f"{sorted(t for t, v in counter.items() if v)[:3]} (the next launch miscounts)"
    return None
