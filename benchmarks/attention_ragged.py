"""Packed variable-length attention and KV-cache decoding (tiledsl/ops/flash/varlen.py, decode.py) against torch:
the tables of `benchmarks/attention.py --varlen` and `--decode`.

    python benchmarks/attention.py --varlen [--backward] [--configs all] [--quick] [--dtypes bfloat16] [--dims 128]
    python benchmarks/attention.py --decode [--quick] [--dtypes bfloat16] [--dims 128]

--varlen: B sequences with lengths drawn from a fixed seed (uniform in 1 .. 2 * mean - 1, mean 1024 and 4096, about
16k tokens a batch), H * D = 2048 (H = H_kv), len_q = len_k, causal and not. TFLOP/s count 4 * H * D * the (query,
key) pairs each sequence attends (exactly: l * (l + 1) / 2 per sequence when causal). Columns: tiledsl's
attention_varlen; torch SDPA on nested jagged tensors (torch.nested.nested_tensor_from_jagged, the backend torch
picks); SDPA on the zero-padded batch (B, H, max_len, D) (causal: is_causal, which hides the padded keys from every
real row; not causal: a key-padding mask), its padding and unpadding outside the timing; flash-attn's
flash_attn_varlen_func where it is installed. Checked: O (max abs error; 2e-3 plus twice the reference's own bf16
rounding) and LSE (1e-3) of the first and the longest sequence against float32. With --backward a second table
times a training step (forward + backward: flash_attention_varlen through autograd against the same SDPA paths'
autograd), D 64 / 128 only, gradients of the longest sequence checked (relative error <= 1e-2). --configs all
times fa2.CANDIDATES' configurations beside the default (varlen.default_config), in the row's notes.

--decode: 32 query / 8 kv heads, D = 128, one new query per sequence, every sequence at the full context (torch
needs no mask), batch x context in (1, 32k), (1, 128k), (16, 8k), (64, 4k), (256, 2k); contiguous (B, S, H_kv, D)
and paged (pages of 64, a shuffled block table) caches. GB/s count the K and V bytes read; 'vs copy' divides by the
device copy bandwidth (a 1 GiB torch copy: 2 bytes moved per byte copied). torch SDPA (each backend, enable_gqa; the
best shown) runs on the cache made contiguous as (B, H_kv, S, D) outside the timing (paged: gathered first, outside
the timing); flash-attn's flash_attn_with_kvcache where installed (on the same cache layout as ours). Checked: O of
the first and last sequence against float32. Then e4m3 (FP8) cache rows at (1, 32k), (16, 8k) and (64, 4k): the
cache quantised per kv head (attention_decode's k_scale / v_scale), bf16 queries; GB/s count the e4m3 bytes; torch's
columns run the dequantised bf16 cache (twice the bytes), so 'vs best torch' is a time ratio.

Times are medians of CUDA events, the columns timed side by side (varlen: attention_rows.side_by_side; decode:
gemm.side_by_side, call by call, L2 evicted and a spin kernel queued before each call, so that the events time the
device's work; 'host us' is the host time of one of our calls queued back to back, which CUDA graphs remove). Both
tables (the default bf16 rows) take about a minute each on an H200; --varlen --backward about a minute more.
"""
import math

import numpy as np

from attention_rows import notes, side_by_side, timing
from kernels import bench

BACKENDS = ("CUDNN_ATTENTION", "FLASH_ATTENTION", "EFFICIENT_ATTENTION")
SHORT = {"FLASH_ATTENTION": "flash", "CUDNN_ATTENTION": "cudnn", "EFFICIENT_ATTENTION": "eff"}
DECODE_SHAPES = ((1, 32768), (1, 131072), (16, 8192), (64, 4096), (256, 2048))
DECODE_BUSY_US = 400                 # a spin kernel queued before each timed decode call (after the L2 flush): the
                                     # events time the device's work, not the host's launch path (column 'host us')
DECODE_PAGE = 64
FP8_ROWS = True                      # --decode adds e4m3-cache rows at FP8_SHAPES
FP8_SHAPES = ((1, 32768), (16, 8192), (64, 4096))
VARLEN_MEANS = (1024, 4096)
TOKENS = 16384


def _flash_attn():
    """flash-attn's module where installed, else None."""
    try:
        import flash_attn
        return flash_attn
    except Exception:
        return None


def _try(row, fns, name, make):
    """fns[name] = make() once it has run (outside the timing); a path that cannot run is n/a, noted."""
    try:
        f = make()
        f()
        fns[name] = f
    except Exception as e:
        row.setdefault("notes", []).append(f"{name}: {type(e).__name__}")


def _sdpa(torch, backend, fn):
    from torch.nn.attention import SDPBackend, sdpa_kernel

    def f():
        with sdpa_kernel(getattr(SDPBackend, backend)):
            return fn()
    return f


def _ref_one(torch, q, k, v, causal, scale):
    """float32 (O (n, H, D), LSE (n, H)) of one sequence, q (n, H, D), k, v (m, H_kv, D), bottom-right causal."""
    n, H, _ = q.shape
    m = k.shape[0]
    g = H // k.shape[1]
    qf = q.float().transpose(0, 1)
    kf = k.float().repeat_interleave(g, 1).transpose(0, 1)
    vf = v.float().repeat_interleave(g, 1).transpose(0, 1)
    s = (qf @ kf.transpose(-1, -2)) * scale
    if causal:
        i = torch.arange(n, device=q.device)[:, None]
        s = s.masked_fill(torch.arange(m, device=q.device)[None, :] > i + (m - n), -math.inf)
    lse = torch.logsumexp(s, -1)
    return (torch.exp(s - lse[..., None]) @ vf).transpose(0, 1), lse.T


def _tol(torch, ro, dt):
    return 2e-3 + (2 * (ro.to(dt).float() - ro).abs().max().item() if dt == torch.bfloat16 else 0.0)


# ------------------------------------------------------------------------------------------------ varlen
def run_varlen_row(torch, ops, dtype, D, mean, causal, quick, configs=()):
    dt = getattr(torch, dtype)
    H = 2048 // D
    B = max(1, TOKENS // mean)
    lens = [int(x) for x in np.random.default_rng(mean).integers(1, 2 * mean, B)]
    T, L = sum(lens), max(lens)
    torch.manual_seed(mean + D)
    q, k, v = (torch.randn(T, H, D, device="cuda", dtype=dt) for _ in range(3))
    cu = torch.tensor([0] + list(np.cumsum(lens)), dtype=torch.int32, device="cuda")
    pairs = sum(n * (n + 1) // 2 if causal else n * n for n in lens)
    tf, reps = timing(4 * H * D * pairs, quick)
    row = {"dtype": dtype, "D": D, "mean": mean, "causal": causal, "B": B, "T": T, "ok": True}
    scale = 1.0 / math.sqrt(D)
    o, lse = ops.attention_varlen(q, k, v, cu, cu, L, L, causal=causal)
    torch.cuda.synchronize()
    eo = el = 0.0
    ok = True
    for b in sorted({0, int(np.argmax(lens))}):
        s, e = int(cu[b]), int(cu[b + 1])
        ro, rl = _ref_one(torch, q[s:e], k[s:e], v[s:e], causal, scale)
        eb = (o[s:e].float() - ro).abs().max().item()
        lb = (lse[:, s:e].T - rl).abs().max().item()
        ok &= eb <= _tol(torch, ro, dt) and lb <= 1e-3
        eo, el = max(eo, eb), max(el, lb)
    row["ok"] = ok
    row["err"] = f"{eo:.1e}/{el:.0e}" + ("" if ok else " FAIL")
    fns = {"tiledsl": lambda: ops.attention_varlen(q, k, v, cu, cu, L, L, causal=causal)}
    for cfg in configs:              # --configs all: fa2.CANDIDATES beside the default, each checked too
        label = ".".join(map(str, cfg))
        oc, lc = ops.attention_varlen(q, k, v, cu, cu, L, L, causal=causal, config=cfg)
        if not (torch.equal(oc.isnan(), o.isnan()) and (oc.float() - o.float()).abs().max().item() <= 2e-2):
            row["ok"] = False
            row["err"] += f" {label} FAIL"
        fns[label] = (lambda cfg=cfg: ops.attention_varlen(q, k, v, cu, cu, L, L, causal=causal, config=cfg))
    off = cu.long()

    def nested():
        nj = [torch.nested.nested_tensor_from_jagged(x, off).transpose(1, 2) for x in (q, k, v)]
        return lambda: torch.nn.functional.scaled_dot_product_attention(*nj, is_causal=causal)
    _try(row, fns, "nested", nested)

    def padded():
        pad = [torch.zeros(B, H, L, D, device="cuda", dtype=dt) for _ in range(3)]
        for b, n in enumerate(lens):
            for p, x in zip(pad, (q, k, v)):
                p[b, :, :n] = x[int(cu[b]):int(cu[b]) + n].transpose(0, 1)
        mask = None if causal else (torch.arange(L, device="cuda")[None, :] <
                                    torch.tensor(lens, device="cuda")[:, None])[:, None, None, :]
        return lambda: torch.nn.functional.scaled_dot_product_attention(*pad, attn_mask=mask, is_causal=causal)
    _try(row, fns, "padded", padded)
    fa = _flash_attn()
    if fa is not None and hasattr(fa, "flash_attn_varlen_func"):
        _try(row, fns, "flash-attn", lambda: (lambda: fa.flash_attn_varlen_func(q, k, v, cu, cu, L, L,
                                                                                 causal=causal)))
    ms = side_by_side(fns, torch, bench, reps)
    row.update({name: tf(t) for name, t in ms.items()})
    if configs:
        row.setdefault("notes", []).append(", ".join(f"{n}: {row[n]:.0f}" for n in fns if n[0].isdigit()))
    return row


def varlen_header():
    return ("| dtype | D | mean len | causal | B | tokens | tiledsl | nested SDPA | padded SDPA | flash-attn | "
            "vs best torch | err O/LSE |\n| --- | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: "
            "| --- |")


def _cell(r, k):
    return "n/a" if r.get(k) is None else f"{r[k]:.0f}"


def varlen_line(r):
    torch_best = max([r[k] for k in ("nested", "padded") if r.get(k)] or [0])
    vs = f"{r['tiledsl'] / torch_best:.2f}" if r.get("tiledsl") and torch_best else "n/a"
    return (f"| {r['dtype']} | {r['D']} | {r['mean']} | {'yes' if r['causal'] else 'no'} | {r.get('B', '-')} | "
            f"{r.get('T', '-')} | {_cell(r, 'tiledsl')} | {_cell(r, 'nested')} | {_cell(r, 'padded')} | "
            f"{_cell(r, 'flash-attn')} | {vs} | {r.get('err', 'ERROR')}{notes(r)} |")


def run_varlen_train_row(torch, ops, dtype, D, mean, causal, quick):
    """--varlen --backward: one training step (forward + backward) of the same packed batch: tiledsl's
    flash_attention_varlen through autograd against SDPA on nested jagged and on padded tensors (each
    torch.autograd.grad of its output). TFLOP/s count 3.5x the forward's (2 GEMMs forward, 5 backward)."""
    dt = getattr(torch, dtype)
    H = 2048 // D
    B = max(1, TOKENS // mean)
    lens = [int(x) for x in np.random.default_rng(mean).integers(1, 2 * mean, B)]
    T, L = sum(lens), max(lens)
    torch.manual_seed(mean + D + 1)
    q, k, v = (torch.randn(T, H, D, device="cuda", dtype=dt, requires_grad=True) for _ in range(3))
    do = torch.randn(T, H, D, device="cuda", dtype=dt)
    cu = torch.tensor([0] + list(np.cumsum(lens)), dtype=torch.int32, device="cuda")
    pairs = sum(n * (n + 1) // 2 if causal else n * n for n in lens)
    tf, reps = timing(3.5 * 4 * H * D * pairs, quick)
    row = {"dtype": dtype, "D": D, "mean": mean, "causal": causal, "B": B, "T": T, "ok": True}
    scale = 1.0 / math.sqrt(D)

    def ours():
        o = ops.flash_attention_varlen(q, k, v, cu, cu, L, L, causal=causal)
        return torch.autograd.grad(o, (q, k, v), do)
    grads = ours()
    torch.cuda.synchronize()
    err = 0.0
    b = int(np.argmax(lens))
    s, e = int(cu[b]), int(cu[b + 1])
    qf, kf, vf = (x[s:e].detach().float().transpose(0, 1).requires_grad_() for x in (q, k, v))
    of = torch.nn.functional.scaled_dot_product_attention(qf, kf, vf, is_causal=causal, scale=scale)
    refs = torch.autograd.grad(of, (qf, kf, vf), do[s:e].float().transpose(0, 1))
    for g, r in zip(grads, refs):
        err = max(err, ((g[s:e].float().transpose(0, 1) - r).norm() / r.norm()).item())
    row["ok"] = err <= 1e-2
    row["err"] = f"{err:.1e}" + ("" if row["ok"] else " FAIL")
    del grads, refs
    fns = {"tiledsl": ours}
    off = cu.long()

    def nested():
        nj = [torch.nested.nested_tensor_from_jagged(x.detach(), off).requires_grad_() for x in (q, k, v)]
        dn = torch.nested.nested_tensor_from_jagged(do, off).transpose(1, 2)

        def f():
            o = torch.nn.functional.scaled_dot_product_attention(*(x.transpose(1, 2) for x in nj), is_causal=causal)
            return torch.autograd.grad(o, nj, dn)
        return f
    _try(row, fns, "nested", nested)

    def padded():
        pad = [torch.zeros(B, H, L, D, device="cuda", dtype=dt) for _ in range(4)]
        for i, n in enumerate(lens):
            for p, x in zip(pad, (q, k, v, do)):
                p[i, :, :n] = x.detach()[int(cu[i]):int(cu[i]) + n].transpose(0, 1)
        qp, kp, vp = (p.requires_grad_() for p in pad[:3])
        mask = None if causal else (torch.arange(L, device="cuda")[None, :] <
                                    torch.tensor(lens, device="cuda")[:, None])[:, None, None, :]

        def f():
            o = torch.nn.functional.scaled_dot_product_attention(qp, kp, vp, attn_mask=mask, is_causal=causal)
            return torch.autograd.grad(o, (qp, kp, vp), pad[3])
        return f
    _try(row, fns, "padded", padded)
    ms = side_by_side(fns, torch, bench, reps)
    row.update({name: tf(t) for name, t in ms.items()})
    return row


# ------------------------------------------------------------------------------------------------ decode
def copy_bandwidth(torch):
    """GB/s of a 1 GiB device copy (bytes read + written), median of CUDA events."""
    src = torch.empty(2 ** 29, dtype=torch.float16, device="cuda")
    dst = torch.empty_like(src)
    ms = bench(lambda: dst.copy_(src), torch)
    return 2 * 2 ** 30 / (ms * 1e-3) / 1e9


def _e4m3(torch, x):
    """x's per-kv-head e4m3 quantisation (amax to 448) and descales: (bytes as float8_e4m3fn, (H_kv,) float32)."""
    amax = x.abs().float().amax(dim=tuple(i for i in range(x.ndim) if i != 2)).clamp_min(1e-6)
    sc = amax / 448.0
    return (x.float() / sc[:, None]).to(torch.float8_e4m3fn), sc


def run_decode_row(torch, ops, dtype, B, ctx, paged, quick, copy_gbs, D=128):
    kv8 = dtype == "e4m3"                    # an FP8 cache read with bf16 queries; torch runs the bf16 dequantised one
    dt = torch.bfloat16 if kv8 else getattr(torch, dtype)
    H, HK = 32, 8
    torch.manual_seed(B + ctx)
    q = torch.randn(B, 1, H, D, device="cuda", dtype=dt)
    lens = torch.full((B,), ctx, dtype=torch.int32, device="cuda")
    row = {"dtype": dtype, "B": B, "ctx": ctx, "paged": paged, "ok": True}
    if paged:
        per = ctx // DECODE_PAGE
        kc, vc = (torch.randn(B * per, DECODE_PAGE, HK, D, device="cuda", dtype=dt) for _ in range(2))
        bt = torch.randperm(B * per, device="cuda").view(B, per).to(torch.int32)
        gathered = [c[bt.long()].reshape(B, ctx, HK, D) for c in (kc, vc)]
    else:
        kc, vc = (torch.randn(B, ctx, HK, D, device="cuda", dtype=dt) for _ in range(2))
        bt = None
        gathered = [kc, vc]
    scales = {}
    if kv8:
        (kc, ks), (vc, vs) = _e4m3(torch, kc), _e4m3(torch, vc)
        scales = dict(k_scale=ks, v_scale=vs)
        # exact: the float32 dequantised values (the check's); gathered: their bf16 rounding (torch's inputs)
        if paged:
            exact = [(c[bt.long()].float() * sc[:, None]).reshape(B, ctx, HK, D) for c, sc in ((kc, ks), (vc, vs))]
        else:
            exact = [c.float() * sc[:, None] for c, sc in ((kc, ks), (vc, vs))]
        gathered = [x.to(dt) for x in exact]
    else:
        exact = gathered
    nbytes = 2 * B * ctx * HK * D * kc.element_size()
    call = (lambda: ops.attention_decode(q, kc, vc, lens, block_table=bt, **scales))
    o = call()
    torch.cuda.synchronize()
    eo, ok = 0.0, True
    for b in sorted({0, B - 1}):
        ro, _ = _ref_one(torch, q[b], exact[0][b], exact[1][b], False, 1.0 / math.sqrt(D))
        e = (o[b].float() - ro).abs().max().item()
        ok &= e <= _tol(torch, ro, dt)
        eo = max(eo, e)
    row["ok"], row["err"] = ok, f"{eo:.1e}" + ("" if ok else " FAIL")
    fns = {"tiledsl": call}
    kt, vt = (g.transpose(1, 2).contiguous() for g in gathered)      # (B, H_kv, S, D), outside the timing
    del gathered, exact
    qt = q.transpose(1, 2)
    for be in BACKENDS:
        _try(row, fns, SHORT[be], lambda be=be: _sdpa(torch, be, lambda: torch.nn.functional.scaled_dot_product_attention(
            qt, kt, vt, enable_gqa=True)))
    fa = _flash_attn()
    if fa is not None and hasattr(fa, "flash_attn_with_kvcache") and not kv8:
        _try(row, fns, "flash-attn", lambda: (lambda: fa.flash_attn_with_kvcache(
            q, kc, vc, cache_seqlens=lens, block_table=bt)))
    ms = dict(zip(fns, flushed_side_by_side(list(fns.values()), torch, [()], reps=10 if quick else 30,
                                            busy_us=DECODE_BUSY_US)))
    row.update({name: nbytes / (t * 1e-3) / 1e9 for name, t in ms.items()})
    row["us"] = ms["tiledsl"] * 1e3
    row["host"] = host_us(call, torch)
    row["copy"] = copy_gbs
    return row


def flushed_side_by_side(*args, **kw):
    """benchmarks/gemm.py's side_by_side (L2 evicted and a spin kernel queued before each call), loaded by path:
    examples/gemm.py takes the name `gemm` on the benchmarks' import path."""
    import importlib.util
    import os
    spec = importlib.util.spec_from_file_location("bench_gemm", os.path.join(os.path.dirname(__file__), "gemm.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.side_by_side(*args, **kw)


def host_us(call, torch, n=200):
    """Microseconds of host time a call takes queued back to back (the eager launch path's cost; CUDA graphs
    remove it), the device left to drain after."""
    import time
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        call()
    t = (time.perf_counter() - t0) / n * 1e6
    torch.cuda.synchronize()
    return t


def decode_header():
    return ("| dtype | batch | context | cache | tiledsl us | tiledsl GB/s | vs copy | cuDNN | flash | efficient | "
            "flash-attn | vs best torch | err O | host us |\n| --- | ---: | ---: | --- | ---: | ---: | ---: | ---: | "
            "---: | ---: | ---: | ---: | --- | ---: |")


def decode_line(r):
    have = [r[k] for k in ("cudnn", "flash", "eff") if r.get(k)]
    vs = f"{r['tiledsl'] / max(have):.2f}" if r.get("tiledsl") and have else "n/a"
    vc = f"{r['tiledsl'] / r['copy']:.2f}" if r.get("tiledsl") and r.get("copy") else "n/a"
    us = f"{r['us']:.0f}" if r.get("us") else "n/a"
    return (f"| {r['dtype']} | {r['B']} | {r['ctx']} | {'paged ' + str(DECODE_PAGE) if r['paged'] else 'contiguous'} "
            f"| {us} | {_cell(r, 'tiledsl')} | {vc} | {_cell(r, 'cudnn')} | {_cell(r, 'flash')} | "
            f"{_cell(r, 'eff')} | {_cell(r, 'flash-attn')} | {vs} | {r.get('err', 'ERROR')}{notes(r)} | "
            f"{r.get('host', 0):.0f} |")


def main_ragged(torch, which, dtypes, dims, quick, backward=False, all_configs=False):
    """Print the --varlen or --decode table (--varlen with backward: the training-step table too); True when every
    row is correct."""
    import traceback
    import tiledsl.ops as ops
    rows = []
    name = torch.cuda.get_device_name()
    if which == "varlen":
        print(varlen_header())
        for dtype in dtypes:
            for D in dims:
                for mean in VARLEN_MEANS:
                    for causal in (False, True):
                        try:
                            from tiledsl.ops.flash import fa2
                            r = run_varlen_row(torch, ops, dtype, D, mean, causal, quick,
                                               fa2.CANDIDATES.get(D, []) if all_configs else ())
                        except Exception:
                            traceback.print_exc()
                            r = {"dtype": dtype, "D": D, "mean": mean, "causal": causal, "ok": False}
                        rows.append(r)
                        print(varlen_line(r), flush=True)
                        torch.cuda.empty_cache()
        brows = []
        for dtype in (dtypes if backward else []):
            for D in [d for d in dims if d in (64, 128)]:
                for mean in VARLEN_MEANS:
                    for causal in (False, True):
                        try:
                            r = run_varlen_train_row(torch, ops, dtype, D, mean, causal, quick)
                        except Exception:
                            traceback.print_exc()
                            r = {"dtype": dtype, "D": D, "mean": mean, "causal": causal, "ok": False}
                        brows.append(r)
                        print(varlen_line(r), flush=True)
                        torch.cuda.empty_cache()
        print(f"\n{name}, torch {torch.__version__}; varlen forward TFLOP/s (medians); 'vs best torch' is tiledsl / "
              f"the faster of nested and padded SDPA")
        print(varlen_header())
        for r in rows:
            print(varlen_line(r))
        if brows:
            print("\nvarlen training step (forward + backward) TFLOP/s (3.5x the forward's flops); err: the largest "
                  "relative gradient error of the longest sequence")
            print(varlen_header())
            for r in brows:
                print(varlen_line(r))
        rows += brows
    else:
        copy_gbs = copy_bandwidth(torch)
        print(f"device copy bandwidth: {copy_gbs:.0f} GB/s")
        print(decode_header())
        for dtype in dtypes + (["e4m3"] if FP8_ROWS else []):
            for B, ctx in (DECODE_SHAPES if dtype != "e4m3" else FP8_SHAPES):
                for paged in (False, True):
                    try:
                        r = run_decode_row(torch, ops, dtype, B, ctx, paged, quick, copy_gbs)
                    except Exception:
                        traceback.print_exc()
                        r = {"dtype": dtype, "B": B, "ctx": ctx, "paged": paged, "ok": False}
                    rows.append(r)
                    print(decode_line(r), flush=True)
                    torch.cuda.empty_cache()
        print(f"\n{name}, torch {torch.__version__}; decode KV GB/s (medians; copy {copy_gbs:.0f} GB/s); 'vs best "
              f"torch' is tiledsl / the fastest SDPA backend")
        print(decode_header())
        for r in rows:
            print(decode_line(r))
    bad = [r for r in rows if not r["ok"]]
    print(f"\ncorrectness: {len(rows) - len(bad)}/{len(rows)} rows within tolerance")
    return not bad
