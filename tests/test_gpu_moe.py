"""MoE and block-scaled FP8 on the H200 (issue 37): grouped_mm against a per-expert torch loop (exact with small
integer-valued inputs, whose f32 sums are exact; within bf16 rounding with random ones) and torch._grouped_mm,
balanced and skewed routing, experts of 0 tokens, Mixtral-like and DeepSeek-like shapes; the backward (dx, dw)
and grouped_linear's autograd; the quantisers bit for bit against their numpy reference; matmul_fp8_blockwise
within 2e-3 of the f32 reference with the same scales, dense and grouped; bad arguments refused naming them.
tests/test_grouped_gemm.py and tests/test_fp8_blockwise.py run the kernels on the interpreter.

Each test function (a kernel family, all its parameters) runs in a pytest process of its own (`own_process`), with a
timeout: a kernel that faults on the GPU (an illegal instruction, an illegal address) poisons the CUDA context of
its process, and every later test in that process would fail with the same error, masking what they would have
found. Here a fault fails its own family only; the others run in fresh processes. Each parameter is still reported
as its own test, with the child's message."""
import functools
import inspect
import os
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET

import numpy as np
import pytest

import tiledsl

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")

CHILD_ENV = "TILEDSL_GPU_TEST_CHILD"      # set in the child: the tests run in place
FAMILY_TIMEOUT_S = int(os.environ.get("TILEDSL_GPU_FAMILY_TIMEOUT", "900"))
POISONED = ("CUDA error", "AcceleratorError", "CUDA_ERROR", "illegal instruction", "illegal memory access")
_families = {}                             # family node id -> ({test name: (outcome, message)}, output tail)


def _child(request, ids):
    """Runs the node ids in one child pytest: ({test name: (outcome, message)}, the tail of its output)."""
    with tempfile.TemporaryDirectory() as d:
        report, log = os.path.join(d, "report.xml"), os.path.join(d, "out.txt")
        cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={report}"]
        if request.config.getoption("--runslow", default=False):
            cmd.append("--runslow")
        with open(log, "w") as out:
            try:
                r = subprocess.run(cmd + ids, cwd=str(request.config.rootpath), stdout=out, stderr=subprocess.STDOUT,
                                   env=dict(os.environ, **{CHILD_ENV: "1"}), timeout=FAMILY_TIMEOUT_S)
                how = f"child pytest exited {r.returncode}"
            except subprocess.TimeoutExpired:
                how = f"child pytest killed after {FAMILY_TIMEOUT_S} s (a hang?)"
        with open(log, errors="replace") as f:
            tail = f"{how}:\n" + f.read()[-8000:]
        results = {}
        if os.path.exists(report):
            for case in ET.parse(report).iter("testcase"):
                outcome, message = "passed", ""
                for kind in ("failure", "error", "skipped"):
                    el = case.find(kind)
                    if el is not None:
                        outcome, message = kind, (el.get("message") or "") + "\n" + (el.text or "")
                        break
                results[case.get("name")] = (outcome, message)
    return results, tail


def _run_family(request, family):
    """The selected tests of one family (node ids family[...]) in one child; where one of them poisoned the CUDA
    context (a CUDA error in its message), each later test that failed runs again in a child of its own, so its
    result is its own rather than the poisoned context's."""
    ids = [i.nodeid for i in request.session.items if i.nodeid.split("[", 1)[0] == family] or [family]
    results, tail = _child(request, ids)
    names = [i.rsplit("::", 1)[-1] for i in ids]
    bad = [k for k, n in enumerate(names) if results.get(n, ("missing", ""))[0] in ("failure", "error", "missing")]
    first = next((k for k in bad if any(p in results.get(names[k], ("", ""))[1] for p in POISONED)), None)
    if first is not None:
        for k in bad:
            if k > first:
                again, t = _child(request, [ids[k]])
                results[names[k]] = again.get(names[k], ("missing", ""))
                if results[names[k]][0] == "missing":
                    tail += f"\n--- {names[k]} alone: {t}"
    return results, tail


def own_process(fn):
    """Runs the test's family in a child process (once, for all its parameters) and reports this parameter's
    outcome from there; in the child (CHILD_ENV set) the test runs in place."""
    sig = inspect.signature(fn)
    takes_request = "request" in sig.parameters

    @functools.wraps(fn)
    def run(*args, **kwargs):
        request = kwargs["request"] if takes_request else kwargs.pop("request")
        if os.environ.get(CHILD_ENV):
            return fn(*args, **kwargs)
        family = request.node.nodeid.split("[", 1)[0]
        if family not in _families:
            _families[family] = _run_family(request, family)
        results, tail = _families[family]
        outcome, message = results.get(request.node.name, ("missing", ""))
        if outcome == "skipped":
            pytest.skip(message.strip().splitlines()[0] if message.strip() else "skipped in the child")
        if outcome != "passed":
            pytest.fail(f"{request.node.name} in its own process: {outcome}\n{message[-6000:]}\n{tail}"
                        if outcome != "missing" else f"{request.node.name}: no result from the child\n{tail}",
                        pytrace=False)

    if not takes_request:
        run.__signature__ = sig.replace(parameters=list(sig.parameters.values()) + [
            inspect.Parameter("request", inspect.Parameter.KEYWORD_ONLY)])
    return run


def _counts(E, Tn, skew, seed=0):
    """Token counts per expert summing to Tn: balanced (multinomial over equal weights) or skewed (Zipf-like
    weights, some experts with none)."""
    g = torch.Generator().manual_seed(seed)
    w = torch.ones(E) if not skew else 1.0 / torch.arange(1, E + 1).float() ** 1.5
    idx = torch.multinomial(w, Tn, replacement=True, generator=g)
    c = torch.bincount(idx, minlength=E)
    if skew:
        c[E // 2] = c[E // 2] + c[-1]
        c[-1] = 0                                              # an expert of 0 tokens
    return c


def _offsets(c):
    return torch.cumsum(c, 0).to(torch.int32).cuda()


def _loop(x, w, offsets):
    out = torch.empty(x.shape[0], w.shape[1], dtype=torch.float32, device=x.device)
    s = 0
    for e, end in enumerate(offsets.tolist()):
        out[s:end] = x[s:end].float() @ w[e].float().T
        s = end
    return out


def _rel(a, b):
    return ((a.float() - b.float()).norm() / b.float().norm().clamp_min(1e-30)).item()


@pytest.mark.parametrize("dt", ["bfloat16", "float16"])
@pytest.mark.parametrize("skew", [False, True], ids=["balanced", "skewed"])
@own_process
def test_grouped_mm_is_exact_on_integer_inputs(dt, skew):
    from tiledsl.ops import grouped_mm
    dt = getattr(torch, dt)
    E, Tn, N, K = 8, 3000, 1000, 520
    c = _counts(E, Tn, skew)
    off = _offsets(c)
    x = (torch.randint(-8, 9, (Tn, K), device="cuda") / 8).to(dt)
    w = (torch.randint(-8, 9, (E, N, K), device="cuda") / 8).to(dt)
    out = grouped_mm(x, w, off)
    torch.testing.assert_close(out, _loop(x, w, off).to(dt), rtol=0, atol=0)


@pytest.mark.parametrize("bn", [128, 256])
@pytest.mark.parametrize("skew", [False, True], ids=["balanced", "skewed"])
@pytest.mark.parametrize("w_kn", [False, True], ids=["forward", "dx"])
@own_process
def test_grouped_mm_through_the_tma_store(bn, skew, w_kn):
    """The row-grouped forms with the TMA-store epilogue (config tma_store, the gated path grouped_tma_store):
    exact on integer inputs, ragged counts (skewed: an expert of 0 tokens), N not a multiple of the tile; every row
    past offsets[-1] keeps out's poison (no TMA store reaches past its group); and out= a view 8 bytes off a
    16-byte boundary: refused where config asks for the TMA store, else through the register stores."""
    from tiledsl.ops import grouped_mm
    E, Tn, N, K = 8, 3000, 1000, 512
    c = _counts(E, Tn, skew, seed=bn)
    off = _offsets(c)
    x = (torch.randint(-8, 9, (Tn + 77, K), device="cuda") / 8).to(torch.bfloat16)
    w = (torch.randint(-8, 9, (E, N, K), device="cuda") / 8).to(torch.bfloat16)
    wk = w.transpose(1, 2).contiguous() if w_kn else w
    out = torch.full((Tn + 77, N), float("nan"), device="cuda", dtype=torch.bfloat16)
    grouped_mm(x, wk, off, out=out, config=dict(tma_store=True, bn=bn), w_kn=w_kn)
    torch.testing.assert_close(out[:Tn], _loop(x[:Tn], w, off).to(torch.bfloat16), rtol=0, atol=0)
    assert torch.isnan(out[Tn:]).all()
    big = torch.full((Tn * N + 4,), float("nan"), device="cuda", dtype=torch.bfloat16)
    view = big[4:].view(Tn, N)                  # 8 bytes past the allocation's start
    with pytest.raises(tiledsl.LaunchError, match="16-byte-aligned"):
        grouped_mm(x[:Tn], wk, off, out=view, config=dict(tma_store=True, bn=bn), w_kn=w_kn)
    grouped_mm(x[:Tn], wk, off, out=view, config=dict(bn=bn), w_kn=w_kn)
    torch.testing.assert_close(view, _loop(x[:Tn], w, off).to(torch.bfloat16), rtol=0, atol=0)

@pytest.mark.parametrize("shape", [(8, 8192, 14336, 4096), (8, 8192, 4096, 14336), (256, 8192, 2048, 7168),
                                   (256, 8192, 7168, 2048), (64, 4096, 1408, 2048)],
                         ids=["mixtral-up", "mixtral-down", "deepseek-up", "deepseek-down", "64-experts"])
@pytest.mark.parametrize("skew", [False, True], ids=["balanced", "skewed"])
@own_process
def test_grouped_mm_model_shapes_against_torch(shape, skew):
    from tiledsl.ops import grouped_mm
    E, Tn, N, K = shape
    c = _counts(E, Tn, skew, seed=E)
    off = _offsets(c)
    x = torch.randn(Tn, K, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(E, N, K, device="cuda", dtype=torch.bfloat16) / K ** 0.5
    out = grouped_mm(x, w, off)
    ref = _loop(x, w, off)
    assert _rel(out, ref) <= 1e-2
    if hasattr(torch, "_grouped_mm"):
        peer = torch._grouped_mm(x, w.transpose(1, 2), offs=off)
        assert _rel(out, peer.float()) <= 1e-2


@own_process
def test_rows_past_the_last_offset_are_left_alone_and_out_is_written():
    from tiledsl.ops import grouped_mm
    x = torch.randn(300, 128, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(3, 256, 128, device="cuda", dtype=torch.bfloat16)
    off = torch.tensor([100, 100, 250], dtype=torch.int32, device="cuda")
    out = torch.full((300, 256), 7.0, device="cuda", dtype=torch.bfloat16)
    grouped_mm(x, w, off, out=out)
    assert (out[250:] == 7).all()
    assert _rel(out[:250], _loop(x[:250], w, off)) <= 1e-2


@own_process
def test_backward_and_autograd_against_the_loop():
    from tiledsl.ops import grouped_linear, grouped_mm_backward
    E, Tn, N, K = 4, 1000, 384, 256
    off = _offsets(_counts(E, Tn, True, seed=3))
    x = torch.randn(Tn, K, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    w = torch.randn(E, N, K, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    g = torch.randn(Tn, N, device="cuda", dtype=torch.bfloat16)
    dx, dw = grouped_mm_backward(g, x.detach(), w.detach(), off)
    ends = off.tolist()
    rdx = torch.empty(Tn, K, device="cuda")
    rdw = torch.zeros(E, N, K, device="cuda")
    s = 0
    for e, end in enumerate(ends):
        rdx[s:end] = g[s:end].float() @ w[e].float()
        rdw[e] = g[s:end].float().T @ x[s:end].float()
        s = end
    assert _rel(dx, rdx) <= 1e-2 and _rel(dw, rdw) <= 1e-2
    grouped_linear(x, w, off).backward(g)
    assert _rel(x.grad, rdx) <= 1e-2 and _rel(w.grad, rdw) <= 1e-2


@pytest.mark.parametrize("K,N", [(4096, 14336), (2048, 7168), (200, 136)], ids=["kn-read-as-stored", "kn-deepseek",
                                                                               "kn-ragged-copy"])
@own_process
def test_w_kn_layout_against_torch(K, N):
    """grouped_mm(x, w (E, K, N), w_kn=True) = torch._grouped_mm(x, w): read as stored where K % 64 == 0, else
    through a transposed copy."""
    from tiledsl.ops import grouped_mm
    E, Tn = 8, 4000
    off = _offsets(_counts(E, Tn, True, seed=K))
    x = torch.randn(Tn, K, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(E, K, N, device="cuda", dtype=torch.bfloat16) / K ** 0.5
    out = grouped_mm(x, w, off, w_kn=True)
    assert _rel(out, _loop(x, w.transpose(1, 2), off)) <= 1e-2


def _weight_grad_problem(Tn, N, K, E=8):
    """Skewed offsets over E experts (one of 0 tokens), integer-valued bf16 x (T, K) and dy (T, N), and the f32
    reference dW (E, N, K) (exact: the sums of these eighths are exact in f32)."""
    off = _offsets(_counts(E, Tn, True, seed=Tn))
    x = (torch.randint(-8, 9, (Tn, K), device="cuda") / 8).to(torch.bfloat16)
    dy = (torch.randint(-8, 9, (Tn, N), device="cuda") / 8).to(torch.bfloat16)
    ref = torch.zeros(E, N, K, device="cuda")
    s = 0
    for e, end in enumerate(off.tolist()):
        ref[e] = dy[s:end].float().T @ x[s:end].float()
        s = end
    return off, x, dy, ref


@pytest.mark.parametrize("Tn,N,K", [(1001, 512, 384), (4096, 2048, 7168), (999, 100, 200)],
                         ids=["token-major-odd-t", "token-major-deepseek", "transposed-copies"])
@own_process
def test_weight_gradient_against_the_loop(Tn, N, K):
    """The K-grouped kernel: ragged experts (one of 0 tokens), T odd; dY and X read as stored (N, K multiples of
    8) or through transposed copies; f32 and bf16 out."""
    from tiledsl.ops import grouped_mm_weight_grad
    off, x, dy, ref = _weight_grad_problem(Tn, N, K)
    E = ref.shape[0]
    out = torch.empty(E, N, K, device="cuda")
    grouped_mm_weight_grad(dy, x, off, out=out)
    torch.testing.assert_close(out, ref, rtol=0, atol=0)              # integer-valued: the f32 sums are exact
    assert _rel(grouped_mm_weight_grad(dy, x, off), ref) <= 1e-2



@pytest.mark.parametrize("Tn,N,K,bn", [(1001, 512, 384, 128), (4096, 2048, 7168, 128), (3000, 1408, 2048, 128),
                                       (1001, 200, 328, 128), (4096, 2048, 1024, 256)],
                         ids=["odd-t", "deepseek", "n1408", "ragged-m-and-n", "bn256"])
@own_process
def test_weight_gradient_through_the_tma_store(Tn, N, K, bn):
    """The weight gradient's TMA-store epilogue (config tma_store, the gated path grouped_dw_tma_store): bf16 dW
    rounded once from the exact f32 sums of integer-valued inputs, so equal to the f32 reference rounded to bf16;
    ragged experts (one of 0 tokens: zeros), N not a multiple of the tile (the 3-D map clips each expert's rows)
    and K not a multiple of 64 (clipped columns); dW's poison (NaN) is gone everywhere."""
    from tiledsl.ops import grouped_mm_weight_grad
    off, x, dy, ref = _weight_grad_problem(Tn, N, K)
    E = ref.shape[0]
    out = torch.full((E, N, K), float("nan"), device="cuda", dtype=torch.bfloat16)
    grouped_mm_weight_grad(dy, x, off, out=out, config=dict(tma_store=True, bn=bn, stages=4 if bn == 128 else 3))
    torch.testing.assert_close(out, ref.to(torch.bfloat16), rtol=0, atol=0)

@own_process
def test_masked_decode_form_against_the_loop():
    from tiledsl.ops import grouped_mm_masked
    E, C, N, K = 16, 256, 2048, 7168
    counts = torch.randint(0, C + 1, (E,), generator=torch.Generator().manual_seed(1)).to(torch.int32)
    counts[3] = 0
    counts[5] = C
    x = torch.randn(E, C, K, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(E, N, K, device="cuda", dtype=torch.bfloat16) / K ** 0.5
    out = torch.full((E, C, N), 3.0, device="cuda", dtype=torch.bfloat16)
    grouped_mm_masked(x, w, counts.cuda(), out=out)
    for e, n in enumerate(counts.tolist()):
        assert _rel(out[e, :n], x[e, :n].float() @ w[e].float().T) <= 1e-2 if n else True
        assert (out[e, n:] == 3).all()


@own_process
def test_refusals_on_the_gpu():
    from tiledsl.ops import grouped_mm, matmul_fp8_blockwise
    x = torch.zeros(64, 128, device="cuda", dtype=torch.bfloat16)
    w = torch.zeros(2, 128, 128, device="cuda", dtype=torch.bfloat16)
    with pytest.raises(tiledsl.LaunchError, match="offsets is on cpu"):
        grouped_mm(x, w, torch.tensor([32, 64], dtype=torch.int32))
    with pytest.raises(tiledsl.LaunchError, match="offsets are not monotone"):
        grouped_mm(x, w, torch.tensor([40, 32], dtype=torch.int32, device="cuda"), validate=True)
    a = torch.zeros(64, 256, device="cuda").to(torch.float8_e4m3fn)
    with pytest.raises(tiledsl.LaunchError, match="scale_b"):
        matmul_fp8_blockwise(a, a, torch.ones(64, 2, device="cuda"), torch.ones(1, 1, device="cuda"))


@pytest.mark.parametrize("dt", ["float32", "float16", "bfloat16"])
@own_process
def test_quantisers_match_the_numpy_reference_bit_for_bit(dt):
    from tiledsl.ops import quantize_fp8, quantize_fp8_blockwise
    from tiledsl.ops.gemm import quantize as Q
    x = (torch.randn(257, 1024, device="cuda") * torch.randn(257, 1, device="cuda").exp() * 10).to(getattr(torch, dt))
    x[3, :128] = 0
    xf = x.float().cpu().numpy()
    q, s = quantize_fp8_blockwise(x)
    rq, rs = Q.reference(xf)
    assert np.array_equal(q.view(torch.uint8).cpu().numpy(), rq) and np.array_equal(s.cpu().numpy(), rs)
    q, s = quantize_fp8(x, "row")
    rq, rs = Q.reference(xf, 1024)
    assert np.array_equal(q.view(torch.uint8).cpu().numpy(), rq) and np.array_equal(s.cpu().numpy(), rs)
    q, s = quantize_fp8(x, "tensor")
    rq, rs = Q.reference(xf, None)
    assert np.array_equal(q.view(torch.uint8).cpu().numpy(), rq) and np.array_equal(s.cpu().numpy(), rs)


def _weights_128(w):
    """w (..., N, K) float as e4m3 with one scale per 128 x 128 block (DeepSeek-V3's weight scales)."""
    *lead, N, K = w.shape
    NB, KB = -(-N // 128), -(-K // 128)
    wp = torch.zeros(*lead, NB * 128, KB * 128, device=w.device)
    wp[..., :N, :K] = w.float()
    blocks = wp.unflatten(-1, (KB, 128)).unflatten(-3, (NB, 128))           # (..., NB, 128, KB, 128)
    amax = blocks.abs().amax(dim=(-3, -1)).clamp_min(1e-12)                 # (..., NB, KB)
    s = amax / 448.0
    q = (blocks / s[..., :, None, :, None]).to(torch.float8_e4m3fn).flatten(-2).flatten(-3, -2)
    return q[..., :N, :K].contiguous(), s.contiguous()


def _blockwise_ref(a, sa, b, sb):
    """f32 reference with the same scales: sum over K blocks of the block products times their scales."""
    M, K = a.shape
    N = b.shape[0]
    af = a.float() * sa.repeat_interleave(128, dim=1)[:, :K]
    bf = b.float() * sb.repeat_interleave(128, dim=0)[:N].repeat_interleave(128, dim=1)[:, :K]
    return af @ bf.T


@pytest.mark.parametrize("M,N,K", [(4096, 4096, 4096), (1000, 2048, 7168), (8192, 7168, 2048), (77, 136, 256)])
@own_process
def test_matmul_fp8_blockwise_within_2e3_of_f32(M, N, K):
    from tiledsl.ops import matmul_fp8_blockwise, quantize_fp8_blockwise
    x = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(N, K, device="cuda") / K ** 0.5
    a, sa = quantize_fp8_blockwise(x)
    b, sb = _weights_128(w)
    out = matmul_fp8_blockwise(a, b, sa, sb, out_dtype=torch.float32)
    assert _rel(out, _blockwise_ref(a, sa, b, sb)) <= 2e-3
    out16 = matmul_fp8_blockwise(a, b, sa, sb)
    assert out16.dtype == torch.bfloat16 and _rel(out16, out) <= 1e-2
    assert _rel(out, x.float() @ w.T) <= 0.1                                 # the quantisation's own error


@own_process
def test_grouped_fp8_blockwise_against_the_loop():
    from tiledsl.ops import grouped_mm_fp8_blockwise, quantize_fp8_blockwise
    E, Tn, N, K = 8, 4000, 2048, 1024
    off = _offsets(_counts(E, Tn, True, seed=5))
    x = torch.randn(Tn, K, device="cuda", dtype=torch.bfloat16)
    qx, sx = quantize_fp8_blockwise(x)
    qw, sw = _weights_128(torch.randn(E, N, K, device="cuda") / K ** 0.5)
    out = grouped_mm_fp8_blockwise(qx, qw, off, sx, sw, out_dtype=torch.float32)
    ref = torch.empty_like(out)
    s = 0
    for e, end in enumerate(off.tolist()):
        ref[s:end] = _blockwise_ref(qx[s:end], sx[s:end], qw[e], sw[e])
        s = end
    assert _rel(out, ref) <= 2e-3


def _pipelined_and_not(monkeypatch, call):
    """call() with the gated software-pipelined promotion off (TILEDSL_DISABLE), then on (TILEDSL_ENABLE, whatever
    the session set)."""
    from tiledsl.ops.gemm import grouped as G
    monkeypatch.setenv("TILEDSL_DISABLE", G.PIPELINED)
    before = call()
    monkeypatch.delenv("TILEDSL_DISABLE")
    monkeypatch.setenv("TILEDSL_ENABLE", G.PIPELINED)
    assert G.pipelined_promotion(before, 128)
    return before, call()


@pytest.mark.parametrize("M,N,K", [(77, 136, 128), (1000, 2048, 640), (4096, 4096, 4096), (256, 384, 384)],
                         ids=["1-block", "5-blocks", "32-blocks", "3-blocks"])
@own_process
def test_pipelined_promotion_matches_the_unpipelined_kernel_bit_for_bit(M, N, K, monkeypatch):
    """The gated path "gemm_fp8_blockwise_pipelined" (at BN = 128, its tile; wide N now defaults to the halved
    128 x 256 form): the same products promoted in the same order, one K block behind the tensor cores, so the
    result equals the unpipelined kernel's bit for bit (odd and even K block counts), and the f32 reference within
    2e-3."""
    from tiledsl.ops import matmul_fp8_blockwise, quantize_fp8_blockwise
    x = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    a, sa = quantize_fp8_blockwise(x)
    b, sb = _weights_128(torch.randn(N, K, device="cuda") / K ** 0.5)
    off, on = _pipelined_and_not(monkeypatch, lambda: matmul_fp8_blockwise(a, b, sa, sb, out_dtype=torch.float32,
                                                                           config={"bn": 128}))
    assert torch.equal(off, on)
    assert _rel(on, _blockwise_ref(a, sa, b, sb)) <= 2e-3


@own_process
def test_pipelined_promotion_grouped_with_empty_experts(monkeypatch):
    from tiledsl.ops import grouped_mm_fp8_blockwise, quantize_fp8_blockwise
    E, Tn, N, K = 8, 4000, 2048, 1152
    off = _offsets(_counts(E, Tn, True, seed=6))
    qx, sx = quantize_fp8_blockwise(torch.randn(Tn, K, device="cuda", dtype=torch.bfloat16))
    qw, sw = _weights_128(torch.randn(E, N, K, device="cuda") / K ** 0.5)
    before, after = _pipelined_and_not(
        monkeypatch, lambda: grouped_mm_fp8_blockwise(qx, qw, off, sx, sw, out_dtype=torch.float32,
                                                      config={"bn": 128}))
    assert torch.equal(before, after)


@pytest.mark.parametrize("M,N,K", [(77, 136, 128), (1000, 2048, 640), (4096, 4096, 4096), (256, 384, 384)],
                         ids=["1-block", "5-blocks", "32-blocks", "3-blocks"])
@own_process
def test_halved_promotion_against_the_128_wide_kernel(M, N, K, monkeypatch):
    """The gated path "gemm_fp8_blockwise_halves" (128 x 256 tiles, each K block as two m64n128 products promoted
    into their halves with fma): within 2e-3 of the f32 reference and within f32 rounding of the 128-wide kernel's
    result (the same per-block products; ragged N leaves a tile's second half partly or wholly past N)."""
    from tiledsl.ops import matmul_fp8_blockwise, quantize_fp8_blockwise
    from tiledsl.ops.gemm import grouped as G
    x = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    a, sa = quantize_fp8_blockwise(x)
    b, sb = _weights_128(torch.randn(N, K, device="cuda") / K ** 0.5)
    narrow = matmul_fp8_blockwise(a, b, sa, sb, out_dtype=torch.float32, config={"bn": 128})
    monkeypatch.setenv("TILEDSL_ENABLE", G.HALVES)
    assert G.halves_promotion(a, 256)
    wide = matmul_fp8_blockwise(a, b, sa, sb, out_dtype=torch.float32, config={"bn": 256})
    torch.cuda.synchronize()
    assert _rel(wide, _blockwise_ref(a, sa, b, sb)) <= 2e-3
    assert _rel(wide, narrow) <= 2e-6


@own_process
def test_halved_promotion_grouped_with_empty_experts(monkeypatch):
    from tiledsl.ops import grouped_mm_fp8_blockwise, quantize_fp8_blockwise
    from tiledsl.ops.gemm import grouped as G
    E, Tn, N, K = 8, 4000, 2048, 1152
    counts = _counts(E, Tn, True, seed=7)
    counts[3] += counts[2]
    counts[2] = 0                                               # an expert of 0 tokens
    off = _offsets(counts)
    qx, sx = quantize_fp8_blockwise(torch.randn(Tn, K, device="cuda", dtype=torch.bfloat16))
    qw, sw = _weights_128(torch.randn(E, N, K, device="cuda") / K ** 0.5)
    narrow = grouped_mm_fp8_blockwise(qx, qw, off, sx, sw, out_dtype=torch.float32, config={"bn": 128})
    monkeypatch.setenv("TILEDSL_ENABLE", G.HALVES)
    wide = grouped_mm_fp8_blockwise(qx, qw, off, sx, sw, out_dtype=torch.float32)     # the gate's default: 256
    torch.cuda.synchronize()
    assert _rel(wide, narrow) <= 2e-6


@pytest.mark.parametrize("M,N,K,bn", [(77, 136, 128, 128), (1000, 2048, 640, 256), (4096, 4096, 4096, 256),
                                      (4100, 1408, 1024, 128)], ids=["1-block", "halves", "4096", "ragged-m"])
@own_process
def test_blockwise_tma_store_matches_the_register_stores(M, N, K, bn):
    """The dense blockwise FP8 GEMM's TMA store (config tma_store, the gated path blockwise_tma_store): bf16 out
    equal bit for bit to the register stores' (the same accumulators, rounded once), M not a multiple of the tile
    (the last rows through the masked stores), out's rows all written."""
    from tiledsl.ops import matmul_fp8_blockwise, quantize_fp8_blockwise
    x = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    a, sa = quantize_fp8_blockwise(x)
    b, sb = _weights_128(torch.randn(N, K, device="cuda") / K ** 0.5)
    outs = []
    for tma in (False, True):
        out = torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
        matmul_fp8_blockwise(a, b, sa, sb, out=out, config=dict(bn=bn, tma_store=tma))
        outs.append(out)
    assert not torch.isnan(outs[1]).any()
    assert torch.equal(outs[0], outs[1])
    assert _rel(outs[1], _blockwise_ref(a, sa, b, sb)) <= 2e-3
