"""Native instruction semantics on hand-built expanded IR: ldmatrix/stmatrix, cp.async, and register forms.

These tests write the `ir.Native` statements directly, exactly as a pattern would emit them (each parsed once by
`tiledsl.isa.registry.native`, like the expansion parses it), and run them with `tiledsl.interpreter.run_ir`.
"""
import os
import sys
from fractions import Fraction

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import tiledsl  # noqa: E402
from tiledsl.core import dtypes as dt  # noqa: E402
from tiledsl.ir import nodes as ir  # noqa: E402
from tiledsl.core.errors import Loc  # noqa: E402
from tiledsl.interpreter import InterpreterError, run_ir  # noqa: E402
from tiledsl.isa.registry import native  # noqa: E402
from test_interpreter_helpers import ref_round_bits  # noqa: E402

LOC = Loc("hand.py", 7, 4, 10, "    hand_built()")


def C(v, d=dt.int32):
    return ir.Const(d, LOC, v)


def B(op, a, b, d=dt.int32):
    return ir.Binary(d, LOC, op, a, b)


LANE = ir.Special(dt.int32, LOC, "laneid")
TID = ir.Special(dt.int32, LOC, "tid", 0)


class K:
    """A tiny builder for hand-written expanded kernels."""

    def __init__(self, block=32):
        self.params, self.allocs, self.body = [], [], []
        self.block = (block, 1, 1) if isinstance(block, int) else block
        self.nvar = 0

    def tensor(self, name, d):
        st = ir.Storage(name, "global", d, None, LOC, param_index=len(self.params))
        self.params.append(ir.Param(name, "tensor", d, ("n",), storage=st))
        return st

    def alloc(self, name, scope, d, size):
        st = ir.Storage(name, scope, d, size, LOC)
        self.allocs.append(st)
        return st

    def loop(self, n, fn):
        """for j in range(n): fn(j_expr) appended as a runtime loop."""
        self.nvar += 1
        v = ir.Var(dt.int32, LOC, f"j.{self.nvar}")
        outer = self.body
        self.body = []
        fn(v)
        inner = self.body
        self.body = outer
        self.body.append(ir.For(LOC, v, C(0), C(n), C(1), inner))

    def store(self, st, d, off, val):
        self.body.append(ir.Store(LOC, st, d, off, val))

    def native(self, opcode, groups, pred=None, preserve=False):
        self.body.append(native(LOC, opcode, groups, pred, preserve))

    def kernel(self):
        return ir.Kernel("hand", self.params, self.body, ir.LaunchSpec((1, 1, 1), self.block), self.allocs, {}, LOC)


def load(st, d, off):
    return ir.Load(d, LOC, st, off)


# ---------------------------------------------------------------- ldmatrix / stmatrix

SIGMA = (np.arange(32) * 5 + 3) % 32          # lane l supplies the address of shared row SIGMA[l]


def _frag_ref(M, count, trans):
    """Register words (32 lanes, count) for matrices M[count, 8, 8] of uint16."""
    out = np.zeros((32, count), np.uint32)
    for lane in range(32):
        g, t = lane // 4, lane % 4
        for i in range(count):
            if trans:
                lo, hi = M[i, 2 * t, g], M[i, 2 * t + 1, g]
            else:
                lo, hi = M[i, g, 2 * t], M[i, g, 2 * t + 1]
            out[lane, i] = int(lo) | (int(hi) << 16)
    return out


def _row_addr(count):
    """Address (in b16 elements) supplied by each lane; unused lanes point far out of bounds (ignored)."""
    used = ir.Binary(dt.int32, LOC, "lt", LANE, C(8 * count))
    used = ir.Compare(dt.bool_, LOC, "lt", LANE, C(8 * count))
    row = B("mod", B("add", B("mul", LANE, C(5)), C(3)), C(32))
    return ir.Select(dt.int32, LOC, used, B("mul", row, C(8)), C(1 << 20))


@pytest.mark.parametrize("count", [1, 2, 4])
@pytest.mark.parametrize("trans", [False, True])
def test_ldmatrix(count, trans):
    k = K()
    G = k.tensor("G", dt.uint16)
    Out = k.tensor("Out", dt.uint32)
    S = k.alloc("S", "shared", dt.uint16, 256)
    R = k.alloc("R", "local", dt.uint32, 4)
    k.loop(8, lambda j: k.store(S, dt.uint16, B("add", B("mul", TID, C(8)), j),
                                load(G, dt.uint16, B("add", B("mul", TID, C(8)), j))))
    k.body.append(ir.Barrier(LOC))
    op = f"ldmatrix.sync.aligned.m8n8.x{count}{'.trans' if trans else ''}.shared.b16"
    k.native(op, [[ir.Reg(R, i, dt.uint32, True) for i in range(count)], [ir.Addr(S, _row_addr(count), dt.uint16)]])
    k.loop(count, lambda i: k.store(Out, dt.uint32, B("add", B("mul", LANE, C(count)), i), load(R, dt.uint32, i)))
    rng = np.random.default_rng(count)
    g = rng.integers(0, 2**16, 256, dtype=np.uint64).astype(np.uint16)
    out = np.zeros((32, count), np.uint32)
    run_ir(k.kernel(), {"G": g, "Out": out})
    rows = g.reshape(32, 8)
    M = np.stack([rows[SIGMA[8 * i: 8 * i + 8]] for i in range(count)])
    np.testing.assert_array_equal(out, _frag_ref(M, count, trans))


@pytest.mark.parametrize("count", [1, 2, 4])
@pytest.mark.parametrize("trans", [False, True])
def test_stmatrix(count, trans):
    k = K()
    W = k.tensor("W", dt.uint32)
    Out = k.tensor("Out", dt.uint16)
    S = k.alloc("S", "shared", dt.uint16, 256)
    R = k.alloc("R", "local", dt.uint32, 4)
    k.loop(8, lambda j: k.store(S, dt.uint16, B("add", B("mul", TID, C(8)), j), C(0, dt.uint16)))
    k.loop(count, lambda i: k.store(R, dt.uint32, i, load(W, dt.uint32, B("add", B("mul", LANE, C(count)), i))))
    k.body.append(ir.Barrier(LOC))
    op = f"stmatrix.sync.aligned.m8n8.x{count}{'.trans' if trans else ''}.shared.b16"
    k.native(op, [[ir.Addr(S, _row_addr(count), dt.uint16)], [ir.Reg(R, i, dt.uint32) for i in range(count)]])
    k.body.append(ir.Barrier(LOC))
    k.loop(8, lambda j: k.store(Out, dt.uint16, B("add", B("mul", TID, C(8)), j),
                                load(S, dt.uint16, B("add", B("mul", TID, C(8)), j))))
    rng = np.random.default_rng(10 + count)
    w = rng.integers(0, 2**32, (32, count), dtype=np.uint64).astype(np.uint32)
    out = np.zeros(256, np.uint16)
    run_ir(k.kernel(), {"W": w, "Out": out})
    # invert the fragment map: every matrix element is held by exactly one lane/half
    M = np.zeros((count, 8, 8), np.uint16)
    for lane in range(32):
        g, t = lane // 4, lane % 4
        for i in range(count):
            lo, hi = int(w[lane, i]) & 0xFFFF, int(w[lane, i]) >> 16
            if trans:
                M[i, 2 * t, g], M[i, 2 * t + 1, g] = lo, hi
            else:
                M[i, g, 2 * t], M[i, g, 2 * t + 1] = lo, hi
    want = np.zeros((32, 8), np.uint16)
    for i in range(count):
        want[SIGMA[8 * i: 8 * i + 8]] = M[i]
    np.testing.assert_array_equal(out.reshape(32, 8), want)
    np.testing.assert_array_equal(_frag_ref(M, count, trans), w)      # ldmatrix is its inverse


def test_ldmatrix_misaligned_faults():
    k = K()
    k.tensor("G", dt.uint16)
    S = k.alloc("S", "shared", dt.uint16, 256)
    R = k.alloc("R", "local", dt.uint32, 1)
    k.native("ldmatrix.sync.aligned.m8n8.x1.shared.b16",
             [[ir.Reg(R, 0, dt.uint32, True)], [ir.Addr(S, B("add", B("mul", LANE, C(8)), C(1)), dt.uint16)]])
    with pytest.raises(tiledsl.KernelFault, match="16-byte aligned") as ei:
        run_ir(k.kernel(), {"G": np.zeros(1, np.uint16)})
    assert "hand.py:7:5" in str(ei.value) and "thread (0, 0, 0)" in str(ei.value)


# ---------------------------------------------------------------- cp.async

def _cp_kernel(src_size=True, two_groups=False):
    k = K()
    G = k.tensor("G", dt.float32)
    O1 = k.tensor("O1", dt.float32)
    O2 = k.tensor("O2", dt.float32)
    O3 = k.tensor("O3", dt.float32)
    S = k.alloc("S", "shared", dt.float32, 256)
    base = B("mul", TID, C(4))
    size = [[ir.Val(B("mul", B("mod", TID, C(5)), C(4)))]] if src_size else []
    k.native("cp.async.cg.shared.global", [[ir.Addr(S, base, dt.float32)], [ir.Addr(G, base, dt.float32)],
                                           [ir.Imm("16")]] + size)
    k.native("cp.async.commit_group", [])
    if two_groups:
        k.native("cp.async.ca.shared.global", [[ir.Addr(S, B("add", TID, C(128)), dt.float32)],
                                               [ir.Addr(G, B("add", TID, C(128)), dt.float32)], [ir.Imm("4")]])
        k.native("cp.async.commit_group", [])
        k.native("cp.async.wait_group", [[ir.Imm("1")]])
    copy = lambda out, off: k.loop(4, lambda j: k.store(out, dt.float32, B("add", B("mul", TID, C(4)), j),  # noqa
                                                        load(S, dt.float32, B("add", B("add", off, j), C(0)))))
    nb = B("mul", B("mod", B("add", TID, C(1)), C(32)), C(4))       # the next thread's chunk
    copy(O1, nb)
    k.native("cp.async.wait_all" if two_groups else "cp.async.wait_group", [] if two_groups else [[ir.Imm("0")]])
    k.body.append(ir.Barrier(LOC))
    copy(O2, nb)
    if two_groups:
        k.loop(1, lambda j: k.store(O3, dt.float32, TID, load(S, dt.float32, B("add", TID, C(128)))))
    return k.kernel()


def test_cp_async_visibility_and_zero_fill(monkeypatch):
    g = np.arange(256, dtype=np.float32) + 1
    o1, o2, o3 = (np.zeros(128, np.float32) for _ in range(3))
    # the kernel reads shared memory before the wait on purpose: the race detector would stop it there
    with pytest.raises(tiledsl.KernelFault, match="the cp.async is still copying"):
        run_ir(_cp_kernel(), {"G": g, "O1": o1, "O2": o2, "O3": o3})
    monkeypatch.setenv("TILEDSL_RACECHECK", "0")
    run_ir(_cp_kernel(), {"G": g, "O1": o1, "O2": o2, "O3": o3})
    assert np.isnan(o1).all()                   # not visible before the wait: shared memory is still undefined
    want = g[:128].reshape(32, 4).copy()
    for t in range(32):
        want[t, (t % 5):] = 0                   # src-size = 4 * (t % 5) bytes, the tail zero-filled
    np.testing.assert_array_equal(o2.reshape(32, 4), np.roll(want, -1, axis=0))


def test_cp_async_groups():
    g = np.arange(256, dtype=np.float32) + 1
    o1, o2, o3 = (np.zeros(128, np.float32) for _ in range(3))
    run_ir(_cp_kernel(src_size=False, two_groups=True), {"G": g, "O1": o1, "O2": o2, "O3": o3})
    # wait_group 1 completes the first group (the chunks) but leaves the second pending
    np.testing.assert_array_equal(o1.reshape(32, 4), np.roll(g[:128].reshape(32, 4), -1, axis=0))
    np.testing.assert_array_equal(o3[:32], g[128:160])


def test_cp_async_misaligned():
    k = K()
    G = k.tensor("G", dt.float32)
    S = k.alloc("S", "shared", dt.float32, 256)
    k.native("cp.async.cg.shared.global", [[ir.Addr(S, B("mul", TID, C(2)), dt.float32)],
                                           [ir.Addr(G, C(0), dt.float32)], [ir.Imm("16")]])
    with pytest.raises(tiledsl.KernelFault, match="misaligned"):
        run_ir(k.kernel(), {"G": np.zeros(64, np.float32)})


def test_unknown_opcode():
    k = K()
    R = k.alloc("R", "local", dt.uint32, 1)
    k.body.append(ir.Native(LOC, "frobnicate.b32", [[ir.Reg(R, 0, dt.uint32, True)]]))   # no family knows it
    with pytest.raises(InterpreterError, match="no semantics for this opcode"):
        run_ir(k.kernel(), {})


# ---------------------------------------------------------------- register forms (one instruction per thread)

REG_DT = {16: dt.uint16, 32: dt.uint32, 64: dt.uint64}


def run_reg(opcode, srcs, dst_bits, groups=None, pred=None, preserve=False):
    """One `opcode` per thread on raw-bit operands: srcs are uint arrays (one per source register)."""
    n = len(srcs[0])
    k = K(block=n)
    outs = k.tensor("Out", REG_DT[dst_bits])
    regs = []
    for i, s in enumerate(srcs):
        d = REG_DT[s.dtype.itemsize * 8]
        st = k.tensor(f"S{i}", d)
        r = k.alloc(f"r{i}", "local", d, 1)
        k.store(r, d, C(0), load(st, d, TID))
        regs.append(ir.Reg(r, 0, d))
    rd = k.alloc("rd", "local", REG_DT[dst_bits], 1)
    k.store(rd, REG_DT[dst_bits], C(0), C(0x1234, REG_DT[dst_bits]))
    dreg = ir.Reg(rd, 0, REG_DT[dst_bits], True)
    k.native(opcode, groups(dreg, regs) if groups else [[dreg]] + [[r] for r in regs], pred, preserve)
    k.store(outs, REG_DT[dst_bits], TID, load(rd, REG_DT[dst_bits], C(0)))
    out = np.zeros(n, np.dtype(f"u{dst_bits // 8}"))
    args = {"Out": out}
    args.update({f"S{i}": s for i, s in enumerate(srcs)})
    run_ir(k.kernel(), args)
    return out


def _f32(rng, n, lo=-30, hi=30):
    return (rng.uniform(1, 2, n) * 2.0 ** rng.integers(lo, hi, n) * rng.choice([-1, 1], n)).astype(np.float32)


@pytest.mark.parametrize("mode", ["rn", "rz", "rm", "rp"])
@pytest.mark.parametrize("op", ["add", "sub", "mul", "div"])
def test_f32_arith_modes(op, mode):
    rng = np.random.default_rng(hash((op, mode)) % 2**32)
    a, b = _f32(rng, 256), _f32(rng, 256)
    if op in ("add", "sub"):
        b[:128] = (-a[:128] * (1 + rng.uniform(-1e-4, 1e-4, 128))).astype(np.float32) * (1 if op == "add" else -1)
    out = run_reg(f"{op}.{mode}.f32", [a.view(np.uint32), b.view(np.uint32)], 32)
    f = {"add": lambda x, y: x + y, "sub": lambda x, y: x - y, "mul": lambda x, y: x * y,
         "div": lambda x, y: x / y}[op]
    for i in range(256):
        q = f(Fraction(float(a[i])), Fraction(float(b[i])))
        zs = 1 if q == 0 and mode == "rm" else 0
        assert int(out[i]) == ref_round_bits(q, "f32", mode, zs), (op, mode, a[i], b[i])


@pytest.mark.parametrize("mode", ["rn", "rz", "rm", "rp"])
def test_fma_f64(mode):
    rng = np.random.default_rng(9)
    n = 64
    a = rng.standard_normal(n) * 2.0 ** rng.integers(-40, 40, n)
    b = rng.standard_normal(n) * 2.0 ** rng.integers(-40, 40, n)
    c = -a * b * (1 + rng.uniform(-1e-9, 1e-9, n))
    out = run_reg(f"fma.{mode}.f64", [a.view(np.uint64), b.view(np.uint64), c.view(np.uint64)], 64)
    for i in range(n):
        q = Fraction(a[i]) * Fraction(b[i]) + Fraction(c[i])
        assert int(out[i]) == ref_round_bits(q, "f64", mode), (mode, i)
    if mode == "rn":
        assert np.count_nonzero(out.view(np.float64) != a * b + c) > n // 4


def test_f16_add_mul_sat_ftz():
    a = np.array([1.0, 0.5, -2.0, 6e-8, 65504.0, 0.0007], np.float16)
    b = np.array([0.25, 0.75, 1.0, 6e-8, 65504.0, 0.0003], np.float16)
    out = run_reg("add.rn.sat.f16", [a.view(np.uint16), b.view(np.uint16)], 16).view(np.float16)
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(out, np.clip((a.astype(np.float64) + b).astype(np.float16), 0, 1))
    out = run_reg("mul.rn.ftz.f16", [a.view(np.uint16), b.view(np.uint16)], 16).view(np.float16)
    assert out[3] == 0 and not np.signbit(out[3])                  # subnormal inputs flushed
    assert np.isinf(out[4])
    assert out[5] == 0                                              # subnormal result flushed


def test_min_max_nan_and_zero():
    a = np.array([np.nan, 1.0, -0.0, np.nan, 2.0], np.float32)
    b = np.array([1.0, np.nan, 0.0, np.nan, -3.0], np.float32)
    mn = run_reg("min.f32", [a.view(np.uint32), b.view(np.uint32)], 32).view(np.float32)
    mx = run_reg("max.f32", [a.view(np.uint32), b.view(np.uint32)], 32).view(np.float32)
    mnn = run_reg("min.NaN.f32", [a.view(np.uint32), b.view(np.uint32)], 32)
    np.testing.assert_array_equal(mn[[0, 1, 4]], [1.0, 1.0, -3.0])
    np.testing.assert_array_equal(mx[[0, 1, 4]], [1.0, 1.0, 2.0])
    assert np.signbit(mn[2]) and not np.signbit(mx[2])
    assert np.isnan(mn[3])
    assert (mnn[[0, 1, 3]] == 0x7FFFFFFF).all() and mnn[4].view(np.float32) == -3.0


def test_integer_forms():
    a = np.array([0xFFFFFFFF, 0x80000000, 7, 0x12345678], np.uint32)
    b = np.array([0xFFFFFFFF, 2, 0xFFFFFFF9, 0x9ABCDEF0], np.uint32)
    hi_u = run_reg("mul.hi.u32", [a, b], 32)
    hi_s = run_reg("mul.hi.s32", [a, b], 32)
    lo = run_reg("mul.lo.s32", [a, b], 32)
    sat = run_reg("add.sat.s32", [a, b], 32)
    for i in range(4):
        x, y = int(a[i]), int(b[i])
        sx, sy = x - (x >> 31 << 32), y - (y >> 31 << 32)
        assert int(hi_u[i]) == (x * y) >> 32
        assert int(hi_s[i]) == ((sx * sy) >> 32) & 0xFFFFFFFF
        assert int(lo[i]) == (x * y) & 0xFFFFFFFF
        assert int(sat[i]) == max(min(sx + sy, 2**31 - 1), -2**31) & 0xFFFFFFFF
    x64 = np.array([2**64 - 1, 3 << 62], np.uint64)
    y64 = np.array([2**64 - 1, 5], np.uint64)
    h = run_reg("mul.hi.u64", [x64, y64], 64)
    assert [int(v) for v in h] == [(int(p) * int(q)) >> 64 for p, q in zip(x64, y64)]


def test_mov_pack_and_cvt_forms():
    a = np.array([0x1111, 0xABCD], np.uint16)
    b = np.array([0x2222, 0x0001], np.uint16)
    out = run_reg("mov.b32", [a, b], 32, groups=lambda d, r: [[d], [r[0], r[1]]])
    assert [hex(v) for v in out] == ["0x22221111", "0x1abcd"]
    f = np.array([1.5, -2.5, 3e38, np.nan], np.float32).view(np.uint32)
    h = run_reg("cvt.rn.f16.f32", [f], 16).view(np.float16)
    np.testing.assert_array_equal(h[:3], np.array([1.5, -2.5, np.inf], np.float16))
    assert np.isnan(h[3])
    hr = run_reg("cvt.rz.f16.f32", [f], 16).view(np.float16)
    assert hr[2] == np.float16(65504)
    back = run_reg("cvt.f32.f16", [h.view(np.uint16)], 32).view(np.float32)
    np.testing.assert_array_equal(back[:2], [1.5, -2.5])
    i = run_reg("cvt.rni.s32.f32", [f], 32).view(np.int32)
    np.testing.assert_array_equal(i, [2, -2, 2**31 - 1, 0])
    u = run_reg("cvt.rmi.u32.f32", [f], 32)
    np.testing.assert_array_equal(u, [1, 0, 2**32 - 1, 0])
    big = np.array([2**31 - 1, -2**31 + 1, 16777217, 3], np.int32).view(np.uint32)
    for mode in ("rn", "rz", "rm", "rp"):
        r = run_reg(f"cvt.{mode}.f32.s32", [big], 32)
        for k, v in enumerate(big.view(np.int32).tolist()):
            assert int(r[k]) == ref_round_bits(Fraction(v), "f32", mode), (mode, v)


def test_cvt_fp8x2_packs_two_saturated_bytes():
    # a -> the upper byte, b -> the lower; nearest-even on e4m3's 3 mantissa bits, .satfinite clamps overflow
    # (and inf) to +-448 (e4m3 has no infinity) or +-57344 (e5m2); NaN is 0x7F; subnormals are kept
    a = np.array([1.0, 470.0, -np.inf, 0.3, 2.0 ** -9, 1.0625, np.nan, 1e6], np.float32)
    b = np.array([-0.0, 449.0, 3.5, 0.0, 2.0 ** -10, 1.1875, 2.0 ** -7, -1e6], np.float32)
    out = run_reg("cvt.rn.satfinite.e4m3x2.f32", [a.view(np.uint32), b.view(np.uint32)], 16)
    assert [hex(v) for v in out] == ["0x3880", "0x7e7e", "0xfe46", "0x2a00", "0x100", "0x383a", "0x7f04", "0x7efe"]
    relu = run_reg("cvt.rn.relu.satfinite.e4m3x2.f32", [a.view(np.uint32), b.view(np.uint32)], 16)
    assert [hex(v) for v in relu][:3] == ["0x3800", "0x7e7e", "0x46"]
    e5 = run_reg("cvt.rn.satfinite.e5m2x2.f32", [a.view(np.uint32), b.view(np.uint32)], 16)
    assert [hex(v) for v in e5][:3] == ["0x3c80", "0x5f5f", "0xfb43"]


def test_register_pred_poison_and_preserve():
    a = np.arange(32, dtype=np.float32)
    pred = ir.Compare(dt.bool_, LOC, "lt", TID, C(16))
    out = run_reg("neg.f32", [a.view(np.uint32)], 32, pred=pred)
    np.testing.assert_array_equal(out[:16].view(np.float32), -a[:16])
    assert np.isnan(out[16:].view(np.float32)).all()
    out = run_reg("neg.f32", [a.view(np.uint32)], 32, pred=pred, preserve=True)
    assert (out[16:] == 0x1234).all()
    out = run_reg("mov.b32", [a.view(np.uint32)], 32, pred=pred)        # integer registers: 0xDEADBEEF
    assert (out[16:] == 0xDEADBEEF).all()


def test_f32x2_fma_halves():
    rng = np.random.default_rng(4)
    a, b, c = (_f32(rng, 64) for _ in range(3))
    words = [x.reshape(32, 2).copy().view(np.uint64).reshape(32) for x in (a, b, c)]
    out = run_reg("fma.rz.f32x2", words, 64).view(np.float32).reshape(32, 2)
    for i in range(64):
        q = Fraction(float(a[i])) * Fraction(float(b[i])) + Fraction(float(c[i]))
        assert int(out.reshape(-1)[i:i + 1].view(np.uint32)[0]) == ref_round_bits(q, "f32", "rz")
