"""Fragment layouts and exact references shared by the pattern tests, and the checks that they are right (no GPU).

`mma_layouts` builds register TileLayouts for mma.sync operands with any repeats, batch axes and a warp group
axis; the tests below prove they reproduce the seed page's lane maps coordinate by coordinate. `round_exact`
rounds an exact rational to f16/bf16/f32 in rn/rz/rm/rp, the reference for fma and packed fma.
"""
from fractions import Fraction
from itertools import product

import numpy as np
import pytest

from tiledsl.layout import S, TileLayout, laneid, warpid

# ------------------------------------------------------------------ mma fragments (seed page, lane l, register r)


def lane_a(l, r):
    return (l // 4 + 8 * (r % 2), l % 4 + 4 * (r // 2))


def lane_b(l, r):
    return (l // 4, l % 4 + 4 * r)


def lane_d(l, r):
    return (l // 4 + 8 * (r // 2), 2 * (l % 4) + r % 2)


def _atoms(k):
    """Per operand: (atom factors [(extent, register stride or `n @ laneid`)], registers per issue)."""
    if k == 16:
        a = [(2, 1), (8, 4 @ laneid), (2, 2), (4, 1 @ laneid)]
        b = [(8, 4 @ laneid), (2, 1), (4, 1 @ laneid)]
    else:
        a = [(2, 1), (8, 4 @ laneid), (4, 1 @ laneid)]
        b = [(8, 4 @ laneid), (4, 1 @ laneid)]
    d = [(2, 2), (8, 4 @ laneid), (4, 1 @ laneid), (2, 1)]
    return {"A": (a, k // 4), "B": (b, k // 8), "D": (d, 4)}


def _layout(lead, atom, per, group):
    ext, st = [], []
    if group:
        ext.append(group)
        st.append(1 @ warpid)
    stride = per
    strides = []
    for e in reversed(lead):
        strides.append(stride)
        stride *= e
    ext += list(lead)
    st += list(reversed(strides))
    for e, s in atom:
        ext.append(e)
        st.append(s)
    return TileLayout(S[tuple(ext) : tuple(st)])


def mma_layouts(k, mr, nr, kr, batch=(), group=0):
    """{"A"|"B"|"D": (view shape, TileLayout, registers per lane)} for repeats (M, N, K) = (mr, nr, kr).

    Registers are numbered row-major over (batch..., M|N, K|N) then the native register index, so register
    r of issue (b, m, kk) of A is `((b * mr + m) * kr + kk) * (k // 4) + r`, as the loaders below assume."""
    atoms = _atoms(k)
    out = {}
    g = (group,) if group else ()
    for name, lead, atom in (("A", (*batch, mr, kr), (16, k // 2)), ("B", (*batch, nr, kr), (8, k // 2)),
                             ("D", (*batch, mr, nr), (16, 8))):
        factors, per = atoms[name]
        regs = per * int(np.prod(lead))
        out[name] = (g + tuple(lead) + atom, _layout(lead, factors, per, group), regs)
    return out


# ------------------------------------------------------------------ host-side packing for mma


def pack_pairs(x):
    """(..., 2n) f16/bf16 bit patterns (uint16) -> (..., n) uint32 words, even element in the low half."""
    x = np.asarray(x, dtype=np.uint16).astype(np.uint32)
    return x[..., 0::2] | (x[..., 1::2] << 16)


def bf16_bits(x):
    """float32 values (exactly representable in bf16) -> bf16 bit patterns."""
    b = np.asarray(x, dtype=np.float32).view(np.uint32)
    assert not np.any(b & 0xFFFF), "values must be exact in bfloat16"
    return (b >> 16).astype(np.uint16)


def half_bits(x, ab):
    return bf16_bits(x) if ab == "bf16" else np.asarray(x, dtype=np.float16).view(np.uint16)


def mma_canonical(a, b, k, ab):
    """a: (M, K) values, b: (N, K) values (B's logical atom is (N, K/2)); -> words A (M/16, K/k, 16, k/2) and
    B (N/8, K/k, 8, k/2)."""
    m_, kk_ = a.shape
    n_ = b.shape[0]
    aw = pack_pairs(half_bits(a, ab)).reshape(m_ // 16, 16, kk_ // k, k // 2).transpose(0, 2, 1, 3)
    bw = pack_pairs(half_bits(b, ab)).reshape(n_ // 8, 8, kk_ // k, k // 2).transpose(0, 2, 1, 3)
    return np.ascontiguousarray(aw), np.ascontiguousarray(bw)


def lane_registers(words, lanemap, nregs):
    """Canonical words (R1, R2, rows, cols) -> per-lane registers (32, R1 * R2 * nregs) in the loaders' order."""
    r1, r2 = words.shape[:2]
    out = np.zeros((32, r1 * r2 * nregs), dtype=words.dtype)
    for l, i, j, r in product(range(32), range(r1), range(r2), range(nregs)):
        out[l, (i * r2 + j) * nregs + r] = words[(i, j) + lanemap(l, r)]
    return out


def d_from_lanes(regs, mr, nr):
    """Per-lane D registers (32, mr * nr * 4) -> the (16 * mr, 8 * nr) matrix."""
    d = np.zeros((16 * mr, 8 * nr), dtype=regs.dtype)
    for l, m, n, r in product(range(32), range(mr), range(nr), range(4)):
        row, col = lane_d(l, r)
        d[16 * m + row, 8 * n + col] = regs[l, (m * nr + n) * 4 + r]
    return d


def d_to_lanes(d, mr, nr):
    """The (16 * mr, 8 * nr) matrix -> per-lane registers (32, mr * nr * 4) of a tensor C / D operand."""
    regs = np.zeros((32, mr * nr * 4), dtype=d.dtype)
    for l, m, n, r in product(range(32), range(mr), range(nr), range(4)):
        row, col = lane_d(l, r)
        regs[l, (m * nr + n) * 4 + r] = d[16 * m + row, 8 * n + col]
    return regs


# ------------------------------------------------------------------ exact rounding

FORMATS = {"f16": (11, -14, 15), "bf16": (8, -126, 127), "f32": (24, -126, 127)}   # precision, emin, emax


def round_exact(x: Fraction, fmt: str, mode: str) -> int:
    """The bits of the exact rational `x` rounded once to `fmt` in `mode` (rn ties-to-even, rz, rm, rp)."""
    p, emin, emax = FORMATS[fmt]
    nbits = {"f16": 16, "bf16": 16, "f32": 32}[fmt]
    ebits = nbits - p
    sign = 1 if x < 0 else 0
    a = -x if sign else x
    if a == 0:
        return sign << (nbits - 1)
    e = a.numerator.bit_length() - a.denominator.bit_length()
    if Fraction(2) ** e > a:
        e -= 1
    e = max(e, emin)
    ulp = Fraction(2) ** (e - p + 1)
    q, rem = divmod(a, ulp)                      # a = q * ulp + rem, 0 <= rem < ulp
    q = int(q)
    up = {"rz": False, "rm": bool(sign) and rem > 0, "rp": not sign and rem > 0}.get(mode)
    if mode == "rn":
        up = rem * 2 > ulp or (rem * 2 == ulp and q % 2 == 1)
    q += int(up)
    if q == 1 << p:                              # carried into the next binade
        q, e = q >> 1, e + 1
    if e > emax:
        to_inf = mode == "rn" or (mode == "rp" and not sign) or (mode == "rm" and sign)
        mag = ((1 << ebits) - 1) << (p - 1) if to_inf else (((1 << ebits) - 2) << (p - 1)) | ((1 << (p - 1)) - 1)
        return (sign << (nbits - 1)) | mag
    biased = e - emin + 1 if q >= 1 << (p - 1) else 0          # subnormal when the leading bit is missing
    mag = (biased << (p - 1)) | (q & ((1 << (p - 1)) - 1))
    return (sign << (nbits - 1)) | mag


def value_of(bits: int, fmt: str) -> Fraction:
    p, emin, _ = FORMATS[fmt]
    nbits = {"f16": 16, "bf16": 16, "f32": 32}[fmt]
    sign = -1 if bits >> (nbits - 1) else 1
    biased = (bits >> (p - 1)) & ((1 << (nbits - p)) - 1)
    frac = bits & ((1 << (p - 1)) - 1)
    if biased == 0:
        return sign * Fraction(frac) * Fraction(2) ** (emin - p + 1)
    return sign * Fraction(frac | (1 << (p - 1))) * Fraction(2) ** (biased - 1 + emin - p + 1)


def fma_inputs(fmt, n, seed=0):
    """n triples (a, b, c) of `fmt` bit patterns whose exact a*b + c lies strictly between two `fmt` values and
    where rounding a*b first and then the sum (two rn roundings) gives a different result than one rounding."""
    rng = np.random.default_rng(seed)
    out = []
    lo, hi = {"f16": (-3, 3), "bf16": (-6, 6), "f32": (-8, 8)}[fmt]
    while len(out) < n:
        vals = []
        for _ in range(3):
            v = Fraction(float(rng.uniform(1, 2) * 2.0 ** int(rng.integers(lo, hi)))) * (1 if rng.random() < .5 else -1)
            vals.append(round_exact(v, fmt, "rn"))
        a, b, c = (value_of(v, fmt) for v in vals)
        exact = a * b + c
        one = round_exact(exact, fmt, "rn")
        if value_of(one, fmt) == exact:
            continue
        prod = value_of(round_exact(a * b, fmt, "rn"), fmt)
        if round_exact(prod + c, fmt, "rn") == one:
            continue
        out.append(tuple(vals))
    return out


# ------------------------------------------------------------------ their checks


@pytest.mark.parametrize("k", [8, 16])
@pytest.mark.parametrize("group", [0, 2])
def test_mma_layouts_follow_the_seed_lane_maps(k, group):
    mr, nr, kr, batch = 2, 2, 3, (2,)
    lays = mma_layouts(k, mr, nr, kr, batch, group)
    maps = {"A": (lane_a, k // 4, (mr, kr)), "B": (lane_b, k // 8, (nr, kr)), "D": (lane_d, 4, (mr, nr))}
    for name, (shape, lay, regs) in lays.items():
        fn, per, (r1, r2) = maps[name]
        seen = set()
        for g, b, i, j, l, r in product(range(max(group, 1)), range(2), range(r1), range(r2), range(32),
                                        range(per)):
            coord = ((g,) if group else ()) + (b, i, j) + fn(l, r)
            off, axes = lay.locate(coord, shape)
            assert axes.get("laneid", 0) == l and axes.get("warpid", 0) == (g if group else 0)
            assert off == ((b * r1 + i) * r2 + j) * per + r
            seen.add((g, off))
        assert len(seen) == max(group, 1) * regs


def test_d_lane_maps_round_trip():
    d = np.arange(32 * 16, dtype=np.float32).reshape(32, 16)
    assert np.array_equal(d_from_lanes(d_to_lanes(d, 2, 2), 2, 2), d)


def test_seed_page_layouts_are_the_k16_builders():
    seed_a = TileLayout(S[(1, 2, 2, 8, 2, 4) : (8, 4, 1, 4 @ laneid, 2, 1 @ laneid)])
    ours = mma_layouts(16, 1, 1, 2)["A"]
    for coord in product(range(1), range(2), range(16), range(8)):
        assert seed_a.locate(coord, (1, 2, 16, 8)) == ours[1].locate(coord, ours[0])


@pytest.mark.parametrize("fmt, np_type", [("f16", np.float16), ("f32", np.float32)])
def test_round_exact_matches_numpy_on_doubles(fmt, np_type):
    rng = np.random.default_rng(1)
    nbits = np.dtype(np_type).itemsize * 8
    utype = {16: np.uint16, 32: np.uint32}[nbits]
    for x in list(rng.standard_normal(2000) * 100) + [6e-8, -3e-6, 1e-40, 70000.0, 65504.0, 65520.0]:
        with np.errstate(over="ignore"):
            want = int(np.array([x]).astype(np_type).view(utype)[0])  # one rounding of an exact double
        assert round_exact(Fraction(x), fmt, "rn") == want, x


def test_round_exact_directed_modes_bracket_the_value():
    rng = np.random.default_rng(2)
    for x in rng.standard_normal(500) * 10:
        fx = Fraction(float(x)) / 3
        for fmt in FORMATS:
            lo, hi = value_of(round_exact(fx, fmt, "rm"), fmt), value_of(round_exact(fx, fmt, "rp"), fmt)
            assert lo < fx < hi
            rz = value_of(round_exact(fx, fmt, "rz"), fmt)
            assert rz == (lo if fx > 0 else hi)
            rn = value_of(round_exact(fx, fmt, "rn"), fmt)
            other = hi if rn == lo else lo
            assert rn in (lo, hi) and abs(rn - fx) <= abs(other - fx)


def test_bf16_rounding_is_the_f32_bit_truncation_in_rz():
    rng = np.random.default_rng(3)
    for x in rng.standard_normal(500).astype(np.float32):
        bits = int(np.array([x]).view(np.uint32)[0])
        assert round_exact(Fraction(float(x)), "bf16", "rz") == bits >> 16


@pytest.mark.parametrize("fmt", ["f16", "bf16", "f32"])
def test_fma_inputs_separate_one_rounding_from_two(fmt):
    for a, b, c in fma_inputs(fmt, 16, seed=4):
        exact = value_of(a, fmt) * value_of(b, fmt) + value_of(c, fmt)
        rm, rp = round_exact(exact, fmt, "rm"), round_exact(exact, fmt, "rp")
        assert value_of(rm, fmt) < exact < value_of(rp, fmt)
