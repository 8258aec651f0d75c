"""The Hopper path of matmul: its configurations, the heuristic and the tuning that choose one per shape, and the
`Plan` that launches hopper.py's kernel with it.

The plan is tuned in two stages: tiledsl.autotune over HOPPER_CONFIGS (tuned_hopper), then the winner against its
stream-K forms (tuning.py); the schedule model (schedule_model.py) checks every configuration before it is launched
(_schedule_checked). At M <= 64 the plan is the skinny kernel (skinny.py: swap-AB, split-K over every SM), and up to
M = 256 the tuner times it beside the winner; on a CUDA device only where gates.enabled("gemm_skinny"), else
`describe` says it was passed over.
"""
import sys

import tiledsl

from .. import gates
from ..device import NUM_SMS, sm_count
from . import hopper as H
from . import schedule_model as SM
from . import skinny as SKN
from . import tuning as HT
from .plan import DTYPES, Plan, host_epilogue, size_of

# A Hopper configuration: (BN, consumer warpgroups (BM = 64 each), stages, persistent, TMA-store epilogue where C's
# rows allow it, 2-CTA multicast of B[, split_k]); split_k, the blocks of a cluster sharing one tile's K loop, may
# be left out (1). The first is the big shapes' (659 TFLOP/s at 4096^3 f16 on the H200, 0.94x cuBLAS); the smaller
# tiles give the small shapes enough blocks for 132 SMs (1024^3 has 32 tiles of 128 x 256), and split-K gives
# them 128 x 128 tiles with two consumers in every block (1024^3: 64 tiles, 128 blocks).
HOPPER_FIELDS = ("bn", "consumers", "stages", "persistent", "tma_store", "multicast", "split_k", "stream_k")
HOPPER_CONFIGS = [(256, 2, 4, 1, 1, 0),     # persistent, 128 x 256 tiles
                  (256, 2, 4, 1, 1, 1),     # the same in 2-CTA clusters sharing B tiles
                  (128, 2, 6, 1, 1, 0),     # persistent, 128 x 128 tiles, a deeper ring (fits beside the epilogue)
                  (128, 2, 4, 1, 1, 0),     # persistent, 128 x 128 tiles
                  (128, 2, 4, 0, 1, 0),     # one 128 x 128 tile per block
                  (64, 2, 4, 0, 1, 0),      # 128 x 64 tiles: 4x the blocks of 128 x 256
                  (128, 1, 4, 0, 1, 0),     # 64 x 128 tiles, one consumer warpgroup
                  (128, 1, 8, 0, 1, 0),     # the same with an 8-deep ring (1024^3: 0.98x cuBLAS against 4 deep's 0.8x)
                  (64, 2, 8, 0, 1, 0),      # 128 x 64 tiles, 8 deep (1024^3: 0.85x against 4 deep's 0.73x)
                  (128, 2, 4, 0, 1, 0, 2),  # 128 x 128 tiles, K split between the 2 blocks of a cluster
                  (128, 2, 6, 0, 1, 0, 2),  # the same, a deeper ring (a rank's K loop is short: more in flight)
                  (128, 2, 4, 0, 1, 0, 4),  # the same over 4 blocks (512^3: 16 tiles, 64 blocks)
                  (192, 2, 4, 1, 1, 0)]     # persistent, 128 x 192 tiles: the waves of shapes 256 fits badly
                                            # (3072^3: 384 tiles, 2.9 waves, against 288 of 128 x 256, 2.2)
# stream-K on the persistent configurations where the tiles end in a short partial wave (stream_k_helps)
STREAM_K = True
# choose_hopper's order: the first that gives at least 90% of a wave of tiles wins
HOPPER_PREFERRED = [(256, 2, 4, 1, 1, 0), (128, 2, 4, 1, 1, 0), (128, 1, 8, 0, 1, 0)]


def is_hopper_config(config) -> bool:
    """A matmul config= that names the Hopper kernel: a dict of hopper_matmul keywords (as sorted items) or a
    HOPPER_CONFIGS tuple of 6 fields, 7 with split_k or 8 with stream_k (mma.sync tuples have 7 or more fields:
    theirs has its BN, at least 32, where a Hopper one has its consumer warpgroups, at most 4)."""
    if not config:
        return False
    if isinstance(config[0], tuple) or len(config) == 6:
        return True
    return len(config) in (7, 8) and config[1] <= 4


def hopper_tiles(config, M: int, N: int) -> int:
    """Output tiles of a Hopper configuration over an M x N product (ragged edges count as tiles)."""
    bn, cons = config[0], config[1]
    return -(-M // (64 * cons)) * -(-N // bn)


def hopper_split(config) -> int:
    """The split_k of a HOPPER_CONFIGS tuple (1 where the tuple leaves it out)."""
    return config[6] if len(config) > 6 else 1


def choose_hopper(M: int, N: int, K: int, out: str = "float16", sms: int = NUM_SMS) -> tuple:
    """The Hopper configuration matmul takes without tuning: the first of HOPPER_PREFERRED (biggest tile first)
    whose tiles fill at least 90% of a wave of `sms` blocks, else the one with the most tiles; where that leaves
    more than half the SMs idle at M <= 64, the stream-K 64 x 128 configuration over every SM. The TMA-store
    field stays 1: hopper_kwargs turns it off where C's rows are not multiples of 16 bytes."""
    best = next((c for c in HOPPER_PREFERRED if hopper_tiles(c, M, N) >= 0.9 * sms), None)
    best = best or max(HOPPER_PREFERRED, key=lambda c: hopper_tiles(c, M, N))
    if hopper_tiles(best, M, N) < 0.5 * sms and M <= 64:
        # a decode-sized M whose tiles leave most SMs idle: every SM's block shares their K steps (stream-K; H200:
        # 1 x 4096 x 14336 f16 0.90x cuBLAS against 0.68x for 32 blocks of 64 x 128)
        return HT.SMALL_M_STREAM_K[0]
    return best


def hopper_kwargs(config, N: int, out_size: int) -> dict:
    """hopper_matmul's keywords for a configuration (tuple or dict items): the TMA-store epilogue only where C's
    rows are multiples of 16 bytes (the tensor map's stride)."""
    kw = dict(config) if isinstance(config[0], tuple) else dict(zip(HOPPER_FIELDS, config))
    unknown = sorted(set(kw) - set(HOPPER_FIELDS) - {"group_m"})
    if unknown:
        raise tiledsl.LaunchError(f"a Hopper configuration takes {', '.join(HOPPER_FIELDS)} and group_m, not "
                                  f"{', '.join(unknown)}")
    for f in ("persistent", "tma_store", "multicast", "stream_k"):
        if f in kw:
            kw[f] = 2 if f == "stream_k" and kw[f] == 2 else bool(kw[f])   # stream_k 2: the last whole wave too
    if kw.get("split_k", 1) == 1:
        kw.pop("split_k", None)             # the default: the keywords (and plan descriptions) of before
    if not kw.get("stream_k", False):
        kw.pop("stream_k", None)
    if kw.get("tma_store", True) and (N * out_size) % 16:
        kw["tma_store"] = False
    return kw


def describe_hopper(kw: dict) -> str:
    bn, cons = kw.get("bn", H.BN), kw.get("consumers", H.CONSUMERS)
    parts = [f"hopper {64 * cons}x{bn} tiles", f"{kw.get('stages', H.STAGES)} stages"]
    parts += [name for f, name in (("persistent", "persistent"), ("tma_store", "TMA store"),
                                   ("multicast", "2-CTA multicast")) if kw.get(f)]
    if kw.get("split_k", 1) > 1:
        parts.append(f"split-K over {kw['split_k']} blocks")
    if kw.get("stream_k"):
        parts.append("stream-K over the last whole wave too" if kw["stream_k"] == 2 else "stream-K")
    mn = [x for x, f in (("A", "a_major"), ("B", "b_major")) if kw.get(f) == "mn"]
    if mn:
        parts.append(f"{' and '.join(mn)} MN-major (read as stored)")
    return ", ".join(parts)


def stream_k_helps(config, M: int, N: int, sms: int = NUM_SMS) -> bool:
    """Whether matmul adds stream-K to a configuration: persistent, no multicast or split-K, at least two whole
    waves of tiles and a partial one of at most 3/4 of a wave, whose K steps stream-K spreads over every block
    instead of leaving the other blocks idle. H200, 128 x 256 tiles, side by side with and without: 4096 x 14336
    x 4096 (13.6 waves) +0.9 / +1.0% (f16 / bf16), 8192^3 and 16384 x 4096 x 4096 (15.5 waves) +1.5 to +3.7%, and
    4096^3 (3.9 waves) -5%: there nearly every tile of the last wave is split, and the fix-ups cost more than
    the idle blocks did."""
    if not STREAM_K or len(config) < 6 or isinstance(config[0], tuple):
        return False
    tiles = hopper_tiles(config, M, N)
    return bool(config[3]) and not config[5] and hopper_split(config) == 1 and tiles > 2 * sms and \
        0 < tiles % sms <= 0.75 * sms


def _hopper_for(A, B, C, hconfig):
    """The kernel factory the Hopper path tunes: make_hopper_gemm for these arrays and configuration."""
    ab, out = (DTYPES.get(str(t.dtype), str(t.dtype)) for t in (A, C))
    kw = hopper_kwargs(hconfig, B.shape[0], size_of(out))
    return H.make_hopper_gemm(ab, out, num_sms=sm_count(A), **kw)


def prune_hopper(configs, M: int, N: int, sms: int = NUM_SMS) -> list:
    """The Hopper candidates worth timing for an M x N output: those with at least half a wave of blocks (or half
    the most tiles any candidate has; a split-K tile counts as its split_k blocks), split-K only where its tiles
    unsplit make less than a wave, multicast only with at least 4 tile rows to pair, and where even the biggest
    tile makes 3 waves, only the persistent ones and one non-persistent 128 x 128 (the small tiles lose there)."""
    def cfg(c):
        return c.constexprs["hconfig"] if hasattr(c, "constexprs") else c
    most = max(hopper_tiles(cfg(c), M, N) for c in configs)
    big = hopper_tiles(HOPPER_CONFIGS[0], M, N) >= 3 * sms
    keep = []
    for c in configs:
        bn, cons, _, persistent, _, multicast = cfg(c)[:6]
        split = hopper_split(cfg(c))
        if hopper_tiles(cfg(c), M, N) * split < 0.5 * min(sms, most):
            continue
        if split > 1 and hopper_tiles(cfg(c), M, N) >= sms:
            continue
        if multicast and -(-M // (64 * cons)) < 4:
            continue
        if big and not persistent and (bn, cons) != (128, 2):
            continue
        keep.append(c)
    return keep


def _prune_hopper_args(configs, args):
    return prune_hopper(configs, args["A"].shape[0], args["B"].shape[0], sm_count(args["A"]))


tuned_hopper = tiledsl.autotune(configs=[tiledsl.Config({"hconfig": c}) for c in HOPPER_CONFIGS],
                                key=["A", "B", "C"], prune=_prune_hopper_args)(_hopper_for)


def hopper_plan(a, b, out, config, tune, sms, majors=("k", "k"), note="") -> Plan:
    """The Hopper kernel for one key: config= as given, else tuned (tune and a CUDA tensor), else choose_hopper.
    majors: how a and b are read ("k": made contiguous; "mn": a (M, K) / b (N, K) given as transposes of
    contiguous tensors, read as stored: matmul passes "mn" only where the gate allows and major_of says so); an
    operand the chosen configuration cannot read MN-major (B with BN not a multiple of 64) is made contiguous. The
    configuration is chosen (tuned) on K-major operands. note: appended to describe (a gated path passed over)."""
    import warnings

    import torch
    M, K = a.shape
    N = b.shape[0]
    ab, od = (DTYPES.get(str(t), str(t)) for t in (a.dtype, out.dtype))
    how = "given"
    skinny_ok = gates.allows("gemm_skinny", a)
    worth = SKN.worth_it(N, K, ab, a)       # a weight too small to be worth the skinny kernel's launch
    passed = ""             # what describe adds where the gated skinny kernel would have served
    if config is None and majors == ("k", "k") and worth and SKN.serves(M, N, K, ab, od):
        if skinny_ok:
            plan, why = SKN.skinny_plan(a, b, out, SKN.choose_skinny(M, N, K, sms, ab), "heuristic")
            if plan is not None:
                return plan
            passed = f"; the schedule model refused the skinny kernel: {why}"
        else:
            passed = f"; the skinny kernel was passed over: gated (gemm_skinny, {gates.why_off('gemm_skinny')})"
    elif config is None and tune and a.is_cuda and SKN.serves(M, N, K, ab, od, SKN.TUNE_MAX_M) and not skinny_ok:
        passed = f"; the skinny kernel was not a tuning candidate: gated (gemm_skinny, {gates.why_off('gemm_skinny')})"
    if not (a.is_contiguous() and b.is_contiguous()):
        # the tuning runs on K-major copies (once, for this key): operands read MN-major, and transposed views
        # that the run copies because the gate keeps them K-major (majors ("k", "k"), the layout not)
        a, b = a.contiguous(), b.contiguous()
    if config is None and tune and a.is_cuda:
        try:
            config = tuned_hopper.pick(a, b, out)[1].constexprs["hconfig"]
            how = "tuned"
        except tiledsl.TiledslError as e:   # tuning failed: the heuristic's choice still serves the call
            warnings.warn(f"matmul: tuning the Hopper GEMM for {M}x{N}x{K} failed ({e}); using choose_hopper",
                          stacklevel=4)
    if config is None:
        config, how = choose_hopper(M, N, K, od, sms), "heuristic"
    if how == "heuristic" and stream_k_helps(config, M, N, sms):
        config = tuple(config[:6]) + (1, 1)
    if how == "tuned":
        config = _stream_k_stage(H, a, b, out, config, sms, ab, od, skinny_ok and worth and majors == ("k", "k"))
        if config[0] == "skinny":
            plan, why = SKN.skinny_plan(a, b, out, config[1:], "tuned")
            return plan         # (a tuning candidate the model refused was never timed)
    kw = hopper_kwargs(config, N, size_of(od))
    kernel = H.make_hopper_gemm(ab, od, num_sms=sms, **kw)
    kernel, kw, how = _schedule_checked(H, kernel, kw, how, ab, od, M, N, K, sms)
    am, bm = majors
    if bm == "mn" and (kw.get("bn", H.BN) // (2 if kw.get("multicast") else 1)) % 64:
        bm = "k"
    if (am, bm) != ("k", "k"):
        kw = dict(kw, a_major=am, b_major=bm)
        kernel = H.make_hopper_gemm(ab, od, num_sms=sms, **kw)
    plain = {k: v for k, v in kw.items() if k != "stream_k"}   # the fused epilogues run without stream-K
    A_, B_ = (lambda x: x.contiguous()) if am == "k" else (lambda x: x.t()), \
        (lambda x: x.contiguous()) if bm == "k" else (lambda x: x.t())

    launch = H._launcher(kernel, a)             # (CPU tensors: the interpreter)
    fused = {}      # (bias dtype, activation) -> the fused-epilogue kernel's launcher, kept from its first call
    f32 = torch.float32

    def run(a, b, out, bias, activation):
        if bias is None and activation is None:
            extra = H.workspace(kernel, a) if kw.get("stream_k") else ()
            launch(A_(a), B_(b), out, *extra)
        elif activation is None or activation in ("relu", "gelu", "silu"):
            key = (None if bias is None else bias.dtype, activation)
            fk = fused.get(key)
            if fk is None or bias is not None and (bias.dim() != 1 or bias.shape[0] != N or
                                                   bias.device != a.device):
                # the first call of this epilogue (or a bias hopper_launch must check): hopper_matmul's checks
                k, args = H.hopper_launch(a, b, out=out, bias=bias, activation=activation, **plain)
                fk = fused[key] = H._launcher(k, a)
                fk(*args)
                return
            if bias is None:
                fk(A_(a), B_(b), out)
            else:       # as hopper.py's _bias_of: C's dtype or float32, another of f16/bf16 converted
                if bias.dtype != out.dtype and bias.dtype != f32:
                    bias = bias.float()
                fk(A_(a), B_(b), out, bias.contiguous())
        else:
            H.hopper_matmul(a, b, out=out, **kw)
            host_epilogue(out, bias, activation)
    return Plan(run, f"{describe_hopper(kw)} ({how}{passed}){note}", "hopper", kw, (am, bm))


def _stream_k_stage(H, a, b, out, config, sms, ab, od, skinny_ok=False):
    """The tuned winner against its stream-K twin and, where its blocks leave SMs idle, the stream-K
    configurations every SM shares, and (M <= skinny.TUNE_MAX_M, where the gate allows) the skinny kernel as
    ("skinny", mp, consumers, stages, splits) (tuning.py: timed here, where the workspaces can be passed; the
    schedule model checks each first)."""
    import torch
    M, K = a.shape
    N = b.shape[0]

    def kernel_of(c):
        if c[0] == "skinny":
            return SKN.make_skinny_gemm(ab, od, *c[1:]), {"skinny": True}
        kw = hopper_kwargs(c, N, size_of(od))
        return H.make_hopper_gemm(ab, od, num_sms=sms, **kw), kw
    cands = HT.stream_k_candidates(sys.modules[__name__], config, M, N, sms,
                                   gates.allows("gemm_stream_k_last_wave", a))
    if skinny_ok and SKN.serves(M, N, K, ab, od, SKN.TUNE_MAX_M):
        cands.append(("skinny",) + SKN.choose_skinny(M, N, K, sms, ab))
    cands = [c for c in cands if SM.check(kernel_of(c)[0], M, N, K) is None] or [tuple(config)]
    A, B = a.contiguous(), b.contiguous()

    def run_of(c):
        k, kw = kernel_of(c)
        extra = H.workspace(k, a) if kw.get("stream_k") else SKN.buffers(k, a, N) if kw.get("skinny") else ()
        return lambda: k(A, B, out, *extra)
    key = {"M": str(M), "N": str(N), "K": str(K), "ab": ab, "out": od, "sms": str(sms),
           "device": torch.cuda.get_device_name(a.device)}
    return HT.pick(cands, run_of, key)[0]


def _schedule_checked(H, kernel, kw, how, ab, od, M, N, K, sms):
    """The kernel matmul may launch: `kernel` where the schedule model (schedule_model.check) finds its walk
    sound over this shape, else the same configuration without stream-K, else one 128 x 128 tile per block (no
    waits between blocks); `how` then names what was refused. Nothing the model refuses is launched."""
    why = SM.check(kernel, M, N, K)
    if why is None:
        return kernel, kw, how
    for fallback in ({k: v for k, v in kw.items() if k != "stream_k"}, hopper_kwargs(HOPPER_CONFIGS[4], N,
                                                                                       size_of(od))):
        k2 = H.make_hopper_gemm(ab, od, num_sms=sms, **fallback)
        if SM.check(k2, M, N, K) is None:
            return k2, fallback, f"{how}; the schedule model refused {describe_hopper(kw)}: {why}"
    raise tiledsl.LaunchError(f"matmul {M}x{N}x{K}: the schedule model refuses every fallback ({why})")
