"""wgmma (isa/wgmma/): the sm_90a target choice, every case of the matrix compiled (ptxas -arch=sm_90a) and run on
the interpreter against numpy, the descriptor bits, a wrong descriptor giving wrong numbers, accumulators read
before their wait_group as a KernelFault, scale_d as a run-time predicate. tests/test_gpu_wgmma.py runs the same
matrix on the GPU."""
import numpy as np
import pytest

import tiledsl
from tiledsl import T
from tiledsl.isa.wgmma import descriptor as DS
from tiledsl.lower import ptx as backend
from tiledsl.layout import S, TileLayout, laneid, warpid
from wgmma_cases import d_layout, decode_fp8, inputs, make_kernel, make_typed_kernel, opcode_of, result_of, \
    shared_layout, typed_inputs

NS = (8, 64, 128, 256)
MATRIX = [(n, ab, a_regs, sw, ta, tb) for n in NS for ab in ("f16", "bf16") for a_regs in (False, True)
          for sw in (0, 32, 64, 128) for ta in ((0,) if a_regs else (0, 1)) for tb in (0, 1)]


def case_id(c):
    n, ab, a_regs, sw, ta, tb = c
    return f"n{n}-{ab}-{'rs' if a_regs else 'ss'}-sw{sw}-ta{ta}-tb{tb}"


@pytest.mark.parametrize("case", MATRIX, ids=[case_id(c) for c in MATRIX])
def test_matrix_compiles_and_matches_numpy_on_the_interpreter(case):
    n, ab, a_regs, sw, ta, tb = case
    k, _, _, so = make_kernel(n, ab, a_regs, sw, ta, tb)
    a, b, ref = inputs(n, ab, 2, seed=n + sw)
    out = np.zeros(so, np.float32)
    ck = k.compile(a, b, out)                          # no target: the default sm_90 becomes sm_90a
    ptx = ck.asm["ptx"]
    assert ".target sm_90a" in ptx
    assert ptx.count(f"wgmma.mma_async.sync.aligned.m64n{n}k16.f32.{ab}.{ab}") == 2
    if backend.ptxas_path() is not None:
        assert ck.metadata["assembler"] in ("ptxas", "nvJitLink") and ck.cubin
        assert ck.metadata.get("spill_stores", 0) == 0
    tiledsl.jit(k.fn, interpret=True)(a, b, out)
    np.testing.assert_array_equal(out, ref.astype(np.float32))


def test_the_default_target_becomes_sm_90a_and_a_named_sm_90_is_refused():
    k, sa, sb, so = make_kernel(8, "f16", False, 128)
    a, b, _ = inputs(8, "f16", 2)
    out = np.zeros(so, np.float32)
    assert ".target sm_90a" in k.compile(a, b, out).asm["ptx"]
    assert ".target sm_90a" in k.compile(a, b, out, target="sm_90a").asm["ptx"]
    # after the default compile, the same kernel named sm_90 must not come from the cache
    with pytest.raises(tiledsl.CompilationError, match="needs the arch-specific target sm_90a"):
        k.compile(a, b, out, target="sm_90")
    with pytest.raises(tiledsl.CompilationError, match="needs the arch-specific target sm_90a"):
        tiledsl.jit(k.fn, target="sm_90").compile(a, b, out)


def test_a_kernel_without_wgmma_keeps_sm_90():
    @tiledsl.jit
    def plain(X: T.Tensor((32,), "float32")):
        T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
        X[T.cuda.thread_id()] = T.float32(1)
    assert ".target sm_90\n" in plain.compile(np.zeros(32, np.float32)).asm["ptx"]


def test_descriptor_bits_of_the_canonical_128B_tile():
    lay = shared_layout(64, 4, 16, 2, 128, False)           # rows of 128 bytes, K steps side by side
    byte = {(r, k): lay.locate((0, 0, r, k), (1, 4, 64, 16))[0] * 2 for r in range(64) for k in range(16)}
    f, why = DS.derive(lambda r, k: byte[(r, k)], 64, 16, 2, True, 1)
    assert why is None and (f.mode, f.sbo) == (1, 1024)
    assert f.static_bits() == (1 << 62) | (64 << 32) | (1 << 16)


def test_a_wrong_descriptor_gives_wrong_numbers(monkeypatch):
    from tiledsl.isa.wgmma import pattern
    real = DS.derive

    def off_by_one_row(*args):
        f, why = real(*args)
        return (DS.Fields(f.mode, f.lbo, f.sbo + 16), None) if f is not None else (f, why)
    monkeypatch.setattr(pattern.DS, "derive", off_by_one_row)
    k, _, _, so = make_kernel(64, "f16", False, 0)
    a, b, ref = inputs(64, "f16", 2)
    out = np.zeros(so, np.float32)
    # the pattern's own proof is bypassed (derive patched); the interpreter decodes the bits it was given
    try:
        tiledsl.jit(k.fn, interpret=True)(a, b, out)
    except tiledsl.KernelFault:
        return                                            # read past the tile: also not the right numbers
    assert not np.array_equal(out, ref.astype(np.float32))


LD8 = d_layout(8)
LA = shared_layout(64, 1, 16, 2, 128, False)
LB = shared_layout(8, 1, 16, 2, 128, False)
MMA8 = "wgmma.mma_async.sync.aligned.m64n8k16.f32.f16.f16"


@tiledsl.jit
def read_too_early(Out: T.Tensor((128,), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=128))
    sa = T.alloc_shared((64 * 64,), "float16")
    sb = T.alloc_shared((8 * 64,), "float16")
    d = T.alloc_local((4,), "float32")
    dv = d.view(1, 1, 64, 8, layout=LD8)
    T.cuda.tile.apply(T.ptx["wgmma.fence.sync.aligned"], dv, scope="warpgroup")
    T.cuda.tile.apply(T.ptx[MMA8], dv, sa.view(1, 1, 64, 16, layout=LA), sb.view(1, 1, 8, 16, layout=LB),
                      scope="warpgroup", scale_d=0)
    T.cuda.tile.apply(T.ptx["wgmma.commit_group.sync.aligned"], dv, scope="warpgroup")
    Out[T.cuda.thread_id()] = d[0]
    T.cuda.tile.apply(T.ptx["wgmma.wait_group.sync.aligned"], 0, dv, scope="warpgroup")


def test_reading_an_accumulator_before_its_wait_is_a_fault():
    with pytest.raises(tiledsl.KernelFault) as e:
        tiledsl.jit(read_too_early.fn, interpret=True)(np.zeros(128, np.float32))
    msg = str(e.value)
    assert "Out[T.cuda.thread_id()] = d[0]" in msg and "wgmma.wait_group" in msg and "has not completed" in msg


@tiledsl.jit
def accumulate(A: T.Tensor((64, 16), "uint16"), B: T.Tensor((8, 16), "uint16"), Out: T.Tensor((64, 8), "float32"),
               keep: T.int32):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=128))
    tid = T.cuda.thread_id()
    lane = tid % 32
    w = tid // 32
    sa = T.alloc_shared((64 * 64,), "uint16")
    sb = T.alloc_shared((8 * 64,), "uint16")
    av = sa.view(1, 1, 64, 16, layout=LA)
    bv = sb.view(1, 1, 8, 16, layout=LB)
    for it in range(8):
        i = it * 128 + tid
        av[0, 0, i // 16, i % 16] = A[i // 16, i % 16]
    bv[0, 0, tid // 16, tid % 16] = B[tid // 16, tid % 16]
    T.cuda.tile.apply(T.ptx["fence.proxy.async.shared::cta"])
    T.cuda.syncthreads()
    d = T.alloc_local((4,), "float32")
    for i in T.unroll(4):
        d[i] = T.float32(1)
    dv = d.view(1, 1, 64, 8, layout=LD8)
    T.cuda.tile.apply(T.ptx["wgmma.fence.sync.aligned"], dv, scope="warpgroup")
    T.cuda.tile.apply(T.ptx[MMA8], dv, av, bv, scope="warpgroup", scale_d=keep != 0)
    T.cuda.tile.apply(T.ptx["wgmma.commit_group.sync.aligned"], dv, scope="warpgroup")
    T.cuda.tile.apply(T.ptx["wgmma.wait_group.sync.aligned"], 0, dv, scope="warpgroup")
    for i in T.unroll(4):
        Out[16 * w + lane // 4 + 8 * ((i // 2) % 2), 2 * (lane % 4) + i % 2] = d[i]


@pytest.mark.parametrize("keep", [0, 1])
def test_scale_d_as_a_run_time_predicate(keep):
    a, b, ref = inputs(8, "f16", 1)
    out = np.zeros((64, 8), np.float32)
    tiledsl.jit(accumulate.fn, interpret=True)(a, b, out, keep)
    np.testing.assert_array_equal(out, (ref + keep).astype(np.float32))
    ptx = accumulate.compile(a, b, out, keep).asm["ptx"]
    assert "setp.ne.b32 %wsp" in ptx and ".target sm_90a" in ptx


LD_CTA = TileLayout(S[(2, 1, 1, 4, 2, 8, 1, 4, 2) : (4 @ warpid, 1, 1, 1 @ warpid, 2, 4 @ laneid, 4, 1 @ laneid, 1)])
LA_CTA = TileLayout(S[(2, 1, 1, 64, 16) : (64 * 64, 1, 1, 64, 1)], swizzle=(3, 3, 3))
LB_CTA = TileLayout(S[(2, 1, 1, 8, 16) : (8 * 64, 1, 1, 64, 1)], swizzle=(3, 3, 3))


@tiledsl.jit
def two_warpgroups(A: T.Tensor((2, 64, 16), "uint16"), B: T.Tensor((2, 8, 16), "uint16"),
                   Out: T.Tensor((2, 64, 8), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=256))
    tid = T.cuda.thread_id()
    lane = tid % 32
    w = (tid // 32) % 4
    g = tid // 128
    sa = T.alloc_shared((2 * 64 * 64,), "uint16")
    sb = T.alloc_shared((2 * 8 * 64,), "uint16")
    av = sa.view(2, 1, 1, 64, 16, layout=LA_CTA)
    bv = sb.view(2, 1, 1, 8, 16, layout=LB_CTA)
    for it in range(8):
        i = it * 256 + tid
        av[i // 1024, 0, 0, (i // 16) % 64, i % 16] = A[i // 1024, (i // 16) % 64, i % 16]
    bv[tid // 128, 0, 0, (tid // 16) % 8, tid % 16] = B[tid // 128, (tid // 16) % 8, tid % 16]
    T.cuda.tile.apply(T.ptx["fence.proxy.async.shared::cta"])
    T.cuda.syncthreads()
    d = T.alloc_local((4,), "float32")
    dv = d.view(2, 1, 1, 64, 8, layout=LD_CTA)
    T.cuda.tile.apply(T.ptx["wgmma.fence.sync.aligned"], d, scope="cta")
    T.cuda.tile.apply(T.ptx[MMA8], dv, av, bv, scope="cta", scale_d=0)
    T.cuda.tile.apply(T.ptx["wgmma.commit_group.sync.aligned"], d, scope="cta")
    T.cuda.tile.apply(T.ptx["wgmma.wait_group.sync.aligned"], 0, d, scope="cta")
    for i in T.unroll(4):
        Out[g, 16 * w + lane // 4 + 8 * ((i // 2) % 2), 2 * (lane % 4) + i % 2] = d[i]


def test_scope_cta_two_warpgroups_each_with_its_tiles():
    rng = np.random.default_rng(3)
    a = (rng.integers(-8, 9, (2, 64, 16)) / 8).astype(np.float16)
    b = (rng.integers(-8, 9, (2, 8, 16)) / 8).astype(np.float16)
    out = np.zeros((2, 64, 8), np.float32)
    tiledsl.jit(two_warpgroups.fn, interpret=True)(a.view(np.uint16), b.view(np.uint16), out)
    ref = np.einsum("gmk,gnk->gmn", a.astype(np.float64), b.astype(np.float64))
    np.testing.assert_array_equal(out, ref.astype(np.float32))
    ptx = two_warpgroups.compile(a.view(np.uint16), b.view(np.uint16), out).asm["ptx"]
    assert ptx.count(MMA8) == 1 and ".target sm_90a" in ptx


# ------------------------------------------------------------------ fp8 (k32) and f16 accumulators


# (N, A type, B type, accumulator, A in registers, swizzle); fp8 is K-major only (no trans)
FP8_MATRIX = [(n, "e4m3", "e4m3", "f32", a_regs, sw) for n in NS for a_regs in (False, True) for sw in (0, 32, 64, 128)]
TYPED_EXTRA = [(64, "e5m2", "e5m2", "f32", False, 128), (8, "e5m2", "e5m2", "f32", True, 0),
               (128, "e4m3", "e5m2", "f32", False, 64), (256, "e5m2", "e4m3", "f32", True, 32),
               (64, "f16", "f16", "f16", False, 128), (256, "f16", "f16", "f16", True, 0),
               (8, "f16", "f16", "f16", False, 32), (8, "e4m3", "e4m3", "f16", True, 32),
               (128, "e5m2", "e5m2", "f16", False, 64)]
TYPED = FP8_MATRIX + TYPED_EXTRA


def typed_id(c):
    n, at, bt, acc, a_regs, sw = c
    return f"n{n}-{at}x{bt}-{acc}-{'rs' if a_regs else 'ss'}-sw{sw}"


def typed_seed(c):
    return c[0] + c[5] + 7 * c[4] + len(c[1] + c[2]) + (1000 if c[3] == "f16" else 0)


@pytest.mark.parametrize("case", TYPED, ids=[typed_id(c) for c in TYPED])
def test_fp8_and_f16_acc_compile_and_match_numpy_on_the_interpreter(case):
    n, at, bt, acc, a_regs, sw = case
    k, _, _, (so, eo) = make_typed_kernel(n, at, bt, acc, a_regs, sw)
    a, b, ref = typed_inputs(n, at, bt, acc, seed=typed_seed(case))
    out = np.zeros(so, eo)
    ck = k.compile(a, b, out)
    ptx = ck.asm["ptx"]
    assert ".target sm_90a" in ptx
    assert ptx.count(opcode_of(n, at, bt, acc) + " ") == 2          # two K steps, nothing else emitted
    if backend.ptxas_path() is not None:
        assert ck.metadata["assembler"] in ("ptxas", "nvJitLink") and ck.cubin
        assert ck.metadata.get("spill_stores", 0) == 0
    tiledsl.jit(k.fn, interpret=True)(a, b, out)
    np.testing.assert_array_equal(result_of(out, acc), ref)


@pytest.mark.parametrize("kind", ["e4m3", "e5m2"])
def test_fp8_decoders_agree_with_torch_on_every_byte(kind):
    """The tests' decoder and the interpreter's (each its own reading of the format) against torch's float8 types
    on all 256 codes, NaN and infinity included."""
    torch = pytest.importorskip("torch")
    from tiledsl.interpreter import rounding as R
    codes = np.arange(256, dtype=np.uint8)
    want = torch.from_numpy(codes).view(torch.float8_e4m3fn if kind == "e4m3" else torch.float8_e5m2)
    want = want.double().numpy()
    np.testing.assert_array_equal(decode_fp8(codes, kind), want)
    np.testing.assert_array_equal(R.decode(R.FP8_FMTS[kind], codes), want)
    assert np.isnan(want).sum() == (2 if kind == "e4m3" else 6) and np.isinf(want).sum() == (0 if kind == "e4m3" else 2)


def test_fp8_nan_and_inf_reach_the_accumulator_on_the_interpreter():
    """e4m3 S.1111.111 is NaN (e4m3 has no infinity); e5m2 0.11111.00 is +inf: the interpreter decodes the bits."""
    for kind, code, check in (("e4m3", 0x7F, np.isnan), ("e5m2", 0x7C, np.isposinf)):
        k, _, _, (so, eo) = make_typed_kernel(8, kind, kind, "f32", False, 128, kr=1)
        a, b, _ = typed_inputs(8, kind, kind, "f32", kr=1)
        a[:] = 0x38 if kind == "e4m3" else 0x3C                      # 1.0
        b[:] = 0
        b[3, 5] = code
        out = np.zeros(so, eo)
        tiledsl.jit(k.fn, interpret=True)(a, b, out)
        assert check(out[:, 3]).all() and (out[:, [0, 1, 2, 4, 5, 6, 7]] == 0).all()


def test_fp8_descriptor_bits_for_one_byte_elements():
    """1-byte elements: 16 K values per 16-byte core-matrix row; unswizzled K-major has the two K halves LBO = 8
    rows x 16 bytes apart; 128B swizzle: rows of 128 bytes, SBO = 8 rows."""
    for sw, mode, lbo, sbo in ((0, 0, 128, 256), (128, 1, 16, 1024), (32, 3, 16, 256)):
        lay = shared_layout(64, 2, 32, 1, sw, False)
        byte = {(r, k): lay.locate((0, 0, r, k), (1, 2, 64, 32))[0] for r in range(64) for k in range(32)}
        f, why = DS.derive(lambda r, k: byte[(r, k)], 64, 32, 1, True, mode)
        assert why is None and (f.mode, f.lbo, f.sbo) == (mode, lbo, sbo), (sw, f, why)


def _run_descriptor_ptx(code: str, regs: dict) -> int:
    """Evaluate descriptor_asm's PTX (the handful of integer instructions it emits) on 32-bit registers."""
    import re
    m32 = 0xFFFFFFFF
    val = lambda x: regs[x] if x in regs else int(x, 0) & m32     # noqa: E731
    for ins in filter(None, (s.strip() for s in code.split(";"))):
        op, rest = ins.split(None, 1)
        if op == "mov.b64":
            d, lo, hi = re.match(r"(%\w+), \{(%\w+), (%\w+)\}", rest).groups()
            regs[d] = regs[hi] << 32 | regs[lo]
            continue
        d, *a = [x.strip() for x in rest.split(",")]
        x = [val(v) for v in a]
        regs[d] = {"add.u32": lambda: (x[0] + x[1]) & m32, "add.s32": lambda: (x[0] + x[1]) & m32,
                   "shr.u32": lambda: x[0] >> x[1], "and.b32": lambda: x[0] & x[1],
                   "or.b32": lambda: x[0] | x[1], "mov.b32": lambda: x[0]}[op]()
    return regs


@pytest.mark.parametrize("mode, lbo, sbo", [(1, 16, 1024), (2, 16, 512), (3, 16, 256), (0, 128, 256),
                                            (1, 8192, 1024)])
def test_descriptor_asm_is_the_descriptor_of_base_plus_imm(mode, lbo, sbo):
    # descriptor_asm forms ((base + imm) >> 4) & 0x3FFF | static as the base's field plus imm // 16 (so ptxas can
    # share the base's part between the tiles of a view): the same 64 bits for every shared address a block can
    # have (below 2^18 bytes), imm positive or negative, base aligned or not as long as base + imm is
    from tiledsl.isa.wgmma.pattern import descriptor_asm
    static = DS.Fields(mode=mode, lbo=lbo, sbo=sbo).static_bits()
    rng = np.random.default_rng(mode * 7 + lbo)
    for _ in range(3000):
        start = int(rng.integers(0, (227 << 10) // 16)) * 16
        imm = int(rng.choice([0, 16, 32, 96, 2048, 8192, 24576, -16, -2048, 8, -8, 40]))
        base = start - imm
        if base < 0:
            continue
        got = _run_descriptor_ptx(descriptor_asm("%b", imm, static, "%lo", "%hi", "%d"), {"%b": base})["%d"]
        assert got == ((start >> 4) & 0x3FFF) | static, (base, imm)
    with pytest.raises(ValueError, match="overlap its start address field"):
        descriptor_asm("%b", 0, static | 1, "%lo", "%hi", "%d")
