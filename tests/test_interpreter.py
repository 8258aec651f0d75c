"""The CPU interpreter: seeds, exact rounding, packed halves, predication, vector ld/st, mma, faults, control flow."""
import importlib
import inspect
import os
import sys
from fractions import Fraction

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import tiledsl  # noqa: E402
from tiledsl import T  # noqa: E402
from tiledsl.interpreter import InterpreterError, available  # noqa: E402
from test_interpreter_helpers import exact_in, f32_bits, ref_round_bits, run_mma  # noqa: E402

MODES = ["rn", "rz", "rm", "rp"]


def _line_of(fn, needle):
    src, start = inspect.getsourcelines(fn)
    for i, line in enumerate(src):
        if needle in line:
            return start + i
    raise AssertionError(needle)


# ---------------------------------------------------------------- seeds

def test_available():
    assert available is True


@pytest.mark.parametrize("example", ["seed_mma", "seed_fma"])
def test_seed_examples_on_interpreter(example, capsys, monkeypatch):
    mod = importlib.import_module(example)
    import tiledsl.runtime.driver as drv
    monkeypatch.setattr(drv, "gpu_available", lambda: False)
    mod.main([])
    assert "ran on the CPU interpreter: OK" in capsys.readouterr().out


def test_seed_mma_exact_values():
    import seed_mma
    a, b, ap, bp = seed_mma.inputs()
    out = np.zeros((16, 8), np.float32)
    tiledsl.jit(seed_mma.warp_mma.fn, interpret=True)(ap, bp, out)
    np.testing.assert_array_equal(out, (a.astype(np.float64) @ b.astype(np.float64).T).astype(np.float32))


def test_env_switch_and_cache(monkeypatch):
    import seed_fma
    monkeypatch.setenv("TILEDSL_INTERPRET", "1")
    k = tiledsl.jit(seed_fma.affine_fma.fn)
    a = np.arange(-2, 2, dtype=np.float32).reshape(4, 1)
    out = np.zeros_like(a)
    k(a, out)
    np.testing.assert_array_equal(out, 2 * a + 1)
    progs = dict(k._interp_programs)
    out[:] = 0
    k(a, out)
    assert k._interp_programs == progs and len(progs) == 1       # no re-parse for the same specialization
    np.testing.assert_array_equal(out, 2 * a + 1)


# ---------------------------------------------------------------- fma.f32: one rounding, four modes

@tiledsl.jit(interpret=True)
def fma_kernel(A: T.Tensor(("n",), "float32"), B: T.Tensor(("n",), "float32"), C: T.Tensor(("n",), "float32"),
               Out: T.Tensor(("n",), "float32"), OPC: T.constexpr):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=(n + 127) // 128, block=128))
    t = T.cuda.block_id() * 128 + T.cuda.thread_id()
    if t < n:
        a = T.alloc_local((1,), "float32")
        b = T.alloc_local((1,), "float32")
        c = T.alloc_local((1,), "float32")
        d = T.alloc_local((1,), "float32")
        a[0] = A[t]
        b[0] = B[t]
        c[0] = C[t]
        T.cuda.tile.apply(T.ptx[OPC], d, a, b, c)
        Out[t] = d[0]


def _between_floats_inputs(n=600, seed=1):
    """a, b, c with a*b + c exactly between two f32 values (cancellation-heavy, ties, tiny addends)."""
    rng = np.random.default_rng(seed)
    a = (rng.uniform(1, 2, n) * 2.0 ** rng.integers(-20, 20, n) * rng.choice([-1, 1], n)).astype(np.float32)
    b = (rng.uniform(1, 2, n) * 2.0 ** rng.integers(-20, 20, n) * rng.choice([-1, 1], n)).astype(np.float32)
    p = a.astype(np.float64) * b.astype(np.float64)
    kind = rng.integers(0, 3, n)
    c = np.where(kind == 0, -p * (1 + rng.uniform(-1e-3, 1e-3, n)),               # heavy cancellation
                 np.where(kind == 1, p * rng.uniform(-4, 4, n),                     # comparable addend
                          p * 2.0 ** -30 * rng.uniform(-1, 1, n))).astype(np.float32)   # addend below an ulp
    keep = []
    for i in range(n):
        q = Fraction(float(a[i])) * Fraction(float(b[i])) + Fraction(float(c[i]))
        if Fraction(float(np.float32(float(q)))) != q:
            keep.append(i)
    return a[keep], b[keep], c[keep]


def _ref_fma_f32(a, b, c, mode):
    out = []
    for x, y, z in zip(a.tolist(), b.tolist(), c.tolist()):
        q = Fraction(x) * Fraction(y) + Fraction(z)
        out.append(ref_round_bits(q, "f32", mode))
    return np.array(out, np.uint32)


@pytest.mark.parametrize("mode", MODES)
def test_fma_f32_rounding_modes_bit_exact(mode):
    a, b, c = _between_floats_inputs()
    assert len(a) > 500
    out = np.zeros_like(a)
    fma_kernel(a, b, c, out, f"fma.{mode}.f32")
    ref = _ref_fma_f32(a, b, c, mode)
    bad = np.flatnonzero(f32_bits(out) != ref)
    assert bad.size == 0, f"{bad.size} mismatches, first a={a[bad[0]]!r} b={b[bad[0]]!r} c={c[bad[0]]!r}"
    if mode == "rn":
        # a rounded multiply followed by a rounded add is NOT an fma reference: it disagrees on these inputs
        naive = (a * b) + c
        assert np.count_nonzero(f32_bits(naive) != ref) > len(a) // 10


def test_fma_f32_modes_differ_and_bracket():
    a, b, c = _between_floats_inputs(200, seed=7)
    res = {}
    for mode in MODES:
        out = np.zeros_like(a)
        fma_kernel(a, b, c, out, f"fma.{mode}.f32")
        res[mode] = out.astype(np.float64)
    exact = [Fraction(float(x)) * Fraction(float(y)) + Fraction(float(z)) for x, y, z in zip(a, b, c)]
    for i, q in enumerate(exact):
        assert Fraction(res["rm"][i]) < q < Fraction(res["rp"][i])
        assert np.nextafter(np.float32(res["rm"][i]), np.float32(np.inf)) == np.float32(res["rp"][i])


def test_fma_f32_special_cases():
    big = np.float32(3.0e38)
    tiny = np.float32(2.0 ** -140)                                # subnormal
    one_p = np.float32(1 + 2.0 ** -12)
    cases = [
        (one_p, one_p, np.float32(0.0)),                          # exact midpoint: ties to even in rn
        (np.float32(3.0), np.float32(-2.0), np.float32(6.0)),     # exact zero: +0, but -0 in rm
        (big, np.float32(2.0), np.float32(0.0)),                  # overflow: inf or max by mode
        (big, np.float32(-2.0), np.float32(0.0)),
        (tiny, np.float32(0.75), np.float32(0.0)),                # subnormal result, rounded
        (np.float32(-0.0), np.float32(1.0), np.float32(-0.0)),    # -0 + -0 = -0
        (np.float32(np.inf), np.float32(0.0), np.float32(1.0)),   # NaN
        (np.float32(np.inf), np.float32(1.0), np.float32(-np.inf)),
    ]
    a, b, c = (np.array(v, np.float32) for v in zip(*cases))
    for mode in MODES:
        out = np.zeros_like(a)
        fma_kernel(a, b, c, out, f"fma.{mode}.f32")
        for i, (x, y, z) in enumerate(cases):
            if not (np.isfinite(x) and np.isfinite(y) and np.isfinite(z)):
                assert np.isnan(out[i]) and f32_bits(out[i]) == 0x7FFFFFFF
                continue
            q = Fraction(float(x)) * Fraction(float(y)) + Fraction(float(z))
            zs = 1 if (q == 0 and (mode == "rm" or (np.signbit(x * y) and np.signbit(z)))) else 0
            assert f32_bits(out[i]) == ref_round_bits(q, "f32", mode, zs), (mode, i, out[i])


def test_fma_ftz_sat():
    a = np.array([2.0 ** -140, 0.5, -3.0, 2.0, np.nan], np.float32)
    b = np.array([1.0, 4.0, 1.0, 0.25, 1.0], np.float32)
    c = np.array([0.0, 0.0, 0.0, 0.25, 0.0], np.float32)
    out = np.zeros_like(a)
    fma_kernel(a, b, c, out, "fma.rn.ftz.sat.f32")
    np.testing.assert_array_equal(out, [0.0, 1.0, 0.0, 0.75, 0.0])
    assert not np.signbit(out[2])
    fma_kernel(a, b, c, out, "fma.rn.ftz.f32")
    assert out[0] == 0 and out[1] == 2.0 and out[2] == -3.0


# ---------------------------------------------------------------- packed halves

@tiledsl.jit(interpret=True)
def hfma_kernel(A: T.Tensor(("n",), "uint32"), B: T.Tensor(("n",), "uint32"), C: T.Tensor(("n",), "uint32"),
                Out: T.Tensor(("n",), "uint32"), OPC: T.constexpr):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=(n + 63) // 64, block=64))
    t = T.cuda.block_id() * 64 + T.cuda.thread_id()
    if t < n:
        a = T.alloc_local((1,), "uint32")
        b = T.alloc_local((1,), "uint32")
        c = T.alloc_local((1,), "uint32")
        d = T.alloc_local((1,), "uint32")
        a[0] = A[t]
        b[0] = B[t]
        c[0] = C[t]
        T.cuda.tile.apply(T.ptx[OPC], d, a, b, c)
        Out[t] = d[0]


def _random_halves(fmt, n, rng):
    if fmt == "f16":
        v = (rng.uniform(0.5, 1, n) * 2.0 ** rng.integers(-12, 8, n) * rng.choice([-1, 1], n)).astype(np.float16)
        return v.view(np.uint16)
    v = (rng.uniform(0.5, 1, n) * 2.0 ** rng.integers(-60, 60, n) * rng.choice([-1, 1], n)).astype(np.float32)
    return (v.view(np.uint32) >> 16).astype(np.uint16)


def _half_value(fmt, bits):
    if fmt == "f16":
        return float(np.array(bits, np.uint16).view(np.float16))
    return float(np.array(int(bits) << 16, np.uint32).view(np.float32))


@pytest.mark.parametrize("fmt", ["f16", "bf16"])
@pytest.mark.parametrize("relu", [False, True])
def test_packed_fma_x2(fmt, relu):
    rng = np.random.default_rng(3)
    n = 300
    halves = [[_random_halves(fmt, n, rng) for _ in range(2)] for _ in range(3)]
    # make some addends cancel the product so the exact result needs the single rounding
    words = [h[0].astype(np.uint32) | (h[1].astype(np.uint32) << 16) for h in halves]
    opc = f"fma.rn{'.relu' if relu else ''}.{fmt}x2"
    out = np.zeros(n, np.uint32)
    hfma_kernel(*words, out, opc)
    for i in range(n):
        for part in range(2):
            a, b, c = (_half_value(fmt, halves[k][part][i]) for k in range(3))
            q = Fraction(a) * Fraction(b) + Fraction(c)
            want = ref_round_bits(q, fmt, "rn")
            if relu and want & 0x8000:
                want = 0
            got = (int(out[i]) >> (16 * part)) & 0xFFFF
            assert got == want, (fmt, i, part, a, b, c, hex(got), hex(want))


def test_packed_fma_single_rounding_matters():
    # bf16: (1 + 2^-7)^2 + 2^-8 = 1 + 2^-6 + 2^-8 + 2^-14 rounds up to 1 + 3*2^-7 (0x3F83); rounding the product
    # first gives 1 + 2^-6, and adding 2^-8 then hits a tie that goes to even: 1 + 2^-6 (0x3F82).
    a = np.array([0x3F81 | (0x3F81 << 16)], np.uint32)
    c = np.array([0x3B80 | (0x3F80 << 16)], np.uint32)          # low half 2^-8, high half 1.0
    out = np.zeros(1, np.uint32)
    hfma_kernel(a, a, c, out, "fma.rn.bf16x2")
    assert int(out[0]) & 0xFFFF == 0x3F83
    assert int(out[0]) >> 16 == ref_round_bits(Fraction(1 + 2**-7) ** 2 + 1, "bf16", "rn")


# ---------------------------------------------------------------- predication

@tiledsl.jit(interpret=True)
def pred_kernel(A: T.Tensor((64, 1), "float32"), Out: T.Tensor((64,), "float32"), Out2: T.Tensor((64,), "float32"),
                PRESERVE: T.constexpr):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=64))
    t = T.cuda.thread_id()
    a = T.alloc_local((1,), "float32")
    d = T.alloc_local((1,), "float32")
    r = T.alloc_local((1,), "float32")
    a[0] = A[t, 0]
    d[0] = T.float32(-7.0)
    r[0] = T.float32(-9.0)
    T.cuda.tile.apply(T.ptx["fma.rn.f32"], d, a, T.float32(2), T.float32(1), pred=t % 3 == 0,
                      preserve_dst=PRESERVE)
    T.cuda.tile.apply(T.ptx["ld.global.f32"], r, A[t], pred=t < 10, preserve_dst=PRESERVE)
    Out[t] = d[0]
    Out2[t] = r[0]


@pytest.mark.parametrize("preserve", [True, False])
def test_pred_preserve(preserve):
    a = np.arange(64, dtype=np.float32).reshape(64, 1)
    out, out2 = np.zeros(64, np.float32), np.zeros(64, np.float32)
    pred_kernel(a, out, out2, preserve)
    t = np.arange(64)
    on = t % 3 == 0
    np.testing.assert_array_equal(out[on], 2 * a[on, 0] + 1)
    np.testing.assert_array_equal(out2[t < 10], a[t < 10, 0])
    if preserve:
        np.testing.assert_array_equal(out[~on], -7.0)
        np.testing.assert_array_equal(out2[t >= 10], -9.0)
    else:                                        # undefined where pred is false: poisoned so tests notice
        assert np.isnan(out[~on]).all()
        assert np.isnan(out2[t >= 10]).all()


# ---------------------------------------------------------------- ld / st vectors

@tiledsl.jit(interpret=True)
def vec_kernel(A: T.Tensor((32, 2, 4), "float32"), Out: T.Tensor((32, 4, 2), "float32"),
               W: T.Tensor((32, 4), "uint32"), WOut: T.Tensor((32, 4), "uint32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    t = T.cuda.thread_id()
    r = T.alloc_local((2, 4), "float32")
    T.cuda.tile.apply(T.ptx["ld.global.v4.f32"], r, A[t])
    rv = r.view(4, 2)
    T.cuda.tile.apply(T.ptx["st.global.v2.f32"], Out[t], rv)
    sm = T.alloc_shared((32, 4), "uint32")
    w = T.alloc_local((4,), "uint32")
    w2 = T.alloc_local((4,), "uint32")
    T.cuda.tile.apply(T.ptx["ld.global.v4.b32"], w, W[t])
    T.cuda.tile.apply(T.ptx["st.shared.v4.b32"], sm[t], w)
    T.cuda.syncthreads()
    sm2 = sm.view(32, 2, 2)
    T.cuda.tile.apply(T.ptx["ld.shared.v2.b32"], w2.view(2, 2), sm2[(t + 1) % 32])
    T.cuda.tile.apply(T.ptx["st.global.v4.b32"], WOut[t], w2)


def test_ld_st_vectors():
    rng = np.random.default_rng(0)
    a = rng.standard_normal((32, 2, 4)).astype(np.float32)
    out = np.zeros((32, 4, 2), np.float32)
    w = rng.integers(0, 2**32, (32, 4), dtype=np.uint64).astype(np.uint32)
    wout = np.zeros_like(w)
    vec_kernel(a, out, w, wout)
    np.testing.assert_array_equal(out.reshape(32, 8), a.reshape(32, 8))
    np.testing.assert_array_equal(wout, np.roll(w, -1, axis=0))


# ---------------------------------------------------------------- mma.sync, all four forms

@pytest.mark.parametrize("k", [8, 16])
@pytest.mark.parametrize("ab", ["f16", "bf16"])
@pytest.mark.parametrize("tensor_c", [False, True])
def test_mma_forms(k, ab, tensor_c):
    rng = np.random.default_rng(k + len(ab) + tensor_c)
    mr, nr, kr = 2, 3, 2
    a = exact_in(ab, rng, (16 * mr, k * kr))
    b = exact_in(ab, rng, (8 * nr, k * kr))
    c = rng.standard_normal((16 * mr, 8 * nr)).astype(np.float32) if tensor_c else None
    cval = 0.0 if tensor_c else 1.25
    out = run_mma(mr, nr, kr, k, ab, a, b, c, cval)
    ref = a @ b.T + (c.astype(np.float64) if tensor_c else cval)
    np.testing.assert_allclose(out, ref, rtol=1e-6, atol=1e-6)


def test_mma_general_values_rounded_once():
    rng = np.random.default_rng(11)
    a = rng.standard_normal((16, 16)).astype(np.float16).astype(np.float64)
    b = rng.standard_normal((8, 16)).astype(np.float16).astype(np.float64)
    c = rng.standard_normal((16, 8)).astype(np.float32)
    out = run_mma(1, 1, 1, 16, "f16", a, b, c)
    np.testing.assert_allclose(out, a @ b.T + c, rtol=1e-6, atol=1e-7)


@tiledsl.jit(interpret=True)
def half_warp_mma(Out: T.Tensor((32, 4), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=64))
    lane = T.cuda.lane_id()
    ar = T.alloc_local((4,), "uint32")
    br = T.alloc_local((2,), "uint32")
    dr = T.alloc_local((4,), "float32")
    for i in range(4):
        ar[i] = T.uint32(0)
    for i in range(2):
        br[i] = T.uint32(0)
    av = ar.view(1, 1, 16, 8, layout=LA1)
    bv = br.view(1, 1, 8, 8, layout=LB1)
    dv = dr.view(1, 1, 16, 8, layout=LD1)
    if lane < 16:
        T.cuda.tile.apply(T.ptx["mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"], dv, av, bv, T.float32(0),
                          scope="warp")


from tiledsl.layout import S, TileLayout, laneid  # noqa: E402

LA1 = TileLayout(S[(1, 1, 2, 8, 2, 4): (4, 4, 1, 4 @ laneid, 2, 1 @ laneid)])
LB1 = TileLayout(S[(1, 1, 8, 2, 4): (2, 2, 4 @ laneid, 1, 1 @ laneid)])
LD1 = TileLayout(S[(1, 1, 2, 8, 4, 2): (4, 4, 2, 4 @ laneid, 1 @ laneid, 1)])


def test_mma_needs_whole_warp():
    # an mma under `lane < 16` is refused when the kernel compiles (it used to fault only when it ran)
    with pytest.raises(tiledsl.CompilationError, match="all 32 lanes of a warp must execute it"):
        half_warp_mma(np.zeros((32, 4), np.float32))


# ---------------------------------------------------------------- faults

@tiledsl.jit(interpret=True)
def oob_kernel(A: T.Tensor((64,), "float32"), Out: T.Tensor((64,), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=2, block=32))
    i = T.cuda.block_id() * 32 + T.cuda.thread_id()
    Out[i] = A[i + 1]


@tiledsl.jit(interpret=True)
def oob_shared_kernel(Out: T.Tensor((32,), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=3, block=(8, 4)))
    sm = T.alloc_shared((32,), "float32")
    t = T.cuda.thread_id(0) + 8 * T.cuda.thread_id(1)
    sm[t + T.cuda.block_id()] = T.float32(1.0)
    Out[t] = sm[t]


def test_oob_global_fault_message():
    line = _line_of(oob_kernel.fn, "A[i + 1]")
    with pytest.raises(tiledsl.KernelFault) as ei:
        oob_kernel(np.zeros(64, np.float32), np.zeros(64, np.float32))
    msg = str(ei.value)
    assert f"{__file__}:{line}:" in msg
    assert "out-of-bounds read of 'A'" in msg and "element offset 64" in msg
    assert "block (1, 0, 0)" in msg and "thread (31, 0, 0)" in msg


def test_oob_shared_fault_message():
    line = _line_of(oob_shared_kernel.fn, "sm[t + T.cuda.block_id()]")
    with pytest.raises(tiledsl.KernelFault) as ei:
        oob_shared_kernel(np.zeros(32, np.float32))
    msg = str(ei.value)
    assert f"{__file__}:{line}:" in msg and "out-of-bounds write of 'sm'" in msg
    assert "block (1, 0, 0)" in msg and "thread (7, 3, 0)" in msg


# ---------------------------------------------------------------- control flow, shared memory, blocks

@tiledsl.jit(interpret=True)
def diverge_kernel(Out: T.Tensor(("n",), "int32"), Sums: T.Tensor((4,), "int32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=4, block=64))
    t = T.cuda.thread_id()
    acc = 0
    for j in range(t % 7):
        if j % 2 == 0:
            acc += j
        else:
            acc -= 1
    Out[T.cuda.block_id() * 64 + t] = acc
    sm = T.alloc_shared((64,), "int32")
    sm[t] = acc + T.cuda.block_id()
    T.cuda.syncthreads()
    if t == 0:
        s = 0
        for j in range(64):
            s += sm[j]
        Sums[T.cuda.block_id()] = s


def test_divergent_loops_and_per_block_shared():
    out = np.zeros(256, np.int32)
    sums = np.zeros(4, np.int32)
    diverge_kernel(out, sums)
    t = np.arange(256) % 64
    want = np.array([sum(j if j % 2 == 0 else -1 for j in range(x % 7)) for x in t])
    np.testing.assert_array_equal(out, want)
    np.testing.assert_array_equal(sums, [want[:64].sum() + 64 * b for b in range(4)])


@tiledsl.jit(interpret=True)
def bad_barrier(Out: T.Tensor((64,), "int32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=64))
    t = T.cuda.thread_id()
    if t < 40:
        T.cuda.syncthreads()
    Out[t] = t


def test_barrier_under_divergence_is_an_error():
    line = _line_of(bad_barrier.fn, "T.cuda.syncthreads()")
    with pytest.raises(tiledsl.KernelFault, match="divergent") as ei:
        bad_barrier(np.zeros(64, np.int32))
    assert f":{line}:" in str(ei.value)


@tiledsl.jit(interpret=True)
def bf16_kernel(F: T.Tensor((16,), "float32"), Out: T.Tensor((16,), "uint16"), Back: T.Tensor((16,), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=16))
    t = T.cuda.thread_id()
    h = T.alloc_local((1,), "bfloat16")
    h[0] = T.cast(F[t], "bfloat16")
    hb = h.view(dtype="uint16")
    Out[t] = hb[0]
    Back[t] = T.cast(h[0] * h[0], "float32")


def test_bfloat16_round_to_nearest_even():
    f = np.array([1.0, 1.00390625, 1.01171875, 1.00390625 + 2**-20, -1.00390625, 3e38, 1e-40, np.nan,
                  np.inf, -0.0, 65504.0, 1 / 3, 2.0**-133, 2.0**-134, 2.0**-134 * 1.5, 7.0], np.float32)
    out = np.zeros(16, np.uint16)
    back = np.zeros(16, np.float32)
    bf16_kernel(f, out, back)
    for i, x in enumerate(f):
        if np.isnan(x):
            assert out[i] & 0x7F80 == 0x7F80 and out[i] & 0x7F
            continue
        if np.isinf(x):
            assert out[i] == 0x7F80
            continue
        want = ref_round_bits(Fraction(float(x)), "bf16", "rn", 1 if np.signbit(x) else 0)
        assert int(out[i]) == want, (x, hex(out[i]), hex(want))
    sq = [(Fraction(float(np.array(int(v) << 16, np.uint32).view(np.float32))) ** 2) for v in out[:7]]
    for i, q in enumerate(sq):
        want = ref_round_bits(q, "bf16", "rn")
        assert int(np.float32(back[i]).view(np.uint32)) >> 16 == want


def test_integer_semantics_without_bf16():
    a = np.array([7, -7, 7, -7, 2**31 - 1, -2**31, 300, -129], np.int32)
    b = np.array([2, 2, -2, -2, 3, 7, 5, 3], np.int32)
    out = np.zeros((8, 6), np.int32)
    f = np.array([1.9, -1.9, np.nan, 3e9, -3e9, 1000.0, -200.0, 2.5], np.float32)
    fout = np.zeros((8, 2), np.int32)
    int_kernel2(a, b, out, f, fout)
    a64, b64 = a.astype(np.int64), b.astype(np.int64)
    np.testing.assert_array_equal(out[:, 0], a64 // b64)
    np.testing.assert_array_equal(out[:, 1], a64 % b64)
    np.testing.assert_array_equal(out[:, 2], ((a64 * b64 + 2**31) % 2**32) - 2**31)
    np.testing.assert_array_equal(out[:, 3], ((a64 * 8 + 2**31) % 2**32) - 2**31)
    np.testing.assert_array_equal(out[:, 4], (a64 % 2**32) >> 1)
    np.testing.assert_array_equal(out[:, 5], ((a64 + 128) % 256) - 128)
    np.testing.assert_array_equal(fout[:, 0], [1, -1, 0, 2**31 - 1, -2**31, 1000, -200, 2])
    np.testing.assert_array_equal(fout[:, 1], [1, -1, 0, 127, -128, 127, -128, 2])


@tiledsl.jit(interpret=True)
def int_kernel2(A: T.Tensor((8,), "int32"), B: T.Tensor((8,), "int32"), Out: T.Tensor((8, 6), "int32"),
                F: T.Tensor((8,), "float32"), FOut: T.Tensor((8, 2), "int32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=8))
    t = T.cuda.thread_id()
    a = A[t]
    b = B[t]
    Out[t, 0] = a // b
    Out[t, 1] = a % b
    Out[t, 2] = a * b
    Out[t, 3] = a << 3
    Out[t, 4] = T.cast(T.cast(a, "uint32") >> 1, "int32")
    Out[t, 5] = T.cast(T.cast(a, "int8"), "int32")
    FOut[t, 0] = T.cast(F[t], "int32")
    FOut[t, 1] = T.cast(T.cast(F[t], "int8"), "int32")


def test_division_by_zero_faults():
    with pytest.raises(tiledsl.KernelFault, match="division by zero"):
        int_kernel2(np.ones(8, np.int32), np.zeros(8, np.int32), np.zeros((8, 6), np.int32),
                    np.zeros(8, np.float32), np.zeros((8, 2), np.int32))


# ---------------------------------------------------------------- register instructions: mov, cvt

@tiledsl.jit(interpret=True)
def cvt_kernel(F: T.Tensor((32, 2), "float32"), Packed: T.Tensor((32,), "uint32"),
               Unpacked: T.Tensor((32, 2), "uint16"), I: T.Tensor((32,), "int32"), OPC: T.constexpr):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    t = T.cuda.thread_id()
    f = T.alloc_local((2, 1), "float32")
    p = T.alloc_local((1,), "uint32")
    h = T.alloc_local((2,), "uint16")
    i = T.alloc_local((1,), "int32")
    f[0, 0] = F[t, 0]
    f[1, 0] = F[t, 1]
    T.cuda.tile.apply(T.ptx[OPC], p, f[0], f[1])
    T.cuda.tile.apply(T.ptx["mov.b32"], h, p)
    T.cuda.tile.apply(T.ptx["cvt.rzi.s32.f32"], i, f[0])
    Packed[t] = p[0]
    Unpacked[t, 0] = h[0]
    Unpacked[t, 1] = h[1]
    I[t] = i[0]


@pytest.mark.parametrize("fmt", ["f16", "bf16"])
@pytest.mark.parametrize("mode", ["rn", "rz"])
def test_cvt_packed_and_mov_unpack(fmt, mode):
    rng = np.random.default_rng(5)
    f = (rng.standard_normal((32, 2)) * 100).astype(np.float32)
    f[0] = [np.nan, 7e4]
    f[1] = [3e9, -3e9]
    packed = np.zeros(32, np.uint32)
    unpacked = np.zeros((32, 2), np.uint16)
    i = np.zeros(32, np.int32)
    cvt_kernel(f, packed, unpacked, i, f"cvt.{mode}.{fmt}x2.f32")
    for t in range(32):
        hi, lo = (ref_round_bits(Fraction(float(x)), fmt, mode) if np.isfinite(x) else 0x7FFF
                  for x in f[t])
        assert int(packed[t]) == (hi << 16) | lo, (t, f[t])           # a goes to the UPPER half
        assert tuple(unpacked[t]) == (lo, hi)                         # mov unpacks the low half first
    want = np.array([0 if np.isnan(x) else max(min(int(x), 2**31 - 1), -2**31) for x in f[:, 0].tolist()])
    np.testing.assert_array_equal(i, want)


# ---------------------------------------------------------------- launch checks

def test_launch_errors():
    import seed_fma
    k = tiledsl.jit(seed_fma.affine_fma.fn, interpret=True)
    with pytest.raises(tiledsl.LaunchError, match="dtype"):
        k(np.zeros((4, 1), np.float64), np.zeros((4, 1), np.float32))
    with pytest.raises(tiledsl.LaunchError, match="shape"):
        k(np.zeros((5, 1), np.float32), np.zeros((4, 1), np.float32))
    with pytest.raises(tiledsl.LaunchError, match="contiguous"):
        k(np.zeros((4, 2), np.float32)[:, :1], np.zeros((4, 1), np.float32))


def test_grid_override_and_callable():
    a = np.arange(300, dtype=np.float32)
    b = np.ones(300, np.float32)
    c = np.zeros(300, np.float32)
    out = np.zeros(300, np.float32)
    fma_kernel[lambda args: (args["A"].shape[0] + 127) // 128, 128](a, b, c, out, "fma.rn.f32")
    np.testing.assert_array_equal(out, a)
    out[:] = 0
    fma_kernel[(1,), 128](a, b, c, out, "fma.rn.f32")               # only the first block runs
    np.testing.assert_array_equal(out[:128], a[:128])
    assert not out[128:].any()


def test_torch_cpu_tensors():
    torch = pytest.importorskip("torch")
    import seed_fma
    a = torch.arange(-2, 2, dtype=torch.float32).reshape(4, 1)
    out = torch.zeros(4, 1)
    tiledsl.jit(seed_fma.affine_fma.fn, interpret=True)(a, out)
    assert torch.equal(out, 2 * a + 1)


def test_interpreter_error_is_tiledsl_error():
    """A kernel that fails on the interpreter is caught by `except tiledsl.TiledslError`, with the reason."""
    with pytest.raises(tiledsl.TiledslError, match="division by zero"):
        int_kernel2(np.ones(8, np.int32), np.zeros(8, np.int32), np.zeros((8, 6), np.int32),
                    np.zeros(8, np.float32), np.zeros((8, 2), np.int32))
    with pytest.raises(tiledsl.TiledslError, match="no semantics"):
        raise InterpreterError("opcode 'frob.f32' has no semantics")


# ---------------------------------------------------------------- ids, reinterpreting loads, scalar parameters

@tiledsl.jit(interpret=True)
def ids_kernel(Out: T.Tensor((2, 3, 64, 6), "int32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=(3, 2), block=(8, 4, 2)))
    t = T.cuda.thread_id(0) + 8 * (T.cuda.thread_id(1) + 4 * T.cuda.thread_id(2))
    bx, by = T.cuda.block_id(0), T.cuda.block_id(1)
    Out[by, bx, t, 0] = T.cuda.lane_id()
    Out[by, bx, t, 1] = T.cuda.warp_id()
    Out[by, bx, t, 2] = T.cuda.thread_id(1)
    Out[by, bx, t, 3] = T.cuda.thread_id(2)
    Out[by, bx, t, 4] = T.cuda.grid_dim(0) * 10 + T.cuda.grid_dim(1)
    Out[by, bx, t, 5] = T.cuda.block_dim(0) * 100 + T.cuda.block_dim(1) * 10 + T.cuda.block_dim(2)


def test_thread_and_block_ids():
    out = np.full((2, 3, 64, 6), -1, np.int32)
    ids_kernel(out)
    t = np.arange(64)
    for by in range(2):
        for bx in range(3):
            np.testing.assert_array_equal(out[by, bx, :, 0], t % 32)
            np.testing.assert_array_equal(out[by, bx, :, 1], t // 32)
            np.testing.assert_array_equal(out[by, bx, :, 2], (t // 8) % 4)
            np.testing.assert_array_equal(out[by, bx, :, 3], t // 32)
            assert (out[by, bx, :, 4] == 32).all() and (out[by, bx, :, 5] == 842).all()


@tiledsl.jit(interpret=True)
def bits_kernel(F: T.Tensor((32, 2), "float32"), Out: T.Tensor((32, 4), "uint16"), W: T.Tensor((32,), "uint64")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    t = T.cuda.thread_id()
    x = T.alloc_local((2,), "float32")
    x[0] = F[t, 0]
    x[1] = F[t, 1]
    h = x.view(dtype="uint16")
    for j in range(4):
        Out[t, j] = h[j]
    sm = T.alloc_shared((64,), "float32")
    sm[2 * t] = F[t, 0]
    sm[2 * t + 1] = F[t, 1]
    T.cuda.syncthreads()
    w = sm.view(dtype="uint64")
    W[t] = w[(t + 1) % 32]


def test_loads_reinterpret_bits():
    rng = np.random.default_rng(2)
    f = rng.standard_normal((32, 2)).astype(np.float32)
    out = np.zeros((32, 4), np.uint16)
    w = np.zeros(32, np.uint64)
    bits_kernel(f, out, w)
    np.testing.assert_array_equal(out, f.view(np.uint16).reshape(32, 4))
    np.testing.assert_array_equal(w, np.roll(f.reshape(-1).view(np.uint64), -1))


@tiledsl.jit(interpret=True)
def scalar_kernel(Out: T.Tensor(("n",), "float32"), I: T.Tensor(("n",), "int64"), s: T.float32, k: T.int64,
                  flag: T.bool, h: T.float16, u: T.uint32):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=48))
    t = T.cuda.thread_id()
    v = s * T.cast(t, "float32") + T.cast(h, "float32")
    if flag:
        v = -v
    Out[t] = v
    I[t] = k * T.cast(t, "int64") + T.cast(u, "int64")


def test_scalar_parameters_and_sizes():
    out = np.zeros(48, np.float32)
    i = np.zeros(48, np.int64)
    scalar_kernel(out, i, 1.5, 2**40, True, 0.333, 2**32 - 1)
    t = np.arange(48)
    np.testing.assert_array_equal(out, -(np.float32(1.5) * t.astype(np.float32) + np.float32(np.float16(0.333))))
    np.testing.assert_array_equal(i, 2**40 * t + 2**32 - 1)
    with pytest.raises(tiledsl.LaunchError):
        scalar_kernel(out, i, 1.5, 2**40, True, 0.333, -1)


def test_fma_directed_rounding_just_below_a_power_of_two():
    # a*b + c = 1 - 2^-69: the float64 sum is exactly 1.0 with a negative residual; rounding down must give the
    # predecessor of 1.0 in the finer binade below (1 - 2^-24), not 1 - 2^-23.
    a = np.array([1 + 2.0**-23, -(1 + 2.0**-23), 1 + 2.0**-23], np.float32)
    b = np.array([1 - 2.0**-23, 1 - 2.0**-23, 1 - 2.0**-23], np.float32)
    c = np.array([2.0**-46 - 2.0**-69, -(2.0**-46 - 2.0**-69), 2.0**-46 + 2.0**-69], np.float32)
    for mode in MODES:
        out = np.zeros_like(a)
        fma_kernel(a, b, c, out, f"fma.{mode}.f32")
        for i in range(3):
            q = Fraction(float(a[i])) * Fraction(float(b[i])) + Fraction(float(c[i]))
            assert int(f32_bits(out[i])) == ref_round_bits(q, "f32", mode), (mode, i, out[i])


@tiledsl.jit(interpret=True)
def batches_kernel(Out: T.Tensor((20, 1024), "int32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=(5, 4), block=1024))
    t = T.cuda.thread_id()
    b = T.cuda.block_id(0) + 5 * T.cuda.block_id(1)
    sm = T.alloc_shared((1024,), "int32")
    sm[t] = b * 10000 + t
    T.cuda.syncthreads()
    Out[b, t] = sm[(t + 1) % 1024]


def test_many_blocks_span_several_batches():
    out = np.zeros((20, 1024), np.int32)
    batches_kernel(out)                          # 20 x 1024 threads: more than one vectorised batch of blocks
    want = np.arange(20)[:, None] * 10000 + (np.arange(1024)[None, :] + 1) % 1024
    np.testing.assert_array_equal(out, want)
