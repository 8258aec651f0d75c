"""The FA3-style Hopper attention forward on the GPU (an sm_90 device): O against an fp32 reference (torch SDPA on
float32 inputs; max abs error <= 2e-3 for f16, plus bf16's own rounding for bf16), LSE against a float32
log-sum-exp, over D 64/128, N 1024/4096 and a ragged 1000, causal or not, f16/bf16, grouped-query attention; the
interpreter agrees with the GPU on the CI case; the SASS is HGMMA + UTMALDG code without local memory;
attention(path=None) takes this kernel on sm_90; the persistent grid (config[6] = 1) against the reference, with
the device's grid and with a small one, and bit for bit against one block per item. (tests/test_attention_hopper.py
compiles these kernels through ptxas on CPU CI: GPU_SHAPES and GQA_SHAPES there are the shapes used here.)"""
import math
import re

import numpy as np
import pytest

from tiledsl.ops.flash import forward as FWD
import tiledsl
from tiledsl.ops.flash import fa3 as AH
from test_attention_hopper import GPU_SHAPES, GQA_SCALE, GQA_SHAPES
from test_gpu_attention import _reference

pytestmark = pytest.mark.gpu


def _sm90():
    torch = pytest.importorskip("torch")
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("the FA3 kernel needs an sm_90 GPU (wgmma, setmaxnreg)")
    return torch


def _qkv(torch, seed, q_shape, kv_shape=None, dtype="float16"):
    """q, k, v of standard normal values on the GPU, drawn in that order after torch.manual_seed(seed) (so each test
    keeps its own inputs); k and v have q's shape unless kv_shape (grouped-query, longer keys) says otherwise."""
    torch.manual_seed(seed)
    dt = getattr(torch, dtype)
    q = torch.randn(*q_shape, device="cuda", dtype=dt)
    k, v = (torch.randn(*(kv_shape or q_shape), device="cuda", dtype=dt) for _ in range(2))
    return q, k, v


def _check_interpreter_agrees(torch, seed, config=None):
    """The CI case (N = 130, D = 64, GQA), causal and not, from numpy's generator seeded `seed`: the kernel of
    `config` (None: the default) on the interpreter and on the GPU. They differ only where ex2.approx/lg2.approx
    do (the interpreter rounds correctly, the GPU within the ISA's bound): O within 1e-3, LSE within 1e-5."""
    rng = np.random.default_rng(seed)
    for causal in (False, True):
        q = rng.standard_normal((1, 2, 130, 64)).astype(np.float16)
        k, v = (rng.standard_normal((1, 1, 130, 64)).astype(np.float16) for _ in range(2))
        oi, li = AH.attention_hopper(q, k, v, causal=causal, scale=0.3, config=config)
        og, lg = AH.attention_hopper(*(torch.from_numpy(x).cuda() for x in (q, k, v)), causal=causal, scale=0.3,
                                     config=config)
        assert np.abs(og.cpu().numpy().astype(np.float32) - oi.astype(np.float32)).max() <= 1e-3
        assert np.abs(lg.cpu().numpy() - li).max() <= 1e-5


def _tolerance(ro, dt, dtype):
    tol = 2e-3
    if dtype == "bfloat16":
        # rounding the exact O to bf16 alone errs by up to half a bf16 ulp: allow twice the reference's own
        # rounding error on top of the f16 budget (as tests/test_gpu_attention.py does)
        tol += 2 * (ro.to(dt).float() - ro).abs().max().item()
    return tol


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("D", [64, 128])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("N", sorted(GPU_SHAPES))
def test_fa3_matches_fp32_reference(dtype, D, causal, N):
    torch = _sm90()
    dt = getattr(torch, dtype)
    B, H, _, _, _ = GPU_SHAPES[N]
    q, k, v = _qkv(torch, N + D + causal, (B, H, N, D), dtype=dtype)
    o, lse = AH.attention_hopper(q, k, v, causal=causal)
    torch.cuda.synchronize()
    assert o.dtype == dt and o.shape == q.shape and lse.dtype == torch.float32 and lse.shape == (B, H, N)
    ro, rl = _reference(q, k, v, causal, 1.0 / math.sqrt(D))
    assert (o.float() - ro).abs().max().item() <= _tolerance(ro, dt, dtype)
    assert (lse - rl).abs().max().item() <= 1e-3


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("shape", GQA_SHAPES, ids=["gqa4", "mqa"])
def test_fa3_grouped_query(causal, shape):
    torch = _sm90()
    B, H, HK, N, NK = shape
    q, k, v = _qkv(torch, 7, (B, H, N, 128), (B, HK, NK, 128))
    o, lse = AH.attention_hopper(q, k, v, causal=causal, scale=GQA_SCALE)
    ro, rl = _reference(q, k, v, causal, GQA_SCALE)
    assert (o.float() - ro).abs().max().item() <= 2e-3
    assert (lse - rl).abs().max().item() <= 1e-3


@pytest.mark.parametrize("causal", [False, True])
def test_fa3_head_dim_256(causal):
    torch = _sm90()
    q, k, v = _qkv(torch, 5, (1, 4, 1000, 256))
    o, lse = AH.attention_hopper(q, k, v, causal=causal)
    ro, rl = _reference(q, k, v, causal, 1.0 / 16)
    assert (o.float() - ro).abs().max().item() <= 2e-3
    assert (lse - rl).abs().max().item() <= 1e-3


def test_fa3_keys_longer_than_queries():
    torch = _sm90()
    q, k, v = _qkv(torch, 3, (1, 4, 300, 64), (1, 2, 1234, 64))
    o, lse = AH.attention_hopper(q, k, v)
    ro, rl = _reference(q, k, v, False, 0.125)
    assert (o.float() - ro).abs().max().item() <= 2e-3 and (lse - rl).abs().max().item() <= 1e-3


def test_fa3_interpreter_agrees_with_gpu():
    # the CI case with the default configuration: the same kernel on the interpreter and on the GPU
    _check_interpreter_agrees(_sm90(), seed=0)


@pytest.mark.parametrize("D", [64, 128])
def test_fa3_sass_is_hgmma_and_tma_without_local_memory(D):
    torch = _sm90()
    shape = GPU_SHAPES[4096]
    B, H, HK, N, NK = shape
    q = torch.empty(B * H, N, D, dtype=torch.float16)
    k = AH.make_attention_hopper("float16", D, True, shape, 1.0 / math.sqrt(D))
    # with tma_o (the defaults at D = 64 causal and D = 128) O is a tensor map of the (B * H, N, D) view
    sass = k.compile(q, q, q, q if k.tma_o else q.view(B, H, N, D), torch.empty(B, H, N)).asm.get("sass")
    if sass is None:
        pytest.skip("cuobjdump not installed")
    assert "HGMMA" in sass and "UTMALDG" in sass and "MUFU.EX2" in sass
    assert ("UTMASTG" in sass) == bool(k.tma_o)
    # the kernel's own code; the precise division's slow-path subroutine (__cuda_sm20_rcp_rn_f32_slowpath, taken
    # only for denormal or huge divisors: the row sum is >= 1 here) keeps its own small stack frame
    own = [part for part in sass.split("Function : ")[1:] if not part.startswith("__cuda_")]
    assert len(own) == 1 and "HGMMA" in own[0]
    assert not re.search(r"\b(STL|LDL)\b", own[0])


def test_attention_path_none_takes_fa3_on_sm90(monkeypatch):
    torch = _sm90()
    q, k, v = _qkv(torch, 1, (1, 2, 256, 128))
    assert FWD._fa3_fits(q, k, v)
    calls = []
    real = AH.attention_hopper

    def spy(*args, **kw):
        calls.append(kw)
        return real(*args, **kw)

    monkeypatch.setattr(AH, "attention_hopper", spy)
    o, lse = FWD.attention(q, k, v, causal=True)
    assert len(calls) == 1
    o2, lse2 = FWD.attention(q, k, v, causal=True, path="fa2")
    assert len(calls) == 1
    ro, rl = _reference(q, k, v, True, 1.0 / math.sqrt(128))
    for out, l in ((o, lse), (o2, lse2)):
        assert (out.float() - ro).abs().max().item() <= 2e-3 and (l - rl).abs().max().item() <= 1e-3


@pytest.mark.parametrize("D", [64, 128, 256])
@pytest.mark.parametrize("causal", [False, True])
def test_fa3_every_candidate_configuration(D, causal):
    torch = _sm90()
    q, k, v = _qkv(torch, 11, (*GPU_SHAPES[1000][:2], 1000, D), dtype="bfloat16")
    ro, rl = _reference(q, k, v, causal, 1.0 / math.sqrt(D))
    for config in AH.CANDIDATES[D]:
        o, lse = AH.attention_hopper(q, k, v, causal=causal, config=config)
        assert (o.float() - ro).abs().max().item() <= _tolerance(ro, torch.bfloat16, "bfloat16"), config
        assert (lse - rl).abs().max().item() <= 1e-3, config


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("D", [64, 128, 256])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("N", [1000, 4096])
def test_fa3_ping_pong_configurations(dtype, D, causal, N):
    # the consumers taking turns through named barriers (AH.PINGPONG_CANDIDATES): ragged and long N, f16 and bf16;
    # a wrong turn order hangs (the test times out) rather than erring
    _check_configurations(dtype, D, causal, N, AH.PINGPONG_CANDIDATES[D], N + D + causal)


def _check_configurations(dtype, D, causal, N, configs, seed):
    """Each configuration's O and LSE against the fp32 reference at GPU_SHAPES[N] (the forward's bounds)."""
    torch = _sm90()
    dt = getattr(torch, dtype)
    B, H = GPU_SHAPES[N][:2]
    q, k, v = _qkv(torch, seed, (B, H, N, D), dtype=dtype)
    ro, rl = _reference(q, k, v, causal, 1.0 / math.sqrt(D))
    for config in configs:
        o, lse = AH.attention_hopper(q, k, v, causal=causal, config=config)
        torch.cuda.synchronize()
        assert (o.float() - ro).abs().max().item() <= _tolerance(ro, dt, dtype), config
        assert (lse - rl).abs().max().item() <= 1e-3, config


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("shape", GQA_SHAPES, ids=["gqa4", "mqa"])
def test_fa3_ping_pong_grouped_query(causal, shape):
    torch = _sm90()
    B, H, HK, N, NK = shape
    q, k, v = _qkv(torch, 8, (B, H, N, 128), (B, HK, NK, 128))
    ro, rl = _reference(q, k, v, causal, GQA_SCALE)
    for config in ((2, 128, 2, 0, 1), (2, 128, 2, 1, 1)):
        o, lse = AH.attention_hopper(q, k, v, causal=causal, scale=GQA_SCALE, config=config)
        assert (o.float() - ro).abs().max().item() <= 2e-3, config
        assert (lse - rl).abs().max().item() <= 1e-3, config


def test_fa3_ping_pong_interpreter_agrees_with_gpu():
    # the CI case with the consumers taking turns: the interpreter (one fiber per consumer warpgroup) and the GPU
    _check_interpreter_agrees(_sm90(), seed=1, config=(2, 64, 2, 1, 1))


@pytest.mark.parametrize("config", [(2, 128, 2, 1, 1), (2, 128, 2, 0, 1)])
def test_fa3_ping_pong_sass_without_local_memory(config):
    torch = _sm90()
    shape = GPU_SHAPES[4096]
    B, H, HK, N, NK = shape
    q = torch.empty(B * H, N, 128, dtype=torch.float16)
    k = AH.make_attention_hopper("float16", 128, False, shape, 1.0 / math.sqrt(128), config)
    sass = k.compile(q, q, q, q.view(B, H, N, 128), torch.empty(B, H, N)).asm.get("sass")
    if sass is None:
        pytest.skip("cuobjdump not installed")
    own = [part for part in sass.split("Function : ")[1:] if not part.startswith("__cuda_")]
    assert len(own) == 1 and "HGMMA" in own[0] and "BAR.SYNC" in own[0] and "BAR.ARV" in own[0]
    assert not re.search(r"\b(STL|LDL)\b", own[0])


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("D", [64, 128])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("N", [1000, 4096])
def test_fa3_polynomial_exponentials(dtype, D, causal, N):
    # a share of the softmax's exponentials on the FMA pipe (AH.POLY_CANDIDATES, tiledsl/lib/exp2_fma.py: relative
    # error 1.03e-4, below P's own f16/bf16 rounding): the forward's bounds as they are
    _check_configurations(dtype, D, causal, N, AH.POLY_CANDIDATES[D], N + D + causal + 7)


def test_fa3_polynomial_interpreter_agrees_with_gpu():
    # the polynomial's instructions (fma.rn, add.rm, sub.rn, integer ops) round alike on both (tests/test_exp2_fma.py
    # checks the interpreter against the ISA's rules bit for bit); S differs in its last bits (tensor-core
    # accumulation), which the polynomial, continuous at the integers since p(1) = 2, passes on as ex2.approx does.
    # (H200 2026-12-01, with the earlier polynomial's 8.6e-5 jump below each integer: LSE 6.7e-5 apart)
    _check_interpreter_agrees(_sm90(), seed=2, config=(2, 64, 2, 1, 1, 16))


PERSISTENT_SHAPE = (2, 8, 2, 4096, 4096)        # GQA; 512 work items at BM = 128: more than the SMs


def _persistent_case(torch, seed, D, causal, dtype="float16"):
    """q, k, v of PERSISTENT_SHAPE at head dim D (_qkv's, from `seed`) and the fp32 reference's O and LSE."""
    B, H, HK, N, NK = PERSISTENT_SHAPE
    q, k, v = _qkv(torch, seed, (B, H, N, D), (B, HK, NK, D), dtype=dtype)
    return (q, k, v) + tuple(_reference(q, k, v, causal, 1.0 / math.sqrt(D)))


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("D", [64, 128, 256])
@pytest.mark.parametrize("causal", [False, True])
def test_fa3_persistent_configurations(dtype, D, causal):
    # AH.PERSISTENT_CANDIDATES on a grid of the device's SMs, each block walking about 4 items; a wrong ring or Q
    # phase hangs (the test times out) or reads another item's tiles (O errs)
    torch = _sm90()
    dt = getattr(torch, dtype)
    q, k, v, ro, rl = _persistent_case(torch, D + causal + 21, D, causal, dtype)
    for config in AH.PERSISTENT_CANDIDATES[D]:
        o, lse = AH.attention_hopper(q, k, v, causal=causal, config=config)
        torch.cuda.synchronize()
        assert (o.float() - ro).abs().max().item() <= _tolerance(ro, dt, dtype), config
        assert (lse - rl).abs().max().item() <= 1e-3, config


@pytest.mark.parametrize("D", [64, 128, 256])
@pytest.mark.parametrize("causal", [False, True])
def test_fa3_early_k_configurations(D, causal):
    # AH.EARLY_K_CANDIDATES (config[7] = 1: K's stage freed by the S that read it): against the reference, and
    # bit for bit the numbers of their twins without it (only the producer's waits move)
    torch = _sm90()
    q, k, v, ro, rl = _persistent_case(torch, D + causal + 27, D, causal)
    for config in AH.EARLY_K_CANDIDATES[D]:
        o, lse = AH.attention_hopper(q, k, v, causal=causal, config=config)
        o1, l1 = AH.attention_hopper(q, k, v, causal=causal, config=config[:7])
        torch.cuda.synchronize()
        assert (o.float() - ro).abs().max().item() <= 2e-3, config
        assert (lse - rl).abs().max().item() <= 1e-3, config
        assert torch.equal(o, o1) and torch.equal(lse, l1), config


@pytest.mark.parametrize("D", [64, 128, 256])
@pytest.mark.parametrize("causal", [False, True])
def test_fa3_lazy_rescale(D, causal):
    # config[8] = 1 (the defaults' lazy rescale). Standard normal inputs: the reference's numbers. Keys that grow
    # along the sequence (rows' maxima move past the first tile, so the rescale's branch runs, and the softmax is
    # peaked, so O is about one row of V, up to ~4): the eager rescale's error plus 2^-10 of O (a stale max leaves
    # the dominant probability inexact in f16, 2^-11 relative, where the eager one makes it exactly 1)
    torch = _sm90()
    q, k, v, ro, rl = _persistent_case(torch, D + causal + 31, D, causal)
    NK = k.shape[2]
    full = AH.full_config(AH.default_config(D, causal, q.shape[2]))
    cfg, eager_cfg = full[:8] + (1,) + full[9:], full[:8] + (0,) + full[9:]
    o, lse = AH.attention_hopper(q, k, v, causal=causal, config=cfg)
    torch.cuda.synchronize()
    assert (o.float() - ro).abs().max().item() <= 2e-3
    assert (lse - rl).abs().max().item() <= 1e-3
    kk = k * (1 + torch.arange(NK, device="cuda") / 300)[:, None].to(k.dtype)
    ro, rl = _reference(q, kk, v, causal, 1.0 / math.sqrt(D))
    o, lse = AH.attention_hopper(q, kk, v, causal=causal, config=cfg)
    o1, _ = AH.attention_hopper(q, kk, v, causal=causal, config=eager_cfg)
    torch.cuda.synchronize()
    eager = (o1.float() - ro).abs().max().item()
    assert (o.float() - ro).abs().max().item() <= eager + ro.abs().max().item() / 1024
    assert (lse - rl).abs().max().item() <= 1e-3


@pytest.mark.parametrize("D", [64, 128])
@pytest.mark.parametrize("causal", [False, True])
def test_fa3_persistent_small_grid_ragged(D, causal):
    # 7 blocks walking the 64 items of the ragged shape (9 or 10 each, the last wave partial)
    torch = _sm90()
    B, H, _, N, _ = GPU_SHAPES[1000]
    q, k, v = _qkv(torch, D + causal + 23, (B, H, N, D))
    ro, rl = _reference(q, k, v, causal, 1.0 / math.sqrt(D))
    for config in AH.PERSISTENT_CANDIDATES[D]:
        o, lse = AH.attention_hopper(q, k, v, causal=causal, config=config, num_sms=7)
        torch.cuda.synchronize()
        assert (o.float() - ro).abs().max().item() <= 2e-3, config
        assert (lse - rl).abs().max().item() <= 1e-3, config


@pytest.mark.parametrize("causal", [False, True])
def test_fa3_persistent_is_bit_for_bit_one_block_per_item(causal):
    # each row sees the same instructions in the same order with or without the walk (as on the interpreter,
    # tests/test_attention_hopper.py): O and LSE equal to the bit
    torch = _sm90()
    B, H, HK, N, NK = PERSISTENT_SHAPE
    q, k, v = _qkv(torch, causal + 25, (B, H, N, 64), (B, HK, NK, 64))
    for config in AH.PERSISTENT_CANDIDATES[64]:
        o, lse = AH.attention_hopper(q, k, v, causal=causal, config=config)
        o1, l1 = AH.attention_hopper(q, k, v, causal=causal, config=config[:6])
        assert torch.equal(o, o1) and torch.equal(lse, l1), config


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("D", [64, 128, 256])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("walk", [0, 1, 2], ids=["grid", "persistent", "dynamic"])
def test_fa3_align_and_tma_o_are_bit_for_bit(dtype, D, causal, walk):
    # config[9] = align (the last query block ends at row N: the first starts below 0, its rows there zero-filled
    # by the TMA unit and not stored) and config[10] = tma_o (O through Q's buffer and the TMA store, which drops
    # the rows past N), each alone: each row sees the same instructions on the same numbers, so O and LSE equal
    # the default's to the bit; on a ragged grouped-query shape (N = 1000: the first block's 24 or 152 rows below
    # 0), every walk
    torch = _sm90()
    B, H, HK, N, NK = GQA_SHAPES[0]
    q, k, v = _qkv(torch, D + causal + 41, (B, H, N, D), (B, HK, NK, D), dtype=dtype)
    dflt = AH.full_config(AH.default_config(D, causal))
    base = dflt[:6] + (walk,) + dflt[7:9]
    o0, l0 = AH.attention_hopper(q, k, v, causal=causal, scale=GQA_SCALE, config=base + (0, 0))
    ro, rl = _reference(q, k, v, causal, GQA_SCALE)
    assert (o0.float() - ro).abs().max().item() <= _tolerance(ro, getattr(torch, dtype), dtype)
    for extra in ((1, 0), (0, 1)):
        o, lse = AH.attention_hopper(q, k, v, causal=causal, scale=GQA_SCALE, config=base + extra)
        torch.cuda.synchronize()
        assert torch.equal(o, o0) and torch.equal(lse, l0), (base + extra, (o.float() - o0.float()).abs().max())
    # both on this ragged N: the first block would be stored below row 0, where the TMA unit faults (it stopped
    # the kernel with an illegal instruction in session 29): refused before launch
    with pytest.raises(tiledsl.LaunchError, match="align and tma_o together"):
        AH.attention_hopper(q, k, v, causal=causal, scale=GQA_SCALE, config=base + (1, 1))
    # and with N = 1024, a multiple of 64: the first block's boxes wholly below row 0 (D = 64: two of three) are
    # skipped, the others stored; bit for bit the st.global epilogue's
    q, k, v = _qkv(torch, D + causal + 43, (B, H, 1024, D), (B, HK, 1024, D), dtype=dtype)
    o0, l0 = AH.attention_hopper(q, k, v, causal=causal, scale=GQA_SCALE, config=base + (0, 0))
    o, lse = AH.attention_hopper(q, k, v, causal=causal, scale=GQA_SCALE, config=base + (1, 1))
    torch.cuda.synchronize()
    assert torch.equal(o, o0) and torch.equal(lse, l0), (base + (1, 1), (o.float() - o0.float()).abs().max())


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("D", [64, 128])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("walk", [1, 2], ids=["persistent", "dynamic"])
def test_fa3_double_q_is_bit_for_bit(dtype, D, causal, walk):
    # config[11] = double_q: item k's Q in buffer k % 2 (loaded while item k - 1 runs): only when Q lands moves, so
    # O and LSE equal one buffer's to the bit; on the ragged grouped-query shape with the full grid and with 7
    # blocks (9 or 10 items each: both buffers turn many times), and with align + tma_o (O staged in the item's
    # own buffer) at N = 1024; D = 128 with 2 stages (3 and two Q tiles exceed shared memory)
    torch = _sm90()
    B, H, HK, N, NK = GQA_SHAPES[0]
    dflt = AH.full_config(AH.default_config(D, causal))
    stages = 2 if D == 128 else dflt[2]
    base = dflt[:2] + (stages,) + dflt[3:6] + (walk,) + dflt[7:9]
    for n, extra in ((N, (0, 0)), (1024, (1, 1))):
        q, k, v = _qkv(torch, D + causal + walk + 51, (B, H, n, D), (B, HK, n, D), dtype=dtype)
        for sms in (None, 7):
            o0, l0 = AH.attention_hopper(q, k, v, causal=causal, scale=GQA_SCALE, config=base + extra + (0,),
                                         num_sms=sms)
            o, lse = AH.attention_hopper(q, k, v, causal=causal, scale=GQA_SCALE, config=base + extra + (1,),
                                         num_sms=sms)
            torch.cuda.synchronize()
            assert torch.equal(o, o0) and torch.equal(lse, l0), (base + extra, sms)
        ro, rl = _reference(q, k, v, causal, GQA_SCALE)
        assert (o.float() - ro).abs().max().item() <= _tolerance(ro, getattr(torch, dtype), dtype)


def test_fa3_tma_o_interpreter_agrees_with_gpu():
    torch = _sm90()
    _check_interpreter_agrees(torch, 47, (2, 64, 2, 1, 1, 0, 0, 0, 1, 0, 1))
