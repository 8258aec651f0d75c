"""Compile-only: every tile-pattern family through PTX, counted, and assembled by ptxas for sm_80 and sm_90.

No GPU needed; ptxas is required (a missing ptxas fails, it does not skip). Each kernel is compiled per target,
so the PTX carries that target's `.target` line and ptxas checks it for that architecture.
"""
import itertools
import re

import numpy as np
import pytest

import tiledsl
from helpers import ptxas
from test_patterns_layouts import mma_layouts
from tiledsl import T
from tiledsl.layout import S, TileLayout, laneid, warpid
from tiledsl.isa.register import pattern as R

ARCHS = ["sm_80", "sm_90"]


def assemble(ck, arch):
    assert f".target {arch}" in ck.asm["ptx"]
    r = ptxas(ck.asm["ptx"], arch)
    assert r.returncode == 0, f"ptxas -arch={arch} rejected the PTX:\n{r.stderr}"


def count(ptx, opcode):
    """Occurrences of exactly this opcode (not a longer one that starts with it)."""
    return len(re.findall(re.escape(opcode) + r"(?=[\s;])", ptx))


def inline_asm(ptx):
    """The instructions tiledsl emitted as inline asm (not those LLVM selected for plain loads and stores)."""
    return re.findall(r"// begin inline asm\n\s*(.*?)\n\s*// end inline asm", ptx)


def test_ptxas_is_installed():
    import shutil
    assert shutil.which("ptxas"), "ptxas must be on PATH: the compile-only pattern tests need it"


# ------------------------------------------------------------------ mma.sync

MMA_FORMS = [(k, ab) for k in (8, 16) for ab in ("f16", "bf16")]


def mma_opcode(k, ab):
    return f"mma.sync.aligned.m16n8k{k}.row.col.f32.{ab}.{ab}.f32"


@tiledsl.jit
def mma_lanes(A: T.Tensor(("t", "na"), "uint32"), B: T.Tensor(("t", "nb"), "uint32"),
              C: T.Tensor(("t", "nd"), "float32"), Out: T.Tensor(("t", "nd"), "float32"),
              OP: T.constexpr, SCOPE: T.constexpr, BLOCK: T.constexpr, SCALAR_C: T.constexpr, CVAL: T.constexpr,
              LAY: T.constexpr):
    """Per-thread registers in, per-thread D registers out; LAY = ((shape, layout, registers) for A, B, D)."""
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=BLOCK))
    tid = T.cuda.thread_id()
    ar = T.alloc_local((LAY[0][2],), "uint32")
    br = T.alloc_local((LAY[1][2],), "uint32")
    cr = T.alloc_local((LAY[2][2],), "float32")
    dr = T.alloc_local((LAY[2][2],), "float32")
    for i in T.unroll(LAY[0][2]):
        ar[i] = A[tid, i]
    for i in T.unroll(LAY[1][2]):
        br[i] = B[tid, i]
    for i in T.unroll(LAY[2][2]):
        cr[i] = C[tid, i]
    av = ar.view(LAY[0][0], layout=LAY[0][1])
    bv = br.view(LAY[1][0], layout=LAY[1][1])
    dv = dr.view(LAY[2][0], layout=LAY[2][1])
    if SCALAR_C:
        T.cuda.tile.apply(T.ptx[OP], dv, av, bv, T.float32(CVAL), scope=SCOPE)
    else:
        T.cuda.tile.apply(T.ptx[OP], dv, av, bv, cr.view(LAY[2][0], layout=LAY[2][1]), scope=SCOPE)
    for i in T.unroll(LAY[2][2]):
        Out[tid, i] = dr[i]


def compile_mma(k, ab, reps=(2, 2, 3), batch=(), scope="warp", block=32, group=0, scalar_c=True,
                target="sm_90"):
    lays = mma_layouts(k, *reps, batch=batch, group=group)
    lay = tuple(lays[n] for n in "ABD")
    arrays = [np.zeros((block, lay[0][2]), np.uint32), np.zeros((block, lay[1][2]), np.uint32),
              np.zeros((block, lay[2][2]), np.float32), np.zeros((block, lay[2][2]), np.float32)]
    return mma_lanes.compile(*arrays, mma_opcode(k, ab), scope, block, scalar_c, 0.5, lay, target=target)


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("batch", [(), (2,)], ids=["nobatch", "batch2"])
@pytest.mark.parametrize("scalar_c", [True, False], ids=["scalarC", "tensorC"])
@pytest.mark.parametrize("k, ab", MMA_FORMS, ids=[f"k{k}-{ab}" for k, ab in MMA_FORMS])
def test_mma_one_instruction_per_repeat(k, ab, scalar_c, batch, arch):
    ck = compile_mma(k, ab, batch=batch, scalar_c=scalar_c, target=arch)
    issues = int(np.prod(batch or (1,))) * 2 * 2 * 3
    assert count(ck.asm["ptx"], mma_opcode(k, ab)) == issues
    assert len(re.findall(r"\bmma\.", ck.asm["ptx"])) == issues
    assert "ldmatrix" not in ck.asm["ptx"] and "bar.sync" not in ck.asm["ptx"]
    assemble(ck, arch)


def regs(group_text, name):
    """'{ar[4], ar[5]}' -> [4, 5] (the register slots of `name`)."""
    return [int(x) for x in re.findall(name + r"\[(\d+)\]", group_text)]


@pytest.mark.parametrize("scalar_c", [True, False], ids=["scalarC", "tensorC"])
def test_mma_repeat_order_is_k_innermost_and_c_feeds_only_the_first_k(scalar_c):
    ck = compile_mma(16, "f16", reps=(2, 2, 3), scalar_c=scalar_c)
    lines = [ln.strip() for ln in ck.asm["expanded"].splitlines() if ln.strip().startswith("mma.sync")]
    assert len(lines) == 12
    for i, ln in enumerate(lines):
        d, a, b, c = [g.strip() for g in ln.split(" ", 1)[1].rstrip(";").split("}, ")]
        m, n, kk = i // 6, (i // 3) % 2, i % 3                   # row-major M, N, then K innermost
        assert regs(d, "dr") == [(m * 2 + n) * 4 + r for r in range(4)], ln
        assert regs(a, "ar") == [(m * 3 + kk) * 4 + r for r in range(4)], ln
        assert regs(b, "br") == [(n * 3 + kk) * 2 + r for r in range(2)], ln
        if kk > 0:
            assert regs(c, "dr") == regs(d, "dr"), f"issue {i} must accumulate into D: {ln}"
        elif scalar_c:
            assert c.strip("{}").split(", ") == ["float32(0.5)"] * 4, ln
        else:
            assert regs(c, "cr") == regs(d, "dr"), ln


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("scope, block, group", [("warpgroup", 128, 4), ("cta", 64, 2), ("cta", 128, 4)])
def test_mma_warpgroup_and_cta_scopes(scope, block, group, arch):
    ck = compile_mma(16, "bf16", reps=(1, 2, 2), scope=scope, block=block, group=group, scalar_c=False,
                     target=arch)
    assert count(ck.asm["ptx"], mma_opcode(16, "bf16")) == 4      # per warp: the group axis is not a repeat
    assemble(ck, arch)


# ------------------------------------------------------------------ ldmatrix / stmatrix


def frag(rep, n):
    return TileLayout(S[(rep, n, 8, 4) : (n, 1, 4 @ laneid, 1 @ laneid)])


def frag_groups(groups, rep, n):
    return TileLayout(S[(groups, rep, n, 8, 4) : (1 @ warpid, n, 1, 4 @ laneid, 1 @ laneid)])


SWZ = TileLayout(S[(3, 4, 8, 4) : (128, 32, 4, 1)], swizzle=(3, 2, 3))   # 16-byte rows permuted by an xor


@tiledsl.jit
def ldst_matrix(Out: T.Tensor((32, "n"), "uint32"), OP: T.constexpr, ST: T.constexpr, N: T.constexpr,
                SWIZZLE: T.constexpr, LR: T.constexpr):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    lane = T.cuda.lane_id()
    sm = T.alloc_shared((3, 4, 8, 4), "uint32")
    r = T.alloc_local((3 * N,), "uint32")
    rv = r.view(3, N, 8, 4, layout=LR)
    mv = sm[0:3, 0:N, 0:8, 0:4]
    if SWIZZLE:
        mv = sm.view(3, 4, 8, 4, layout=SWZ)
    if ST:
        for i in T.unroll(3 * N):
            r[i] = T.cast(lane + i, "uint32")
        T.cuda.tile.apply(T.ptx[OP], mv, rv, scope="warp")
        T.cuda.syncthreads()
        for i in T.unroll(3 * N):
            Out[lane, i] = sm[i // N, i % N, lane // 4, lane % 4]
    else:
        for i in T.unroll(3 * N):
            sm[i // N, i % N, lane // 4, lane % 4] = T.cast(lane + i, "uint32")
        T.cuda.syncthreads()
        T.cuda.tile.apply(T.ptx[OP], rv, mv, scope="warp")
        for i in T.unroll(3 * N):
            Out[lane, i] = r[i]


LDST_FORMS = [(op, n, tr) for op in ("ldmatrix", "stmatrix") for n in (1, 2, 4) for tr in ("", ".trans")]


@pytest.mark.parametrize("op, n, trans", LDST_FORMS, ids=[f"{o}-x{n}{t}" for o, n, t in LDST_FORMS])
def test_ldmatrix_stmatrix_forms(op, n, trans):
    opcode = f"{op}.sync.aligned.m8n8.x{n}{trans}.shared.b16"
    for arch in ARCHS:
        if op == "stmatrix" and arch == "sm_80":
            with pytest.raises(tiledsl.CompilationError, match="needs sm_90"):
                ldst_matrix.compile(np.zeros((32, 3 * n), np.uint32), opcode, True, n, False, frag(3, n),
                                    target=arch)
            continue
        ck = ldst_matrix.compile(np.zeros((32, 3 * n), np.uint32), opcode, op == "stmatrix", n, False,
                                 frag(3, n), target=arch)
        assert count(ck.asm["ptx"], opcode) == 3
        regs = "{" + ", ".join(["%r\\d+"] * n) + "}"
        assert re.search(re.escape(opcode) + r"\s+" + (regs + r", \[%r\d+\]" if op == "ldmatrix" else
                                                      r"\[%r\d+\], " + regs), ck.asm["ptx"])
        assemble(ck, arch)


@pytest.mark.parametrize("arch", ARCHS)
def test_ldmatrix_swizzled_shared_rows_and_shared_cta(arch):
    ck = ldst_matrix.compile(np.zeros((32, 12), np.uint32), "ldmatrix.sync.aligned.m8n8.x4.trans.shared::cta.b16",
                             False, 4, True, frag(3, 4), target=arch)
    assert count(ck.asm["ptx"], "ldmatrix.sync.aligned.m8n8.x4.trans.shared::cta.b16") == 3
    assert "xor.b32" in ck.asm["ptx"]
    assemble(ck, arch)


@tiledsl.jit
def ldmatrix_groups(Out: T.Tensor((128, 8), "uint32"), SCOPE: T.constexpr, BLOCK: T.constexpr, G: T.constexpr,
                    LR: T.constexpr):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=BLOCK))
    tid = T.cuda.thread_id()
    sm = T.alloc_shared((G, 2, 4, 8, 4), "uint32")
    r = T.alloc_local((8,), "uint32")
    T.cuda.tile.apply(T.ptx["ldmatrix.sync.aligned.m8n8.x4.shared.b16"], r.view(G, 2, 4, 8, 4, layout=LR),
                      sm, scope=SCOPE)
    for i in T.unroll(8):
        Out[tid, i] = r[i]


@pytest.mark.parametrize("scope, block, g", [("warpgroup", 128, 4), ("cta", 64, 2)])
def test_ldmatrix_warpgroup_and_cta_scopes(scope, block, g):
    for arch in ARCHS:
        ck = ldmatrix_groups.compile(np.zeros((128, 8), np.uint32), scope, block, g, frag_groups(g, 2, 4),
                                     target=arch)
        assert count(ck.asm["ptx"], "ldmatrix.sync.aligned.m8n8.x4.shared.b16") == 2
        assert "%laneid" in ck.asm["ptx"]
        assemble(ck, arch)


# ------------------------------------------------------------------ cp.async with commit / wait


@tiledsl.jit
def cp_async_copy(A: T.Tensor((32, 16), "uint32"), Out: T.Tensor((32, 16), "uint32"), n: T.int32,
                  OP: T.constexpr, CHUNK: T.constexpr, TAIL: T.constexpr, WAIT: T.constexpr):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    lane = T.cuda.lane_id()
    sm = T.alloc_shared((32, 16), "uint32")
    w = CHUNK // 4
    dst = sm.view(32, 16 // w, w)
    src = A.view(32, 16 // w, w)
    if TAIL == "src_size":
        T.cuda.tile.apply(T.ptx[OP], dst, src, chunk_bytes=CHUNK, src_size=n, scope="warp")
    elif TAIL == "src_size_static":
        T.cuda.tile.apply(T.ptx[OP], dst, src, chunk_bytes=CHUNK, src_size=CHUNK // 2, scope="warp")
    elif TAIL == "ignore_src":
        T.cuda.tile.apply(T.ptx[OP], dst, src, chunk_bytes=CHUNK, ignore_src=n > lane, scope="warp")
    elif TAIL == "pred":
        T.cuda.tile.apply(T.ptx[OP], dst, src, chunk_bytes=CHUNK, pred=lane < n, scope="warp")
    else:
        T.cuda.tile.apply(T.ptx[OP], dst, src, chunk_bytes=CHUNK, scope="warp")
    T.cuda.tile.apply(T.ptx["cp.async.commit_group"])
    if WAIT:
        T.cuda.tile.apply(T.ptx["cp.async.wait_group"], 0)
    else:
        T.cuda.tile.apply(T.ptx["cp.async.wait_all"])
    T.cuda.syncthreads()
    for i in T.unroll(16):
        Out[lane, i] = sm[lane, i]


CP_FORMS = [("cp.async.ca.shared.global", 4), ("cp.async.ca.shared.global", 8), ("cp.async.ca.shared.global", 16),
            ("cp.async.cg.shared.global", 16), ("cp.async.cg.shared::cta.global.L2::128B", 16)]


@pytest.mark.parametrize("tail", ["none", "src_size", "src_size_static", "ignore_src", "pred"])
@pytest.mark.parametrize("opcode, chunk", CP_FORMS, ids=[f"{o.split('.')[2]}{c}" + ("-L2" if "L2" in o else "")
                                                        for o, c in CP_FORMS])
def test_cp_async_forms_with_commit_and_wait(opcode, chunk, tail):
    a = np.zeros((32, 16), np.uint32)
    for arch in ARCHS:
        ck = cp_async_copy.compile(a, a, 1, opcode, chunk, tail, chunk == 16, target=arch)
        ptx = ck.asm["ptx"]
        assert count(ptx, opcode) == 64 // chunk
        assert count(ptx, "cp.async.commit_group") == 1
        assert count(ptx, "cp.async.wait_group" if chunk == 16 else "cp.async.wait_all") == 1
        if tail in ("src_size", "src_size_static", "ignore_src"):
            assert re.search(re.escape(opcode) + rf"\s+\[%r\d+\], \[%rd\d+\], {chunk}, %r\d+;", ptx), ptx
        else:
            assert re.search(re.escape(opcode) + rf"\s+\[%r\d+\], \[%rd\d+\], {chunk};", ptx)
        assemble(ck, arch)


@tiledsl.jit
def cp_async_hinted(A: T.Tensor((32, 16), "uint32"), Out: T.Tensor((32, 16), "uint32"), pol: T.uint64, n: T.int32,
                    OP: T.constexpr, SIZE: T.constexpr):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    lane = T.cuda.lane_id()
    sm = T.alloc_shared((32, 16), "uint32")
    dst, src = sm.view(32, 4, 4), A.view(32, 4, 4)
    if SIZE:
        T.cuda.tile.apply(T.ptx[OP], dst, src, chunk_bytes=16, src_size=n, cache_policy=pol, scope="warp")
    else:
        T.cuda.tile.apply(T.ptx[OP], dst, src, chunk_bytes=16, cache_policy=pol, scope="warp")
    T.cuda.tile.apply(T.ptx["cp.async.wait_all"])
    T.cuda.syncthreads()
    for i in T.unroll(16):
        Out[lane, i] = sm[lane, i]


@pytest.mark.parametrize("opcode", ["cp.async.cg.shared.global.L2::cache_hint",
                                    "cp.async.ca.shared::cta.global.L2::cache_hint.L2::256B"])
@pytest.mark.parametrize("size", [False, True])
def test_cp_async_cache_hint_takes_the_policy_last(opcode, size):
    a = np.arange(32 * 16, dtype=np.uint32).reshape(32, 16)
    ck = cp_async_hinted.compile(a, a, np.uint64(0), 8, opcode, size, target="sm_90")
    tail = r", %r\d+, %rd\d+;" if size else r", %rd\d+;"
    assert len(re.findall(re.escape(opcode) + r"\s+\[%r\d+(\+\d+)?\], \[%rd\d+(\+\d+)?\], 16" + tail,
                          ck.asm["ptx"])) == 4, ck.asm["ptx"]
    assemble(ck, "sm_90")
    out = np.zeros_like(a)
    tiledsl.jit(cp_async_hinted.fn, interpret=True)(a, out, np.uint64(0), 8, opcode, size)
    want = a.copy()
    if size:                                    # 8 of each 16-byte chunk read, the rest zero-filled
        want.reshape(32, 4, 4)[:, :, 2:] = 0
    np.testing.assert_array_equal(out, want)


@pytest.mark.parametrize("opcode,policy,msg", [
    ("cp.async.cg.shared.global.L2::cache_hint", False, "cache_policy= .* is required"),
    ("cp.async.cg.shared.global", True, "only allowed when the opcode carries")])
def test_cp_async_cache_policy_exactly_with_the_hint(opcode, policy, msg):
    @tiledsl.jit
    def k(A: T.Tensor((32, 4), "uint32")):
        T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
        sm = T.alloc_shared((32, 4), "uint32")
        if policy:
            T.cuda.tile.apply(T.ptx[opcode], sm.view(32, 1, 4), A.view(32, 1, 4), chunk_bytes=16, scope="warp",
                              cache_policy=1)
        else:
            T.cuda.tile.apply(T.ptx[opcode], sm.view(32, 1, 4), A.view(32, 1, 4), chunk_bytes=16, scope="warp")
    with pytest.raises(tiledsl.CompilationError, match=msg):
        k.compile(np.zeros((32, 4), np.uint32), target="sm_90")


def test_cp_async_needs_sm80():
    a = np.zeros((32, 16), np.uint32)
    with pytest.raises(tiledsl.CompilationError, match="needs sm_80"):
        cp_async_copy.compile(a, a, 1, "cp.async.cg.shared.global", 16, "none", True, target="sm_75")


# ------------------------------------------------------------------ ld / st vectors


lane_rows = TileLayout(S[(32, 2, 4) : (1 @ laneid, 4, 1)])
lane_pairs = TileLayout(S[(32, 4, 2) : (1 @ laneid, 2, 1)])


@tiledsl.jit
def vector_copy(A: T.Tensor((32, 8), "float32"), Out: T.Tensor((32, 8), "float32"), D: T.Tensor((4, 2), "float64")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    r = T.alloc_local((8,), "float32")
    q = T.alloc_local((8,), "float32")
    sm = T.alloc_shared((32, 8), "float32")
    T.cuda.tile.apply(T.ptx["ld.global.v4.f32"], r.view(32, 2, 4, layout=lane_rows), A.view(32, 2, 4), scope="warp")
    T.cuda.tile.apply(T.ptx["st.shared.v2.f32"], sm.view(32, 4, 2), r.view(32, 4, 2, layout=lane_pairs), scope="warp")
    T.cuda.syncthreads()
    T.cuda.tile.apply(T.ptx["ld.shared.v4.b32"], q.view(32, 2, 4, layout=lane_rows), sm.view(32, 2, 4), scope="warp")
    T.cuda.tile.apply(T.ptx["st.global.v2.f32"], Out.view(32, 4, 2), q.view(32, 4, 2, layout=lane_pairs), scope="warp")
    d = T.alloc_local((4, 2), "float64")
    T.cuda.tile.apply(T.ptx["ld.global.v2.f64"], d, D)
    T.cuda.tile.apply(T.ptx["st.global.v2.f64"], D, d, pred=T.cuda.lane_id() == 0)


@pytest.mark.parametrize("arch", ARCHS)
def test_ld_st_vectors_global_and_shared(arch):
    a = np.zeros((32, 8), np.float32)
    ck = vector_copy.compile(a, a, np.zeros((4, 2), np.float64), target=arch)
    ptx = ck.asm["ptx"]
    for opcode, n in [("ld.global.v4.f32", 2), ("st.shared.v2.f32", 4), ("ld.shared.v4.b32", 2),
                      ("st.global.v2.f32", 4), ("ld.global.v2.f64", 4), ("st.global.v2.f64", 4)]:
        assert count(ptx, opcode) == n, opcode
    assemble(ck, arch)


# ------------------------------------------------------------------ register family: every claimed form


def claimed_register_forms():
    """Every register form the pattern accepts: each op and type of the table with every combination of its
    qualifiers in PTX order, and every cvt that the cvt rules accept (mov's register groups are tested below)."""
    forms = []
    for op, (_, types) in R.TABLE.items():
        if op == "mov":
            continue
        for ty, (allowed, _) in types.items():
            al = sorted(allowed, key=R.ORDER.index)
            for n in range(len(al) + 1):
                for qs in itertools.combinations(al, n):
                    f = R.match(".".join((op,) + qs + (ty,)))
                    if isinstance(f, R.Form):
                        forms.append(f)
    types = sorted(R.INTS | R.FLOATS)
    for d in types + ["f16x2", "bf16x2", "e4m3x2", "e5m2x2"]:
        for s in types:
            for rnd in [None] + sorted(R.RND | R.IRND):
                for n in range(3):
                    for qs in itertools.combinations(["ftz", "sat", "relu", "satfinite"], n):
                        f = R.match(".".join(["cvt"] + ([rnd] if rnd else []) + list(qs) + [d, s]))
                        if isinstance(f, R.Form):
                            forms.append(f)
    return forms


FORMS = claimed_register_forms()


@tiledsl.jit
def register_forms(X: T.Tensor((8,), "uint64"), Out: T.Tensor(("n",), "uint64"), FORMS: T.constexpr):
    """FORMS: (opcode, operand count, destination dtype, source dtype, 64 // destination bits) per form."""
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    for k in T.unroll(len(FORMS)):
        f = FORMS[k]
        x = X.view(dtype=f[3])
        a = T.alloc_local((1,), f[3])
        b = T.alloc_local((1,), f[3])
        c = T.alloc_local((1,), f[3])
        d = T.alloc_local((1,), f[2])
        a[0] = x[0]
        b[0] = x[1]
        c[0] = x[2]
        if f[1] == 2:
            T.cuda.tile.apply(T.ptx[f[0]], d, a)
        elif f[1] == 3:
            T.cuda.tile.apply(T.ptx[f[0]], d, a, b)
        else:
            T.cuda.tile.apply(T.ptx[f[0]], d, a, b, c)
        o = Out.view(dtype=f[2])
        o[k * f[4]] = d[0]


def form_entry(f):
    return (f.opcode, len(f.names), R.TYPES[f.type][1].name, R.TYPES[f.src_type][1].name, 64 // R.TYPES[f.type][0])


def compile_forms(forms, arch):
    entries = tuple(form_entry(f) for f in forms)
    return register_forms.compile(np.zeros(8, np.uint64), np.zeros(len(entries), np.uint64), entries, target=arch)


def test_claimed_register_forms_cover_the_issue_list():
    ops = {f.op for f in FORMS}
    assert {"add", "sub", "mul", "fma", "min", "max", "neg", "abs", "cvt"} <= ops
    names = {f.opcode for f in FORMS}
    for opcode in ("fma.rn.f32", "fma.rz.f32", "fma.rm.f32", "fma.rp.f32", "fma.rn.ftz.sat.f32", "fma.rn.f64",
                   "fma.rn.f16", "fma.rn.f16x2", "fma.rn.relu.bf16x2", "fma.rn.bf16", "add.rn.bf16x2",
                   "add.s32", "add.sat.s32", "mul.lo.u32", "mul.wide.s16", "min.NaN.f16x2", "max.relu.s32",
                   "neg.bf16x2", "abs.ftz.f32", "cvt.rn.f16x2.f32", "cvt.rn.relu.bf16x2.f32", "cvt.rzi.s32.f32",
                   "cvt.f32.f16", "cvt.rn.bf16.f32", "cvt.sat.u16.s32", "fma.rn.f32x2",
                   "cvt.rn.satfinite.e4m3x2.f32", "cvt.rn.relu.satfinite.e5m2x2.f32"):
        assert opcode in names, opcode
    assert len(FORMS) > 900


@pytest.mark.parametrize("arch", ARCHS)
def test_every_claimed_register_form_assembles(arch):
    sm = int(arch[3:])
    forms = [f for f in FORMS if R.min_sm(f) <= sm]
    ck = compile_forms(forms, arch)
    emitted = [line.split()[0] for line in inline_asm(ck.asm["ptx"])]
    assert sorted(emitted) == sorted(f.opcode for f in forms)
    assemble(ck, arch)


@pytest.mark.parametrize("arch", ARCHS)
def test_register_forms_beyond_the_target_are_rejected(arch):
    sm = int(arch[3:])
    newer = [f for f in FORMS if R.min_sm(f) > sm]
    assert newer, "every target below sm_100 has forms it must refuse (e.g. fma.rn.f32x2)"
    for f in newer[:: max(1, len(newer) // 40)] + [R.match("fma.rn.f32x2")]:
        with pytest.raises(tiledsl.CompilationError, match=f"needs sm_{R.min_sm(f)} or newer; the target is {arch}"):
            compile_forms([f], arch)


def test_f32x2_forms_assemble_for_sm100():
    forms = [f for f in FORMS if R.min_sm(f) == 100]
    assert any(f.opcode == "fma.rn.f32x2" for f in forms)
    ck = compile_forms(forms, "sm_100")
    assemble(ck, "sm_100")


@tiledsl.jit
def mov_forms(X: T.Tensor((4,), "uint64"), Out: T.Tensor((16,), "uint64"), v: T.uint32):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    h = T.alloc_local((4,), "uint16")
    w = T.alloc_local((2,), "uint32")
    q = T.alloc_local((1,), "uint64")
    x16 = X.view(dtype="uint16")
    for i in T.unroll(4):
        h[i] = x16[i]
    T.cuda.tile.apply(T.ptx["mov.b32"], w.view(2, 1), h.view(2, 2))          # pack {a, b} -> d, twice
    T.cuda.tile.apply(T.ptx["mov.b64"], q.view(1, 1), w.view(1, 2))          # pack two b32
    T.cuda.tile.apply(T.ptx["mov.b64"], h.view(1, 4), q.view(1, 1))          # unpack into four b16
    T.cuda.tile.apply(T.ptx["mov.b32"], w.view(2, 1), v)                      # scalar broadcast
    f = T.alloc_local((3, 1), "float32")
    T.cuda.tile.apply(T.ptx["mov.f32"], f, 1.5)
    Out[0] = q[0]
    Out[1] = T.cast(w[0], "uint64")
    Out[2] = T.cast(h[3], "uint64")
    Out[3] = T.cast(f[2, 0], "uint64")


@pytest.mark.parametrize("arch", ARCHS)
def test_mov_register_groups(arch):
    ck = mov_forms.compile(np.zeros(4, np.uint64), np.zeros(16, np.uint64), 7, target=arch)
    ptx = ck.asm["ptx"]
    assert re.search(r"mov\.b32\s+%r\d+, \{%rs\d+, %rs\d+\}", ptx)
    assert re.search(r"mov\.b64\s+%rd\d+, \{%r\d+, %r\d+\}", ptx)
    assert re.search(r"mov\.b64\s+\{%rs\d+, %rs\d+, %rs\d+, %rs\d+\}, %rd\d+", ptx)
    assemble(ck, arch)


# ------------------------------------------------------------------ predication and broadcast

lane_one = TileLayout(S[(32, 2, 1) : (1 @ laneid, 1, 1)])


@tiledsl.jit
def predicated(A: T.Tensor((32, 2, 1), "float32"), Out: T.Tensor((32, 2, 1), "float32"), PRESERVE: T.constexpr):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    lane = T.cuda.lane_id()
    r = T.alloc_local((2,), "float32")
    rv = r.view(32, 2, 1, layout=lane_one)
    T.cuda.tile.apply(T.ptx["ld.global.f32"], rv, A, scope="warp")
    T.cuda.tile.apply(T.ptx["fma.rn.f32"], rv, rv, 3.0, rv, scope="warp", pred=lane % 2 == 0,
                      preserve_dst=PRESERVE)
    T.cuda.tile.apply(T.ptx["st.global.f32"], Out, rv, scope="warp")


@pytest.mark.parametrize("preserve", [False, True])
def test_predicated_fma_with_and_without_preserve_dst(preserve):
    a = np.zeros((32, 2, 1), np.float32)
    for arch in ARCHS:
        ck = predicated.compile(a, a, preserve, target=arch)
        assert count(ck.asm["ptx"], "fma.rn.f32") == 2
        assert "@%tp fma.rn.f32" in ck.asm["ptx"]
        assert ("(preserve)" in ck.asm["expanded"]) == preserve
        assemble(ck, arch)


# ------------------------------------------------------------------ ld / st: every qualifier combination

from tiledsl.isa.memory import pattern as M  # noqa: E402

VEC_TYPES = [(v, t) for v in ("", "v2", "v4") for t in ("b16", "u16", "b32", "s32", "f32", "b64", "u64", "f64")
             if not (v == "v4" and t in ("b64", "u64", "f64"))]


def claimed_memory_forms():
    """Every qualifier combination the ld/st pattern accepts, each with one vector width and type (in rotation,
    so every width and type appears), in PTX order."""
    forms, k = [], 0
    for op in ("ld", "st"):
        for sem, space, cop, nc, hint, pf in itertools.product(
                ("", "weak", "volatile"), ("global", "shared", "shared::cta", "local"), [""] + sorted(M.CACHE[op]),
                ("", "nc") if op == "ld" else ("",), ("", "L2::cache_hint"),
                ("", "L2::64B", "L2::128B", "L2::256B") if op == "ld" else ("",)):
            vec, ty = VEC_TYPES[k % len(VEC_TYPES)]
            f = M.match(".".join(x for x in (op, sem, space, cop, nc, hint, pf, vec, ty) if x))
            if isinstance(f, M.Form):
                forms.append(f)
                k += 1
    return forms


MEM_FORMS = claimed_memory_forms()


@tiledsl.jit
def memory_forms(G: T.Tensor((64,), "uint64"), FORMS: T.constexpr):
    """FORMS: (opcode, ld?, space, words, dtype, cache hint?) per form."""
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    sh = T.alloc_shared((64,), "uint64")
    lo = T.alloc_local((64,), "uint64")
    pol = G[63]
    for k in T.unroll(len(FORMS)):
        f = FORMS[k]
        r = T.alloc_local((f[3],), f[4])
        g = G.view(dtype=f[4])
        m = g[0:f[3]]
        if f[2] == "shared":
            m = sh.view(dtype=f[4])[0:f[3]]
        elif f[2] == "local":
            m = lo.view(dtype=f[4])[0:f[3]]
        if f[1]:
            if f[5]:
                T.cuda.tile.apply(T.ptx[f[0]], r, m, cache_policy=pol)
            else:
                T.cuda.tile.apply(T.ptx[f[0]], r, m)
            g[k % 8] = r[0]
        else:
            r[0] = g[1]
            if f[5]:
                T.cuda.tile.apply(T.ptx[f[0]], m, r, cache_policy=pol)
            else:
                T.cuda.tile.apply(T.ptx[f[0]], m, r)


@pytest.mark.parametrize("arch", ARCHS)
def test_every_ld_st_qualifier_combination_assembles(arch):
    assert {f.space for f in MEM_FORMS} == {"global", "shared", "local"} and len(MEM_FORMS) > 150
    entries = tuple((f.opcode, f.op == "ld", f.space, f.words, R.TYPES[f.type][1].name, f.hint) for f in MEM_FORMS)
    ck = memory_forms.compile(np.zeros(64, np.uint64), entries, target=arch)
    emitted = [line.split()[0] for line in inline_asm(ck.asm["ptx"])]
    assert sorted(emitted) == sorted(f.opcode for f in MEM_FORMS)
    assemble(ck, arch)


@pytest.mark.parametrize("opcode", ["ld.shared.nc.f32", "ld.weak.global.nc.f32", "ld.volatile.global.ca.f32",
                                    "ld.local.L2::128B.f32", "st.shared.L2::cache_hint.f32", "ld.volatile.local.f32",
                                    "ld.global.lu.nc.f32", "st.global.L2::128B.f32"])
def test_ld_st_combinations_ptxas_refuses_are_refused(opcode):
    assert not isinstance(M.match(opcode), M.Form)
