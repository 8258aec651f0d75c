"""attention_varlen_backward: the gradients of attention_varlen (varlen.py) for packed sequences, fa2_backward.py's
main kernel with per-sequence offsets read from the device (cu_seqlens), and the float64 `reference_varlen_backward`.

Three kernels, every size read at call time (no recompilation per batch):
  * make_varlen_delta: Delta = rowsum(dO * O) and LSE * log2(e) of each (sequence, head), padded to NPM rows (the
    longest sequence's query tiles), zeros on the padding; a row that saw no key (LSE = -inf) gets 0, so its
    masked scores give P = ex2(-inf - 0) = 0 and no NaN;
  * make_varlen_backward: one block per (key block of BK = 16 * warps rows, query head, sequence), fa2_backward.py's
    loop over the sequence's query tiles (S^T, P^T, dV += P^T dO, dP^T, dS^T, dK += dS^T Q, dQ += dS K by
    red.global.add.f32); bottom-right causal (query i sees key j <= i + len_k - len_q); a key block past its
    sequence's keys returns, one whose sequence has no query stores zeros;
  * make_varlen_cast: float32 accumulators to q's dtype (dQ, and with GQA dK and dV, which every query head's block
    adds into).
"""
import math

import numpy as np

import tiledsl
from tiledsl import T

from .backward_tile import tile_parts
from .common import LOG2E, NEG, cast_row8, host_launcher, softmax_scale
from .fa2_backward import QTILE, WARPS
from .varlen import _dtype_of, interpreted

_BIG = 2 ** 31 - 1
DELTA_THREADS = 128
_KERNELS = {}


def make_varlen_delta(dtype, D, H):
    """Delta2, LSE2 (B, H, NPM) float32 from O, dO (Tq, H, D), LSE (H, Tq) and cu_seqlens_q. Launch: grid
    ceil(B * H * NPM / (128 / (D / 8))), 128 threads."""
    key = ("delta", dtype, D, H)
    if key in _KERNELS:
        return _KERNELS[key]
    CPR = D // 8
    RPB = DELTA_THREADS // CPR
    LOGC = CPR.bit_length() - 1
    W = D // 2

    @tiledsl.jit
    def varlen_bwd_delta(O: T.Tensor(("TQ", H, D), dtype), dO: T.Tensor(("TQ", H, D), dtype),
                         LSE: T.Tensor((H, "TQ"), "float32"), CU: T.Tensor(("B1",), "int32"),
                         Delta2: T.Tensor(("B", H, "NPM"), "float32"), LSE2: T.Tensor(("B", H, "NPM"), "float32")):
        T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=DELTA_THREADS))    # the grid: the host's
        tid = T.cuda.thread_id()
        p = T.cuda.block_id() * RPB + tid // CPR      # padded row: (sequence, head, n)
        c = tid % CPR
        bh = T.min(p // NPM, B * H - 1)
        n = p % NPM
        b = bh // H
        h = bh % H
        q0 = CU[b]
        nq = CU[b + 1] - q0
        r = T.min(T.max((q0 + T.min(n, nq - 1)) * H + h, 0), TQ * H - 1)   # clamped: pad rows compute and drop
        ro = T.alloc_local((1, 4), "uint32")
        rd = T.alloc_local((1, 4), "uint32")
        gO = O.view(dtype="uint32").view(_BIG // W, W)
        gdO = dO.view(dtype="uint32").view(_BIG // W, W)
        T.cuda.tile.apply(T.ptx["ld.global.v4.b32"], ro[0], gO[r, c * 4: c * 4 + 4])
        T.cuda.tile.apply(T.ptx["ld.global.v4.b32"], rd[0], gdO[r, c * 4: c * 4 + 4])
        ho = ro.view(dtype=dtype)
        hd = rd.view(dtype=dtype)
        acc = T.alloc_local((1, 1), "float32")
        sh = T.alloc_local((1, 1), "float32")
        s = T.float32(0)
        for j in T.unroll(8):
            s = s + T.cast(ho[0, j], "float32") * T.cast(hd[0, j], "float32")
        acc[0, 0] = s
        for k in T.unroll(LOGC):
            T.cuda.tile.apply(T.ptx["shfl.sync.bfly.b32"], sh, acc, 1 << k, 0x1F, 0xFFFFFFFF)
            acc[0, 0] = acc[0, 0] + sh[0, 0]
        if c == 0 and p < B * H * NPM:
            live = n < nq
            Delta2.view(_BIG)[p] = acc[0, 0] if live else 0.0
            lse = LSE[h, q0 + n] if live else NEG
            LSE2.view(_BIG)[p] = lse * LOG2E if lse != NEG else 0.0

    _KERNELS[key] = varlen_bwd_delta
    return varlen_bwd_delta


def make_varlen_cast(dtype):
    """Y (n8, 8) in `dtype` from X (n8, 8) float32, 8 values a thread. Launch: grid ceil(n8 / 256), 256 threads."""
    key = ("cast", dtype)
    if key in _KERNELS:
        return _KERNELS[key]

    @tiledsl.jit
    def varlen_bwd_cast(X: T.Tensor(("N8", 8), "float32"), Y: T.Tensor(("N8", 8), dtype)):
        T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=256))               # the grid: the host's
        i = T.cuda.block_id() * 256 + T.cuda.thread_id()
        if i < N8:
            cast_row8(X, i, Y, i, dtype)

    _KERNELS[key] = varlen_bwd_cast
    return varlen_bwd_cast


def make_varlen_backward(dtype, D, causal, H, HK, scale, warps=None):
    """The main kernel: Q, dO (Tq, H, D); K, V (Tk, H_kv, D); LSE2, Delta (B, H, NPM) (make_varlen_delta's, NPM a
    multiple of the query tile); dQ (Tq, H, D) float32 zeroed; dK, dV (Tk, H_kv, D) in `dtype` without GQA, else
    float32 zeroed accumulators; cu_seqlens_q, cu_seqlens_k. Launch: grid (ceil(max_seqlen_k / BK), H, B)."""
    if D not in (64, 128):
        raise tiledsl.LaunchError(f"attention_varlen_backward supports head dims 64 and 128, got {D}")
    warps = warps or WARPS
    if warps not in (4, 8):
        raise tiledsl.LaunchError(f"attention_varlen_backward runs 4 or 8 warps a block, got {warps}")
    key = ("bwd", dtype, D, bool(causal), H, HK, float(scale), warps)
    if key in _KERNELS:
        return _KERNELS[key]
    GROUP = H // HK
    COPY = "cp.async.cg.shared.global"
    W, CPR = D // 2, D // 8
    BQ = QTILE[D]
    BK, THREADS = 16 * warps, 32 * warps
    DN = D // 8
    MQ = BQ // 16
    DPW = (DN // 2) * MQ // warps
    ROWQ = _BIG // (CPR * 4)
    acc_t = dtype if GROUP == 1 else "float32"

    @tiledsl.inline
    def copy_rows(cp, g, stage, rows, row0, nrows, base, stride, head, tid):
        """cp.async of `rows` rows from the sequence's row row0 (clamped to nrows - 1) into `stage` (None: the
        single-stage K or V): the sequence's row r is packed row (base + r) * stride + head."""
        for j in T.unroll(rows * CPR // THREADS):
            c = tid + THREADS * j
            r = (base + T.min(row0 + c // CPR, nrows - 1)) * stride + head
            if stage is None:
                T.cuda.tile.apply(T.ptx[COPY], cp[c // CPR, c % CPR], g[r, c % CPR, :], chunk_bytes=16)
            else:
                T.cuda.tile.apply(T.ptx[COPY], cp[stage, c // CPR, c % CPR], g[r, c % CPR, :], chunk_bytes=16)

    @tiledsl.inline
    def copy_stats(sl, gL, gD, stage, qt, srow, tid):
        """cp.async of query tile qt's LSE * log2e and delta (BQ floats each, from padded row srow) into `stage`."""
        if tid < BQ // 2:
            c = tid % (BQ // 4)
            if tid < BQ // 4:
                T.cuda.tile.apply(T.ptx[COPY], sl[stage, 0, c], gL[srow + qt * (BQ // 4) + c, :], chunk_bytes=16)
            else:
                T.cuda.tile.apply(T.ptx[COPY], sl[stage, 1, c], gD[srow + qt * (BQ // 4) + c, :], chunk_bytes=16)

    parts = tile_parts(dtype, D, BQ, warps, scale)
    shared, registers, gemm_t, key_tile, store_kv = (parts.shared, parts.registers, parts.gemm_t, parts.key_tile,
                                                     parts.store_kv)

    @tiledsl.jit
    def varlen_bwd(Q: T.Tensor(("TQ", H, D), dtype), K: T.Tensor(("TK", HK, D), dtype),
                   V: T.Tensor(("TK", HK, D), dtype), dO: T.Tensor(("TQ", H, D), dtype),
                   LSE2: T.Tensor(("B", H, "NPM"), "float32"), Delta: T.Tensor(("B", H, "NPM"), "float32"),
                   dQ: T.Tensor(("TQ", H, D), "float32"), dK: T.Tensor(("TK", HK, D), acc_t),
                   dV: T.Tensor(("TK", HK, D), acc_t), CUQ: T.Tensor(("B1",), "int32"),
                   CUK: T.Tensor(("B1",), "int32")):
        T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=THREADS))           # the grid: the host's
        tid = T.cuda.thread_id()
        warp = T.cuda.warp_id()
        lane = T.cuda.lane_id()
        kb = T.cuda.block_id(0)
        h = T.cuda.block_id(1)
        b = T.cuda.block_id(2)
        kvh = h // GROUP
        k0 = CUK[b]
        nk = CUK[b + 1] - k0
        if kb * BK >= nk:
            return
        q0 = CUQ[b]
        nq = CUQ[b + 1] - q0
        offs = nk - nq                       # bottom-right causal: query i sees key j <= i + offs
        NQT = (nq + BQ - 1) // BQ
        srow = (b * H + h) * (NPM // 4)      # this head's first 16-byte chunk of LSE2 / Delta
        gQ = Q.view(dtype="uint32").view(ROWQ, CPR, 4)
        gO = dO.view(dtype="uint32").view(ROWQ, CPR, 4)
        gK = K.view(dtype="uint32").view(ROWQ, CPR, 4)
        gV = V.view(dtype="uint32").view(ROWQ, CPR, 4)
        gdQ = dQ.view(_BIG // D, D)

        sl, cp_k, cp_v, cp_q, cp_o, lda_k, ldb_q, smem = shared()
        gL = LSE2.view(dtype="uint32").view(_BIG // 4, 4)
        gD = Delta.view(dtype="uint32").view(_BIG // 4, 4)

        # causal: the first query tile holding a query that sees this block's first key
        qt0 = 0
        if causal:
            qt0 = T.min(T.max(kb * BK - offs, 0) // BQ, NQT)

        copy_rows(cp_k, gK, None, BK, kb * BK, nk, k0, HK, kvh, tid)
        copy_rows(cp_v, gV, None, BK, kb * BK, nk, k0, HK, kvh, tid)
        if qt0 < NQT:
            copy_rows(cp_q, gQ, 0, BQ, qt0 * BQ, nq, q0, H, h, tid)
            copy_rows(cp_o, gO, 0, BQ, qt0 * BQ, nq, q0, H, h, tid)
            copy_stats(sl, gL, gD, 0, qt0, srow, tid)
        T.cuda.tile.apply(T.ptx["cp.async.commit_group"])

        s_v, ra_ld, ra_mma, rb_ld, rb_mma, dk, dv, acc, regs = registers()

        key0 = kb * BK + warp * 16 + lane // 4         # this lane's key rows (of the sequence): key0, key0 + 8
        mq = warp % MQ
        dp0 = (warp // MQ) * DPW
        # causal: the tiles holding a query that misses one of the block's keys (phase 0, masked) apart from the rest
        qtm = qt0
        if causal:
            qtm = T.max(qt0, T.min(NQT, (T.max(kb * BK + BK - 1 - offs, 0) + BQ - 1) // BQ))
        for ph in T.unroll(2 if causal else 1):
            lo = qt0 if ph == 0 else qtm
            hi = qtm if causal and ph == 0 else NQT
            for qt in range(lo, hi):
                st = (qt - qt0) % 2
                T.cuda.tile.apply(T.ptx["cp.async.wait_group"], 0)
                T.cuda.syncthreads()
                if qt + 1 < NQT:
                    copy_rows(cp_q, gQ, 1 - st, BQ, (qt + 1) * BQ, nq, q0, H, h, tid)
                    copy_rows(cp_o, gO, 1 - st, BQ, (qt + 1) * BQ, nq, q0, H, h, tid)
                    copy_stats(sl, gL, gD, 1 - st, qt + 1, srow, tid)
                T.cuda.tile.apply(T.ptx["cp.async.commit_group"])

                gemm_t(s_v, lda_k[warp], ldb_q, st, ra_ld, ra_mma, rb_ld, rb_mma)
                key_tile(acc, regs, smem, st, qt, kb, warp, lane, key0, mq, dp0, nq, nk, offs, causal and ph == 0,
                         gdQ, q0, H, h, nq)

        # epilogue: this warp's 16 key rows of dK and dV (zeros where no query saw them)
        for r in T.unroll(2):
            krow = key0 + 8 * r
            if krow < nk:
                grow = (k0 + krow) * HK + kvh
                if GROUP == 1:
                    store_kv(dk, dv, r, lane, grow, (dK.view(dtype="uint32").view(_BIG // W, W),
                                                     dV.view(dtype="uint32").view(_BIG // W, W)), None)
                else:
                    store_kv(dk, dv, r, lane, grow, None, (dK.view(_BIG // D, D), dV.view(_BIG // D, D)))

    varlen_bwd.bk = BK
    varlen_bwd.bq = BQ
    varlen_bwd.threads = THREADS
    _KERNELS[key] = varlen_bwd
    return varlen_bwd


def attention_varlen_backward(q, k, v, out, lse, dout, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                              causal=False, scale=None, warps=None):
    """(dq, dk, dv) of attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, causal,
    scale) = (out, lse) for the output gradient dout (q's shape). D in {64, 128}; dk and dv are the gradients of
    each kv head summed over its query heads (GQA). numpy float16 arrays run on the interpreter. The offsets are
    not validated here (attention_varlen's validate= does it for the forward)."""
    if q.ndim != 3 or k.ndim != 3 or tuple(k.shape) != tuple(v.shape):
        raise tiledsl.LaunchError(f"q must be (Tq, H, D), k and v (Tk, H_kv, D); got {tuple(q.shape)}, "
                                  f"{tuple(k.shape)}, {tuple(v.shape)}")
    Tq, H, D = q.shape
    Tk, HK = k.shape[0], k.shape[1]
    if k.shape[2] != D or H % HK:
        raise tiledsl.LaunchError(f"k/v (Tk, H_kv, D) must have q's D={D} and H_kv dividing H={H}")
    if tuple(out.shape) != tuple(q.shape) or tuple(dout.shape) != tuple(q.shape) or tuple(lse.shape) != (H, Tq):
        raise tiledsl.LaunchError(f"out and dout must have q's shape {tuple(q.shape)} and lse be (H, Tq) = "
                                  f"{(H, Tq)}; got {tuple(out.shape)}, {tuple(dout.shape)}, {tuple(lse.shape)}")
    dt = _dtype_of(q, k, v)
    _dtype_of(q, out, dout)
    scale = softmax_scale(scale, D)
    main = make_varlen_backward(dt, D, causal, H, HK, scale, warps)
    delta_k = make_varlen_delta(dt, D, H)
    cast = make_varlen_cast(dt)
    B = cu_seqlens_q.shape[0] - 1
    BQ, BK = main.bq, main.bk
    NPM = max(1, -(-int(max_seqlen_q) // BQ)) * BQ
    gqa = H != HK
    rpb = DELTA_THREADS // (D // 8)
    grid_d = (-(-(B * H * NPM) // rpb),)
    grid_m = (max(1, -(-int(max_seqlen_k) // BK)), H, B)
    if isinstance(q, np.ndarray):
        run = (lambda kern, g, t, *a: interpreted(kern)[g, t](*a))
        z = (lambda shape, dtype: np.zeros(shape, dtype))
        f32, half = np.float32, q.dtype
        q, k, v, out, dout, lse = (np.ascontiguousarray(x) for x in (q, k, v, out, dout, lse))
        cuq, cuk = np.ascontiguousarray(cu_seqlens_q), np.ascontiguousarray(cu_seqlens_k)
    else:
        import torch
        dev = q.device
        run = (lambda kern, g, t, *a: host_launcher(kern, q)[g, t](*a))     # CPU tensors: the interpreter
        z = (lambda shape, dtype: torch.zeros(shape, dtype=dtype, device=dev))
        f32, half = torch.float32, q.dtype
        q, k, v, out, dout, lse = (x.contiguous() for x in (q, k, v, out, dout, lse))
        cuq, cuk = cu_seqlens_q.contiguous(), cu_seqlens_k.contiguous()
    dq = z((Tq, H, D), half)
    dk, dv = z((Tk, HK, D), half), z((Tk, HK, D), half)
    if B == 0 or Tq == 0 or Tk == 0:
        return dq, dk, dv
    delta, lse2 = z((B, H, NPM), f32), z((B, H, NPM), f32)
    run(delta_k, grid_d, DELTA_THREADS, out, dout, lse, cuq, delta, lse2)
    dqa = z((Tq, H, D), f32)
    dka, dva = (z((Tk, HK, D), f32), z((Tk, HK, D), f32)) if gqa else (dk, dv)
    run(main, grid_m, main.threads, q, k, v, dout, lse2, delta, dqa, dka, dva, cuq, cuk)
    n8 = Tq * H * D // 8
    run(cast, (-(-n8 // 256),), 256, dqa.reshape(n8, 8), dq.reshape(n8, 8))
    if gqa:
        n8 = Tk * HK * D // 8
        run(cast, (-(-n8 // 256),), 256, dka.reshape(n8, 8), dk.reshape(n8, 8))
        run(cast, (-(-n8 // 256),), 256, dva.reshape(n8, 8), dv.reshape(n8, 8))
    return dq, dk, dv


def reference_varlen_backward(q, k, v, dout, cu_seqlens_q, cu_seqlens_k, causal=False, scale=None):
    """float64 numpy (dq, dk, dv) per packed sequence (bottom-right causal; rows that see no key contribute 0)."""
    q, k, v, dout = (np.asarray(x, np.float64) for x in (q, k, v, dout))
    Tq, H, D = q.shape
    HK = k.shape[1]
    g = H // HK
    scale = 1.0 / math.sqrt(D) if scale is None else scale
    dq, dk, dv = np.zeros_like(q), np.zeros_like(k), np.zeros_like(v)
    for b in range(len(cu_seqlens_q) - 1):
        q0, q1, k0, k1 = (int(x) for x in (cu_seqlens_q[b], cu_seqlens_q[b + 1], cu_seqlens_k[b], cu_seqlens_k[b + 1]))
        n, m = q1 - q0, k1 - k0
        if n == 0 or m == 0:
            continue
        qs, do = q[q0:q1].transpose(1, 0, 2), dout[q0:q1].transpose(1, 0, 2)         # (H, n, D)
        ke = np.repeat(k[k0:k1], g, axis=1).transpose(1, 0, 2)                       # (H, m, D)
        ve = np.repeat(v[k0:k1], g, axis=1).transpose(1, 0, 2)
        s = qs @ ke.transpose(0, 2, 1) * scale
        if causal:
            s = np.where(np.arange(m)[None, :] > np.arange(n)[:, None] + (m - n), -np.inf, s)
        mx = s.max(-1, keepdims=True)
        live = np.isfinite(mx)
        p = np.where(live, np.exp(s - np.where(live, mx, 0)), 0.0)
        p /= np.where(live, p.sum(-1, keepdims=True), 1.0)
        dvh = p.transpose(0, 2, 1) @ do
        dp = do @ ve.transpose(0, 2, 1)
        ds = p * (dp - (dp * p).sum(-1, keepdims=True)) * scale
        dq[q0:q1] = (ds @ ke).transpose(1, 0, 2)
        dkh = ds.transpose(0, 2, 1) @ qs
        dk[k0:k1] = dkh.reshape(HK, g, m, D).sum(1).transpose(1, 0, 2)
        dv[k0:k1] = dvh.reshape(HK, g, m, D).sum(1).transpose(1, 0, 2)
    return dq, dk, dv


def _function():
    import torch
    from .varlen import attention_varlen

    class FlashAttentionVarlen(torch.autograd.Function):
        """out = attention_varlen(...)[0], differentiable in q, k and v (attention_varlen_backward)."""

        @staticmethod
        def forward(ctx, q, k, v, cu_q, cu_k, max_q, max_k, causal, scale):
            o, lse = attention_varlen(q, k, v, cu_q, cu_k, max_q, max_k, causal=causal, scale=scale)
            ctx.save_for_backward(q, k, v, o, lse, cu_q, cu_k)
            ctx.args = (max_q, max_k, causal, scale)
            return o

        @staticmethod
        def backward(ctx, do):
            q, k, v, o, lse, cu_q, cu_k = ctx.saved_tensors
            max_q, max_k, causal, scale = ctx.args
            dq, dk, dv = attention_varlen_backward(q, k, v, o, lse, do.contiguous(), cu_q, cu_k, max_q, max_k,
                                                   causal=causal, scale=scale)
            return dq, dk, dv, None, None, None, None, None, None

    return FlashAttentionVarlen


_FUNCTION = []


def flash_attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, causal=False,
                           scale=None):
    """attention_varlen's out for torch tensors (CUDA; CPU ones on the interpreter), differentiable in q, k and v (the autograd Function is built
    on first use: importing this module does not import torch)."""
    if not _FUNCTION:
        _FUNCTION.append(_function())
    return _FUNCTION[0].apply(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, causal, scale)
