"""tiledsl.layouts: each constructor equals the layouts written by hand in the kernels, examples, docs and tests,
compiles to the same PTX, and is accepted by the mma/ldmatrix patterns on the interpreter (no GPU)."""
import subprocess
import sys

import numpy as np
import pytest

import tiledsl
from tiledsl import T
from tiledsl import layouts as L
from tiledsl.core.errors import LayoutError
from tiledsl.layout import S, TileLayout, laneid, wid_in_wg

from test_patterns_layouts import mma_layouts


# ------------------------------------------------------------------ the hand-written layouts they replace


def hand_gemm_layouts(bm, bn, bk, wm, wn, stages, padded=False):
    """tiledsl/ops/gemm/mma.py's layouts() as written by hand before tiledsl.layouts (commit a0b90de)."""
    tm, tn = bm // wm, bn // wn
    MI, NI = tm // 16, tn // 8
    cpr = bk // 8
    words = bk // 2 + (4 if padded else 0)
    ks = bk // 16
    sw = None if padded else {2: (1, 2, 3), 4: (2, 2, 3), 8: (3, 2, 3), 16: (3, 2, 4)}[cpr]
    H = {}
    H["cp_a"] = TileLayout(S[(stages, bm, cpr, 4) : (bm * words, words, 4, 1)], swizzle=sw)
    H["cp_b"] = TileLayout(S[(stages, bn, cpr, 4) : (bn * words, words, 4, 1)], swizzle=sw)
    H["ld_a"] = TileLayout(S[(stages, wm, MI, ks, 2, 2, 8, 4) :
                             (bm * words, tm * words, 16 * words, 8, 4, 8 * words, words, 1)], swizzle=sw)
    H["ld_b"] = TileLayout(S[(stages, wn, NI // 2, ks, 2, 2, 8, 4) :
                             (bn * words, tn * words, 16 * words, 8, 8 * words, 4, words, 1)], swizzle=sw)
    H["r_a"] = TileLayout(S[(MI, 4, 8, 4) : (4, 1, 4 @ laneid, 1 @ laneid)])
    H["r_b"] = TileLayout(S[(NI // 2, 4, 8, 4) : (4, 1, 4 @ laneid, 1 @ laneid)])
    H["m_a"] = TileLayout(S[(MI, 1, 2, 8, 2, 4) : (4, 4, 1, 4 @ laneid, 2, 1 @ laneid)])
    H["m_b"] = TileLayout(S[(NI, 1, 8, 2, 4) : (2, 2, 4 @ laneid, 1, 1 @ laneid)])
    H["m_d"] = TileLayout(S[(MI, NI, 2, 8, 4, 2) : (NI * 4, 4, 2, 4 @ laneid, 1 @ laneid, 1)])
    H["r_a2"] = TileLayout(S[(2, MI, 4, 8, 4) : (MI * 4, 4, 1, 4 @ laneid, 1 @ laneid)])
    H["r_b2"] = TileLayout(S[(2, NI // 2, 4, 8, 4) : (NI * 2, 4, 1, 4 @ laneid, 1 @ laneid)])
    H["m_a2"] = TileLayout(S[(2, MI, 1, 2, 8, 2, 4) : (MI * 4, 4, 4, 1, 4 @ laneid, 2, 1 @ laneid)])
    H["m_b2"] = TileLayout(S[(2, NI, 1, 8, 2, 4) : (NI * 2, 2, 2, 4 @ laneid, 1, 1 @ laneid)])
    return H


def test_gemm_layouts_equal_the_hand_written_ones():
    from tiledsl.ops.gemm import mma
    configs = {c[:6] for c in mma.CONFIGS + mma.PREFERRED + mma.DYNAMIC_PREFERRED}
    configs |= {(128, 128, 16, 2, 2, 3), (128, 128, 128, 2, 2, 3), (64, 64, 32, 1, 1, 2), (64, 128, 64, 1, 4, 2)}
    for c in sorted(configs):
        for padded in (False, True):
            assert mma.layouts(*c, padded=padded) == hand_gemm_layouts(*c, padded=padded), (c, padded)


def test_fa2_layouts_are_the_constructors():
    """tiledsl/ops/flash/fa2.py's hand-written layouts (all but V's .trans view, whose k step comes before its
    d-tile pair): the register fragments in the kernel's own register order through strides=."""
    from tiledsl.ops.flash import fa2
    BN = fa2.BN
    for D in (64, 128, 256):
        for warps, mi in ((4, 1), (4, 2), (2, 1)):
            H = fa2.layouts(D, warps, mi)
            KD, NI, KT, DN = D // 16, BN // 8, BN // 16, D // 8
            sw = L.row_swizzle(2 * D)
            bm = 16 * mi * warps
            ours = {"cp_q": L.chunk_rows(bm, D, stages=None, swizzle=sw),
                    "cp_kv": L.chunk_rows(BN, D, stages=2, swizzle=sw),
                    "ld_q": L.ldmatrix_a(bm, D, warps=warps, stages=None, swizzle=sw),
                    "ld_k": L.ldmatrix_b(BN, D, stages=2, warps=None, swizzle=sw),
                    "r_q": L.ldmatrix_regs(mi, KD), "r_q1": L.ldmatrix_regs(mi), "r_k": L.ldmatrix_regs(),
                    "r_v": L.ldmatrix_regs(),
                    "m_q": L.mma_a(KD, mi, 1, strides=(4, KD * 4, 4)), "m_q1": L.mma_a(mi, 1),
                    "m_p": L.mma_a(KT, mi, 1, strides=(4, NI * 2, 4)), "m_k": L.mma_b(2, 1), "m_v": L.mma_b(2, 1),
                    "m_s2": L.mma_c(NI // 2, mi, 2, strides=(8, NI * 4, 4)), "m_o": L.mma_c(mi, DN),
                    "m_o2": L.mma_c(DN // 2, mi, 2, strides=(8, DN * 4, 4))}
            assert set(H) - set(ours) == {"ld_v"}
            for name, lay in ours.items():
                assert lay == H[name], (D, warps, mi, name)


def test_seed_and_pattern_page_layouts():
    import seed_mma
    assert (seed_mma.la, seed_mma.lb, seed_mma.ld) == (L.mma_a(1, 2), L.mma_b(1, 2), L.mma_c(1, 1))
    # docs/patterns/mma.md (MR, NR, KR = 2, 2, 2)
    MR, NR, KR = 2, 2, 2
    assert L.mma_a(MR, KR) == TileLayout(S[(MR, KR, 2, 8, 2, 4) : (KR * 4, 4, 1, 4 @ laneid, 2, 1 @ laneid)])
    assert L.mma_b(NR, KR) == TileLayout(S[(NR, KR, 8, 2, 4) : (KR * 2, 2, 4 @ laneid, 1, 1 @ laneid)])
    assert L.mma_c(MR, NR) == TileLayout(S[(MR, NR, 2, 8, 4, 2) : (NR * 4, 4, 2, 4 @ laneid, 1 @ laneid, 1)])
    # docs/patterns/ldmatrix.md
    assert L.ldmatrix_regs() == TileLayout(S[(4, 8, 4) : (1, 4 @ laneid, 1 @ laneid)])
    assert L.ldmatrix_regs(count=2) == TileLayout(S[(2, 8, 4) : (1, 4 @ laneid, 1 @ laneid)])
    assert L.mma_a(1, 1) == TileLayout(S[(1, 1, 2, 8, 2, 4) : (4, 4, 1, 4 @ laneid, 2, 1 @ laneid)])
    assert L.mma_b(1, 1) == TileLayout(S[(1, 1, 8, 2, 4) : (2, 2, 4 @ laneid, 1, 1 @ laneid)])


@pytest.mark.parametrize("k", [8, 16])
@pytest.mark.parametrize("group", [0, 2, 4])
@pytest.mark.parametrize("batch", [(), (3,)])
def test_mma_fragments_equal_the_test_builders(k, group, batch):
    mr, nr, kr = 2, 3, 2
    ref = mma_layouts(k, mr, nr, kr, batch, group)
    ours = {"A": L.mma_a(*batch, mr, kr, k=k, warps=group), "B": L.mma_b(*batch, nr, kr, k=k, warps=group),
            "D": L.mma_c(*batch, mr, nr, warps=group)}
    for name, (shape, lay, regs) in ref.items():
        assert ours[name] == lay, name
        assert ours[name].storage_span(shape) == regs


def test_wgmma_and_stmatrix_fragments():
    import wgmma_cases
    from tiledsl.lib import staging
    from tiledsl.ops.gemm import hopper_kernel
    for n in (8, 64, 128, 256):
        assert L.wgmma_acc(n) == wgmma_cases.d_layout(n)
        assert L.wgmma_acc(n, dtype="float16") == wgmma_cases.acc_layout(n)
    for kr in (1, 2, 4):
        assert L.wgmma_a(kr) == wgmma_cases.a_regs_layout(kr)
    for d in (64, 128, 256):
        assert L.ldmatrix_regs(d // 16) == staging.packed_words(d)
    for ab in ("float16", "bfloat16", "e4m3"):
        for bm, bn, stages, cons in ((64, 128, 4, 1), (128, 256, 3, 2), (128, 128, 4, 2)):   # bm = 64 * consumers
            bk = hopper_kernel.k_tile(ab)
            H = hopper_kernel.layouts(bm, bn, bk, stages, cons, ab)
            store = "uint8" if ab == "e4m3" else ab
            assert H["acc"] == L.wgmma_acc(bn, warp_axis="wid_in_wg")
            assert H["tma_a"] == L.tma_tile((stages, bm, bk), store, 128)
            assert H["wg_a"] == L.wgmma_smem(bm, bk, store, stages=stages, groups=cons)
            assert H["wg_b"] == L.wgmma_smem(bn, bk, store, stages=stages)


def test_attention_wgmma_fragments():
    # tiledsl/ops/flash/fa3_parts.py's accumulator and fp8.py's register P operand (warps named wid_in_wg)
    from tiledsl.ops.flash import fa3_parts
    for n in (64, 128, 176, 256):
        assert fa3_parts.acc_layout(n) == L.wgmma_acc(n, warp_axis="wid_in_wg")
    for kr in (1, 2, 4):
        assert L.wgmma_a(kr, warp_axis="wid_in_wg") == TileLayout(
            S[(1, kr, 4, 2, 8, 2, 4) : (1, 4, 1 @ wid_in_wg, 1, 4 @ laneid, 2, 1 @ laneid)])


def test_hopper_epilogue_packed_words():
    # tiledsl/ops/gemm/hopper_kernel.py's L_PK: the stmatrix.x4 registers of an EPI-column part
    for epi in (64, 128):
        assert L.ldmatrix_regs(epi // 16) == TileLayout(S[(epi // 16, 4, 8, 4) : (4, 1, 4 @ laneid, 1 @ laneid)])
    assert L.wgmma_acc(64, warp_axis="wid_in_wg") == TileLayout(
        S[(1, 1, 4, 2, 8, 8, 4, 2) : (1, 1, 1 @ wid_in_wg, 2, 4 @ laneid, 4, 1 @ laneid, 1)])


def test_row_swizzle_is_the_tma_swizzle():
    from tiledsl.core import dtypes
    from tiledsl.lang.tensormap import swizzle_of
    for nbytes in (32, 64, 128):
        for dt in ("uint32", "float16", "uint8"):
            assert L.row_swizzle(nbytes, dt) == swizzle_of(nbytes, dtypes.lookup(dt))
    assert L.row_swizzle(256) == (3, 2, 4) and L.row_swizzle(512) == (3, 2, 5)


def test_bad_arguments_name_what_is_allowed():
    with pytest.raises(LayoutError, match="m16n8k8 and m16n8k16"):
        L.mma_a(1, k=32)
    with pytest.raises(LayoutError, match="positive int"):
        L.mma_c(0)
    with pytest.raises(LayoutError, match="1, 2 or 4"):
        L.ldmatrix_regs(count=3)
    with pytest.raises(LayoutError, match="multiple of warps"):
        L.ldmatrix_a(48, 16, warps=2)
    with pytest.raises(LayoutError, match="multiple of 8 from 8 to 256"):
        L.wgmma_acc(12)
    with pytest.raises(LayoutError, match="128 bytes"):
        L.wgmma_smem(64, 32, "float16")
    with pytest.raises(LayoutError, match="row_bytes"):
        L.row_swizzle(48)
    with pytest.raises(LayoutError, match="one non-negative int register stride per repeat"):
        L.mma_a(2, 1, strides=(4,))


def test_a_layout_built_inside_a_kernel_says_where_to_build_it():
    @tiledsl.jit
    def inside(X: T.Tensor((4,), "float32")):
        T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
        r = T.alloc_local((4,), "float32")
        r.view(1, 1, 16, 8, layout=L.mma_c(1, 1))

    with pytest.raises(tiledsl.CompilationError, match="build layouts outside the kernel .*tiledsl.layouts.mma_c"):
        inside.compile(np.zeros(4, np.float32), target="sm_90")


def test_import_is_light_and_lazy_from_tiledsl():
    code = ("import sys; import tiledsl.layouts; "
            "bad = [m for m in ('torch', 'numpy', 'llvmlite', 'tiledsl.compiler') if m in sys.modules]; print(bad)")
    lazy = ("import sys, tiledsl; print('tiledsl.layouts' in sys.modules, "
            "tiledsl.layouts.mma_c(1, 1) == tiledsl.layouts.mma_d(1, 1))")
    assert subprocess.run([sys.executable, "-c", lazy], capture_output=True, text=True,
                          check=True).stdout.split() == ["False", "True"]
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


# ------------------------------------------------------------------ the same PTX


def _seed_kernel(la, lb, ld):
    @tiledsl.jit
    def warp_mma(A: T.Tensor((1, 2, 16, 8), "uint32"), B: T.Tensor((1, 2, 8, 8), "uint32"),
                 Out: T.Tensor((16, 8), "float32")):
        T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
        lane = T.cuda.lane_id()
        ar = T.alloc_local((8,), "uint32", layout="default")
        br = T.alloc_local((4,), "uint32", layout="default")
        dr = T.alloc_local((4,), "float32", layout="default")
        for kk, r in T.grid(2, 4):
            ar[kk * 4 + r] = A[0, kk, lane // 4 + 8 * (r % 2), lane % 4 + 4 * (r // 2)]
        for kk, r in T.grid(2, 2):
            br[kk * 2 + r] = B[0, kk, lane // 4, lane % 4 + 4 * r]
        T.cuda.tile.apply(T.ptx["mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"], dr.view(1, 1, 16, 8, layout=ld),
                          ar.view(1, 2, 16, 8, layout=la), br.view(1, 2, 8, 8, layout=lb), T.float32(0),
                          scope="warp")
        for r in range(4):
            Out[lane // 4 + 8 * (r // 2), 2 * (lane % 4) + r % 2] = dr[r]
    return warp_mma


def test_seed_kernel_ptx_is_byte_identical():
    import seed_mma
    args = (np.zeros((1, 2, 16, 8), np.uint32), np.zeros((1, 2, 8, 8), np.uint32), np.zeros((16, 8), np.float32))
    hand = _seed_kernel(seed_mma.la, seed_mma.lb, seed_mma.ld).compile(*args, target="sm_80").asm["ptx"]
    ours = _seed_kernel(L.mma_a(1, 2), L.mma_b(1, 2), L.mma_c(1, 1)).compile(*args, target="sm_80").asm["ptx"]
    assert ours == hand


def test_gemm_ptx_is_byte_identical(monkeypatch):
    from tiledsl.ops.gemm import mma
    config, shape = (128, 128, 32, 2, 2, 4, 1), (256, 256, 128)
    a = np.zeros((256, 128), np.float16)
    c = np.zeros((256, 256), np.float16)
    ours = mma.make_gemm("float16", "float16", config, shape).compile(a, a, c, target="sm_80").asm["ptx"]
    monkeypatch.setattr(mma, "layouts", hand_gemm_layouts)
    monkeypatch.setattr(mma, "_KERNELS", {})
    hand = mma.make_gemm("float16", "float16", config, shape).compile(a, a, c, target="sm_80").asm["ptx"]
    assert ours == hand


# ------------------------------------------------------------------ accepted by the patterns, right on the interpreter


def _ldmatrix_mma_kernel(M, N, K, WM, WN, b_trans, bcount=4):
    """A C = A @ B^T block (B given as N x K, or K x N with b_trans) on WM x WN warps: the whole tile in shared
    memory, ldmatrix.x4 fragments (B .x4.trans when K x N), one m16n8k16 call per k16 step; layouts only from
    tiledsl.layouts."""
    MI, NI, KS = M // WM // 16, N // WN // 8, K // 16
    LA = L.ldmatrix_a(M, K, warps=WM)
    LB = L.ldmatrix_b(N, K, warps=WN, trans=b_trans, count=bcount)
    NB = NI // (bcount // 2)                     # B loads per k16 step
    RA, RB = L.ldmatrix_regs(MI), L.ldmatrix_regs(NB, count=bcount)
    FA, FB, FC = L.mma_a(MI, 1), L.mma_b(NI, 1), L.mma_c(MI, NI)
    LDB = f"ldmatrix.sync.aligned.m8n8.x{bcount}{'.trans' if b_trans else ''}.shared.b16"
    BSH = (K, N // 2) if b_trans else (N, K // 2)
    THREADS = 32 * WM * WN

    @tiledsl.jit
    def kernel(A: T.Tensor((M, K // 2), "uint32"), B: T.Tensor(BSH, "uint32"), C: T.Tensor((M, N), "float32")):
        T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=THREADS))
        tid = T.cuda.thread_id()
        warp = T.cuda.warp_id()
        lane = T.cuda.lane_id()
        wm = warp // WN
        wn = warp % WN
        sa = T.alloc_shared((M * K // 2,), "uint32")
        sb = T.alloc_shared((BSH[0] * BSH[1],), "uint32")
        for i in T.unroll(M * K // 2 // THREADS):
            sa[tid + THREADS * i] = A[(tid + THREADS * i) // (K // 2), (tid + THREADS * i) % (K // 2)]
        for i in T.unroll(BSH[0] * BSH[1] // THREADS):
            sb[tid + THREADS * i] = B[(tid + THREADS * i) // BSH[1], (tid + THREADS * i) % BSH[1]]
        T.cuda.syncthreads()
        ld_a = sa.view(1, WM, MI, KS, 4, 8, 4, layout=LA)
        ld_b = sb.view(1, WN, NB, KS, bcount, 8, 4, layout=LB)
        ra = T.alloc_local((MI * 4,), "uint32")
        rb = T.alloc_local((NI * 2,), "uint32")
        acc = T.alloc_local((MI * NI * 4,), "float32")
        for i in T.unroll(MI * NI * 4):
            acc[i] = 0.0
        for ks in T.unroll(KS):
            T.cuda.tile.apply(T.ptx["ldmatrix.sync.aligned.m8n8.x4.shared.b16"], ra.view(MI, 4, 8, 4, layout=RA),
                              ld_a[0, wm, :, ks], scope="warp")
            T.cuda.tile.apply(T.ptx[LDB], rb.view(NB, bcount, 8, 4, layout=RB), ld_b[0, wn, :, ks], scope="warp")
            T.cuda.tile.apply(T.ptx["mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"],
                              acc.view(MI, NI, 16, 8, layout=FC), ra.view(MI, 1, 16, 8, layout=FA),
                              rb.view(NI, 1, 8, 8, layout=FB), acc.view(MI, NI, 16, 8, layout=FC), scope="warp")
        for m, n, r in T.grid(MI, NI, 4):
            C[wm * (M // WM) + 16 * m + lane // 4 + 8 * (r // 2),
              wn * (N // WN) + 8 * n + 2 * (lane % 4) + r % 2] = acc[(m * NI + n) * 4 + r]
    return kernel


@pytest.mark.parametrize("M, N, K, WM, WN, b_trans, bcount", [
    (32, 16, 32, 1, 1, False, 4), (32, 32, 16, 2, 1, True, 4), (32, 32, 32, 1, 2, False, 4),
    (16, 16, 32, 1, 2, False, 2), (32, 16, 16, 2, 1, True, 2)])
def test_ldmatrix_mma_on_the_interpreter(M, N, K, WM, WN, b_trans, bcount):
    rng = np.random.default_rng(M + N + K + WM)
    a = (rng.integers(-8, 9, (M, K)) / 8).astype(np.float16)
    b = (rng.integers(-8, 9, (N, K)) / 8).astype(np.float16)
    bw = np.ascontiguousarray(b.T).view(np.uint32) if b_trans else b.view(np.uint32)
    out = np.zeros((M, N), np.float32)
    kern = _ldmatrix_mma_kernel(M, N, K, WM, WN, b_trans, bcount)
    tiledsl.jit(kern.fn, interpret=True)(a.view(np.uint32), bw, out)
    np.testing.assert_array_equal(out, a.astype(np.float64) @ b.astype(np.float64).T)


@pytest.mark.parametrize("b_trans", [False, True])
def test_ldmatrix_x2_x1_feed_m16n8k8_on_the_interpreter(b_trans):
    """ldmatrix_a(count=2) and ldmatrix_b(count=1): m16n8k8's A by ldmatrix.x2 and B by .x1 (.x1.trans from K x N),
    k8 step by k8 step."""
    M, K = 32, 16
    MI, KS = M // 16, K // 8
    LA, RA = L.ldmatrix_a(M, K, count=2), L.ldmatrix_regs(MI, count=2)
    LB, RB = L.ldmatrix_b(8, K, count=1, trans=b_trans), L.ldmatrix_regs(1, count=1)
    FA, FB, FC = L.mma_a(MI, 1, k=8), L.mma_b(1, 1, k=8), L.mma_c(MI, 1)
    BSH = (K, 4) if b_trans else (8, K // 2)
    LDB = "ldmatrix.sync.aligned.m8n8.x1.trans.shared.b16" if b_trans else "ldmatrix.sync.aligned.m8n8.x1.shared.b16"

    @tiledsl.jit
    def k8(A: T.Tensor((M, K // 2), "uint32"), B: T.Tensor(BSH, "uint32"), C: T.Tensor((M, 8), "float32")):
        T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
        lane = T.cuda.lane_id()
        sa = T.alloc_shared((M * K // 2,), "uint32")
        for i in T.unroll(M * K // 2 // 32):
            sa[lane + 32 * i] = A[(lane + 32 * i) // (K // 2), (lane + 32 * i) % (K // 2)]
        sb = T.alloc_shared((64,), "uint32")
        for i in T.unroll(2):
            sb[lane + 32 * i] = B[(lane + 32 * i) // BSH[1], (lane + 32 * i) % BSH[1]]
        T.cuda.syncthreads()
        ra = T.alloc_local((MI * 2,), "uint32")
        rb = T.alloc_local((1,), "uint32")
        acc = T.alloc_local((MI * 4,), "float32")
        for i in T.unroll(MI * 4):
            acc[i] = 0.0
        for ks in T.unroll(KS):
            T.cuda.tile.apply(T.ptx["ldmatrix.sync.aligned.m8n8.x2.shared.b16"], ra.view(MI, 2, 8, 4, layout=RA),
                              sa.view(1, 1, MI, KS, 2, 8, 4, layout=LA)[0, 0, :, ks], scope="warp")
            T.cuda.tile.apply(T.ptx[LDB], rb.view(1, 1, 8, 4, layout=RB),
                              sb.view(1, 1, 1, KS, 1, 8, 4, layout=LB)[0, 0, :, ks], scope="warp")
            T.cuda.tile.apply(T.ptx["mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32"],
                              acc.view(MI, 1, 16, 8, layout=FC), ra.view(MI, 1, 16, 4, layout=FA),
                              rb.view(1, 1, 8, 4, layout=FB), acc.view(MI, 1, 16, 8, layout=FC), scope="warp")
        for m, r in T.grid(MI, 4):
            C[16 * m + lane // 4 + 8 * (r // 2), 2 * (lane % 4) + r % 2] = acc[m * 4 + r]

    rng = np.random.default_rng(3)
    a = (rng.integers(-8, 9, (M, K)) / 8).astype(np.float16)
    b = (rng.integers(-8, 9, (8, K)) / 8).astype(np.float16)
    bw = np.ascontiguousarray(b.T).view(np.uint32) if b_trans else b.view(np.uint32)
    out = np.zeros((M, 8), np.float32)
    tiledsl.jit(k8.fn, interpret=True)(a.view(np.uint32), bw, out)
    np.testing.assert_array_equal(out, a.astype(np.float64) @ b.astype(np.float64).T)


def test_k8_and_warp_group_fragments_on_the_interpreter():
    """m16n8k8 operands from mma_a/mma_b(k=8) with the scope="cta" group axis (warps=2): two warps, each its own
    16x8 tile, registers loaded by the lane maps of the pattern page."""
    W = 2
    FA, FB, FC = L.mma_a(1, 1, k=8, warps=W), L.mma_b(1, 1, k=8, warps=W), L.mma_c(1, 1, warps=W)

    @tiledsl.jit
    def k8(A: T.Tensor((W, 16, 4), "uint32"), B: T.Tensor((W, 8, 4), "uint32"), C: T.Tensor((W, 16, 8), "float32")):
        T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32 * W))
        lane = T.cuda.lane_id()
        w = T.cuda.warp_id()
        ar = T.alloc_local((2,), "uint32")
        br = T.alloc_local((1,), "uint32")
        dr = T.alloc_local((4,), "float32")
        for r in T.unroll(2):
            ar[r] = A[w, lane // 4 + 8 * r, lane % 4]
        br[0] = B[w, lane // 4, lane % 4]
        T.cuda.tile.apply(T.ptx["mma.sync.aligned.m16n8k8.row.col.f32.bf16.bf16.f32"],
                          dr.view(W, 1, 1, 16, 8, layout=FC), ar.view(W, 1, 1, 16, 4, layout=FA),
                          br.view(W, 1, 1, 8, 4, layout=FB), 0.0, scope="cta")
        for r in T.unroll(4):
            C[w, lane // 4 + 8 * (r // 2), 2 * (lane % 4) + r % 2] = dr[r]

    rng = np.random.default_rng(7)
    a = (rng.integers(-8, 9, (W, 16, 8)) / 8).astype(np.float32)
    b = (rng.integers(-8, 9, (W, 8, 8)) / 8).astype(np.float32)
    bf = lambda x: np.ascontiguousarray((x.view(np.uint32) >> 16).astype(np.uint16)).view(np.uint32)  # noqa: E731
    out = np.zeros((W, 16, 8), np.float32)
    tiledsl.jit(k8.fn, interpret=True)(bf(a), bf(b), out)
    np.testing.assert_array_equal(out, np.einsum("wmk,wnk->wmn", a.astype(np.float64), b.astype(np.float64)))


def test_mma_gemm_example_runs_on_the_interpreter_and_compiles(capsys):
    import mma_gemm
    mma_gemm.main([])
    assert "exact" in capsys.readouterr().out
    a = np.zeros((128, 64), np.float16)
    ck = mma_gemm.make_gemm(128, 128, 64).compile(a, a, np.zeros((128, 128), np.float32), target="sm_80")
    ptx = ck.asm["ptx"]
    # MI x NI x KS = 2 x 4 x 2 issues per k tile (LLVM may unroll the two k tiles)
    n_mma, n_ldm = ptx.count("mma.sync.aligned.m16n8k16"), ptx.count("ldmatrix.sync.aligned")
    assert n_mma and n_mma % 16 == 0 and n_ldm * 2 == n_mma        # (MI + NI/2) ldmatrix.x4 per k16 step
