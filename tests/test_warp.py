"""The warp collectives family (shfl.sync, vote.sync, redux.sync, match.sync, activemask) without a GPU.

Every form compiles and assembles with ptxas (sm_90; the .f32 redux forms for sm_100a), the kernels of
tests/test_gpu_warp.py assemble too, and the interpreter's semantics are checked against small references written
here from the ISA's pseudo-code: a butterfly sum, ballots, matches, votes, reductions, the shfl source-lane rule
with clamps and segments, and the faults when a lane named in membermask did not arrive.
"""
import re

import numpy as np
import pytest

import tiledsl
from helpers import ptxas
from tiledsl import T
from tiledsl.layout import S, TileLayout, laneid

N = 64                                   # two warps
one = TileLayout(S[(32, 1) : (1 @ laneid, 1)])

SHFL = [f"shfl.sync.{m}.b32" for m in ("up", "down", "bfly", "idx")]
VOTE = [f"vote.sync.{m}.pred" for m in ("all", "any", "uni")]
REDUX = [f"redux.sync.{op}.{t}" for op in ("add", "min", "max") for t in ("u32", "s32")] + \
        [f"redux.sync.{op}.b32" for op in ("and", "or", "xor")]
REDUX_F32 = [f"redux.sync.{op}{q}.f32" for op in ("min", "max") for q in ("", ".abs", ".NaN", ".abs.NaN")]
MATCH = [f"match.{m}.sync.{t}" for m in ("any", "all") for t in ("b32", "b64")]


# ------------------------------------------------------------------ kernels (also run on the GPU)

@tiledsl.jit
def shfl_kernel(A: T.Tensor((N,), "uint32"), B: T.Tensor((N,), "uint32"), C: T.Tensor((N,), "uint32"),
                M: T.Tensor((N,), "uint32"), Act: T.Tensor((N,), "uint32"), D: T.Tensor((N,), "uint32"),
                P: T.Tensor((N,), "uint32"), OPC: T.constexpr):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=N))
    t = T.cuda.thread_id()
    if Act[t] != 0:
        a = T.alloc_local((1,), "uint32")
        b = T.alloc_local((1,), "uint32")
        d = T.alloc_local((1,), "uint32")
        p = T.alloc_local((1,), "uint32")
        a[0] = A[t]
        b[0] = B[t]
        T.cuda.tile.apply(T.ptx[OPC], d, a, b, C[t], M[t], p=p)
        D[t] = d[0]
        P[t] = p[0]


@tiledsl.jit
def shfl_f32_kernel(A: T.Tensor((N,), "float32"), B: T.Tensor((N,), "uint32"), C: T.Tensor((N,), "uint32"),
                    M: T.Tensor((N,), "uint32"), Act: T.Tensor((N,), "uint32"), D: T.Tensor((N,), "float32"),
                    OPC: T.constexpr):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=N))
    t = T.cuda.thread_id()
    if Act[t] != 0:
        a = T.alloc_local((1,), "float32")
        d = T.alloc_local((1,), "float32")
        a[0] = A[t]
        T.cuda.tile.apply(T.ptx[OPC], d, a, B[t], C[t], M[t])
        D[t] = d[0]


@tiledsl.jit
def vote_kernel(A: T.Tensor((N,), "uint32"), M: T.Tensor((N,), "uint32"), Act: T.Tensor((N,), "uint32"),
                D: T.Tensor((N,), "uint32"), OPC: T.constexpr):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=N))
    t = T.cuda.thread_id()
    if Act[t] != 0:
        a = T.alloc_local((1,), "uint8")
        d = T.alloc_local((1,), "uint32")
        a[0] = T.cast(A[t], "uint8")
        T.cuda.tile.apply(T.ptx[OPC], d, a, M[t])
        D[t] = d[0]


@tiledsl.jit
def ballot_kernel(A: T.Tensor((N,), "uint32"), M: T.Tensor((N,), "uint32"), Act: T.Tensor((N,), "uint32"),
                  D: T.Tensor((N,), "uint32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=N))
    t = T.cuda.thread_id()
    if Act[t] != 0:
        d = T.alloc_local((1,), "uint32")
        T.cuda.tile.apply(T.ptx["vote.sync.ballot.b32"], d, A[t] != 0, M[t])
        D[t] = d[0]


@tiledsl.jit
def redux_kernel(A: T.Tensor((N,), "uint32"), M: T.Tensor((N,), "uint32"), Act: T.Tensor((N,), "uint32"),
                 D: T.Tensor((N,), "uint32"), OPC: T.constexpr):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=N))
    t = T.cuda.thread_id()
    if Act[t] != 0:
        a = T.alloc_local((1,), "uint32")
        d = T.alloc_local((1,), "uint32")
        a[0] = A[t]
        T.cuda.tile.apply(T.ptx[OPC], d, a, M[t])
        D[t] = d[0]


@tiledsl.jit
def redux_f32_kernel(A: T.Tensor((N,), "float32"), M: T.Tensor((N,), "uint32"), D: T.Tensor((N,), "float32"),
                     OPC: T.constexpr):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=N))
    t = T.cuda.thread_id()
    a = T.alloc_local((1,), "float32")
    d = T.alloc_local((1,), "float32")
    a[0] = A[t]
    T.cuda.tile.apply(T.ptx[OPC], d, a, M[t])
    D[t] = d[0]


@tiledsl.jit
def match_kernel(A: T.Tensor((N,), "uint64"), M: T.Tensor((N,), "uint32"), Act: T.Tensor((N,), "uint32"),
                 D: T.Tensor((N,), "uint32"), P: T.Tensor((N,), "uint32"), OPC: T.constexpr, WIDE: T.constexpr):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=N))
    t = T.cuda.thread_id()
    if Act[t] != 0:
        d = T.alloc_local((1,), "uint32")
        if WIDE:
            a = T.alloc_local((1,), "uint64")
            a[0] = A[t]
        else:
            a = T.alloc_local((1,), "uint32")
            a[0] = T.cast(A[t], "uint32")
        if OPC == "match.all.sync.b32" or OPC == "match.all.sync.b64":
            p = T.alloc_local((1,), "uint32")
            T.cuda.tile.apply(T.ptx[OPC], d, a, M[t], p=p)
            P[t] = p[0]
        else:
            T.cuda.tile.apply(T.ptx[OPC], d, a, M[t])
        D[t] = d[0]


@tiledsl.jit
def activemask_kernel(Act: T.Tensor((N,), "uint32"), D: T.Tensor((N,), "uint32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=N))
    t = T.cuda.thread_id()
    if Act[t] != 0:
        d = T.alloc_local((1,), "uint32")
        T.cuda.tile.apply(T.ptx["activemask.b32"], d)
        D[t] = d[0]


@tiledsl.jit
def warp_sum_kernel(X: T.Tensor((4, 32, 1), "float32"), Out: T.Tensor((4, 1), "float32")):
    """Four warps, each sums its 32 values with a butterfly (every lane ends with the sum); lane 0 stores it."""
    T.device_entry(launch=T.cuda.LaunchConfig(grid=4, block=32))
    x = T.alloc_local((1,), "float32")
    t = T.alloc_local((1,), "float32")
    xv = x.view(32, 1, layout=one)
    tv = t.view(32, 1, layout=one)
    T.cuda.tile.apply(T.ptx["ld.global.b32"], xv, X[T.cuda.block_id()], scope="warp")
    for k in T.unroll(5):
        T.cuda.tile.apply(T.ptx["shfl.sync.bfly.b32"], tv, xv, 16 >> k, 0x1F, 0xFFFFFFFF, scope="warp")
        T.cuda.tile.apply(T.ptx["add.rn.f32"], xv, xv, tv, scope="warp")
    if T.cuda.lane_id() == 0:
        Out[T.cuda.block_id(), 0] = x[0]


# ------------------------------------------------------------------ references, written from the ISA

def shfl_reference(mode, a, b, c, mask, act):
    """d and p of every lane of one 64-thread block (None where the lane did not execute or its source lane is
    outside its membermask, where PTX leaves d undefined)."""
    d, p = [None] * N, [None] * N
    for t in range(N):
        if not act[t]:
            continue
        lane, base = t % 32, t - t % 32
        bval, cval, seg = int(b[t]) & 31, int(c[t]) & 31, (int(c[t]) >> 8) & 31
        max_lane = (lane & seg) | (cval & ~seg & 31)
        j = {"up": lane - bval, "down": lane + bval, "bfly": lane ^ bval,
             "idx": (lane & seg) | (bval & ~seg & 31)}[mode]
        ok = j >= max_lane if mode == "up" else j <= max_lane
        j = j if ok else lane
        p[t] = int(ok)
        d[t] = int(a[base + j]) if (int(mask[t]) >> j) & 1 else None
    return d, p


def group_reduce(values, mask, act, fn):
    """fn(list of the member values) for every executing lane."""
    out = [None] * N
    for t in range(N):
        if act[t]:
            base = t - t % 32
            out[t] = fn([values[base + l] for l in range(32) if (int(mask[t]) >> l) & 1], t)
    return out


def interpret(kernel, *args):
    """Run on the interpreter; the numpy arrays in `args` are updated in place."""
    tiledsl.jit(kernel.fn, interpret=True)(*args)
    return args


def segments(rng, width, single=False, keep=0.75):
    """Per-thread (mask, active) for lanes cut into aligned segments of `width` lanes, about `keep` of them
    active (at least one; `single`: one per warp); every active lane's mask is its segment."""
    mask = np.zeros(N, np.uint32)
    act = np.zeros(N, np.uint32)
    nseg = N // width
    on = rng.random(nseg) < keep
    if single:
        per = 32 // width if width < 32 else 1
        on[:] = False
        for w in range(N // 32):
            on[w * per + rng.integers(per)] = True
    else:
        on[rng.integers(nseg)] = True
    for s in range(nseg):
        lanes = range(s * width, (s + 1) * width)
        bits = sum(1 << (l % 32) for l in lanes)
        for t in lanes:
            mask[t] = bits
            act[t] = on[s]
    return mask, act


def random_groups(rng):
    """Per-thread (mask, active): each warp's lanes split into random non-contiguous groups, some inactive."""
    mask = np.zeros(N, np.uint32)
    act = np.zeros(N, np.uint32)
    for w in range(N // 32):
        label = rng.integers(0, rng.integers(1, 5), 32)
        off = rng.integers(-1, label.max() + 1)                          # -1: every group active
        for g in set(label.tolist()):
            lanes = np.flatnonzero(label == g)
            bits = int(sum(1 << int(l) for l in lanes))
            for l in lanes:
                mask[32 * w + l] = bits
                act[32 * w + l] = g != off
    if not act.any():
        act[:32] = 1
        mask[:32] = 0xFFFFFFFF
    return mask, act


def one_group(rng):
    """Per-thread (mask, active): in each warp one random set of lanes (sometimes all 32, sometimes none) executes
    with that set as its membermask; the rest are inactive. (Several masks executing converged in one warp are
    legal PTX and modelled by the interpreter, but the GPU tests keep to one mask per warp.)"""
    mask = np.zeros(N, np.uint32)
    act = np.zeros(N, np.uint32)
    for w in range(N // 32):
        r = rng.random()
        on = np.ones(32, bool) if r < 0.3 else rng.random(32) < rng.random()
        if w == 0 and not on.any():
            on[rng.integers(32)] = True
        bits = int(sum(1 << int(l) for l in np.flatnonzero(on)))
        mask[32 * w:32 * w + 32] = bits
        act[32 * w:32 * w + 32] = on
    return mask, act


def shfl_case(rng, mode, single=False):
    """Random data, b, c and masks whose source lanes stay inside each lane's membermask (`single`: one active
    segment per warp)."""
    width = int(rng.choice([32, 16, 8, 4, 2]))
    mask, act = segments(rng, width, single) if rng.random() < 0.7 or width < 32 else (np.full(N, 0xFFFFFFFF, np.uint32),
                                                                              np.ones(N, np.uint32))
    seg = (32 - width) & 31 if width < 32 else int(rng.integers(0, 32))
    a = rng.integers(0, 2**32, N, dtype=np.uint64).astype(np.uint32)
    if mode == "bfly" and width < 32:
        b = rng.integers(0, width, N).astype(np.uint32)
    else:
        b = rng.integers(0, 64, N).astype(np.uint32)
    if rng.random() < 0.5:                                              # one offset for the whole block
        b[:] = b[0]
    c = (np.uint32(seg << 8) | rng.integers(0, 32, N).astype(np.uint32)
         | (rng.integers(0, 8, N).astype(np.uint32) << np.uint32(13)))   # bits above c[12:8] are ignored
    return a, b, c.astype(np.uint32), mask, act


def check_shfl(mode, a, b, c, mask, act, d, p):
    want_d, want_p = shfl_reference(mode, a, b, c, mask, act)
    for t in range(N):
        if want_d[t] is not None:
            assert int(d[t]) == want_d[t], (t, mode)
        if want_p[t] is not None and p is not None:
            assert int(p[t]) == want_p[t], (t, mode)


# ------------------------------------------------------------------ every form compiles and assembles

def _compile(kernel, args, target="sm_90"):
    ck = kernel.compile(*args, target=target)
    r = ptxas(ck.asm["ptx"], target)
    assert r.returncode == 0, r.stderr
    return ck


def _zeros(dtype="uint32"):
    return np.zeros(N, dtype)


def shfl_args(opc):
    return [_zeros() for _ in range(7)] + [opc]


@pytest.mark.parametrize("opc", SHFL)
def test_shfl_forms_assemble(opc):
    ck = _compile(shfl_kernel, shfl_args(opc))
    assert re.search(re.escape(opc) + r" %r\d+\|%wp, ", ck.asm["ptx"])
    _compile(shfl_f32_kernel, [_zeros("float32")] + [_zeros() for _ in range(4)] + [_zeros("float32"), opc])


@pytest.mark.parametrize("opc", VOTE)
def test_vote_forms_assemble(opc):
    ck = _compile(vote_kernel, [_zeros() for _ in range(4)] + [opc])
    assert f"{opc} %wd, %wa, " in ck.asm["ptx"]


def test_ballot_assembles():
    ck = _compile(ballot_kernel, [_zeros() for _ in range(4)])
    assert "vote.sync.ballot.b32" in ck.asm["ptx"]


@pytest.mark.parametrize("opc", REDUX)
def test_redux_forms_assemble(opc):
    _compile(redux_kernel, [_zeros() for _ in range(4)] + [opc], "sm_80")
    _compile(redux_kernel, [_zeros() for _ in range(4)] + [opc])


@pytest.mark.parametrize("opc", REDUX_F32)
def test_redux_f32_forms_assemble_for_sm_100a(opc):
    ck = _compile(redux_f32_kernel, [_zeros("float32"), _zeros(), _zeros("float32"), opc], "sm_100a")
    assert opc in ck.asm["ptx"]


@pytest.mark.parametrize("target", ["sm_90", "sm_100"])
def test_redux_f32_refused_off_sm_100a(target):
    with pytest.raises(tiledsl.CompilationError, match="sm_100a|needs sm_100"):
        redux_f32_kernel.compile(_zeros("float32"), _zeros(), _zeros("float32"), "redux.sync.min.f32",
                                 target=target)


def test_redux_refused_before_sm_80():
    with pytest.raises(tiledsl.CompilationError, match="needs sm_80 or newer; the target is sm_75"):
        redux_kernel.compile(*[_zeros() for _ in range(4)], "redux.sync.add.u32", target="sm_75")


@pytest.mark.parametrize("opc", MATCH)
def test_match_forms_assemble(opc):
    ck = _compile(match_kernel, [_zeros("uint64")] + [_zeros() for _ in range(4)] + [opc, opc.endswith("b64")])
    if ".all." in opc:
        assert re.search(re.escape(opc) + r" %r\d+\|%wp, ", ck.asm["ptx"])


def test_activemask_and_warp_sum_assemble():
    _compile(activemask_kernel, [_zeros(), _zeros()])
    ck = _compile(warp_sum_kernel, [np.zeros((4, 32, 1), np.float32), np.zeros((4, 1), np.float32)])
    assert ck.asm["ptx"].count("shfl.sync.bfly.b32") == 5


# ------------------------------------------------------------------ interpreter semantics

def test_butterfly_warp_sum():
    x = np.random.default_rng(1).integers(-1000, 1000, (4, 32, 1)).astype(np.float32)
    out = np.zeros((4, 1), np.float32)
    interpret(warp_sum_kernel, x, out)
    np.testing.assert_array_equal(out[:, 0], x.sum(axis=(1, 2)))        # small integers: every order is exact


@pytest.mark.parametrize("mode", ["up", "down", "bfly", "idx"])
@pytest.mark.parametrize("seed", range(4))
def test_shfl_matches_the_isa_reference(mode, seed):
    rng = np.random.default_rng(seed)
    a, b, c, mask, act = shfl_case(rng, mode)
    d, p = _zeros(), _zeros()
    interpret(shfl_kernel, a, b, c, mask, act, d, p, f"shfl.sync.{mode}.b32")
    check_shfl(mode, a, b, c, mask, act, d, p)


def test_shfl_out_of_range_reads_own_lane_with_p_false():
    a = np.arange(N, dtype=np.uint32) + 100
    full = np.full(N, 0xFFFFFFFF, np.uint32)
    d, p = _zeros(), _zeros()
    interpret(shfl_kernel, a, np.full(N, 3, np.uint32), np.zeros(N, np.uint32), full, np.ones(N, np.uint32), d, p,
              "shfl.sync.up.b32")                                           # c = 0: clamp at lane 0
    lane = np.arange(N) % 32
    np.testing.assert_array_equal(d, np.where(lane >= 3, a - 3, a))
    np.testing.assert_array_equal(p, (lane >= 3).astype(np.uint32))


def test_shfl_of_f32_moves_the_bits():
    a = np.random.default_rng(3).integers(0, 2**32, N, dtype=np.uint64).astype(np.uint32)
    a[:4] = [0x7FC00001, 0xFF800000, 0x80000000, 0x00000001]              # NaN payload, -inf, -0, denormal
    d = np.zeros(N, np.float32)
    full = np.full(N, 0xFFFFFFFF, np.uint32)
    interpret(shfl_f32_kernel, a.view(np.float32), np.full(N, 1, np.uint32), np.full(N, 0x1F, np.uint32), full,
              np.ones(N, np.uint32), d, "shfl.sync.bfly.b32")
    np.testing.assert_array_equal(d.view(np.uint32), a[np.arange(N) ^ 1])


def test_shfl_source_outside_the_mask_is_poisoned():
    a = np.arange(N, dtype=np.uint32)
    mask = np.full(N, 0x0000FFFF, np.uint32)
    act = (np.arange(N) % 32 < 16).astype(np.uint32)
    d, p = _zeros(), _zeros()
    interpret(shfl_kernel, a, np.full(N, 8, np.uint32), np.full(N, 0x1F, np.uint32), mask, act, d, p,
              "shfl.sync.down.b32")
    lane = np.arange(N) % 32
    ok = (lane < 8)
    np.testing.assert_array_equal(d[ok], a[ok] + 8)
    assert (d[(lane >= 8) & (lane < 16)] == 0xDEADBEEF).all()             # lanes 16..23: not members


def test_ballot_and_votes():
    rng = np.random.default_rng(5)
    for _ in range(4):
        a = (rng.random(N) < rng.random()).astype(np.uint32)
        mask, act = random_groups(rng)
        d = _zeros()
        interpret(ballot_kernel, a, mask, act, d)
        for t in range(N):
            if act[t]:
                base = t - t % 32
                bits = sum(1 << l for l in range(32) if (int(mask[t]) >> l) & 1 and a[base + l])
                assert int(d[t]) == bits
        for opc, fn in (("vote.sync.all.pred", all), ("vote.sync.any.pred", any),
                        ("vote.sync.uni.pred", lambda v: all(v) or not any(v))):
            d = _zeros()
            interpret(vote_kernel, a, mask, act, d, opc)
            want = group_reduce(a, mask, act, lambda v, t, fn=fn: int(fn([bool(x) for x in v])))
            assert [int(d[t]) if act[t] else None for t in range(N)] == want, opc


def _signed(x):
    return int(np.uint32(x).view(np.int32))


REDUX_REF = {
    "add": lambda v, s: sum(v) & 0xFFFFFFFF,
    "min": lambda v, s: min(v, key=_signed if s else int),
    "max": lambda v, s: max(v, key=_signed if s else int),
    "and": lambda v, s: np.bitwise_and.reduce(np.array(v, np.uint32)),
    "or": lambda v, s: np.bitwise_or.reduce(np.array(v, np.uint32)),
    "xor": lambda v, s: np.bitwise_xor.reduce(np.array(v, np.uint32)),
}


@pytest.mark.parametrize("opc", REDUX)
def test_redux(opc):
    rng = np.random.default_rng(len(opc))
    op, ty = opc.split(".")[2:]
    for _ in range(3):
        a = rng.integers(0, 2**32, N, dtype=np.uint64).astype(np.uint32)
        mask, act = random_groups(rng)
        d = _zeros()
        interpret(redux_kernel, a, mask, act, d, opc)
        want = group_reduce([int(x) for x in a], mask, act, lambda v, t: int(REDUX_REF[op](v, ty == "s32")))
        assert [int(d[t]) if act[t] else None for t in range(N)] == want


def f32_ref(values, is_min, absolute, nan):
    v = np.array(values, np.uint32)
    if absolute:
        v = v & np.uint32(0x7FFFFFFF)
    f = v.view(np.float32).astype(np.float64)
    if np.isnan(f).all() or (nan and np.isnan(f).any()):
        return 0x7FFFFFFF
    keep = v[~np.isnan(f)]
    fk = keep.view(np.float32).astype(np.float64)
    best = fk.min() if is_min else fk.max()
    cands = keep[fk == best]
    if best == 0:                                                         # -0.0 < +0.0
        neg = cands[cands >> 31 == 1]
        pos = cands[cands >> 31 == 0]
        cands = (neg if len(neg) else pos) if is_min else (pos if len(pos) else neg)
    return int(cands[0])


@pytest.mark.parametrize("opc", REDUX_F32)
def test_redux_f32(opc):
    rng = np.random.default_rng(7)
    parts = opc.split(".")
    for trial in range(4):
        x = rng.standard_normal(N).astype(np.float32)
        x[rng.random(N) < 0.1] = np.nan
        x[rng.random(N) < 0.1] = -0.0
        x[rng.random(N) < 0.1] = 0.0
        if trial == 3:
            x[:32] = np.nan
        mask = np.full(N, 0xFFFFFFFF, np.uint32)
        d = np.zeros(N, np.float32)
        tiledsl.jit(redux_f32_kernel.fn, interpret=True, target="sm_100a")(x, mask, d, opc)
        want = f32_ref(x[:32].view(np.uint32), parts[2] == "min", "abs" in parts, "NaN" in parts)
        assert (d[:32].view(np.uint32) == want).all(), (trial, hex(want), hex(int(d[:32].view(np.uint32)[0])))


@pytest.mark.parametrize("opc", MATCH)
def test_match(opc):
    rng = np.random.default_rng(11)
    wide = opc.endswith("b64")
    for _ in range(4):
        a = rng.integers(0, 3, N).astype(np.uint64) * np.uint64(0x100000001 if wide else 1)
        if rng.random() < 0.3:
            a[:] = a[0]
        mask, act = random_groups(rng)
        d, p = _zeros(), _zeros()
        interpret(match_kernel, a, mask, act, d, p, opc, wide)
        for t in range(N):
            if not act[t]:
                continue
            base = t - t % 32
            mem = [l for l in range(32) if (int(mask[t]) >> l) & 1]
            same = sum(1 << l for l in mem if a[base + l] == a[t])
            if ".any." in opc:
                assert int(d[t]) == same
            else:
                alleq = all(a[base + l] == a[t] for l in mem)
                assert int(d[t]) == (int(mask[t]) if alleq else 0) and int(p[t]) == int(alleq)


def test_activemask_is_the_lanes_executing_together():
    act = (np.arange(N) % 3 == 0).astype(np.uint32)
    d = _zeros()
    interpret(activemask_kernel, act, d)
    for w in range(2):
        bits = sum(1 << l for l in range(32) if act[32 * w + l])
        assert (d[32 * w:32 * w + 32][act[32 * w:32 * w + 32] == 1] == bits).all()


# ------------------------------------------------------------------ faults: every named lane must arrive

def test_fault_when_a_named_lane_did_not_arrive():
    act = np.ones(N, np.uint32)
    act[37] = 0
    full = np.full(N, 0xFFFFFFFF, np.uint32)
    with pytest.raises(tiledsl.KernelFault, match=r"redux.sync.add.u32: membermask 0xffffffff names lanes .* "
                                                  r"lane\(s\) 5 did not arrive") as e:
        interpret(redux_kernel, _zeros(), full, act, _zeros(), "redux.sync.add.u32")
    assert "T.cuda.tile.apply" in str(e.value) and "test_warp.py" in str(e.value)


def test_fault_when_lanes_disagree_on_the_mask():
    mask = np.full(N, 0xFFFFFFFF, np.uint32)
    mask[3] = 0x0000000F
    with pytest.raises(tiledsl.KernelFault, match=r"arrived with a different membermask"):
        interpret(ballot_kernel, _zeros(), mask, np.ones(N, np.uint32), _zeros())


def test_fault_when_a_lane_is_not_in_its_own_mask():
    mask = np.full(N, 0xFFFFFFFE, np.uint32)
    with pytest.raises(tiledsl.KernelFault, match=r"lane 0 executes it but is not in its own membermask"):
        interpret(vote_kernel, _zeros(), mask, np.ones(N, np.uint32), _zeros(), "vote.sync.all.pred")


@tiledsl.jit
def partial_block(D: T.Tensor((48,), "uint32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=48))
    t = T.cuda.thread_id()
    d = T.alloc_local((1,), "uint32")
    T.cuda.tile.apply(T.ptx["redux.sync.add.u32"], d, 1, 0xFFFFFFFF)
    D[t] = d[0]


@tiledsl.jit
def partial_block_ok(D: T.Tensor((48,), "uint32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=48))
    t = T.cuda.thread_id()
    d = T.alloc_local((1,), "uint32")
    full = T.uint32(0xFFFFFFFF)
    T.cuda.tile.apply(T.ptx["redux.sync.add.u32"], d, 1, full if t < 32 else T.uint32(0xFFFF))
    D[t] = d[0]


def test_lanes_beyond_a_partial_warp_do_not_arrive():
    with pytest.raises(tiledsl.KernelFault, match=r"lane\(s\) 16, 17, .* do not exist \(the block has 48 threads\)"):
        interpret(partial_block, np.zeros(48, np.uint32))
    d = np.zeros(48, np.uint32)
    interpret(partial_block_ok, d)
    np.testing.assert_array_equal(d, [32] * 32 + [16] * 16)


# ------------------------------------------------------------------ the docs page runs

def test_docs_page_example(tmp_path):
    from test_patterns_docs import SECTIONS, blocks, run_page
    text = (run_page.__globals__["DOCS"] / "warp.md").read_text()
    for s in SECTIONS:
        assert s in text
    assert any(b.startswith("# needs a GPU") for b in blocks("warp"))
    ns = run_page("warp", tmp_path, with_gpu=False)
    assert ns["ck"].asm["ptx"].count("shfl.sync.bfly.b32") == 5


def test_docs_page_gpu_block_on_the_interpreter(tmp_path, monkeypatch):
    import sys
    from test_patterns_docs import _host_torch, run_page
    monkeypatch.setenv("TILEDSL_INTERPRET", "1")
    monkeypatch.setitem(sys.modules, "torch", _host_torch())
    run_page("warp", tmp_path, with_gpu=True)


# ------------------------------------------------------------------ random kernels (the GPU agreement tests' cases)

RANDOM_KINDS = ("shfl", "shfl_f32", "vote", "ballot", "redux", "match")


def random_case(seed):
    """(kernel, arrays, constexprs, output indices) of one random warp-collective kernel whose every result is
    defined by PTX: random forms, offsets, clamps, segments, masks (some lanes inactive) and data."""
    rng = np.random.default_rng(1000 + seed)
    kind = RANDOM_KINDS[seed % len(RANDOM_KINDS)]
    if kind in ("shfl", "shfl_f32"):
        mode = str(rng.choice(["up", "down", "bfly", "idx"]))
        a, b, c, mask, act = shfl_case(rng, mode, single=True)
        opc = f"shfl.sync.{mode}.b32"
        if kind == "shfl":
            return shfl_kernel, [a, b, c, mask, act, _zeros(), _zeros()], [opc], [5, 6]
        return shfl_f32_kernel, [a.view(np.float32), b, c, mask, act, _zeros("float32")], [opc], [5]
    mask, act = one_group(rng)
    if kind in ("vote", "ballot"):
        a = (rng.random(N) < rng.random()).astype(np.uint32)
        if kind == "ballot":
            return ballot_kernel, [a, mask, act, _zeros()], [], [3]
        return vote_kernel, [a, mask, act, _zeros()], [str(rng.choice(VOTE))], [3]
    if kind == "redux":
        a = rng.integers(0, 2**32, N, dtype=np.uint64).astype(np.uint32)
        if rng.random() < 0.3:
            a = rng.integers(0, 4, N).astype(np.uint32) * np.uint32(0x7FFFFFFF)
        return redux_kernel, [a, mask, act, _zeros()], [str(rng.choice(REDUX))], [3]
    opc = MATCH[(seed // len(RANDOM_KINDS)) % len(MATCH)]
    wide = opc.endswith("b64")
    a = rng.integers(0, 3, N).astype(np.uint64) * np.uint64(0x100000001 if wide else 1)
    return match_kernel, [a, mask, act, _zeros(), _zeros()], [opc, wide], [3, 4]


@pytest.mark.parametrize("seed", range(0, 32, 3))
def test_random_cases_run_on_the_interpreter(seed):
    kernel, arrays, consts, outs = random_case(seed)
    interpret(kernel, *arrays, *consts)
    if kernel is shfl_kernel:
        check_shfl(consts[0].split(".")[2], *arrays[:5], arrays[5], arrays[6])
