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


def _cases(draw, n, seed, default=DEFAULT):
    """n cases from draw(rng, i), the first `default` in the default run, the others marked slow."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        case = draw(rng, i)
        out.append(pytest.param(*case, marks=() if i < default else pytest.mark.slow))
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
    return plan.describe


def _gemm_shape(rng, i):
    small_m = i % 3 == 0                            # a decode-sized M: the skinny kernel (or small-M stream-K)
    M = _edge(rng, 1, 64, (8, 16, 32)) if small_m else _edge(rng, 1, 300)
    N = _edge(rng, 1, 300) if rng.random() < 0.8 else int(rng.integers(1, 16))
    K = 8 * _edge(rng, 1, 64, (8, 16))              # K % 8 == 0: the TMA unit's 16-byte rows
    ab = str(rng.choice(("float16", "bfloat16")))
    od = str(rng.choice(("float16", "bfloat16", "float32")))
    return M, N, K, ab, od, SMS[i % 2]


@pytest.mark.parametrize("M,N,K,ab,od,sms", _cases(_gemm_shape, 30, 901))
def test_matmul_heuristic_plan(M, N, K, ab, od, sms, monkeypatch):
    """hopper_plan untuned: choose_hopper (+ stream_k_helps), or at M <= 64 choose_skinny, the schedule model's
    fallbacks, then the chosen kernel on the interpreter. At M <= 64 both: the skinny kernel is gated on a GPU
    (gates "gemm_skinny", off by default), where choose_hopper's small-M stream-K serves instead."""
    _run_plan(M, N, K, ab, od, sms, None, seed=M * N + K)
    if SKN.serves(M, N, K, ab, od):
        monkeypatch.setattr(SKN, "serves", lambda *a, **k: False)     # as hopper_plan with the gate closed
        _run_plan(M, N, K, ab, od, sms, None, seed=M * N + K + 1)


def _forced():
    """Every configuration class the GPU plans can choose: HOPPER_CONFIGS (tiles, persistent, multicast, split-K),
    the stream-K twins stream_k_helps / the tuner add (and their stream_k=2 forms), and the small-M stream-K ones."""
    cs = [tuple(c) for c in HP.HOPPER_CONFIGS]
    cs += [c[:6] + (1, sk) for sk in (1, 2) for c in HP.HOPPER_CONFIGS
           if c[3] and not c[5] and HP.hopper_split(c) == 1]
    cs += [c[:6] + (1, sk) for sk in (1, 2) for c in HT.LAST_WAVE_TILES]
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


_ULP = {"float32": 1e-5, "float16": 2e-3, "bfloat16": 1.6e-2}     # the rounding of C's type, with margin


def _fused_case(rng, i):
    M = _edge(rng, 1, 64, (8, 16, 32)) if i % 3 == 0 else _edge(rng, 1, 260)
    return M, _edge(rng, 1, 260), 8 * _edge(rng, 1, 40, (8, 16)), ("float16", "bfloat16")[i % 2], \
        ("float32", "float16", "bfloat16")[i % 3], SMS[(i // 2) % 2], ("float32", "out")[(i // 3) % 2], \
        ("gelu", "relu", "silu", None)[i % 4]


@pytest.mark.parametrize("M,N,K,ab,od,sms,bias,act", _cases(_fused_case, 12, 910))
def test_matmul_fused_epilogue_plan(M, N, K, ab, od, sms, bias, act, monkeypatch):
    """matmul(a, b, bias=, activation=)'s plan: the heuristic's kernel with the bias and activation fused (the
    fused kernels run without stream-K), at the persistent grid width of `sms` SMs."""
    from tiledsl.ops.gemm.epilogue import reference as act_ref
    monkeypatch.setattr(H, "sm_count", lambda a: sms)
    a, b, ref = _operands(M, N, K, ab, M * 3 + N + K)
    bias_t = (torch.randint(-16, 17, (N,), generator=torch.Generator().manual_seed(N)) / 4).to(
        torch.float32 if bias == "float32" else _TORCH[od])
    out = torch.full((M, N), float("nan"), dtype=_TORCH[od])
    plan = HP.hopper_plan(a, b, out, None, False, sms)
    what = f"{M}x{N}x{K} {ab}->{od} sms={sms} bias={bias_t.dtype} activation={act}: {plan.describe}"
    plan.run(a, b, out, bias_t, act)
    want = ref.numpy() + bias_t.double().numpy()
    want = want if act is None else act_ref(want, act)
    got = out.double().numpy()
    assert not np.isnan(got).any(), f"{what}: elements left unwritten"
    err = np.abs(got - want) / np.maximum(np.abs(want), 1.0)
    assert err.max() <= _ULP[od], f"{what}: relative error {err.max()} at {np.unravel_index(err.argmax(), err.shape)}"


def _fp8_case(rng, i):
    M = _edge(rng, 1, 64, (8, 16, 32)) if i % 2 else _edge(rng, 1, 260)
    N = _edge(rng, 1, 260)
    K = 16 * _edge(rng, 1, 24, (8, 16))             # K % 16 == 0: fp8 rows of 16 bytes
    at, bt = ("e4m3", "e5m2")[i % 2], ("e4m3", "e5m2")[(i // 2) % 2]
    return M, N, K, at, bt, ("bfloat16", "float16", "float32")[i % 3], SMS[(i // 2) % 2]


_FP8 = {"e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}


@pytest.mark.parametrize("M,N,K,at,bt,od,sms", _cases(_fp8_case, 16, 904))
def test_matmul_fp8_heuristic_plan(M, N, K, at, bt, od, sms, monkeypatch):
    """matmul_fp8's untuned GPU choice (fp8.py): at M <= 64 the skinny kernel's FP8 form with choose_skinny's
    configuration, else choose_hopper's configuration in the FP8 kernel's keywords (its defaults where the FP8 form
    refuses it), on the interpreter with the grid sized for `sms` SMs. Values k/8 are exact in e4m3 and e5m2."""
    import inspect

    from tiledsl import TiledslError
    monkeypatch.setattr(H, "sm_count", lambda a: sms)  # the persistent grid's width on the GPU: its SMs
    g = torch.Generator().manual_seed(M * K + N)
    a = (torch.randint(-8, 9, (M, K), generator=g) / 8).to(_FP8[at])
    b = (torch.randint(-8, 9, (N, K), generator=g) / 8).to(_FP8[bt])
    sa, sb = torch.tensor([0.25]), torch.tensor([2.0])
    ref = (a.double() @ b.double().T) * 0.5
    out = torch.full((M, N), float("nan"), dtype=_TORCH[od])
    if M <= SKN.MAX_M:
        config = SKN.choose_skinny(M, N, K, sms, at)
        what = f"fp8 skinny {M}x{N}x{K} {at}x{bt}->{od} sms={sms} config={config}"
        SKN.skinny_matmul_fp8(a, b, sa, sb, out=out, config=config)
    else:
        params = inspect.signature(H.hopper_matmul_fp8).parameters
        kw = HP.hopper_kwargs(HP.choose_hopper(M, N, K, "bfloat16", sms), N, out.element_size())
        kw = {k: v for k, v in kw.items() if k in params}
        what = f"fp8 hopper {M}x{N}x{K} {at}x{bt}->{od} sms={sms} kw={kw}"
        try:
            H.hopper_matmul_fp8(a, b, sa, sb, out=out, **kw)
        except TiledslError:                            # as matmul_fp8: the FP8 form's defaults then
            what += " (refused: defaults)"
            H.hopper_matmul_fp8(a, b, sa, sb, out=out)
    _check_gemm(out, ref, what)



def _fp8_forced_cases():
    rng = np.random.default_rng(911)
    cs = [tuple(c) for c in HT.FP8_CONFIGS] + [tuple(c) for c in HT.BIG_STREAM_K + HT.SMALL_M_STREAM_K]
    out = []
    for i, c in enumerate(cs):
        M, N, K = _edge(rng, 1, 260), _edge(rng, 1, 260), 16 * _edge(rng, 1, 20, (8, 16))
        out.append(pytest.param(M, N, K, ("e4m3", "e5m2")[i % 2], ("bfloat16", "float32", "float16")[i % 3], c,
                                marks=() if i == 0 else pytest.mark.slow, id=f"{'-'.join(map(str, c))}-{M}x{N}x{K}"))
    return out


@pytest.mark.parametrize("M,N,K,at,od,config", _fp8_forced_cases())
def test_matmul_fp8_forced_config(M, N, K, at, od, config, monkeypatch):
    """matmul_fp8's tuning candidates (FP8_CONFIGS, the stream-K ones) as hopper_matmul_fp8's keywords, on 3 SMs."""
    monkeypatch.setattr(H, "sm_count", lambda a: 3)
    g = torch.Generator().manual_seed(M + N * K)
    a = (torch.randint(-8, 9, (M, K), generator=g) / 8).to(_FP8[at])
    b = (torch.randint(-8, 9, (N, K), generator=g) / 8).to(_FP8[at])
    out = torch.full((M, N), float("nan"), dtype=_TORCH[od])
    kw = HP.hopper_kwargs(config, N, out.element_size())
    H.hopper_matmul_fp8(a, b, torch.tensor([0.25]), torch.tensor([2.0]), out=out, **kw)
    _check_gemm(out, (a.double() @ b.double().T) * 0.5, f"fp8 {M}x{N}x{K} {at}->{od} sms=3 kw={kw}")

# ---------------------------------------------------------------- attention: float16 normals, the tests' bounds

from tiledsl.ops.flash import backward as BWD            # noqa: E402
from tiledsl.ops.flash import decode as DC               # noqa: E402
from tiledsl.ops.flash import fa3 as AH                  # noqa: E402
from tiledsl.ops.flash import fa3_backward as ABH        # noqa: E402
from tiledsl.ops.flash import forward as FWD             # noqa: E402
from tiledsl.ops.flash import varlen as VL               # noqa: E402

_HEADS = [(1, 1), (2, 1), (4, 2), (4, 1), (3, 3), (6, 2)]     # (H, H_kv): MHA and GQA ratios 2, 3, 4


def _seq(rng, edges=(64, 128, 192)):
    """A sequence length: 1, beside a block edge, or uniform up to 300."""
    r = rng.random()
    if r < 0.15:
        return 1
    if r < 0.6:
        return max(1, int(rng.choice(edges)) + int(rng.choice((-1, 0, 1))))
    return int(rng.integers(1, 301))


def _normals(rng, *shapes):
    return [rng.standard_normal(s).astype(np.float16) for s in shapes]


def _close(o, lse, ro, rl, what, tol=2e-3):
    err = np.abs(o.astype(np.float64) - ro).max() if o.size else 0.0
    assert err <= tol, f"{what}: |O - ref| = {err}"
    assert np.array_equal(np.isinf(lse), np.isinf(rl)), f"{what}: LSE -inf where the reference's is not"
    fin = np.isfinite(rl)
    lerr = np.abs(lse[fin] - rl[fin]).max() if fin.any() else 0.0
    assert lerr <= 1e-4, f"{what}: |LSE - ref| = {lerr}"


def _fwd_case(rng, i):
    D = (64, 128, 256)[i % 3]
    return D, bool(rng.random() < 0.5), _HEADS[int(rng.integers(len(_HEADS)))], int(rng.integers(1, 3)), \
        _seq(rng), _seq(rng), SMS[(i // 3) % 2]


def _fwd(D, causal, heads, B, n, nk, sms, config, seed):
    H, HK = heads
    q, k, v = _normals(np.random.default_rng(seed), (B, H, n, D), (B, HK, nk, D), (B, HK, nk, D))
    scale = 0.3 * 8 / D ** 0.5
    cfg = AH.full_config(config or AH.default_config(D, causal, n))
    what = f"fa3 forward B={B} H={H} HK={HK} N={n} NK={nk} D={D} causal={causal} sms={sms} config={cfg}"
    o, lse = AH.attention_hopper(q, k, v, causal=causal, scale=scale, config=config, num_sms=sms)
    ro, rl = FWD.reference(q, k, v, causal=causal, scale=scale)
    _close(o, lse, ro, rl, what)


@pytest.mark.parametrize("D,causal,heads,B,n,nk,sms", _cases(_fwd_case, 30, 905, default=2))
def test_fa3_forward_default_config(D, causal, heads, B, n, nk, sms):
    """attention_hopper's own choice (default_config(D, causal, N): align / tma_o by N) on the interpreter."""
    _fwd(D, causal, heads, B, n, nk, sms, None, seed=n * nk + D)


def _fwd_configs():
    """Every configuration class a benchmark or user may give: the defaults and every candidate list's entries."""
    seen = []
    for D in AH.SUPPORTED_D:
        for c in [AH.CONFIGS[D], AH.CAUSAL_CONFIGS[D]] + [c for t in (
                AH.CANDIDATES, AH.PINGPONG_CANDIDATES, AH.POLY_CANDIDATES, AH.PERSISTENT_CANDIDATES,
                AH.EARLY_K_CANDIDATES) for c in t[D]]:
            if (D, AH.full_config(c)) not in seen:
                seen.append((D, AH.full_config(c)))
    return seen


def _fwd_forced_cases():
    rng = np.random.default_rng(906)
    out = []
    for i, (D, c) in enumerate(_fwd_configs()):
        causal = bool(i % 2)
        n = _seq(rng) if not (c[9] and c[10]) else 64 * int(rng.integers(1, 4))  # align + tma_o: N % 64 == 0
        out.append(pytest.param(D, causal, _HEADS[i % len(_HEADS)], 1, n, _seq(rng), SMS[1], c,
                                marks=() if i % 12 == 0 else pytest.mark.slow, id=f"{D}-{'-'.join(map(str, c))}"))
    return out


@pytest.mark.parametrize("D,causal,heads,B,n,nk,sms,config", _fwd_forced_cases())
def test_fa3_forward_forced_config(D, causal, heads, B, n, nk, sms, config):
    _fwd(D, causal, heads, B, n, nk, sms, config, seed=n + nk + D)


def test_fa3_dynamic_walk_in_lockstep_batches():
    """The dynamic walk's blocks (config[6] = 2) draw different numbers of items from a global counter (3 items on
    2 blocks). Run in lockstep, the block that stops early waits for the one still loading, a deadlock only the
    interpreter would have: the batch runs again with a fiber per block (interpreter/program.py, Program.run)."""
    _fwd(64, False, (3, 1), 1, 64, 64, 2, (2, 64, 2, 0, 0, 0, 2), seed=0)


def _bwd_case(rng, i):
    return bool(rng.random() < 0.5), _HEADS[int(rng.integers(len(_HEADS)))], _seq(rng), _seq(rng), SMS[i % 2], \
        (None, None, True, None)[i % 4], 1 + (i % 3 == 2)


@pytest.mark.parametrize("causal,heads,n,nk,sms,tail_split,B", _cases(_bwd_case, 16, 907, default=2))
def test_fa3_backward_plan(causal, heads, n, nk, sms, tail_split, B):
    """attention_backward(path="fa3") with the GPU's choices for `sms` SMs (tail_split and tma_kv as
    TAIL_SPLIT / tail_split_helps / TMA_KV decide), or the tail split forced; D = 128, the fa3 backward's."""
    H, HK = heads
    D, scale = 128, 0.3
    q, do, k, v = _normals(np.random.default_rng(n * nk + H), (B, H, n, D), (B, H, n, D), (B, HK, nk, D),
                           (B, HK, nk, D))
    split = ABH.TAIL_SPLIT and ABH.tail_split_helps(causal, (B, H, HK, n, nk), sms) if tail_split is None \
        else tail_split
    what = (f"fa3 backward B={B} H={H} HK={HK} N={n} NK={nk} causal={causal} sms={sms} tail_split={split} "
            f"tma_kv={ABH.TMA_KV and not split and H == HK}")
    o, lse = FWD.attention(q, k, v, causal=causal, scale=scale, config=(4, 1, 1))
    got = BWD.attention_backward(q, k, v, o, lse, do, causal=causal, scale=scale, path="fa3", sms=sms,
                                 tail_split=tail_split)
    ref = BWD.reference_backward(q, k, v, do, causal=causal, scale=scale)
    for name, g, r, x in zip(("dq", "dk", "dv"), got, ref, (q, k, v)):
        assert g.shape == x.shape and g.dtype == np.float16, f"{what}: {name} {g.shape} {g.dtype}"
        norm = np.linalg.norm(r)
        err = np.linalg.norm(g.astype(np.float64) - r) / norm if norm else np.abs(g).max()
        assert err <= 1e-2, f"{what}: {name} relative error {err}"


def _varlen_case(rng, i):
    nseq = int(rng.integers(1, 4))
    lq = [_seq(rng) if rng.random() < 0.8 else 0 for _ in range(nseq)]
    lk = [x if rng.random() < 0.5 else _seq(rng) for x in lq]
    D = (128, 64)[i % 2]
    return bool(rng.random() < 0.5), _HEADS[int(rng.integers(len(_HEADS)))], lq, lk, D


@pytest.mark.parametrize("causal,heads,lq,lk,D", _cases(_varlen_case, 16, 908))
def test_varlen_sm90_plan(causal, heads, lq, lk, D):
    """attention_varlen with the configuration it takes on an sm_90 GPU (varlen.default_config: SM90_CONFIGS[D],
    else fa2's) on ragged packed batches: empty sequences, one token, lengths beside the tiles, len_q != len_k."""
    H, HK = heads
    rng = np.random.default_rng(sum(lq) * 7 + sum(lk))
    cuq = np.concatenate([[0], np.cumsum(lq)]).astype(np.int32)
    cuk = np.concatenate([[0], np.cumsum(lk)]).astype(np.int32)
    q, k, v = _normals(rng, (int(cuq[-1]), H, D), (int(cuk[-1]), HK, D), (int(cuk[-1]), HK, D))
    config = VL.SM90_CONFIGS.get(D)
    what = f"varlen lq={lq} lk={lk} H={H} HK={HK} D={D} causal={causal} config={config}"
    o, lse = VL.attention_varlen(q, k, v, cuq, cuk, max(max(lq), 1), max(max(lk), 1), causal=causal, scale=0.3,
                                 config=config)
    ro, rl = VL.reference_varlen(q, k, v, cuq, cuk, causal=causal, scale=0.3)
    _close(o, lse, ro, rl, what)


def _decode_case(rng, i):
    B = int(rng.integers(1, 4))
    lens = [int(rng.choice((0, 1, 63, 64, 65, 127, 129, 255, 257))) if rng.random() < 0.6 else
            int(rng.integers(0, 600)) for _ in range(B)]
    return bool(i % 3 == 1), int(rng.choice((1, 1, 2, 3))), _HEADS[int(rng.integers(len(_HEADS)))], lens, \
        (0, 16, 32)[i % 3], (64, 128)[(i // 2) % 2], SMS[i % 2], i % 4 == 2


@pytest.mark.parametrize("causal,lq,heads,lens,page,D,sms,kv8", _cases(_decode_case, 16, 909))
def test_decode_split_plan(causal, lq, heads, lens, page, D, sms, kv8, monkeypatch):
    """attention_decode with choose_splits' KV split count for `sms` SMs (no splits= given), contiguous and paged
    caches (f16, or e4m3 bytes with per-kv-head descales), ragged cache_seqlens (empty, one key, beside the 64-key
    tiles), 1 to 3 new queries, GQA. A capacity of 1024 keys lets the heuristic split (a split reads at least 4
    tiles); splits past a sequence's end are empty."""
    monkeypatch.setattr(DC, "sm_count", lambda q: sms)
    chosen = []
    choose = DC.choose_splits
    monkeypatch.setattr(DC, "choose_splits", lambda *a: chosen.append(choose(*a)) or chosen[-1])
    H, HK = heads
    B, S = len(lens), 1024
    rng = np.random.default_rng(sum(lens) + 31 * lq + D)
    q, = _normals(rng, (B, lq, H, D))
    cache_lens = np.array(lens, np.int32)
    kw = {}
    if page:
        pages_each = S // page
        npages = B * pages_each + 2
        kc, vc = _normals(rng, (npages, page, HK, D), (npages, page, HK, D))
        kw["block_table"] = rng.permutation(npages)[:B * pages_each].reshape(B, pages_each).astype(np.int32)
    else:
        kc, vc = _normals(rng, (B, S, HK, D), (B, S, HK, D))
    rk, rv = kc, vc
    if kv8:
        from test_attention_decode import e4m3_values
        tab = e4m3_values()
        kc, vc = (np.where(np.isnan(tab[x]), 0, x).astype(np.uint8) for x in
                  (rng.integers(0, 256, kc.shape), rng.integers(0, 256, vc.shape)))
        kw["k_scale"], kw["v_scale"] = (rng.uniform(0.005, 0.05, HK).astype(np.float32) for _ in range(2))
        # both descales are applied in the kernel (k_scale in the scores' float32 scale), so the reference takes
        # q as given and the dequantised cache
        q_ref = q
        rk, rv = tab[kc] * kw["k_scale"][:, None], tab[vc] * kw["v_scale"][:, None]
    o, lse = DC.attention_decode(q, kc, vc, cache_lens, scale=0.3, causal=causal, return_lse=True, **kw)
    what = (f"decode B={B} lq={lq} H={H} HK={HK} D={D} lens={lens} page={page} causal={causal} sms={sms} "
            f"kv8={kv8} (splits, keys each)={chosen}")
    ro, rl = DC.reference_decode(q_ref if kv8 else q, rk, rv, cache_lens, scale=0.3, causal=causal,
                                 block_table=kw.get("block_table"))
    # O: the f16 bound relative to O's range (the e4m3 V spans up to 448 x v_scale), as test_attention_decode's
    _close(o, lse, ro, rl, what, tol=2e-3 * max(np.abs(ro).max(), 1.0) if kv8 else 2e-3)



@pytest.mark.parametrize("K", [7, 12, 100, 1])
def test_k_off_the_tma_rows_routes_away_from_hopper(K):
    """K % 8 != 0: the Hopper kernels' TMA rows cannot hold it; route sends such shapes to the mma.sync path on
    sm_90, and a Hopper configuration given for them is refused by name."""
    from tiledsl import LaunchError
    from tiledsl.ops.gemm.matmul import route
    assert route((9, 0), 33, 70, K, "float16", "float16") in ("mma", "mma-padded"), K
    a, b, _ = _operands(33, 70, K, "float16", K)
    with pytest.raises(LaunchError, match="multiple of 8"):
        H.hopper_matmul(a, b)
