"""The row-wise kernels for rows too long to hold in registers (more than rows.MAX_ROW elements: a softmax over a
large vocabulary, say): the block walks its row in tiles of threads x VEC x VT elements, reading the row again for
each pass instead of keeping it (the re-reads of one row mostly hit L2). Same functions, dtypes and outputs as
softmax_rows.py and norms.py, so the torch ops pick them by row length alone:

- softmax forward: the max and the sum of exponentials in one pass (an online softmax per thread, combined across
  the block), then the write (two reads); backward: sum(dy * y), then dx.
- layer norm forward: sum, then sum of squared deviations, then the write; backward: the two sums, then dx.
- RMS norm forward (fused_add: S = X + Res written in the first pass, read back by the thread that wrote it):
  sum of squares, then the write; backward: sum(g * xhat), then dx (+ ds).
- the backward kernels add dW (dB) into the partials' row of their block in global memory, each column by the
  one thread that owns it (no atomics); the host zeroes the partials and sums them.

Every slot of every tile is predicated on lying in the row (c < chunks).
"""
import math

import tiledsl
from tiledsl import T

from ...lib.reductions import block_allreduce
from .rows import words

LOG2E = 1.4426950408889634
_KERNELS = {}


def long_plan(n, threads=1024, elems=8):
    """(threads, VEC, VT, chunks, tiles) for rows of n: vectors of the widest width dividing n, `elems` elements
    per thread and tile."""
    vec = next(w for w in (8, 4, 2, 1) if n % w == 0)
    vt = max(1, elems // vec)
    chunks = n // vec
    return threads, vec, vt, chunks, -(-chunks // (threads * vt))


@tiledsl.inline
def load_tile(Aw, row, r, t, tid, q, ldop, W):
    """Slots t * VT .. t * VT + VT - 1 of this thread's share of row `row` into r (zeros past the row)."""
    for v in T.unroll(q[2]):
        c = (t * q[2] + v) * q[0] + tid
        for w in T.unroll(W):
            r[v, w] = 0
        T.cuda.tile.apply(T.ptx[ldop], r[v], Aw[row, c * W: c * W + W], pred=c < q[3], preserve_dst=True)


@tiledsl.inline
def store_tile(Aw, row, r, t, tid, q, stop, W):
    for v in T.unroll(q[2]):
        c = (t * q[2] + v) * q[0] + tid
        T.cuda.tile.apply(T.ptx[stop], Aw[row, c * W: c * W + W], r[v], pred=c < q[3])


@tiledsl.inline
def load_weight_tile(Ww, r, t, tid, q, ldop, W):
    for v in T.unroll(q[2]):
        c = (t * q[2] + v) * q[0] + tid
        for w in T.unroll(W):
            r[v, w] = 0
        T.cuda.tile.apply(T.ptx[ldop], r[v], Ww[c * W: c * W + W], pred=c < q[3], preserve_dst=True)


@tiledsl.inline
def add_partial(P, b, t, tid, v, e, q, value):
    """P[b, column] += value for element e of slot v of tile t, where it lies in the row."""
    c = (t * q[2] + v) * q[0] + tid
    if c < q[3]:
        P[b, c * q[1] + e] = P[b, c * q[1] + e] + value


def make_long_softmax(n, dtype, backward=False, threads=1024, elems=8):
    """Forward (X, Y) or backward (Y, DY, DX), rows of n `dtype` values, one block per row."""
    q = long_plan(n, threads, elems)
    key = ("softmax", n, dtype, backward, q)
    if key in _KERNELS:
        return _KERNELS[key]
    threads, VEC, VT, _, NT = q
    word, W, ldop, stop = words(VEC)

    if not backward:
        @tiledsl.jit
        def long_softmax_forward(X: T.Tensor(("R", n), dtype), Y: T.Tensor(("R", n), dtype)):
            T.device_entry(launch=T.cuda.LaunchConfig(grid=R, block=threads))  # noqa: F821
            r = T.alloc_local((VT, W), word)
            h = r.view(dtype=dtype)
            red = T.alloc_shared((2, threads // 32), "float32")
            tid = T.cuda.thread_id()
            row = T.cuda.block_id()
            Xw = X.view(dtype=word)
            # one pass for the max and the sum: each thread keeps its running max m and its sum s of exp(x - m),
            # rescaling s once a tile when the max grows; the block then rescales every thread's s to the row's max
            m = T.float32(-math.inf)
            s = T.float32(0)
            for t in range(NT):
                load_tile(Xw, row, r, t, tid, q, ldop, W)
                mt = m
                for j in T.unroll(VT * VEC):
                    ok = (t * VT + j // VEC) * threads + tid < q[3]
                    mt = T.max(mt, T.cast(h[j // VEC, j % VEC], "float32")) if ok else mt
                s = s * T.exp2((m - mt) * LOG2E, approx=True, ftz=True) if mt > m else s
                m = mt
                for j in T.unroll(VT * VEC):
                    ok = (t * VT + j // VEC) * threads + tid < q[3]
                    e = T.exp2((T.cast(h[j // VEC, j % VEC], "float32") - m) * LOG2E, approx=True, ftz=True)
                    # (a max of -inf so far: only -inf values seen, which add nothing)
                    s = s + e if ok and m > -math.inf else s
            mrow = block_allreduce(m, red[0], "max", threads)
            s = s * T.exp2((m - mrow) * LOG2E, approx=True, ftz=True) if m > -math.inf else s
            m = mrow
            inv = 1.0 / block_allreduce(s, red[1], "add", threads)
            for t in range(NT):
                load_tile(Xw, row, r, t, tid, q, ldop, W)
                for j in T.unroll(VT * VEC):
                    e = T.exp2((T.cast(h[j // VEC, j % VEC], "float32") - m) * LOG2E, approx=True, ftz=True)
                    h[j // VEC, j % VEC] = T.cast(e * inv, dtype)
                store_tile(Y.view(dtype=word), row, r, t, tid, q, stop, W)
        kernel = long_softmax_forward
    else:
        @tiledsl.jit
        def long_softmax_backward(Y: T.Tensor(("R", n), dtype), DY: T.Tensor(("R", n), dtype),
                                  DX: T.Tensor(("R", n), dtype)):
            T.device_entry(launch=T.cuda.LaunchConfig(grid=R, block=threads))  # noqa: F821
            ry = T.alloc_local((VT, W), word)
            rg = T.alloc_local((VT, W), word)
            hy = ry.view(dtype=dtype)
            hg = rg.view(dtype=dtype)
            red = T.alloc_shared((threads // 32,), "float32")
            tid = T.cuda.thread_id()
            row = T.cuda.block_id()
            Yw = Y.view(dtype=word)
            Gw = DY.view(dtype=word)
            s = T.float32(0)
            for t in range(NT):
                load_tile(Yw, row, ry, t, tid, q, ldop, W)
                load_tile(Gw, row, rg, t, tid, q, ldop, W)
                for j in T.unroll(VT * VEC):
                    s = s + T.cast(hy[j // VEC, j % VEC], "float32") * T.cast(hg[j // VEC, j % VEC], "float32")
            dot = block_allreduce(s, red, "add", threads)
            for t in range(NT):
                load_tile(Yw, row, ry, t, tid, q, ldop, W)
                load_tile(Gw, row, rg, t, tid, q, ldop, W)
                for j in T.unroll(VT * VEC):
                    y = T.cast(hy[j // VEC, j % VEC], "float32")
                    hg[j // VEC, j % VEC] = T.cast(y * (T.cast(hg[j // VEC, j % VEC], "float32") - dot), dtype)
                store_tile(DX.view(dtype=word), row, rg, t, tid, q, stop, W)
        kernel = long_softmax_backward

    _KERNELS[key] = kernel
    return kernel


def make_long_layer_norm_forward(n, dtype, threads=1024, elems=8):
    """(X, W, B, Y, Mean, Rstd, eps), as norms.make_layer_norm_forward."""
    q = long_plan(n, threads, elems)
    key = ("ln_fwd", n, dtype, q)
    if key in _KERNELS:
        return _KERNELS[key]
    threads, VEC, VT, _, NT = q
    word, W, ldop, stop = words(VEC)

    @tiledsl.jit
    def long_layer_norm_forward(X: T.Tensor(("R", n), dtype), Wt: T.Tensor((n,), dtype), B: T.Tensor((n,), dtype),
                                Y: T.Tensor(("R", n), dtype), Mean: T.Tensor(("R",), "float32"),
                                Rstd: T.Tensor(("R",), "float32"), eps: T.float32):
        T.device_entry(launch=T.cuda.LaunchConfig(grid=R, block=threads))  # noqa: F821
        r = T.alloc_local((VT, W), word)
        wr = T.alloc_local((VT, W), word)
        br = T.alloc_local((VT, W), word)
        h = r.view(dtype=dtype)
        wh = wr.view(dtype=dtype)
        bh = br.view(dtype=dtype)
        red = T.alloc_shared((2, threads // 32), "float32")
        tid = T.cuda.thread_id()
        row = T.cuda.block_id()
        Xw = X.view(dtype=word)
        s = T.float32(0)
        for t in range(NT):
            load_tile(Xw, row, r, t, tid, q, ldop, W)
            for j in T.unroll(VT * VEC):
                s = s + T.cast(h[j // VEC, j % VEC], "float32")
        mean = block_allreduce(s, red[0], "add", threads) * (1.0 / n)
        d2 = T.float32(0)
        for t in range(NT):
            load_tile(Xw, row, r, t, tid, q, ldop, W)
            for j in T.unroll(VT * VEC):
                ok = (t * VT + j // VEC) * threads + tid < q[3]
                d = T.cast(h[j // VEC, j % VEC], "float32") - mean
                d2 = d2 + d * d if ok else d2
        rstd = 1.0 / T.sqrt(block_allreduce(d2, red[1], "add", threads) * (1.0 / n) + eps)
        if tid == 0:
            Mean[row] = mean
            Rstd[row] = rstd
        for t in range(NT):
            load_tile(Xw, row, r, t, tid, q, ldop, W)
            load_weight_tile(Wt.view(dtype=word), wr, t, tid, q, ldop, W)
            load_weight_tile(B.view(dtype=word), br, t, tid, q, ldop, W)
            for j in T.unroll(VT * VEC):
                y = ((T.cast(h[j // VEC, j % VEC], "float32") - mean) * rstd * T.cast(wh[j // VEC, j % VEC], "float32")
                     + T.cast(bh[j // VEC, j % VEC], "float32"))
                h[j // VEC, j % VEC] = T.cast(y, dtype)
            store_tile(Y.view(dtype=word), row, r, t, tid, q, stop, W)

    _KERNELS[key] = long_layer_norm_forward
    return long_layer_norm_forward


def make_long_layer_norm_backward(n, dtype, threads=1024, elems=8):
    """(X, W, DY, Mean, Rstd, DX, DWp, DBp) on G blocks, as norms.make_layer_norm_backward; DWp, DBp zeroed."""
    q = long_plan(n, threads, elems)
    key = ("ln_bwd", n, dtype, q)
    if key in _KERNELS:
        return _KERNELS[key]
    threads, VEC, VT, _, NT = q
    word, W, ldop, stop = words(VEC)

    @tiledsl.jit
    def long_layer_norm_backward(X: T.Tensor(("R", n), dtype), Wt: T.Tensor((n,), dtype),
                                 DY: T.Tensor(("R", n), dtype), Mean: T.Tensor(("R",), "float32"),
                                 Rstd: T.Tensor(("R",), "float32"), DX: T.Tensor(("R", n), dtype),
                                 DWp: T.Tensor(("G", n), "float32"), DBp: T.Tensor(("G", n), "float32")):
        T.device_entry(launch=T.cuda.LaunchConfig(grid=G, block=threads))  # noqa: F821
        rx = T.alloc_local((VT, W), word)
        rg = T.alloc_local((VT, W), word)
        wr = T.alloc_local((VT, W), word)
        hx = rx.view(dtype=dtype)
        hg = rg.view(dtype=dtype)
        wh = wr.view(dtype=dtype)
        red = T.alloc_shared((2, threads // 32), "float32")
        tid = T.cuda.thread_id()
        bid = T.cuda.block_id()
        Xw = X.view(dtype=word)
        Gw = DY.view(dtype=word)
        Ww = Wt.view(dtype=word)
        for k in range((R - bid + G - 1) // G):  # noqa: F821
            row = bid + k * G  # noqa: F821
            mean = Mean[row]
            rstd = Rstd[row]
            a = T.float32(0)
            c = T.float32(0)
            for t in range(NT):
                load_tile(Xw, row, rx, t, tid, q, ldop, W)
                load_tile(Gw, row, rg, t, tid, q, ldop, W)
                load_weight_tile(Ww, wr, t, tid, q, ldop, W)
                for j in T.unroll(VT * VEC):
                    xh = (T.cast(hx[j // VEC, j % VEC], "float32") - mean) * rstd
                    d = T.cast(hg[j // VEC, j % VEC], "float32")
                    g = d * T.cast(wh[j // VEC, j % VEC], "float32")      # zero past the row (d is)
                    a = a + g * xh
                    c = c + g
                    add_partial(DWp, bid, t, tid, j // VEC, j % VEC, q, d * xh)
                    add_partial(DBp, bid, t, tid, j // VEC, j % VEC, q, d)
            a = block_allreduce(a, red[0], "add", threads) * (1.0 / n)
            c = block_allreduce(c, red[1], "add", threads) * (1.0 / n)
            for t in range(NT):
                load_tile(Xw, row, rx, t, tid, q, ldop, W)
                load_tile(Gw, row, rg, t, tid, q, ldop, W)
                load_weight_tile(Ww, wr, t, tid, q, ldop, W)
                for j in T.unroll(VT * VEC):
                    xh = (T.cast(hx[j // VEC, j % VEC], "float32") - mean) * rstd
                    g = T.cast(hg[j // VEC, j % VEC], "float32") * T.cast(wh[j // VEC, j % VEC], "float32")
                    hg[j // VEC, j % VEC] = T.cast(rstd * (g - xh * a - c), dtype)
                store_tile(DX.view(dtype=word), row, rg, t, tid, q, stop, W)

    _KERNELS[key] = long_layer_norm_backward
    return long_layer_norm_backward


def make_long_rms_norm_forward(n, dtype, fused_add=False, threads=1024, elems=8):
    """(X, W, Y, Rstd, eps) or fused (X, Res, W, Y, S, Rstd, eps), as norms.make_rms_norm_forward."""
    q = long_plan(n, threads, elems)
    key = ("rms_fwd", n, dtype, fused_add, q)
    if key in _KERNELS:
        return _KERNELS[key]
    threads, VEC, VT, _, NT = q
    word, W, ldop, stop = words(VEC)

    @tiledsl.inline
    def body(X, Res, Wt, Y, S, Rstd, eps):
        r = T.alloc_local((VT, W), word)
        rr = T.alloc_local((VT, W), word)
        wr = T.alloc_local((VT, W), word)
        h = r.view(dtype=dtype)
        hr = rr.view(dtype=dtype)
        wh = wr.view(dtype=dtype)
        red = T.alloc_shared((threads // 32,), "float32")
        tid = T.cuda.thread_id()
        row = T.cuda.block_id()
        Xw = X.view(dtype=word)
        src = S.view(dtype=word) if fused_add else Xw
        s2 = T.float32(0)
        for t in range(NT):
            load_tile(Xw, row, r, t, tid, q, ldop, W)
            if fused_add:
                load_tile(Res.view(dtype=word), row, rr, t, tid, q, ldop, W)
                for j in T.unroll(VT * VEC):
                    h[j // VEC, j % VEC] = T.cast(T.cast(h[j // VEC, j % VEC], "float32")
                                                  + T.cast(hr[j // VEC, j % VEC], "float32"), dtype)
                # read back below by this same thread: no barrier needed
                store_tile(src, row, r, t, tid, q, stop, W)
            for j in T.unroll(VT * VEC):
                f = T.cast(h[j // VEC, j % VEC], "float32")
                s2 = s2 + f * f
        rstd = 1.0 / T.sqrt(block_allreduce(s2, red, "add", threads) * (1.0 / n) + eps)
        if tid == 0:
            Rstd[row] = rstd
        for t in range(NT):
            load_tile(src, row, r, t, tid, q, ldop, W)
            load_weight_tile(Wt.view(dtype=word), wr, t, tid, q, ldop, W)
            for j in T.unroll(VT * VEC):
                y = T.cast(h[j // VEC, j % VEC], "float32") * rstd * T.cast(wh[j // VEC, j % VEC], "float32")
                h[j // VEC, j % VEC] = T.cast(y, dtype)
            store_tile(Y.view(dtype=word), row, r, t, tid, q, stop, W)

    if fused_add:
        @tiledsl.jit
        def long_add_rms_norm_forward(X: T.Tensor(("R", n), dtype), Res: T.Tensor(("R", n), dtype),
                                      Wt: T.Tensor((n,), dtype), Y: T.Tensor(("R", n), dtype),
                                      S: T.Tensor(("R", n), dtype), Rstd: T.Tensor(("R",), "float32"), eps: T.float32):
            T.device_entry(launch=T.cuda.LaunchConfig(grid=R, block=threads))  # noqa: F821
            body(X, Res, Wt, Y, S, Rstd, eps)
        kernel = long_add_rms_norm_forward
    else:
        @tiledsl.jit
        def long_rms_norm_forward(X: T.Tensor(("R", n), dtype), Wt: T.Tensor((n,), dtype),
                                  Y: T.Tensor(("R", n), dtype), Rstd: T.Tensor(("R",), "float32"), eps: T.float32):
            T.device_entry(launch=T.cuda.LaunchConfig(grid=R, block=threads))  # noqa: F821
            body(X, X, Wt, Y, X, Rstd, eps)
        kernel = long_rms_norm_forward

    _KERNELS[key] = kernel
    return kernel


def make_long_rms_norm_backward(n, dtype, add_grad=False, threads=1024, elems=8):
    """(X, W, DY, Rstd, [DS,] DX, DWp) on G blocks, as norms.make_rms_norm_backward; DWp zeroed."""
    q = long_plan(n, threads, elems)
    key = ("rms_bwd", n, dtype, add_grad, q)
    if key in _KERNELS:
        return _KERNELS[key]
    threads, VEC, VT, _, NT = q
    word, W, ldop, stop = words(VEC)

    @tiledsl.inline
    def body(X, Wt, DY, Rstd, DS, DX, DWp):
        rx = T.alloc_local((VT, W), word)
        rg = T.alloc_local((VT, W), word)
        rs = T.alloc_local((VT, W), word)
        wr = T.alloc_local((VT, W), word)
        hx = rx.view(dtype=dtype)
        hg = rg.view(dtype=dtype)
        hs = rs.view(dtype=dtype)
        wh = wr.view(dtype=dtype)
        red = T.alloc_shared((threads // 32,), "float32")
        tid = T.cuda.thread_id()
        bid = T.cuda.block_id()
        G = T.cuda.grid_dim()
        R = X.shape[0]
        Xw = X.view(dtype=word)
        Gw = DY.view(dtype=word)
        Ww = Wt.view(dtype=word)
        for k in range((R - bid + G - 1) // G):
            row = bid + k * G
            rstd = Rstd[row]
            a = T.float32(0)
            for t in range(NT):
                load_tile(Xw, row, rx, t, tid, q, ldop, W)
                load_tile(Gw, row, rg, t, tid, q, ldop, W)
                load_weight_tile(Ww, wr, t, tid, q, ldop, W)
                for j in T.unroll(VT * VEC):
                    xh = T.cast(hx[j // VEC, j % VEC], "float32") * rstd
                    d = T.cast(hg[j // VEC, j % VEC], "float32")
                    a = a + d * T.cast(wh[j // VEC, j % VEC], "float32") * xh
                    add_partial(DWp, bid, t, tid, j // VEC, j % VEC, q, d * xh)
            a = block_allreduce(a, red, "add", threads) * (1.0 / n)
            for t in range(NT):
                load_tile(Xw, row, rx, t, tid, q, ldop, W)
                load_tile(Gw, row, rg, t, tid, q, ldop, W)
                load_weight_tile(Ww, wr, t, tid, q, ldop, W)
                if add_grad:
                    load_tile(DS.view(dtype=word), row, rs, t, tid, q, ldop, W)
                for j in T.unroll(VT * VEC):
                    xh = T.cast(hx[j // VEC, j % VEC], "float32") * rstd
                    g = T.cast(hg[j // VEC, j % VEC], "float32") * T.cast(wh[j // VEC, j % VEC], "float32")
                    d = rstd * (g - xh * a)
                    if add_grad:
                        d = d + T.cast(hs[j // VEC, j % VEC], "float32")
                    hg[j // VEC, j % VEC] = T.cast(d, dtype)
                store_tile(DX.view(dtype=word), row, rg, t, tid, q, stop, W)

    if add_grad:
        @tiledsl.jit
        def long_add_rms_norm_backward(X: T.Tensor(("R", n), dtype), Wt: T.Tensor((n,), dtype),
                                       DY: T.Tensor(("R", n), dtype), Rstd: T.Tensor(("R",), "float32"),
                                       DS: T.Tensor(("R", n), dtype), DX: T.Tensor(("R", n), dtype),
                                       DWp: T.Tensor(("G", n), "float32")):
            T.device_entry(launch=T.cuda.LaunchConfig(grid=G, block=threads))  # noqa: F821
            body(X, Wt, DY, Rstd, DS, DX, DWp)
        kernel = long_add_rms_norm_backward
    else:
        @tiledsl.jit
        def long_rms_norm_backward(X: T.Tensor(("R", n), dtype), Wt: T.Tensor((n,), dtype),
                                   DY: T.Tensor(("R", n), dtype), Rstd: T.Tensor(("R",), "float32"),
                                   DX: T.Tensor(("R", n), dtype), DWp: T.Tensor(("G", n), "float32")):
            T.device_entry(launch=T.cuda.LaunchConfig(grid=G, block=threads))  # noqa: F821
            body(X, Wt, DY, Rstd, DX, DX, DWp)
        kernel = long_rms_norm_backward

    _KERNELS[key] = kernel
    return kernel
