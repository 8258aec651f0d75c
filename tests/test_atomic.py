"""The atomic family (atom / red): grammar, PTX + ptxas sm_90 for every op/type/space/sem/scope class, and the
interpreter's semantics (thread-ordered read-modify-write, wraparound, inc/dec, cas, float adds, histograms).

The kernels here are the ones tests/test_gpu_atomic.py runs on the GPU, so CI assembles each of them."""
import sys
from collections import Counter

import numpy as np
import pytest

import tiledsl
from helpers import ptxas
from tiledsl import T
from tiledsl.core.target import Target
from tiledsl.isa import registry
from tiledsl.isa.atomic import pattern as P
from tiledsl.isa.atomic.semantics import rmw

NT = 128            # threads of the test kernels
NS = 16             # memory slots they hit
WIDTH = {16: "uint16", 32: "uint32", 64: "uint64"}


# ---------------------------------------------------------------- the kernels (also run on the GPU)

@tiledsl.jit
def rmw_kernel(M: T.Tensor((NS,), "int64"), S: T.Tensor((NT,), "int32"), B: T.Tensor((NT,), "int64"),
               C: T.Tensor((NT,), "int64"), Old: T.Tensor((NT,), "int64"), OP: T.constexpr, W: T.constexpr,
               SHARED: T.constexpr, NOPS: T.constexpr):
    """Thread t applies OP to slot S[t] of M (or of a shared copy of it) with B[t] (and C[t]); Old[t] gets the
    returned value. Every array is int64 on the host and read as W-bit words here."""
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=NT))
    t = T.cuda.thread_id()
    m = M.view(dtype=W)
    b = B.view(dtype=W)[t]
    c = C.view(dtype=W)[t]
    old = Old.view(dtype=W)
    d = T.alloc_local((1,), W)
    s = S[t]
    sh = T.alloc_shared((NS,), W)
    if SHARED:
        if t < NS:
            sh[t] = m[t]
        T.cuda.syncthreads()
        mem = sh[s : s + 1]
    else:
        mem = m[s : s + 1]
    if NOPS == 2:
        T.cuda.tile.apply(T.ptx[OP], mem, b)
    elif NOPS == 3:
        T.cuda.tile.apply(T.ptx[OP], d, mem, b)
    else:
        T.cuda.tile.apply(T.ptx[OP], d, mem, b, c)
    if SHARED:
        T.cuda.syncthreads()
        if t < NS:
            m[t] = sh[t]
    if NOPS > 2:
        old[t] = d[0]


BINS = 256


@tiledsl.jit
def histogram(X: T.Tensor(("n",), "int32"), H: T.Tensor((BINS,), "uint32")):
    """Per-block counts in shared memory (red.shared.add), merged into H with one red.global.add per bin."""
    T.device_entry(launch=T.cuda.LaunchConfig(grid=(n + 1023) // 1024, block=256))
    t = T.cuda.thread_id()
    sh = T.alloc_shared((BINS,), "uint32")
    sh[t] = T.uint32(0)
    T.cuda.syncthreads()
    base = T.cuda.block_id() * 1024
    for k in range(4):
        i = base + k * 256 + t
        if i < n:
            b = X[i]
            T.cuda.tile.apply(T.ptx["red.shared.add.u32"], sh[b : b + 1], 1)
    T.cuda.syncthreads()
    T.cuda.tile.apply(T.ptx["red.global.add.u32"], H[t : t + 1], sh[t], pred=sh[t] != 0)


@tiledsl.jit
def counter(C: T.Tensor((1,), "uint32"), Old: T.Tensor(("n",), "uint32")):
    """Every thread takes a ticket: atom.add returns each thread its own old value."""
    T.device_entry(launch=T.cuda.LaunchConfig(grid=(n + 127) // 128, block=128))
    i = T.cuda.block_id() * 128 + T.cuda.thread_id()
    d = T.alloc_local((1,), "uint32")
    T.cuda.tile.apply(T.ptx["atom.relaxed.gpu.global.add.u32"], d, C, 1, pred=i < n)
    if i < n:
        Old[i] = d[0]


@tiledsl.jit
def cas_sum(M: T.Tensor((1,), "uint32"), Tries: T.Tensor((NT,), "int32")):
    """A compare-and-swap loop adding t + 1 to M[0]: read, compute, cas; retry with the returned value until the
    cas finds what it expected. A thread fails only when another succeeds, so NT rounds always suffice."""
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=NT))
    t = T.cuda.thread_id()
    e = T.alloc_local((1,), "uint32")
    d = T.alloc_local((1,), "uint32")
    done = T.alloc_local((1,), "int32")
    e[0] = M[0]
    done[0] = 0
    for it in range(NT):
        T.cuda.tile.apply(T.ptx["atom.acq_rel.gpu.global.cas.b32"], d, M, e[0], e[0] + T.uint32(t + 1),
                          pred=done[0] == 0)
        if done[0] == 0:
            if d[0] == e[0]:
                done[0] = 1
                Tries[t] = it + 1
            else:
                e[0] = d[0]


# ---------------------------------------------------------------- the forms

# (opcode, width) for every op/type/space class, and the sem/scope qualifiers; each is assembled for sm_90
ACCEPTED = [
    *[(f"atom.{sp}.add.{t}", w) for sp in ("global", "shared") for t, w in
      (("u32", 32), ("s32", 32), ("u64", 64), ("f32", 32), ("f64", 64))],
    *[(f"{k}.{sp}.add.noftz.{t}", w) for k in ("atom", "red") for sp in ("global", "shared") for t, w in
      (("f16", 16), ("f16x2", 32), ("bf16", 16), ("bf16x2", 32))],
    *[(f"{k}.global.{o}.{t}", w) for k in ("atom", "red") for o in ("min", "max") for t, w in
      (("u32", 32), ("s32", 32), ("u64", 64), ("s64", 64))],
    *[(f"{k}.{sp}.{o}.u32", 32) for k in ("atom", "red") for sp in ("global", "shared") for o in ("inc", "dec")],
    *[(f"{k}.shared.{o}.{t}", w) for k in ("atom", "red") for o in ("and", "or", "xor") for t, w in
      (("b32", 32), ("b64", 64))],
    *[(f"atom.{sp}.exch.{t}", w) for sp in ("global", "shared") for t, w in (("b32", 32), ("b64", 64))],
    *[(f"atom.{sp}.cas.{t}", w) for sp in ("global", "shared") for t, w in (("b16", 16), ("b32", 32), ("b64", 64))],
    *[(f"red.{sp}.add.{t}", w) for sp in ("global", "shared") for t, w in
      (("u32", 32), ("s32", 32), ("u64", 64), ("f32", 32), ("f64", 64))],
    *[(f"atom.{sem}.{sc}.global.add.u32", 32) for sem in P.SEMS for sc in P.SCOPES],
    *[(f"red.{sem}.{sc}.shared.add.u32", 32) for sem in P.RED_SEMS for sc in P.SCOPES],
    ("atom.acquire.global.exch.b32", 32), ("atom.sys.shared::cta.cas.b32", 32), ("red.gpu.global.add.f32", 32),
    ("atom.shared::cta.add.u32", 32), ("red.release.shared::cta.max.s32", 32),
]

REFUSED = [
    ("atom.global.add.s64", ["'.s64' is not a type of atom.add", ".u32 .s32 .u64"]),
    ("atom.global.add.b32", ["'.b32' is not a type of atom.add"]),
    ("atom.global.inc.s32", ["types: .u32"]),
    ("atom.global.min.f32", ["'.f32' is not a type of atom.min"]),
    ("atom.global.and.u32", ["types: .b32 .b64"]),
    ("atom.global.cas.f32", ["types: .b16 .b32 .b64"]),
    ("atom.global.add.f16", ["must be written atom.add.noftz.f16"]),
    ("atom.global.add.noftz.f32", [".noftz belongs to the f16/bf16 adds only"]),
    ("atom.global.mul.u32", ["unknown operation .mul", "supported:"]),
    ("red.global.cas.b32", ["red has no .cas", "use atom.cas"]),
    ("red.global.exch.b32", ["red has no .exch"]),
    ("red.acquire.global.add.u32", ["red takes .sem .relaxed or .release only"]),
    ("red.acq_rel.gpu.global.add.u32", ["not .acq_rel"]),
    ("atom.add.u32", ["needs a state space"]),
    ("atom.global.gpu.add.u32", ["out of order", "atom.sem.scope.space.op.type"]),
    ("atom.gpu.relaxed.global.add.u32", ["out of order"]),
    ("atom.weak.global.add.u32", ["needs a state space"]),
    ("atom.shared::cluster.add.u32", ["needs a state space"]),
    ("atom.global.add.L2::cache_hint.u32", ["unknown qualifier .L2::cache_hint"]),
    ("atom.global.v2.add.f32", ["unknown operation .v2"]),
    ("atom.global", ["is not a complete atom opcode"]),
]


@pytest.mark.parametrize("opcode, words", REFUSED, ids=[r[0] for r in REFUSED])
def test_refused_forms_name_what_is_supported(opcode, words):
    with pytest.raises(tiledsl.CompilationError) as e:
        registry.lookup(opcode)
    for w in words:
        assert w in str(e.value), str(e.value)


@pytest.mark.parametrize("opcode, sm, words", [
    ("atom.global.add.noftz.bf16", 80, "needs sm_90"), ("red.global.add.noftz.bf16x2", 89, "needs sm_90"),
    ("atom.cluster.global.add.u32", 80, "needs sm_90"), ("atom.shared::cta.add.u32", 75, "needs sm_80")])
def test_forms_the_target_lacks_are_refused(opcode, sm, words):
    with pytest.raises(tiledsl.CompilationError, match=words):
        registry.lookup(opcode, target=Target(sm))
    registry.lookup(opcode, target=Target(90))


def nops(opcode):
    form = registry.lookup(opcode)[1]
    return len(form.names)


def arrays(rng=None):
    rng = rng or np.random.default_rng(0)
    return [np.zeros(NS, np.int64), rng.integers(0, NS, NT).astype(np.int32), np.zeros(NT, np.int64),
            np.zeros(NT, np.int64), np.zeros(NT, np.int64)]


@pytest.mark.parametrize("opcode, width", ACCEPTED, ids=[a[0] for a in ACCEPTED])
def test_every_form_compiles_and_assembles_for_sm90(opcode, width):
    shared = ".shared" in opcode
    ck = rmw_kernel.compile(*arrays(), opcode, WIDTH[width], shared, nops(opcode), target="sm_90")
    ptx = ck.asm["ptx"]
    line = [ln.strip() for ln in ptx.splitlines() if ln.strip().startswith(opcode + " ")]
    assert len(line) == 1, ptx
    r = ptxas(ptx, "sm_90")
    assert r.returncode == 0, r.stderr


def test_every_op_type_space_sem_scope_class_is_covered():
    seen = {(f.kind, f.op, f.type) for f in (registry.lookup(o)[1] for o, _ in ACCEPTED)}
    for kind, ops in (("atom", P.OPS), ("red", P.RED_OPS)):
        for op in ops:
            for ty in P.OPS[op]:
                assert (kind, op, ty) in seen or kind == "red" and ty == "b16", (kind, op, ty)
    forms = [registry.lookup(o)[1] for o, _ in ACCEPTED]
    assert {f.sem for f in forms} >= set(P.SEMS) and {f.scope for f in forms} >= set(P.SCOPES)
    assert {f.space for f in forms} == {"global", "shared"}


@pytest.mark.parametrize("kernel, args", [
    (histogram, (np.zeros(4096, np.int32), np.zeros(BINS, np.uint32))),
    (counter, (np.zeros(1, np.uint32), np.zeros(300, np.uint32))),
    (cas_sum, (np.zeros(1, np.uint32), np.zeros(NT, np.int32)))], ids=["histogram", "counter", "cas_sum"])
def test_gpu_kernels_assemble_for_sm90(kernel, args):
    ck = kernel.compile(*args, target="sm_90")
    r = ptxas(ck.asm["ptx"], "sm_90")
    assert r.returncode == 0, r.stderr


def test_debug_mode_checks_the_atomic_element():
    ck = tiledsl.jit(histogram.fn, debug=True).compile(np.zeros(4096, np.int32), np.zeros(BINS, np.uint32),
                                                        target="sm_90")
    assert len(ck.metadata["debug_sites"]) >= 2
    assert ptxas(ck.asm["ptx"], "sm_90").returncode == 0


# ---------------------------------------------------------------- interpreter semantics

def run_interp(opcode, width, init, slots, b, c):
    """Run rmw_kernel on the interpreter; returns (final memory, returned old values) as W-bit words."""
    u = np.dtype(WIDTH[width])
    args = arrays()
    args[1] = np.asarray(slots, np.int32)
    for k, v in ((0, init), (2, b), (3, c)):
        args[k].view(u)[:len(v)] = np.asarray(v).astype(u)
    tiledsl.jit(rmw_kernel.fn, interpret=True)(*args, opcode, WIDTH[width], ".shared" in opcode, nops(opcode))
    return args[0].view(u)[:NS].copy(), args[4].view(u)[:NT].copy()


def reference(opcode, init, slots, b, c):
    """The thread-ordered chain, one thread at a time in plain Python on the form's rmw function."""
    f = rmw(registry.lookup(opcode)[1])
    mem, olds = np.array(init), np.empty_like(np.asarray(b))
    for t, s in enumerate(slots):
        olds[t] = mem[s]
        args = [mem[s:s + 1], np.asarray(b)[t:t + 1]] + ([np.asarray(c)[t:t + 1]] if ".cas." in opcode else [])
        mem[s] = f(*args)[0]
    return mem, olds


def chain_holds(opcode, init, slots, b, c, final, olds):
    """Some serial order explains the result: per slot, the returned olds plus the final value are exactly the
    initial value plus each thread's new value f(old, b[, c]). Holds for every order the GPU may pick."""
    f = rmw(registry.lookup(opcode)[1])
    slots = np.asarray(slots)
    for s in range(NS):
        ts = np.flatnonzero(slots == s)
        args = [olds[ts], np.asarray(b)[ts]] + ([np.asarray(c)[ts]] if ".cas." in opcode else [])
        new = f(*args) if len(ts) else np.zeros(0, final.dtype)
        lhs = Counter(olds[ts].tolist() + [final[s].item()])
        rhs = Counter(new.tolist() + [init[s].item()])
        if lhs != rhs:
            return False
    return True


def _case(opcode, width, seed):
    """Random operands for `opcode`; float adds get small integers so every order gives the same sums."""
    rng = np.random.default_rng(seed)
    u = np.dtype(WIDTH[width])
    form = registry.lookup(opcode)[1]
    slots = rng.integers(0, NS, NT)
    full = lambda n: rng.integers(0, 2**width, n, dtype=np.uint64).astype(u)  # noqa: E731
    if form.op == "add" and form.type[0] in "fb":
        lim = 2 if form.type.startswith("bf16") else 8
        fl = {16: np.float16, 32: np.float32, 64: np.float64}
        if form.type.startswith("bf16"):
            def enc(v):
                return (np.asarray(v, np.float32).view(np.uint32) >> 16).astype(np.uint16)
        else:
            def enc(v):
                return np.asarray(v, fl[width if not form.type.endswith("x2") else 16]).view(
                    np.uint16 if form.type.endswith("x2") else u)
        if form.type.endswith("x2"):
            def vals(n):
                lo, hi = enc(rng.integers(-lim, lim + 1, n)), enc(rng.integers(-lim, lim + 1, n))
                return (lo.astype(np.uint32) | (hi.astype(np.uint32) << 16)).astype(u)
        else:
            def vals(n):
                return enc(rng.integers(-lim, lim + 1, n)).astype(u)
        return vals(NS), slots, vals(NT), vals(NT)
    if form.op in ("inc", "dec"):
        return rng.integers(0, 12, NS).astype(u), slots, rng.integers(0, 10, NT).astype(u), np.zeros(NT, u)
    if form.op == "cas":
        return rng.integers(0, 3, NS).astype(u), slots, rng.integers(0, 3, NT).astype(u), full(NT)
    return full(NS), slots, full(NT), full(NT)


SEM_CASES = ["atom.global.add.u32", "atom.shared.add.s32", "atom.global.add.u64", "atom.shared.min.s32",
             "atom.global.max.s64", "atom.global.min.u64", "atom.shared.inc.u32", "atom.global.dec.u32",
             "atom.global.and.b32", "atom.shared.or.b64", "atom.global.xor.b64", "atom.shared.exch.b32",
             "atom.global.exch.b64", "atom.global.cas.b16", "atom.shared.cas.b32", "atom.global.cas.b64",
             "atom.global.add.f32", "atom.shared.add.f64", "atom.global.add.noftz.f16",
             "atom.shared.add.noftz.f16x2", "atom.global.add.noftz.bf16", "atom.global.add.noftz.bf16x2"]


@pytest.mark.parametrize("opcode", SEM_CASES)
def test_interpreter_applies_threads_in_ascending_order(opcode):
    width = TYPE_WIDTH(opcode)
    init, slots, b, c = _case(opcode, width, 7)
    final, olds = run_interp(opcode, width, init, slots, b, c)
    want_mem, want_old = reference(opcode, init, slots, b, c)
    np.testing.assert_array_equal(final, want_mem)
    np.testing.assert_array_equal(olds, want_old)
    assert chain_holds(opcode, init, slots, b, c, final, olds)


def TYPE_WIDTH(opcode):                                          # noqa: N802 - reads like a table
    return P.TYPES[registry.lookup(opcode)[1].type][0]


def test_integer_rules_wrap_inc_dec_cas():
    f = lambda op, *xs: rmw(registry.lookup(op)[1])(*[np.array(x, np.uint32) for x in xs]).tolist()  # noqa: E731
    assert f("atom.global.add.u32", [0xFFFFFFFF, 5], [2, 0xFFFFFFFF]) == [1, 4]
    assert f("atom.global.inc.u32", [0, 4, 5, 9], [4, 4, 4, 4]) == [1, 0, 0, 0]
    assert f("atom.global.dec.u32", [0, 1, 5, 9], [4, 4, 4, 4]) == [4, 0, 4, 4]
    assert f("atom.global.cas.b32", [3, 3], [3, 2], [7, 7]) == [7, 3]
    assert f("atom.global.min.s32", [0xFFFFFFFF], [1]) == [0xFFFFFFFF]                 # -1 < 1 signed
    assert f("atom.global.min.u32", [0xFFFFFFFF], [1]) == [1]


def test_float_add_rounds_per_operation_in_thread_order():
    """1 + 2^-24 + 2^-24 ... in f32: each add rounds to nearest even, so the small terms vanish one at a time."""
    tiny = np.float32(2.0**-24)
    init = np.zeros(NS, np.float32)
    init[0] = 1.0
    b = np.full(NT, tiny, np.float32)
    b[-1] = np.float32(2.0**-23)
    final, olds = run_interp("atom.global.add.f32", 32, init.view(np.uint32), np.zeros(NT), b.view(np.uint32),
                             np.zeros(NT, np.uint32))
    assert final.view(np.float32)[0] == np.float32(1 + 2.0**-23)
    assert (olds.view(np.float32)[:-1] == 1.0).all()


def test_global_f32_add_flushes_subnormals_shared_does_not():
    sub = np.array([2.0**-140], np.float32).view(np.uint32)
    fg = rmw(registry.lookup("atom.global.add.f32")[1])
    fs = rmw(registry.lookup("atom.shared.add.f32")[1])
    assert int(fg(np.zeros(1, np.uint32), sub)[0]) == 0
    assert int(fs(np.zeros(1, np.uint32), sub)[0]) == int(sub[0])


def test_counter_returns_distinct_tickets_in_thread_order():
    c, old = np.zeros(1, np.uint32), np.zeros(300, np.uint32)
    tiledsl.jit(counter.fn, interpret=True)(c, old)
    assert int(c[0]) == 300
    np.testing.assert_array_equal(old, np.arange(300))


def test_cas_loop_sums_and_the_interpreter_retries_in_thread_order():
    m, tries = np.array([5], np.uint32), np.zeros(NT, np.int32)
    tiledsl.jit(cas_sum.fn, interpret=True)(m, tries)
    assert int(m[0]) == 5 + NT * (NT + 1) // 2
    np.testing.assert_array_equal(tries, np.arange(1, NT + 1))   # round r: the lowest waiting thread wins


def test_shared_then_global_histogram_equals_bincount():
    x = np.random.default_rng(3).integers(0, BINS, 5000).astype(np.int32)
    x[:700] = 17                                                   # one heavily contended bin
    h = np.zeros(BINS, np.uint32)
    tiledsl.jit(histogram.fn, interpret=True)(x, h)
    np.testing.assert_array_equal(h, np.bincount(x, minlength=BINS))


@tiledsl.jit
def pred_repeats(M: T.Tensor((NT, 2, 1), "uint32"), Old: T.Tensor((NT, 2, 1), "uint32"), PRESERVE: T.constexpr):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=NT))
    t = T.cuda.thread_id()
    d = T.alloc_local((2, 1), "uint32")
    d[0, 0] = T.uint32(77)
    d[1, 0] = T.uint32(77)
    T.cuda.tile.apply(T.ptx["atom.global.exch.b32"], d, M[t // 2], t, pred=t % 3 != 0, preserve_dst=PRESERVE)
    Old[t, 0, 0] = d[0, 0]
    Old[t, 1, 0] = d[1, 0]


@pytest.mark.parametrize("preserve", [True, False])
def test_repeats_run_in_order_and_pred_skips_threads(preserve):
    m = np.arange(NT * 2, dtype=np.uint32).reshape(NT, 2, 1) + 1000
    old = np.zeros_like(m)
    m0 = m.copy()
    tiledsl.jit(pred_repeats.fn, interpret=True)(m, old, preserve)
    t = np.arange(NT)
    on = t % 3 != 0
    for r in range(NT // 2):                         # threads 2r and 2r+1 share row r; the later active one wins
        act = [x for x in (2 * r, 2 * r + 1) if on[x]]
        want = act[-1] if act else None
        for k in range(2):
            assert int(m[r, k, 0]) == (want if want is not None else m0[r, k, 0])
    first = [x for x in range(NT) if on[x] and (x % 2 == 0 or not on[x - 1])]
    for x in first:
        np.testing.assert_array_equal(old[x, :, 0], m0[x // 2, :, 0])
    if preserve:
        assert (old[~on] == 77).all()
    else:
        assert (old[~on] == 0xDEADBEEF).all()


def test_doc_page(tmp_path, monkeypatch):
    """docs/patterns/atomic.md: the seed sections, a GPU block, and its example on the compiler and interpreter."""
    import test_patterns_docs as D
    text = (D.DOCS / "atomic.md").read_text()
    for s in D.SECTIONS:
        assert s in text
    assert "ck" in D.run_page("atomic", tmp_path, with_gpu=False)
    monkeypatch.setenv("TILEDSL_INTERPRET", "1")
    monkeypatch.setitem(sys.modules, "torch", D._host_torch())
    D.run_page("atomic", tmp_path, with_gpu=True)


# 24 kernels, each a different form: every op, every type width, both spaces, sem/scope qualifiers
RANDOM_FORMS = [
    "atom.global.add.u32", "atom.relaxed.gpu.shared.add.s32", "atom.global.add.u64", "red.shared.add.u32",
    "atom.acq_rel.gpu.global.min.s32", "atom.shared.max.u64", "red.release.sys.global.min.s64",
    "atom.global.inc.u32", "atom.shared.dec.u32", "red.global.inc.u32", "red.shared::cta.dec.u32",
    "atom.global.and.b64", "atom.acquire.cta.shared.or.b32", "red.global.xor.b32",
    "atom.global.exch.b32", "atom.shared.exch.b64", "atom.global.cas.b16", "atom.release.gpu.shared.cas.b32",
    "atom.global.cas.b64", "atom.global.add.f32", "red.shared.add.f64", "atom.global.add.noftz.f16x2",
    "atom.shared.add.noftz.bf16", "red.global.add.noftz.bf16x2",
]


def test_gpu_harness_on_the_interpreter(monkeypatch):
    """test_gpu_atomic.py's checks with the interpreter standing in for the GPU: they must pass on any machine
    (so a failure on the GPU is the GPU's answer, not the harness)."""
    import test_gpu_atomic as G
    monkeypatch.setattr(G, "ON_INTERPRETER", True)
    assert len(G.RANDOM_FORMS) >= 20 and len(set(G.RANDOM_FORMS)) == len(G.RANDOM_FORMS)
    for k in range(len(G.RANDOM_FORMS)):
        G.random_kernel_agrees(k)
    G.test_cas_loop_adds_every_thread_once()


@pytest.mark.parametrize("opcode", RANDOM_FORMS)
def test_gpu_random_forms_assemble_for_sm90(opcode):
    ck = rmw_kernel.compile(*arrays(), opcode, WIDTH[TYPE_WIDTH(opcode)], registry.lookup(opcode)[1].space ==
                            "shared", nops(opcode), target="sm_90")
    assert ptxas(ck.asm["ptx"], "sm_90").returncode == 0
