"""Layer norm and RMS norm over rows of any length, forward and backward, float16 or bfloat16 in and out with
float32 statistics: one block per row holds the row in registers (rows.py splits it) and reduces across the block
(tiledsl.lib.reductions). 1/sqrt is exact (sqrt.rn then div.rn), once per row.

- layer norm forward: (X, W, B) -> Y = (x - mean) * rstd * w + b, and Mean, Rstd (float32, one per row), the two
  statistics by two exact float32 passes over the registers.
- layer norm backward: (X, W, DY, Mean, Rstd) -> DX = rstd * (g - (xhat * sum(g * xhat) + sum(g)) / n) with
  g = dy * w, xhat = (x - mean) * rstd; and per-block partials of dW = sum dy * xhat, dB = sum dy: the grid is the
  partials' rows G (the host picks it), block b walking rows b, b + G, ...; the host sums the G partials.
- RMS norm forward: (X, W) -> Y = x * rstd * w with rstd = 1 / sqrt(mean(x^2) + eps), and Rstd.
- fused add + RMS norm forward: (X, Res, W) -> S = x + res (rounded to the dtype, written out), Y = rmsnorm(S), Rstd.
- RMS norm backward: (X, W, DY, Rstd[, DS]) -> DX = rstd * (g - xhat * sum(g * xhat) / n) (+ ds: the gradient of
  the fused op's sum output, added in the same pass) and partials of dW = sum dy * xhat.
"""
import tiledsl
from tiledsl import T

from ...lib.reductions import block_allreduce
from .rows import from_float, load_row, load_vec, pack_opcode, plan, store_row, to_float, words

_KERNELS = {}


# elements of a row a thread holds: the backward kernels keep float32 weight-gradient accumulators beside the rows'
# words, so they split a row over twice the threads of the forward kernels to stay at a few blocks per SM
FORWARD_PER_THREAD = 32
BACKWARD_PER_THREAD = 16


def _setup(kind, n, dtype, threads, extra=(), per_thread=FORWARD_PER_THREAD):
    p = tuple(plan(n, threads, per_thread))
    key = (kind, n, dtype, p) + tuple(extra)
    return key, p, words(p[1])


@tiledsl.inline
def mask_tail(f, value, tid, p):
    """Set this thread's tail slot to `value` where it lies past the row (no-op for rows without a tail)."""
    if not p[4]:
        ok = (p[2] - 1) * p[0] + tid < p[3]
        for j in T.unroll(p[1]):
            f[(p[2] - 1) * p[1] + j] = f[(p[2] - 1) * p[1] + j] if ok else value


@tiledsl.inline
def store_partial(P, b, acc, tid, p):
    """acc (this thread's float32 share of a length-n vector) into row b of the float32 partials P."""
    for v in T.unroll(p[2]):
        c = v * p[0] + tid
        if p[4] or v < p[2] - 1:
            for e in T.unroll(p[1]):
                P[b, c * p[1] + e] = acc[v * p[1] + e]
        else:
            if c < p[3]:
                for e in T.unroll(p[1]):
                    P[b, c * p[1] + e] = acc[v * p[1] + e]


def make_layer_norm_forward(n, dtype, threads=None):
    """(X (R, n), W (n,), B (n,), Y (R, n), Mean (R,) float32, Rstd (R,) float32, eps float32)."""
    key, p, (word, W, ldop, stop) = _setup("ln_fwd", n, dtype, threads)
    if key in _KERNELS:
        return _KERNELS[key]
    threads, VEC, V = p[0], p[1], p[2]
    cvt = pack_opcode(dtype)

    @tiledsl.jit
    def layer_norm_forward(X: T.Tensor(("R", n), dtype), Wt: T.Tensor((n,), dtype), B: T.Tensor((n,), dtype),
                           Y: T.Tensor(("R", n), dtype), Mean: T.Tensor(("R",), "float32"),
                           Rstd: T.Tensor(("R",), "float32"), eps: T.float32):
        T.device_entry(launch=T.cuda.LaunchConfig(grid=R, block=threads))  # noqa: F821
        r = T.alloc_local((V, W), word)
        h = r.view(dtype=dtype)
        f = T.alloc_local((V * VEC,), "float32")
        red = T.alloc_shared((2, threads // 32), "float32")
        tid = T.cuda.thread_id()
        row = T.cuda.block_id()
        load_row(X.view(dtype=word), row, r, tid, p, ldop, W)
        to_float(h, f, p)
        s = T.float32(0)
        for j in T.unroll(V * VEC):
            s = s + f[j]                     # a masked slot holds zeros
        mean = block_allreduce(s, red[0], "add", threads) * (1.0 / n)
        for j in T.unroll(V * VEC):
            f[j] = f[j] - mean
        mask_tail(f, T.float32(0), tid, p)
        q = T.float32(0)
        for j in T.unroll(V * VEC):
            q = q + f[j] * f[j]
        rstd = 1.0 / T.sqrt(block_allreduce(q, red[1], "add", threads) * (1.0 / n) + eps)
        if tid == 0:
            Mean[row] = mean
            Rstd[row] = rstd
        wr = T.alloc_local((V, W), word)
        br = T.alloc_local((V, W), word)
        wh = wr.view(dtype=dtype)
        bh = br.view(dtype=dtype)
        load_vec(Wt.view(dtype=word), wr, tid, p, ldop, W)
        load_vec(B.view(dtype=word), br, tid, p, ldop, W)
        for j in T.unroll(V * VEC):
            f[j] = f[j] * rstd * T.cast(wh[j // VEC, j % VEC], "float32") + T.cast(bh[j // VEC, j % VEC], "float32")
        from_float(f, r, h, p, dtype, cvt)
        store_row(Y.view(dtype=word), row, r, tid, p, stop, W)

    _KERNELS[key] = layer_norm_forward
    return layer_norm_forward


def make_layer_norm_backward(n, dtype, threads=None):
    """(X, W, DY, Mean, Rstd, DX, DWp (G, n) float32, DBp (G, n) float32): launched on G blocks.

    The rows stay in their 16-bit words; xhat and g are recomputed from them after the reductions rather than kept
    as float32 (registers go to the dW and dB accumulators instead)."""
    key, p, (word, W, ldop, stop) = _setup("ln_bwd", n, dtype, threads, per_thread=BACKWARD_PER_THREAD)
    if key in _KERNELS:
        return _KERNELS[key]
    threads, VEC, V = p[0], p[1], p[2]
    cvt = pack_opcode(dtype)

    @tiledsl.jit
    def layer_norm_backward(X: T.Tensor(("R", n), dtype), Wt: T.Tensor((n,), dtype), DY: T.Tensor(("R", n), dtype),
                            Mean: T.Tensor(("R",), "float32"), Rstd: T.Tensor(("R",), "float32"),
                            DX: T.Tensor(("R", n), dtype), DWp: T.Tensor(("G", n), "float32"),
                            DBp: T.Tensor(("G", n), "float32")):
        T.device_entry(launch=T.cuda.LaunchConfig(grid=G, block=threads))  # noqa: F821
        rx = T.alloc_local((V, W), word)
        rg = T.alloc_local((V, W), word)
        wr = T.alloc_local((V, W), word)
        hx = rx.view(dtype=dtype)
        hg = rg.view(dtype=dtype)
        wh = wr.view(dtype=dtype)
        dw = T.alloc_local((V * VEC,), "float32")
        db = T.alloc_local((V * VEC,), "float32")
        red = T.alloc_shared((2, threads // 32), "float32")
        tid = T.cuda.thread_id()
        bid = T.cuda.block_id()
        load_vec(Wt.view(dtype=word), wr, tid, p, ldop, W)
        for j in T.unroll(V * VEC):
            dw[j] = 0.0
            db[j] = 0.0
        Xw = X.view(dtype=word)
        DYw = DY.view(dtype=word)
        DXw = DX.view(dtype=word)
        for k in range((R - bid + G - 1) // G):  # noqa: F821
            row = bid + k * G  # noqa: F821
            load_row(Xw, row, rx, tid, p, ldop, W)
            load_row(DYw, row, rg, tid, p, ldop, W)
            mean = Mean[row]
            rstd = Rstd[row]
            a = T.float32(0)
            c = T.float32(0)
            for j in T.unroll(V * VEC):
                xh = (T.cast(hx[j // VEC, j % VEC], "float32") - mean) * rstd
                d = T.cast(hg[j // VEC, j % VEC], "float32")
                g = d * T.cast(wh[j // VEC, j % VEC], "float32")          # zero in a masked slot (d is)
                dw[j] = dw[j] + d * xh
                db[j] = db[j] + d
                a = a + g * xh
                c = c + g
            a = block_allreduce(a, red[0], "add", threads) * (1.0 / n)
            c = block_allreduce(c, red[1], "add", threads) * (1.0 / n)
            for j in T.unroll(V * VEC):
                xh = (T.cast(hx[j // VEC, j % VEC], "float32") - mean) * rstd
                g = T.cast(hg[j // VEC, j % VEC], "float32") * T.cast(wh[j // VEC, j % VEC], "float32")
                hg[j // VEC, j % VEC] = T.cast(rstd * (g - xh * a - c), dtype)
            store_row(DXw, row, rg, tid, p, stop, W)
        store_partial(DWp, bid, dw, tid, p)
        store_partial(DBp, bid, db, tid, p)

    _KERNELS[key] = layer_norm_backward
    return layer_norm_backward


def make_rms_norm_forward(n, dtype, fused_add=False, threads=None):
    """(X, W, Y, Rstd, eps), or with fused_add (X, Res, W, Y, S, Rstd, eps): S = X + Res, Y = rmsnorm(S)."""
    key, p, (word, W, ldop, stop) = _setup("rms_fwd", n, dtype, threads, (fused_add,))
    if key in _KERNELS:
        return _KERNELS[key]
    threads, VEC, V = p[0], p[1], p[2]
    cvt = pack_opcode(dtype)

    @tiledsl.inline
    def rms_rows(r, h, f, wr, tid, row, Y, Rstd, eps):
        red = T.alloc_shared((threads // 32,), "float32")
        q = T.float32(0)
        for j in T.unroll(V * VEC):
            q = q + f[j] * f[j]              # a masked slot holds zeros
        rstd = 1.0 / T.sqrt(block_allreduce(q, red, "add", threads) * (1.0 / n) + eps)
        if tid == 0:
            Rstd[row] = rstd
        wh = wr.view(dtype=dtype)
        for j in T.unroll(V * VEC):
            f[j] = f[j] * rstd * T.cast(wh[j // VEC, j % VEC], "float32")
        from_float(f, r, h, p, dtype, cvt)
        store_row(Y.view(dtype=word), row, r, tid, p, stop, W)

    if not fused_add:
        @tiledsl.jit
        def rms_norm_forward(X: T.Tensor(("R", n), dtype), Wt: T.Tensor((n,), dtype), Y: T.Tensor(("R", n), dtype),
                             Rstd: T.Tensor(("R",), "float32"), eps: T.float32):
            T.device_entry(launch=T.cuda.LaunchConfig(grid=R, block=threads))  # noqa: F821
            r = T.alloc_local((V, W), word)
            wr = T.alloc_local((V, W), word)
            f = T.alloc_local((V * VEC,), "float32")
            h = r.view(dtype=dtype)
            tid = T.cuda.thread_id()
            row = T.cuda.block_id()
            load_row(X.view(dtype=word), row, r, tid, p, ldop, W)
            load_vec(Wt.view(dtype=word), wr, tid, p, ldop, W)
            to_float(h, f, p)
            rms_rows(r, h, f, wr, tid, row, Y, Rstd, eps)
        kernel = rms_norm_forward
    else:
        @tiledsl.jit
        def add_rms_norm_forward(X: T.Tensor(("R", n), dtype), Res: T.Tensor(("R", n), dtype),
                                 Wt: T.Tensor((n,), dtype), Y: T.Tensor(("R", n), dtype),
                                 S: T.Tensor(("R", n), dtype), Rstd: T.Tensor(("R",), "float32"), eps: T.float32):
            T.device_entry(launch=T.cuda.LaunchConfig(grid=R, block=threads))  # noqa: F821
            r = T.alloc_local((V, W), word)
            rr = T.alloc_local((V, W), word)
            wr = T.alloc_local((V, W), word)
            f = T.alloc_local((V * VEC,), "float32")
            h = r.view(dtype=dtype)
            hr = rr.view(dtype=dtype)
            tid = T.cuda.thread_id()
            row = T.cuda.block_id()
            load_row(X.view(dtype=word), row, r, tid, p, ldop, W)
            load_row(Res.view(dtype=word), row, rr, tid, p, ldop, W)
            load_vec(Wt.view(dtype=word), wr, tid, p, ldop, W)
            for j in T.unroll(V * VEC):
                f[j] = T.cast(h[j // VEC, j % VEC], "float32") + T.cast(hr[j // VEC, j % VEC], "float32")
            # the sum rounded to the dtype, as torch's x + residual; the norm is of that rounded sum
            from_float(f, r, h, p, dtype, cvt)
            to_float(h, f, p)
            store_row(S.view(dtype=word), row, r, tid, p, stop, W)
            rms_rows(r, h, f, wr, tid, row, Y, Rstd, eps)
        kernel = add_rms_norm_forward

    _KERNELS[key] = kernel
    return kernel


def make_rms_norm_backward(n, dtype, add_grad=False, threads=None):
    """(X, W, DY, Rstd, [DS,] DX, DWp (G, n) float32): launched on G blocks; add_grad adds DS to DX."""
    key, p, (word, W, ldop, stop) = _setup("rms_bwd", n, dtype, threads, (add_grad,), BACKWARD_PER_THREAD)
    if key in _KERNELS:
        return _KERNELS[key]
    threads, VEC, V = p[0], p[1], p[2]
    cvt = pack_opcode(dtype)

    @tiledsl.inline
    def rms_backward_rows(X, Wt, DY, Rstd, DS, DX, DWp):
        rx = T.alloc_local((V, W), word)
        rg = T.alloc_local((V, W), word)
        rs = T.alloc_local((V, W), word)
        wr = T.alloc_local((V, W), word)
        hx = rx.view(dtype=dtype)
        hg = rg.view(dtype=dtype)
        hs = rs.view(dtype=dtype)
        wh = wr.view(dtype=dtype)
        dw = T.alloc_local((V * VEC,), "float32")
        red = T.alloc_shared((threads // 32,), "float32")
        tid = T.cuda.thread_id()
        bid = T.cuda.block_id()
        G = T.cuda.grid_dim()
        R = X.shape[0]
        load_vec(Wt.view(dtype=word), wr, tid, p, ldop, W)
        for j in T.unroll(V * VEC):
            dw[j] = 0.0
        Xw = X.view(dtype=word)
        DYw = DY.view(dtype=word)
        DXw = DX.view(dtype=word)
        for k in range((R - bid + G - 1) // G):
            row = bid + k * G
            load_row(Xw, row, rx, tid, p, ldop, W)
            load_row(DYw, row, rg, tid, p, ldop, W)
            if add_grad:
                load_row(DS.view(dtype=word), row, rs, tid, p, ldop, W)
            rstd = Rstd[row]
            a = T.float32(0)
            for j in T.unroll(V * VEC):
                xh = T.cast(hx[j // VEC, j % VEC], "float32") * rstd
                d = T.cast(hg[j // VEC, j % VEC], "float32")
                dw[j] = dw[j] + d * xh
                a = a + d * T.cast(wh[j // VEC, j % VEC], "float32") * xh
            # the barrier inside the reduction orders last row's reads of red before this row's writes
            a = block_allreduce(a, red, "add", threads) * (1.0 / n)
            for j in T.unroll(V * VEC):
                xh = T.cast(hx[j // VEC, j % VEC], "float32") * rstd
                g = T.cast(hg[j // VEC, j % VEC], "float32") * T.cast(wh[j // VEC, j % VEC], "float32")
                d = rstd * (g - xh * a)
                if add_grad:
                    d = d + T.cast(hs[j // VEC, j % VEC], "float32")
                hg[j // VEC, j % VEC] = T.cast(d, dtype)
            store_row(DXw, row, rg, tid, p, stop, W)
        store_partial(DWp, bid, dw, tid, p)

    if add_grad:
        @tiledsl.jit
        def add_rms_norm_backward(X: T.Tensor(("R", n), dtype), Wt: T.Tensor((n,), dtype),
                                  DY: T.Tensor(("R", n), dtype), Rstd: T.Tensor(("R",), "float32"),
                                  DS: T.Tensor(("R", n), dtype), DX: T.Tensor(("R", n), dtype),
                                  DWp: T.Tensor(("G", n), "float32")):
            T.device_entry(launch=T.cuda.LaunchConfig(grid=G, block=threads))  # noqa: F821
            rms_backward_rows(X, Wt, DY, Rstd, DS, DX, DWp)
        kernel = add_rms_norm_backward
    else:
        @tiledsl.jit
        def rms_norm_backward(X: T.Tensor(("R", n), dtype), Wt: T.Tensor((n,), dtype), DY: T.Tensor(("R", n), dtype),
                              Rstd: T.Tensor(("R",), "float32"), DX: T.Tensor(("R", n), dtype),
                              DWp: T.Tensor(("G", n), "float32")):
            T.device_entry(launch=T.cuda.LaunchConfig(grid=G, block=threads))  # noqa: F821
            rms_backward_rows(X, Wt, DY, Rstd, DX, DX, DWp)
        kernel = rms_norm_backward

    _KERNELS[key] = kernel
    return kernel
