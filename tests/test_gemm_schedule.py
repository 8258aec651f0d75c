"""The Hopper GEMM's schedule model (tiledsl/ops/gemm/schedule_model.py) over a dense grid of shapes, SM counts and
configurations, and the proof that it catches the schedule that hung the H200 (issue 31: 16384 x 8192 x 1024 f16,
stream-K, a block waiting for a block whose share of K steps was empty)."""
import os
from concurrent.futures import ProcessPoolExecutor

import pytest

import tiledsl
from tiledsl.ops.gemm import hopper as H
from tiledsl.ops.gemm import hopper_plan as HP
from tiledsl.ops.gemm import schedule_model as SM

STREAM_K = [c for c in HP.HOPPER_CONFIGS if c[3] and not c[5] and HP.hopper_split(c) == 1]


def _kernel(config, sms, stream_k=False, ab="float16"):
    kw = HP.hopper_kwargs(config, 4096, 2)
    kw.update(stream_k=stream_k)
    return H.make_hopper_gemm(ab, "float16", num_sms=sms, **kw)


# ------------------------------------------------------------------------------------------------ the old schedule
# The stream-K walk as it was when the H200 hung: every block shared the partial wave's K steps (lo = bid * skt //
# G, so with fewer K steps than blocks some shares were empty), pieces ran in K order, and the block running a
# tile's FIRST K step finished it, waiting for blocks bid + 1 .. the one holding the tile's last K step.
def _old_walk(bid, G_, ntiles, nk, SKW, MINK):
    tdp = ntiles // G_ * G_
    ndp = tdp // G_
    skt = (ntiles - tdp) * nk
    lo, hi = bid * skt // G_, (bid + 1) * skt // G_
    f_t = lo // nk
    mine = ndp + ((hi - 1) // nk - f_t + 1 if hi > lo else 0)
    return mine, ndp, tdp, skt, G_, lo, hi, f_t


def _old_piece(ti, bid, G_, nk, ndp, lo, hi, SKW):
    t = lo // nk + ti - ndp
    sk = ti >= ndp
    return (ndp * G_ + t if sk else bid + ti * G_), (max(lo - t * nk, 0) if sk else 0), \
        (min(hi - t * nk, nk) if sk else nk)


def _old_exchange(tile, klo, khi, nk, ntiles, G_, MINK, bid, SKW=1):
    tdp = ntiles // G_ * G_
    skt = (ntiles - tdp) * nk
    e = (tile - tdp + 1) * nk
    return (1 if klo > 0 else 0), (1 if klo == 0 and khi < nk else 0), (1 if klo == 0 else 0), bid + 1, \
        min((e * G_ + skt - 1) // max(skt, 1), G_)


OLD = dict(SM.HELPERS, stream_k_walk=_old_walk, piece=_old_piece, exchange=_old_exchange)


def test_the_shape_that_hung_is_sound_now():
    for ab in ("float16", "bfloat16"):
        k = _kernel(HP.HOPPER_CONFIGS[0], 132, stream_k=True, ab=ab)
        assert SM.check(k, 16384, 8192, 1024) is None


def test_the_model_refuses_the_schedule_that_hung():
    k = _kernel(HP.HOPPER_CONFIGS[0], 132, stream_k=True)
    why = SM.check(k, 16384, 8192, 1024, h=OLD, min_share=1)
    assert why is not None and "publishes nothing" in why, why
    # where every share is non-empty, the old walk still waited for later tickets: the model refuses that too
    why = SM.check(k, 16384, 8192, 8192, h=OLD, min_share=1)
    assert why is not None and "later ticket" in why, why


def test_a_wait_for_a_later_block_alone_is_refused():
    """Only the direction of the wait changed: finishing at the tile's first K step (the old roles) on the new
    walk. Every publisher exists, so only the ticket order can object."""
    k = _kernel(HP.HOPPER_CONFIGS[0], 16, stream_k=True)

    def first_finishes(tile, klo, khi, nk, ntiles, G_, MINK, bid, SKW=1):
        tdp = ntiles // G_ * G_
        skt = (ntiles - tdp) * nk
        units = max(min(G_, skt // MINK), 1)
        last = ((tile - tdp + 1) * nk * units + skt - 1) // skt     # past the block holding the tile's last K step
        return (1 if klo > 0 else 0), (1 if klo == 0 and khi < nk else 0), (1 if klo == 0 else 0), bid + 1, last
    why = SM.check(k, 128, 256 * 21, 4096, h=dict(SM.HELPERS, exchange=first_finishes))
    assert why is not None and "later ticket" in why, why


def test_a_missing_partial_sum_is_refused():
    k = _kernel(HP.HOPPER_CONFIGS[0], 16, stream_k=True)

    def skips_one(*args):
        pub, fin, store, jlo, jhi = SM.HELPERS["exchange"](*args)
        return pub, fin, store, jlo + 1, jhi
    why = SM.check(k, 128, 256 * 21, 4096, h=dict(SM.HELPERS, exchange=skips_one))
    assert why is not None and "added 0 times" in why, why


# ------------------------------------------------------------------------------------------------ the dense grid
# The stream-K exchange depends on the shape only through (blocks G, tiles of the partial wave r, K steps a tile
# nk): whole waves are the persistent walk's, which has no waits. So the grid of M, N from 1 to 65536 (every
# multiple of the tile and its neighbours: every tile count, so every r < G) and SM counts 1..132 is covered by
# every (G, r) and the K steps below; each (G, r, nk) is replayed on C = (BM, BN * (G + r)).
NK_FAST = (1, 3, 4, 5, 16, 17, 1024)
NK_DENSE = tuple(range(1, 41)) + (63, 64, 65, 127, 128, 129, 255, 256, 257, 511, 512, 513, 1023, 1024)
# stream_k=2 replays two wave counts a (G, r): fewer K-step counts (shares of one to two tiles: the small counts and
# those around powers of two are where a share's ends meet the tiles' differently)
NK_DENSE_2 = tuple(range(1, 17)) + (31, 32, 33, 63, 64, 65, 127, 128, 129, 255, 256, 257, 1023, 1024)
G_FAST = (1, 2, 3, 5, 8, 13, 31, 66, 131, 132)


def _stream_k_grid(sms_list, nks, config=HP.HOPPER_CONFIGS[0], ragged=True, stream_k=1):
    """ragged: also K one 8-element step short of nk K tiles (the same nk: the walk's numbers are the same, so the
    dense grid leaves it out). stream_k=2 (the last whole wave shared too): one and two whole waves before the
    partial one (with one, every tile is shared)."""
    bad = []
    for sms in sms_list:
        k = _kernel(config, sms, stream_k=stream_k)
        BM, BN, KT = k.tile
        for waves in ((1,) if stream_k == 1 else (1, 2)):
            for r in range(sms):
                for nk in nks:
                    for K in {nk * KT, max(nk * KT - 8, 8) if ragged else nk * KT}:
                        why = SM.check(k, BM, BN * (waves * sms + r), K)
                        if why:
                            bad.append(why)
    return bad


def test_stream_k_schedule_over_sm_counts_and_partial_waves():
    assert _stream_k_grid(G_FAST, NK_FAST) == []


def test_stream_k_over_the_last_whole_wave_too():
    """stream_k=2: the last whole wave's K steps join the partial wave's, so a share spans one to two tiles; the
    same guarantees over SM counts, partial waves and K steps."""
    k = _kernel(HP.HOPPER_CONFIGS[0], 132, stream_k=2)
    assert k.walk["SKW"] == 2
    assert SM.check(k, 4096, 14336, 4096) is None
    assert _stream_k_grid(G_FAST, NK_FAST, stream_k=2) == []


def test_a_partial_sum_written_to_another_blocks_row_is_refused():
    """The kernel writes a published partial to workspace row ticket + ti - ndp (its first stream-K piece is the one
    that publishes, so the row is its own) and raises its own flag. A walk that runs a share's tiles first tile
    first publishes at a later piece: the partial would land in the next block's row. Every wait still points to a
    lower ticket, so only the row check can object."""
    k = _kernel(HP.HOPPER_CONFIGS[0], 16, stream_k=2)

    def first_tile_first(ti, bid, G_, nk, ndp, lo, hi, SKW):
        t = lo // nk + (ti - ndp)
        sk = ti >= ndp
        return (ndp * G_ + t if sk else bid + ti * G_), \
            (max(lo - t * nk, 0) if sk else 0), (min(hi - t * nk, nk) if sk else nk)
    why = SM.check(k, 128, 256 * (2 * 16 + 5), 4096, h=dict(SM.HELPERS, piece=first_tile_first))
    assert why is not None and "workspace row" in why, why


@pytest.mark.slow
@pytest.mark.parametrize("stream_k", [1, 2])
def test_stream_k_schedule_dense_grid(stream_k):
    """Every SM count 1..132, every partial wave 0..G - 1, 54 K-step counts 1..1024 (about 470,000 replays; with
    stream_k=2, 30 K-step counts after one and after two whole waves)."""
    with ProcessPoolExecutor(max_workers=min(8, os.cpu_count() or 1)) as ex:
        results = ex.map(_stream_k_grid, [[s] for s in range(132, 0, -1)],
                         [NK_DENSE if stream_k == 1 else NK_DENSE_2] * 132,
                         [HP.HOPPER_CONFIGS[0]] * 132, [False] * 132, [stream_k] * 132)
        bad = [w for r in results for w in r]
    assert bad == [], bad[:5]


def _sizes(tile, top=65536):
    """1 .. top at every multiple of the tile and its neighbours (every tile count the dimension can have), thinned
    for speed to the first 40 tile counts and the neighbours of powers of two above them."""
    out = {1, 2, top}
    for t in list(range(1, 18)) + [2 ** p + d for p in range(5, 17) for d in (-1, 0, 1)]:
        for v in (t * tile - 1, t * tile, t * tile + 1):
            if 1 <= v <= top:
                out.add(v)
    return sorted(out)


@pytest.mark.parametrize("config", HP.HOPPER_CONFIGS, ids=lambda c: "-".join(map(str, c)))
def test_every_configuration_covers_every_tile_once(config):
    """Tile order (grouped, multicast pairs), split-K shares and the ragged edges: every configuration over M, N
    around tile multiples, small and ragged K, a few SM counts."""
    bad = []
    for sms in (1, 132):
        k = _kernel(config, sms)
        BM, BN, KT = k.tile
        for M in _sizes(BM * k.walk["MC"], 34 * BM * k.walk["MC"]):
            for N in (1, BN + 1, 3 * BN, 7 * BN + 5):
                for K in (8, KT, KT + 8, 5 * KT - 8):
                    why = SM.check(k, M, N, K)
                    if why:
                        bad.append(why)
    assert bad == [], bad[:5]


def test_heuristic_choices_over_llm_and_ragged_shapes():
    """What matmul picks without tuning (choose_hopper, then stream-K where stream_k_helps) is sound on every shape of
    a grid of M, N up to 65536 and K up to 65536, at the H200's 132 SMs and at a few smaller counts."""
    assert _heuristic_grid([1, 7, 65, 128, 1000, 3072, 4000, 8191, 16384, 65536], (132, 66), (8, 1024, 4104)) == []


@pytest.mark.slow
def test_heuristic_choices_dense():
    dims = [1, 7, 64, 65, 127, 128, 129, 1000, 1024, 3072, 4000, 4096, 8191, 8192, 14336, 16384, 28672, 65536]
    assert _heuristic_grid(dims, (132, 114, 66, 1), (8, 1024, 4104, 65536)) == []


def _heuristic_grid(dims, sms_list, ks):
    bad = []
    for sms in sms_list:
        for M in dims:
            for N in dims:
                for K in ks:
                    cfg = HP.choose_hopper(M, N, K, "float16", sms)
                    sk = HP.stream_k_helps(cfg, M, N, sms)
                    why = SM.check(_kernel(cfg, sms, stream_k=sk), M, N, K)
                    if why:
                        bad.append(f"{cfg} stream_k={sk}: {why}")
    return bad[:5]


def test_a_refused_kernel_is_never_launched_and_the_plan_says_so(monkeypatch):
    """matmul's plan asks the model first: a stream-K kernel it refuses falls back to the same tiles without
    stream-K, and the plan's description names the refusal."""
    real = SM.check

    def refuse_stream_k(kernel, M, N, K, **kw):
        return "refused for the test" if kernel.walk["SKW"] else real(kernel, M, N, K, **kw)
    monkeypatch.setattr(SM, "check", refuse_stream_k)
    kw = HP.hopper_kwargs(tuple(HP.HOPPER_CONFIGS[0]) + (1, 1), 8192, 2)
    k = H.make_hopper_gemm("float16", "float16", num_sms=132, **kw)
    k2, kw2, how = HP._schedule_checked(H, k, kw, "heuristic", "float16", "float16", 16384, 8192, 1024, 132)
    assert not k2.walk["SKW"] and "stream_k" not in kw2
    assert "schedule model refused" in how and "stream-K" in how and "refused for the test" in how
    monkeypatch.setattr(SM, "check", real)      # a sound kernel passes through unchanged
    assert HP._schedule_checked(H, k, kw, "tuned", "float16", "float16", 16384, 8192, 1024, 132) == (k, kw, "tuned")


def test_stream_k_candidates_of_the_second_tuning_stage():
    from tiledsl.ops.gemm import tuning as HT
    big = HP.HOPPER_CONFIGS[0]
    # 4096^3: 512 tiles of 128 x 256 (3 waves + 116): the twin; 128 x 128's 1024 tiles (7 waves + 100) and
    # 128 x 192's 704 (5 waves + 44) too
    assert HT.stream_k_candidates(HP, big, 4096, 4096, 132) == [big, big + (1, 1), (128, 2, 4, 1, 1, 0, 1, 1),
                                                                 (192, 2, 4, 1, 1, 0, 1, 1)]
    # with the last wave shared too (gated: gemm_stream_k_last_wave), each twin's stream_k=2 form beside it
    assert HT.stream_k_candidates(HP, big, 4096, 4096, 132, last_wave=True) == [
        big, big + (1, 1), big + (1, 2), (128, 2, 4, 1, 1, 0, 1, 1), (128, 2, 4, 1, 1, 0, 1, 2),
        (192, 2, 4, 1, 1, 0, 1, 1), (192, 2, 4, 1, 1, 0, 1, 2), (160, 2, 4, 1, 1, 0, 1, 1),
        (160, 2, 4, 1, 1, 0, 1, 2)]
    # under one wave (1536 x 1536: 72 tiles of 128 x 256) the two forms are one walk: no stream_k=2 form
    assert all(c[7:] != (2,) for c in HT.stream_k_candidates(HP, big, 1536, 1536, 132, last_wave=True)
               if HP.hopper_tiles(c, 1536, 1536) < 132)
    # FP8 likewise: BIG_STREAM_K's stream_k=2 forms beside theirs, each sound on the FP8 kernel at 4096 x 14336
    f8 = HT.fp8_candidates(HP, 4096, 14336, 132, last_wave=True)
    assert (256, 2, 4, 1, 1, 0, 1, 2) in f8 and (256, 2, 4, 1, 1, 0, 1, 2) not in HT.fp8_candidates(HP, 4096, 14336, 132)
    for cand in f8:
        kw = HP.hopper_kwargs(cand, 14336, 2)
        k8 = H.make_hopper_gemm_fp8("e4m3", None, "bfloat16", num_sms=132, **kw)
        assert SM.check(k8, 4096, 14336, 4096) is None, cand
    # a decode-sized M: 32 tiles of 64 x 128 leave 100 SMs idle
    c = HT.stream_k_candidates(HP, (128, 1, 8, 0, 1, 0), 1, 4096, 132)
    assert c[0] == (128, 1, 8, 0, 1, 0) and set(HT.SMALL_M_STREAM_K) <= set(c)
    # every candidate is one the model finds sound there
    for cand in c:
        kw = HP.hopper_kwargs(cand, 4096, 2)
        assert SM.check(H.make_hopper_gemm("float16", "float16", num_sms=132, **kw), 1, 4096, 4096) is None


def test_direct_hopper_calls_are_checked_too(monkeypatch):
    """hopper_matmul / hopper_matmul_fp8 ask the model before launching (not only matmul's plans): a refused walk
    is a LaunchError naming the model's reason; one tile per block (nobody waits) is not asked."""
    from tiledsl.ops.gemm import hopper as H
    from tiledsl.ops.gemm import schedule_model
    k = H.make_hopper_gemm("float16", "float16", persistent=True, num_sms=132, stream_k=True)
    monkeypatch.setattr(schedule_model, "check", lambda *a: "a wait nobody serves")
    with pytest.raises(tiledsl.LaunchError, match="refuses this launch .a wait nobody serves"):
        H.schedule_checked(k, 7, 4096, 4096)
    H.schedule_checked(H.make_hopper_gemm("float16", "float16", persistent=False), 7, 4096, 4096)
    monkeypatch.undo()
    H.schedule_checked(k, 8, 4096, 4096)


# ------------------------------------------------------------------------------------------------ the skinny walk
# skinny_kernel.py's split-K: no block waits; the model checks the partition of K, the workspace slots, and that
# whatever order a tile's blocks reach its counter in, over two launches on the same counters, exactly the last
# one sums and stores and the counters end at 0.
SKINNY_SMS = (1, 2, 7, 66, 113, 132)


def _skinny(M, N, K, sms):
    from tiledsl.ops.gemm import skinny as SKN
    return SKN.make_skinny_gemm("float16", "float16", *SKN.choose_skinny(M, N, K, sms))


def test_skinny_heuristic_choices_over_shapes_and_sm_counts():
    bad = []
    for sms in SKINNY_SMS:
        for M in (1, 7, 16, 33, 64, 65, 200):
            for N in (1, 63, 64, 65, 127, 4096, 4097, 14336, 28672):
                for K in (8, 64, 72, 1000, 4096, 14336):
                    why = SM.check(_skinny(M, N, K, sms), M, N, K)
                    if why:
                        bad.append(why)
    assert bad == [], bad[:5]


def test_skinny_every_split_count_over_k_tiles():
    """Split counts 1..9, 16 and 64 over 1..20 K tiles (more splits than K tiles: the splits past the end have none
    and contribute zeros), ragged N, one and two consumers."""
    from tiledsl.ops.gemm import skinny as SKN
    bad = []
    for cons in (1, 2):
        for S in list(range(1, 10)) + [16, 64]:
            k = SKN.make_skinny_gemm("float16", "float16", 16, cons, 4, S)
            for kt in range(1, 21):
                for N in (1, 64 * cons, 64 * cons * 3 + 5):
                    why = SM.check(k, 16, N, kt * 64 - 8)
                    if why:
                        bad.append(why)
    assert bad == [], bad[:5]


def test_the_skinny_model_refuses_broken_walks():
    from tiledsl.ops.gemm import skinny as SKN
    k = SKN.make_skinny_gemm("float16", "float16", 16, 1, 4, 3)
    h = SM.HELPERS
    # a last arriver that never recognises itself: nobody stores the tile
    why = SM.check(k, 16, 200, 1000, h=dict(h, skinny_is_last=lambda old, S: 1 if old == S else 0))
    assert why is not None and "stored 0 times" in why, why
    # a counter that does not wrap at the S-th arrival: the replay (second launch) miscounts
    why = SM.check(k, 16, 200, 1000, h=dict(h, skinny_limit=lambda S: S))
    assert why is not None and "launch 1" in why and "counters left" in why, why
    # two tiles' splits in one slot
    why = SM.check(k, 16, 200, 1000, h=dict(h, skinny_slot=lambda tile, split, S: tile + split))
    assert why is not None and "slot" in why, why
    # shares of floor(ktiles / S): the last K tiles are nobody's
    def floor_share(bid, S, ktiles):
        kh = ktiles // S
        return bid // S, bid % S, bid % S * kh, kh
    why = SM.check(k, 16, 200, 1000, h=dict(h, skinny_block=floor_share))
    assert why is not None and "do not reach" in why, why
    # the first arriver summing (an early reader): the slots of later splits are not written yet
    why = SM.check(k, 16, 200, 1000, h=dict(h, skinny_is_last=lambda old, S: 1 if old == 0 else 0))
    assert why is not None and "not all written" in why, why


@pytest.mark.slow
def test_skinny_heuristic_choices_dense():
    """Every SM count 1..132, M from 1 to 256 (each wgmma N the heuristic takes, and its neighbours), N around tile
    multiples up to 65536, K up to 65536."""
    bad = []
    for sms in range(1, 133):
        for M in (1, 8, 9, 16, 17, 33, 64, 65, 128, 200, 256):
            for N in (1, 64, 65, 4095, 4096, 5120, 11008, 14336, 28672, 65536):
                for K in (8, 72, 4104, 14336, 65536):
                    why = SM.check(_skinny(M, N, K, sms), M, N, K)
                    if why:
                        bad.append(why)
    assert bad == [], bad[:5]
