"""matmul's second tuning stage on the Hopper path, and matmul_fp8's tuner: candidates timed on the call's own
operands, the winner kept on disk beside the autotuner's (tiledsl.tune.store).

Stream-K needs a workspace the autotuner's factory signature (A, B, C) cannot pass, so it is tuned here, after the
autotuner picked among HOPPER_CONFIGS: the winner, its stream-K twin where the tiles end in a partial wave, and
where the winner's tiles leave SMs idle (a decode-sized M: the product is a read of the weight) the stream-K
configurations whose K steps every SM shares (SMALL_M_STREAM_K). Each candidate is checked by the schedule model
before it is timed; the fastest wins. FP8 (no autotuner factory: its kernel also takes the scales) is tuned here
over FP8_CONFIGS, pruned by shape as the f16 candidates are.
"""
import tiledsl
from tiledsl.tune import store

# persistent, stream-K over every SM: 64 x 128 tiles 8 deep, 64 x 256 tiles 4 deep (one consumer warpgroup: an M of
# 64 or less fills its rows)
SMALL_M_STREAM_K = [(128, 1, 8, 1, 1, 0, 1, 1), (256, 1, 4, 1, 1, 0, 1, 1)]
# the persistent 128 x 256 and 128 x 128 tiles with stream-K: timed beside any winner whose shape ends in a partial
# wave (or has fewer tiles than SMs: 1536 x 1536 x 4104 has 72 tiles of 128 x 256), whatever the winner's tile
BIG_STREAM_K = [(256, 2, 4, 1, 1, 0, 1, 1), (128, 2, 4, 1, 1, 0, 1, 1), (192, 2, 4, 1, 1, 0, 1, 1)]
# with the last wave shared (gate gemm_stream_k_last_wave) the tiles whose stream-K forms are timed besides
# BIG_STREAM_K's: 128 x 160 makes N = 4000 / 8000 / 12000 whole tiles (4000^3: 800 tiles, 6 waves + 8; its
# stream_k=2 form shares 140 tiles over 132 blocks, a schedule-model estimate 3-4% under the 128 x 256 tiles')
LAST_WAVE_TILES = [(160, 2, 4, 1, 1, 0)]
# matmul_fp8's candidates (HOPPER_CONFIGS' fields), besides the stream-K ones of fp8_candidates
FP8_CONFIGS = [(256, 2, 4, 1, 1, 0), (256, 2, 4, 1, 1, 1), (128, 2, 4, 1, 1, 0), (128, 2, 4, 0, 1, 0),
               (128, 1, 8, 0, 1, 0), (128, 1, 4, 0, 1, 0), (128, 2, 4, 0, 1, 0, 2), (128, 2, 4, 0, 1, 0, 4),
               (192, 2, 4, 1, 1, 0)]
VERSION = "1"       # bump when the kernels change what a stored winner meant


def stream_k_candidates(G, config, M: int, N: int, sms: int, last_wave: bool = False) -> list:
    """The tuned winner first, then its stream-K twin and BIG_STREAM_K (persistent, no multicast or split-K, where
    their tiles end in a partial wave; with last_wave, also their stream_k=2 forms where a whole wave precedes
    the partial one, and both forms of LAST_WAVE_TILES), and where the winner's blocks leave SMs idle at a small M,
    SMALL_M_STREAM_K."""
    config = tuple(config)
    out = [config]
    for c in [config] + [b[:6] for b in BIG_STREAM_K] + (LAST_WAVE_TILES if last_wave else []):
        if len(c) >= 6 and c[3] and not c[5] and G.hopper_split(c) == 1 and G.hopper_tiles(c, M, N) % sms:
            if c[:6] + (1, 1) not in out:
                out.append(c[:6] + (1, 1))
            if last_wave and G.hopper_tiles(c, M, N) > sms and c[:6] + (1, 2) not in out:
                out.append(c[:6] + (1, 2))
    if G.hopper_tiles(config, M, N) * G.hopper_split(config) < sms and M <= 64 * 4:
        out += [c for c in SMALL_M_STREAM_K if c not in out]
    return out


def pick(cands: list, run_of, key: dict, bench=None):
    """The fastest of `cands` ((config, timings)): run_of(c) makes a no-argument callable launching candidate c
    (raising tiledsl.TiledslError where c cannot serve), timed by tiledsl.testing.do_bench; the winner is stored
    under `key` (a dict of strings naming the shape, dtypes and device) and read back by later processes."""
    if len(cands) == 1:
        return cands[0], {}
    skey = store.entry_key(dict(key, cands=repr(cands), version=VERSION))
    rec = store.load(skey)
    if rec is not None:
        for c in cands:
            if repr(c) == rec["config"]:
                return c, rec.get("timings", {})
        store.discard(skey, "its winner is not a candidate")
    if bench is None:
        from tiledsl.testing import do_bench as bench
    timings = {}
    for c in cands:
        try:
            timings[repr(c)] = float(bench(run_of(c), warmup=10, rep=40))
        except tiledsl.TiledslError as e:
            timings[repr(c)] = f"{type(e).__name__}: {e}"
    ok = {k: v for k, v in timings.items() if isinstance(v, float)}
    if not ok:
        raise tiledsl.LaunchError(f"no candidate ran: {timings}")
    best = min(ok, key=ok.get)
    store.save(skey, {"config": best, "ms": ok[best], "timings": timings, "name": "hopper-stage2"})
    return next(c for c in cands if repr(c) == best), timings


def fp8_candidates(G, M: int, N: int, sms: int, last_wave: bool = False) -> list:
    """FP8_CONFIGS kept by the f16 path's pruning rules (enough blocks, split-K only below a wave, ...), then the
    stream-K configurations (BIG_STREAM_K, and SMALL_M_STREAM_K at a small M) whose tiles end in a partial wave:
    their blocks are every SM's, whatever the tile count; with last_wave, BIG_STREAM_K's stream_k=2 forms where a
    whole wave precedes the partial one."""
    out = G.prune_hopper(FP8_CONFIGS, M, N, sms) or FP8_CONFIGS[:1]
    for c in BIG_STREAM_K + (SMALL_M_STREAM_K if M <= 64 * 4 else []):
        if G.hopper_tiles(c, M, N) % sms:
            out.append(c)
            if last_wave and c in BIG_STREAM_K and G.hopper_tiles(c, M, N) > sms:
                out.append(c[:7] + (2,))
    return out
