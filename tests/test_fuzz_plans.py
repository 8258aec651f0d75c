"""Shape fuzz of the GPU kernels the planners choose, run on the lane-exact interpreter.

CPU tensors take simpler kernels in tiledsl.ops, so the kernels an H100/H200 user runs were exercised here only at
the few fixed shapes of their own tests. For each family this draws a seeded sample of small shapes with tails in
every dimension (M, N, K off the tiles, M or N < 16, one-token and block-edge sequence lengths, GQA ratios), asks
the GPU planner what it would run on a 132-SM sm_90 device (and on 3 SMs, so persistent and stream-K walks wrap),
runs that kernel on the interpreter and compares with a float reference at the family's tolerance. Where a planner
chooses by shape only at large sizes, every configuration class it can choose is also forced at small shapes.

The first few cases of each family run by default (a few seconds); the rest are `slow` (--runslow). Every assertion
message names the shape and the configuration."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("tiledsl.interpreter.fibers")       # the warp-specialised kernels' rings turn only on fibers

from tiledsl.ops.gemm import hopper as H                 # noqa: E402
from tiledsl.ops.gemm import hopper_plan as HP           # noqa: E402
from tiledsl.ops.gemm import skinny as SKN               # noqa: E402
from tiledsl.ops.gemm import tuning as HT                # noqa: E402

SMS = (132, 3)          # an H100/H200's SMs, and a few so that persistent and stream-K walks wrap
DEFAULT = 3             # cases of each family in the default run; the rest are slow


def _edge(rng, lo, hi, tiles=(16, 64, 128)):
    """A size in [lo, hi]: half the time one beside a tile edge (t - 1, t + 1, ...), else uniform."""
    if rng.random() < 0.5:
        t = int(rng.choice(tiles)) * int(rng.integers(1, 3))
        return int(np.clip(t + int(rng.choice((-1, 1, -7, 9))), lo, hi))
    return int(rng.integers(lo, hi + 1))


def _cases(draw, n, seed):
    """n cases from draw(rng, i), the first DEFAULT in the default run, the others marked slow."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        case = draw(rng, i)
        out.append(pytest.param(*case, marks=() if i < DEFAULT else pytest.mark.slow))
    return out


# ---------------------------------------------------------------- GEMM: small integers / 8, exact sums in f32

_TORCH = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}


def _operands(M, N, K, ab, seed):
    g = torch.Generator().manual_seed(seed)
    a = (torch.randint(-8, 9, (M, K), generator=g) / 8).to(_TORCH[ab])
    b = (torch.randint(-8, 9, (N, K), generator=g) / 8).to(_TORCH[ab])
    return a, b, a.double() @ b.double().T      # every product and partial sum exact in f32


def _check_gemm(out, ref, what):
    """C equals the exact sums rounded once to C's type (every element written: C starts at NaN)."""
    want = ref.to(out.dtype)
    bad = ~((out == want) | (out.isnan() & want.isnan()))
    assert not bad.any(), (f"{what}: {int(bad.sum())} of {out.numel()} elements differ, first at "
                           f"{tuple(bad.nonzero()[0].tolist())}: {out[bad][:4].tolist()} != {want[bad][:4].tolist()}")


def _run_plan(M, N, K, ab, od, sms, config, seed):
    a, b, ref = _operands(M, N, K, ab, seed)
    out = torch.full((M, N), float("nan"), dtype=_TORCH[od])
    plan = HP.hopper_plan(a, b, out, config, False, sms)
    what = f"{M}x{N}x{K} {ab}->{od} sms={sms} config={config}: {plan.describe}"
    plan.run(a, b, out, None, None)
    _check_gemm(out, ref, what)


def _gemm_shape(rng, i):
    small_m = i % 3 == 0                            # a decode-sized M: the skinny kernel (or small-M stream-K)
    M = _edge(rng, 1, 64, (8, 16, 32)) if small_m else _edge(rng, 1, 300)
    N = _edge(rng, 1, 300) if rng.random() < 0.8 else int(rng.integers(1, 16))
    K = 8 * _edge(rng, 1, 64, (8, 16))              # K % 8 == 0: the TMA unit's 16-byte rows
    ab = str(rng.choice(("float16", "bfloat16")))
    od = str(rng.choice(("float16", "bfloat16", "float32")))
    return M, N, K, ab, od, SMS[i % 2]


@pytest.mark.parametrize("M,N,K,ab,od,sms", _cases(_gemm_shape, 30, 901))
def test_matmul_heuristic_plan(M, N, K, ab, od, sms):
    """hopper_plan untuned: choose_hopper (+ stream_k_helps), or at M <= 64 choose_skinny, the schedule model's
    fallbacks, then the chosen kernel on the interpreter."""
    _run_plan(M, N, K, ab, od, sms, None, seed=M * N + K)


def _forced():
    """Every configuration class the GPU plans can choose: HOPPER_CONFIGS (tiles, persistent, multicast, split-K),
    the stream-K twins stream_k_helps / the tuner add, and the small-M stream-K ones."""
    cs = [tuple(c) for c in HP.HOPPER_CONFIGS]
    cs += [c[:6] + (1, 1) for c in HP.HOPPER_CONFIGS if c[3] and not c[5] and HP.hopper_split(c) == 1]
    cs += [tuple(c) for c in HT.SMALL_M_STREAM_K if tuple(c) not in cs]
    return cs


def _forced_cases():
    rng = np.random.default_rng(902)
    out = []
    for i, c in enumerate(_forced()):
        for j in range(2):
            M, N = _edge(rng, 1, 290), _edge(rng, 1, 290)
            K = 8 * _edge(rng, 1, 40, (8, 16))
            ab, od = ("float16", "bfloat16")[j], ("float32", "bfloat16", "float16")[(i + j) % 3]
            slow = (i % 5, j) != (0, 0)
            out.append(pytest.param(M, N, K, ab, od, SMS[1 - j], c, marks=pytest.mark.slow if slow else (),
                                    id=f"{'-'.join(map(str, c))}-{M}x{N}x{K}-{j}"))
    return out


@pytest.mark.parametrize("M,N,K,ab,od,sms,config", _forced_cases())
def test_matmul_forced_hopper_config(M, N, K, ab, od, sms, config):
    """hopper_plan with config= each configuration (as the tuner or a user would give it) at small ragged shapes."""
    _run_plan(M, N, K, ab, od, sms, config, seed=M + N * K)


def _skinny_case(rng, i):
    M = _edge(rng, 1, 64, (8, 16, 32))
    N = _edge(rng, 1, 300)
    K = 8 * _edge(rng, 1, 80, (8, 16))
    splits = (None, 1, 2, 3, 4)[i % 5]              # None: choose_skinny's count
    return M, N, K, str(rng.choice(("float16", "bfloat16"))), ("float32", "float16", "bfloat16")[i % 3], \
        SMS[i % 2], splits, 1 + (i % 4 == 3)


@pytest.mark.parametrize("M,N,K,ab,od,sms,splits,consumers", _cases(_skinny_case, 20, 903))
def test_skinny_split_counts(M, N, K, ab, od, sms, splits, consumers):
    """The skinny kernel (swap-AB, split-K) with choose_skinny's configuration, or its split count and consumer
    warpgroups forced (the tuner's candidates differ only in these)."""
    a, b, ref = _operands(M, N, K, ab, M + N + K)
    mp, cons, stages, best = SKN.choose_skinny(M, N, K, sms, ab)
    config = (mp, consumers, stages, best if splits is None else splits)
    out = torch.full((M, N), float("nan"), dtype=_TORCH[od])
    plan, why = SKN.skinny_plan(a, b, out, config, "forced")
    what = f"skinny {M}x{N}x{K} {ab}->{od} sms={sms} config={config}"
    if plan is None:
        assert splits is not None, f"{what}: the schedule model refuses choose_skinny's own choice: {why}"
        pytest.skip(f"{what}: the schedule model refuses it ({why}); never launched")
    plan.run(a, b, out, None, None)
    _check_gemm(out, ref, what)
