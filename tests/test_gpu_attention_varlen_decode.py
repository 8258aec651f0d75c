"""attention_varlen and attention_decode on the GPU at model sizes (32 query / 8 kv heads): varlen packed batches
with lengths drawn from a fixed seed (mean 1024 and 4096), causal or not, f16 / bf16, D 64 / 128, against torch SDPA
per sequence on float32 inputs (bottom-right causal mask where len_q != len_k); decode against SDPA on the gathered
cache, contiguous and paged (pages of 16 to 256), batch 1 to 64, contexts 1k to 32k, ragged cache_seqlens, 1 to 16
new queries, split-KV and not. (tests/test_attention_varlen.py and tests/test_attention_decode.py compile these
kernels through ptxas on CPU CI and run small cases on the interpreter.)"""
import math

import numpy as np
import pytest

import tiledsl.ops as ops

pytestmark = pytest.mark.gpu


def _tol(torch, ro, dt):
    """f16's 2e-3 budget, plus (bf16) twice the reference's own rounding to bf16 (test_gpu_attention.py's rule)."""
    tol = 2e-3
    if dt == torch.bfloat16:
        tol += 2 * (ro.to(dt).float() - ro).abs().max().item()
    return tol


def _attend(torch, q, k, v, causal, scale, rows=1024):
    """float32 (O (n, H, D), LSE (n, H), live (n,)) of one sequence by torch SDPA over chunks of query rows: q (n, H,
    D), k and v (m, H_kv, D); causal bottom-right (query i sees key j <= i + m - n). live: rows that see a key (the
    others' O is 0, LSE -inf in tiledsl's convention; SDPA would give NaN)."""
    F = torch.nn.functional
    n, H, D = q.shape
    m, HK = k.shape[0], k.shape[1]
    g = H // HK
    kf = k.float().repeat_interleave(g, 1).transpose(0, 1)            # (H, m, D)
    vf = v.float().repeat_interleave(g, 1).transpose(0, 1)
    o = torch.zeros((n, H, D), device=q.device)
    lse = torch.full((n, H), -math.inf, device=q.device)
    live = torch.zeros(n, dtype=torch.bool, device=q.device)
    for r0 in range(0, n, rows):
        r1 = min(n, r0 + rows)
        qf = q[r0:r1].float().transpose(0, 1)                         # (H, r, D)
        i = torch.arange(r0, r1, device=q.device)[:, None]
        mask = torch.arange(m, device=q.device)[None, :] <= i + (m - n) if causal else \
            torch.ones((r1 - r0, m), dtype=torch.bool, device=q.device)
        ok = mask.any(1)
        live[r0:r1] = ok
        if m == 0 or not ok.any():
            continue
        mk = mask | ~ok[:, None]                                       # dead rows: any finite value, dropped below
        oc = F.scaled_dot_product_attention(qf, kf, vf, attn_mask=mk, scale=scale)
        s = (qf @ kf.transpose(-1, -2)) * scale
        lc = torch.logsumexp(s.masked_fill(~mk, -math.inf), -1)       # (H, r)
        o[r0:r1] = torch.where(ok[:, None, None], oc.transpose(0, 1), 0.0)
        lse[r0:r1] = torch.where(ok[:, None], lc.transpose(0, 1), -math.inf)
    return o, lse, live


def _lengths(seed, B, mean):
    rng = np.random.default_rng(seed)
    return [int(x) for x in rng.integers(1, 2 * mean, B)]


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("D", [64, 128])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("mean", [1024, 4096])
def test_varlen_matches_sdpa_per_sequence(dtype, D, causal, mean):
    torch = pytest.importorskip("torch")
    dt = getattr(torch, dtype)
    lens = _lengths(mean + D, 8 if mean == 1024 else 4, mean)
    lens[1] = 1                                                         # a 1-token sequence among the long ones
    torch.manual_seed(mean + D + causal)
    T = sum(lens)
    H, HK = 32, 8
    cu = torch.tensor([0] + list(np.cumsum(lens)), dtype=torch.int32, device="cuda")
    q = torch.randn(T, H, D, device="cuda", dtype=dt)
    k, v = (torch.randn(T, HK, D, device="cuda", dtype=dt) for _ in range(2))
    scale = 1.0 / math.sqrt(D)
    o, lse = ops.attention_varlen(q, k, v, cu, cu, max(lens), max(lens), causal=causal)
    assert o.shape == q.shape and o.dtype == dt and lse.shape == (H, T) and lse.dtype == torch.float32
    for b in range(len(lens)):
        s, e = int(cu[b]), int(cu[b + 1])
        ro, rl, _ = _attend(torch, q[s:e], k[s:e], v[s:e], causal, scale)
        assert (o[s:e].float() - ro).abs().max().item() <= _tol(torch, ro, dt), b
        assert (lse[:, s:e].T - rl).abs().max().item() <= 1e-3, b


@pytest.mark.parametrize("causal", [False, True])
def test_varlen_unequal_lengths_and_empty_sequences(causal):
    # len_q != len_k (bottom-right causal: rows before the first visible key are 0 / -inf), empty sequences
    torch = pytest.importorskip("torch")
    torch.manual_seed(11)
    lq = [300, 0, 1, 777, 64, 5]
    lk = [500, 10, 0, 700, 64, 900]
    H, HK, D = 8, 2, 128
    cuq = torch.tensor([0] + list(np.cumsum(lq)), dtype=torch.int32, device="cuda")
    cuk = torch.tensor([0] + list(np.cumsum(lk)), dtype=torch.int32, device="cuda")
    q = torch.randn(sum(lq), H, D, device="cuda", dtype=torch.float16)
    k, v = (torch.randn(sum(lk), HK, D, device="cuda", dtype=torch.float16) for _ in range(2))
    o, lse = ops.attention_varlen(q, k, v, cuq, cuk, max(lq), max(lk), causal=causal, scale=0.07, validate=True)
    for b in range(len(lq)):
        s, e, ks, ke = int(cuq[b]), int(cuq[b + 1]), int(cuk[b]), int(cuk[b + 1])
        ro, rl, live = _attend(torch, q[s:e], k[ks:ke], v[ks:ke], causal, 0.07)
        assert (o[s:e].float() - ro).abs().max().item() <= 2e-3 if e > s else True, b
        got = lse[:, s:e].T
        assert torch.equal(torch.isinf(got), ~live[:, None].expand_as(got)), b
        assert (got[live] - rl[live]).abs().max().item() <= 1e-3 if live.any() else True, b


def _cache(torch, B, ctx, HK, D, dt, page, seed):
    """(k_cache, v_cache, block_table or None, the (B, ctx) key/value rows each sequence sees, gathered)."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    if not page:
        kc, vc = (torch.randn(B, ctx, HK, D, device="cuda", dtype=dt, generator=g) for _ in range(2))
        return kc, vc, None, kc, vc
    per = -(-ctx // page)
    npages = B * per + 3
    kc, vc = (torch.randn(npages, page, HK, D, device="cuda", dtype=dt, generator=g) for _ in range(2))
    bt = torch.randperm(npages, device="cuda", generator=g)[:B * per].view(B, per).to(torch.int32)
    gather = (lambda c: c[bt.long()].reshape(B, per * page, HK, D)[:, :ctx])
    return kc, vc, bt, gather(kc), gather(vc)


DECODE_CASES = [  # (B, context, page, Lq, causal, dtype, D)
    (1, 32768, 0, 1, False, "float16", 128),       # batch 1: split-KV carries it
    (1, 32768, 64, 1, False, "bfloat16", 128),
    (16, 8192, 16, 1, False, "float16", 128),
    (64, 4096, 256, 1, False, "bfloat16", 128),
    (64, 4096, 0, 1, False, "float16", 128),
    (4, 16384, 128, 4, True, "float16", 128),      # speculative decoding: 4 new tokens, causal among them
    (8, 2048, 32, 16, True, "bfloat16", 128),
    (8, 1024, 0, 2, True, "float16", 64),
]


@pytest.mark.parametrize("kernel", ["ragged", "split"])
@pytest.mark.parametrize("B, ctx, page, lq, causal, dtype, D", DECODE_CASES)
def test_decode_matches_sdpa_on_the_gathered_cache(B, ctx, page, lq, causal, dtype, D, kernel):
    # both decode kernels: ragged.py's (a 64-key tile per warp) and decode_kernel.py's (the tile split over 4 warps)
    torch = pytest.importorskip("torch")
    dt = getattr(torch, dtype)
    H, HK = 32, 8
    kc, vc, bt, kg, vg = _cache(torch, B, ctx, HK, D, dt, page, B + ctx + page)
    torch.manual_seed(B + ctx)
    q = torch.randn(B, lq, H, D, device="cuda", dtype=dt)
    # ragged lengths: the full context, one key, and random ones (never below... the 1-key one sees fewer than Lq)
    lens = torch.randint(1, ctx + 1, (B,), device="cuda", dtype=torch.int32)
    lens[0] = ctx
    if B > 1:
        lens[1] = 1
    scale = 1.0 / math.sqrt(D)
    o, lse = ops.attention_decode(q, kc, vc, lens, block_table=bt, causal=causal, return_lse=True, validate=True,
                                  kernel=kernel)
    assert o.shape == q.shape and o.dtype == dt and lse.shape == (B, lq, H)
    for b in range(B):
        n = int(lens[b])
        ro, rl, live = _attend(torch, q[b], kg[b, :n], vg[b, :n], causal, scale)
        assert (o[b].float() - ro).abs().max().item() <= _tol(torch, ro, dt), b
        assert torch.equal(torch.isinf(lse[b]), ~live[:, None].expand_as(lse[b])), b
        assert (lse[b][live] - rl[live]).abs().max().item() <= 1e-3, b


@pytest.mark.parametrize("kernel", ["ragged", "split"])
@pytest.mark.parametrize("splits", [1, 3, 16])
def test_decode_forced_splits_agree(splits, kernel):
    # the same call split 1, 3 and 16 ways: the combine reproduces the unsplit result within float rounding
    torch = pytest.importorskip("torch")
    B, ctx, H, HK, D = 2, 5000, 32, 8, 128
    kc, vc, bt, kg, vg = _cache(torch, B, ctx, HK, D, torch.float16, 16, 5)
    torch.manual_seed(5)
    q = torch.randn(B, 1, H, D, device="cuda", dtype=torch.float16)
    lens = torch.tensor([5000, 3333], dtype=torch.int32, device="cuda")
    o = ops.attention_decode(q, kc, vc, lens, block_table=bt, splits=splits, kernel=kernel)
    for b in range(B):
        n = int(lens[b])
        ro, _, _ = _attend(torch, q[b], kg[b, :n], vg[b, :n], False, 1.0 / math.sqrt(D))
        assert (o[b].float() - ro).abs().max().item() <= 2e-3


@pytest.mark.parametrize("kernel", ["ragged", "split"])
def test_decode_split_combine_repeats_and_replays_in_a_graph(kernel):
    # the split's combine runs in the kernel (split_combine.py): a group's counter must be back at zero after every
    # launch, or the next call's last arriver is misjudged. 20 calls back to back, then a CUDA graph's replays
    # (its own counters, zero-filled in the graph), give the first call's bits (the combine's order is fixed)
    torch = pytest.importorskip("torch")
    B, ctx, H, HK, D = 3, 9000, 32, 8, 128
    kc, vc, bt, kg, vg = _cache(torch, B, ctx, HK, D, torch.bfloat16, 64, 7)
    torch.manual_seed(7)
    q = torch.randn(B, 1, H, D, device="cuda", dtype=torch.bfloat16)
    lens = torch.tensor([9000, 1, 4097], dtype=torch.int32, device="cuda")
    call = (lambda: ops.attention_decode(q, kc, vc, lens, block_table=bt, splits=13, kernel=kernel,
                                         return_lse=True))
    o0, l0 = call()
    for _ in range(20):
        o, lse = call()
        assert torch.equal(o, o0) and torch.equal(lse, l0)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        call()
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        og, lg = call()
    for _ in range(5):
        og.zero_()
        g.replay()
        torch.cuda.synchronize()
        assert torch.equal(og, o0) and torch.equal(lg, l0)
    for b in range(B):
        n = int(lens[b])
        ro, _, _ = _attend(torch, q[b], kg[b, :n], vg[b, :n], False, 1.0 / math.sqrt(D))
        assert (o0[b].float() - ro).abs().max().item() <= _tol(torch, ro, torch.bfloat16), b


def _grads_reference(torch, q, k, v, do, causal, scale):
    """float32 (dq, dk, dv) of one sequence by torch autograd through SDPA (the math backend: float32 throughout)
    with the bottom-right causal mask; rows that see no key (len_q > len_k) contribute 0."""
    F = torch.nn.functional
    from torch.nn.attention import SDPBackend, sdpa_kernel
    qf, kf, vf = (x.detach().float().requires_grad_() for x in (q, k, v))
    n, H, D = q.shape
    m, HK = k.shape[0], k.shape[1]
    g = H // HK
    ke, ve = kf.repeat_interleave(g, 1).transpose(0, 1), vf.repeat_interleave(g, 1).transpose(0, 1)
    mask = torch.ones((n, m), dtype=torch.bool, device=q.device)
    if causal:
        mask = torch.arange(m, device=q.device)[None, :] <= torch.arange(n, device=q.device)[:, None] + (m - n)
    live = mask.any(1)
    with sdpa_kernel(SDPBackend.MATH):
        o = F.scaled_dot_product_attention(qf.transpose(0, 1), ke, ve, attn_mask=mask | ~live[:, None], scale=scale)
    o = torch.where(live[None, :, None], o, 0.0)
    return torch.autograd.grad(o.transpose(0, 1), (qf, kf, vf), do.float())


def _grad_bound(ref, rtol=1e-2, atol=1e-4):
    """The error norm a gradient may have: rtol of the reference's norm plus an RMS floor of atol. The floor is for
    gradients that are exactly 0: a 1-token sequence's dq and dk (softmax over one key is the constant 1), where the
    kernel returns its rounding noise (~1e-7) and a relative error alone divides that by ~0. 1e-4 is 1000x that
    noise and under 1/400 of the smallest gradient RMS here (dq of a 1400-token non-causal sequence: ~0.044)."""
    return rtol * ref.norm().item() + atol * math.sqrt(ref.numel())


@pytest.mark.parametrize("D", [64, 128])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("heads", [(16, 16), (32, 8)])
def test_varlen_backward_matches_autograd(D, causal, heads):
    # flash_attention_varlen's gradients per sequence against float32 autograd through SDPA: error norm <= 1e-2 of
    # the reference's, plus an RMS floor of 1e-4 (_grad_bound; the 1-token sequence's dq and dk are exactly 0)
    torch = pytest.importorskip("torch")
    lens = _lengths(D + causal, 6, 700)
    lens[2] = 1
    torch.manual_seed(D)
    H, HK = heads
    T = sum(lens)
    cu = torch.tensor([0] + list(np.cumsum(lens)), dtype=torch.int32, device="cuda")
    q = torch.randn(T, H, D, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    k, v = (torch.randn(T, HK, D, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(2))
    do = torch.randn(T, H, D, device="cuda", dtype=torch.bfloat16)
    o = ops.flash_attention_varlen(q, k, v, cu, cu, max(lens), max(lens), causal=causal)
    dq, dk, dv = torch.autograd.grad(o, (q, k, v), do)
    for b in range(len(lens)):
        s, e = int(cu[b]), int(cu[b + 1])
        refs = _grads_reference(torch, q[s:e], k[s:e], v[s:e], do[s:e], causal, 1.0 / math.sqrt(D))
        for name, got, ref in zip("qkv", (dq[s:e], dk[s:e], dv[s:e]), refs):
            assert not got.isnan().any(), (b, name)
            err = (got.float() - ref).norm().item()
            assert err <= _grad_bound(ref), (b, name, lens[b], err, ref.norm().item())


@pytest.mark.parametrize("kernel", ["ragged", "split", "split2"])
@pytest.mark.parametrize("B, ctx, page, qdtype", [(1, 32768, 0, "bfloat16"), (16, 4096, 64, "float16"),
                                                  (4, 8192, 16, "bfloat16"), (3, 3000, 0, "float16")])
def test_decode_fp8_cache(B, ctx, page, qdtype, kernel, monkeypatch):
    # split2: decode_kernel.py with 2 e4m3 staging stages (three blocks an SM) instead of its default
    if kernel == "split2":
        from tiledsl.ops.flash import decode_kernel as DK
        monkeypatch.setitem(DK.STAGES, True, 2)
        kernel = "split"
    # an e4m3 cache quantised per kv head (amax -> 448): O against float32 attention on the dequantised cache
    torch = pytest.importorskip("torch")
    dt = getattr(torch, qdtype)
    H, HK, D = 32, 8, 128
    kc, vc, bt, _, _ = _cache(torch, B, ctx, HK, D, torch.float32, page, B + ctx)
    q8 = []
    for c in (kc, vc):
        sc = c.abs().amax(dim=(0, 1, 3)) / 448.0
        q8.append(((c / sc[:, None]).to(torch.float8_e4m3fn), sc))
    (k8, ks), (v8, vs) = q8
    deq = [c.float() * sc[:, None] for c, sc in q8]
    if page:
        per = -(-ctx // page)
        deq = [d[bt.long()].reshape(B, per * page, HK, D)[:, :ctx] for d in deq]
    torch.manual_seed(B)
    q = torch.randn(B, 1, H, D, device="cuda", dtype=dt)
    lens = torch.randint(1, ctx + 1, (B,), device="cuda", dtype=torch.int32)
    lens[0] = ctx
    o = ops.attention_decode(q, k8, v8, lens, block_table=bt, k_scale=ks, v_scale=vs, validate=True, kernel=kernel)
    assert o.dtype == dt and o.shape == q.shape
    for b in range(B):
        n = int(lens[b])
        ro, _, _ = _attend(torch, q[b], deq[0][b, :n], deq[1][b, :n], False, 1.0 / math.sqrt(D))
        assert (o[b].float() - ro).abs().max().item() <= _tol(torch, ro, dt) + 2e-3 * ro.abs().max().item(), b


def test_interpreter_agrees_with_the_gpu():
    # tests/test_attention_varlen.py's and test_attention_decode.py's small cases: the same kernels on the GPU and
    # on the interpreter differ only where ex2.approx / lg2.approx do
    torch = pytest.importorskip("torch")
    from tiledsl.ops.flash import decode as DC
    from tiledsl.ops.flash import varlen as VL
    rng = np.random.default_rng(0)
    lq, lk = [5, 0, 33], [5, 3, 40]
    cuq = np.concatenate([[0], np.cumsum(lq)]).astype(np.int32)
    cuk = np.concatenate([[0], np.cumsum(lk)]).astype(np.int32)
    q = rng.standard_normal((38, 2, 64)).astype(np.float16)
    k, v = (rng.standard_normal((48, 1, 64)).astype(np.float16) for _ in range(2))
    oi, li = VL.attention_varlen(q, k, v, cuq, cuk, 33, 40, causal=True, scale=0.3, config=(2, 1, 1))
    t = (lambda x: torch.from_numpy(x).cuda())
    og, lg = VL.attention_varlen(t(q), t(k), t(v), t(cuq), t(cuk), 33, 40, causal=True, scale=0.3, config=(2, 1, 1))
    assert np.abs(og.cpu().numpy().astype(np.float32) - oi).max() <= 2e-3
    assert np.array_equal(np.isinf(lg.cpu().numpy()), np.isinf(li))
    fin = np.isfinite(li)
    assert np.abs(lg.cpu().numpy()[fin] - li[fin]).max() <= 1e-4
    qd = rng.standard_normal((3, 3, 4, 64)).astype(np.float16)
    kc, vc = (rng.standard_normal((3, 256, 1, 64)).astype(np.float16) for _ in range(2))
    lens = np.array([0, 70, 200], np.int32)
    oi = DC.attention_decode(qd, kc, vc, lens, scale=0.3, causal=True, splits=4)
    og = DC.attention_decode(t(qd), t(kc), t(vc), t(lens), scale=0.3, causal=True, splits=4)
    assert np.abs(og.cpu().numpy().astype(np.float32) - oi).max() <= 2e-3


@pytest.mark.parametrize("causal", [False, True])
def test_attention_jagged_matches_sdpa_per_sequence(causal):
    torch = pytest.importorskip("torch")
    lens = _lengths(21, 5, 600)
    torch.manual_seed(21)
    off = torch.tensor([0] + list(np.cumsum(lens)), device="cuda")
    vals = [torch.randn(sum(lens), 8, 128, device="cuda", dtype=torch.float16) for _ in range(3)]
    nts = [torch.nested.nested_tensor_from_jagged(x, off).transpose(1, 2) for x in vals]
    out = ops.attention_jagged(*nts, causal=causal)
    packed = out.values().transpose(0, 1)
    for b in range(len(lens)):
        s, e = int(off[b]), int(off[b + 1])
        ro, _, _ = _attend(torch, vals[0][s:e], vals[1][s:e], vals[2][s:e], causal, 128 ** -0.5)
        assert (packed[s:e].float() - ro).abs().max().item() <= 2e-3, b
