"""The TMA family (tiledsl/isa/tma/) and T.TensorMap parameters: compile + ptxas sm_90, the interpreter against
numpy (1-D/2-D/3-D boxes, every swizzle, ragged tails with zero and NaN fill, repeats with coord_steps), the
tensor-map encoding call and the launch path on the stub driver."""
import numpy as np
import pytest

import tiledsl
from helpers import ptxas
from tiledsl import T
from tiledsl.lang.tensormap import TensorMapType, tma_layout
from tiledsl.runtime import tensormap

LOAD = "cp.async.bulk.tensor.{r}d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
STORE = "cp.async.bulk.tensor.{r}d.global.shared::cta.tile.bulk_group"
LOAD2, STORE2 = LOAD.format(r=2), STORE.format(r=2)
LOAD2_MC, LOAD2_HINT = LOAD2 + ".multicast::cluster", LOAD2 + ".L2::cache_hint"


def copy_kernel(rank: int, box: tuple, dtype: str, swizzle=None, oob_fill="zero", grid=(1, 1, 1)):
    """A kernel whose block (x, y, z) loads the box at block coordinates (z, y, x)[-rank:] * box through map A,
    writes what it received to the padded plain tensor Out (so the fill and the swizzled layout are visible),
    then stores the box to map B (the ragged tail is dropped by the TMA unit)."""
    L = tma_layout(box, dtype, swizzle)
    NB = int(np.prod(box))
    TX = NB * np.dtype(dtype if dtype != "bfloat16" else "uint16").itemsize
    names = ("M", "N", "K")[:rank]
    A_ann = T.TensorMap(names, dtype, box=box, swizzle=swizzle, oob_fill=oob_fill)
    B_ann = T.TensorMap(names, dtype, box=box, swizzle=swizzle)
    pshape = tuple(b * g for b, g in zip(box, tuple(reversed(grid))[3 - rank:]))
    op_load, op_store = T.ptx[LOAD.format(r=rank)], T.ptx[STORE.format(r=rank)]
    B0, B1, B2 = (tuple(box) + (1, 1))[:3]

    if rank == 1:
        def body(A: A_ann, B: B_ann, Out: T.Tensor(pshape, dtype)):
            T.device_entry(launch=T.cuda.LaunchConfig(grid=grid, block=32))
            tid = T.cuda.thread_id()
            tile = T.alloc_shared(box, dtype, layout=L)
            bar = T.alloc_shared((1,), "uint64")
            c0 = T.cuda.block_id(0) * B0
            if tid == 0:
                T.cuda.tile.apply(T.ptx["mbarrier.init.shared::cta.b64"], bar, 1)
                T.cuda.tile.apply(T.ptx["fence.mbarrier_init.release.cluster"])
            T.cuda.syncthreads()
            if tid == 0:
                T.cuda.tile.apply(T.ptx["mbarrier.arrive.expect_tx.shared::cta.b64"], bar, TX)
                T.cuda.tile.apply(op_load, tile, A, bar, coords=(c0,))
            T.cuda.tile.apply(T.ptx["mbarrier.try_wait.parity.shared::cta.b64"], bar, 0)
            for e in range(tid, NB, 32):
                Out[c0 + e] = tile[e]
            T.cuda.tile.apply(T.ptx["fence.proxy.async.shared::cta"])
            T.cuda.syncthreads()
            if tid == 0:
                T.cuda.tile.apply(op_store, B, tile, coords=(c0,))
                T.cuda.tile.apply(T.ptx["cp.async.bulk.commit_group"])
                T.cuda.tile.apply(T.ptx["cp.async.bulk.wait_group.read"], 0)
    elif rank == 2:
        def body(A: A_ann, B: B_ann, Out: T.Tensor(pshape, dtype)):
            T.device_entry(launch=T.cuda.LaunchConfig(grid=grid, block=32))
            tid = T.cuda.thread_id()
            tile = T.alloc_shared(box, dtype, layout=L)
            bar = T.alloc_shared((1,), "uint64")
            c0 = T.cuda.block_id(1) * B0
            c1 = T.cuda.block_id(0) * B1
            if tid == 0:
                T.cuda.tile.apply(T.ptx["mbarrier.init.shared::cta.b64"], bar, 1)
                T.cuda.tile.apply(T.ptx["fence.mbarrier_init.release.cluster"])
            T.cuda.syncthreads()
            if tid == 0:
                T.cuda.tile.apply(T.ptx["mbarrier.arrive.expect_tx.shared::cta.b64"], bar, TX)
                T.cuda.tile.apply(op_load, tile, A, bar, coords=(c0, c1))
            T.cuda.tile.apply(T.ptx["mbarrier.try_wait.parity.shared::cta.b64"], bar, 0)
            for e in range(tid, NB, 32):
                Out[c0 + e // B1, c1 + e % B1] = tile[e // B1, e % B1]
            T.cuda.tile.apply(T.ptx["fence.proxy.async.shared::cta"])
            T.cuda.syncthreads()
            if tid == 0:
                T.cuda.tile.apply(op_store, B, tile, coords=(c0, c1))
                T.cuda.tile.apply(T.ptx["cp.async.bulk.commit_group"])
                T.cuda.tile.apply(T.ptx["cp.async.bulk.wait_group.read"], 0)
    else:
        def body(A: A_ann, B: B_ann, Out: T.Tensor(pshape, dtype)):
            T.device_entry(launch=T.cuda.LaunchConfig(grid=grid, block=32))
            tid = T.cuda.thread_id()
            tile = T.alloc_shared(box, dtype, layout=L)
            bar = T.alloc_shared((1,), "uint64")
            c0 = T.cuda.block_id(2) * B0
            c1 = T.cuda.block_id(1) * B1
            c2 = T.cuda.block_id(0) * B2
            if tid == 0:
                T.cuda.tile.apply(T.ptx["mbarrier.init.shared::cta.b64"], bar, 1)
                T.cuda.tile.apply(T.ptx["fence.mbarrier_init.release.cluster"])
            T.cuda.syncthreads()
            if tid == 0:
                T.cuda.tile.apply(T.ptx["mbarrier.arrive.expect_tx.shared::cta.b64"], bar, TX)
                T.cuda.tile.apply(op_load, tile, A, bar, coords=(c0, c1, c2))
            T.cuda.tile.apply(T.ptx["mbarrier.try_wait.parity.shared::cta.b64"], bar, 0)
            for e in range(tid, NB, 32):
                i = e // (B1 * B2)
                j = e // B2 % B1
                k = e % B2
                Out[c0 + i, c1 + j, c2 + k] = tile[i, j, k]
            T.cuda.tile.apply(T.ptx["fence.proxy.async.shared::cta"])
            T.cuda.syncthreads()
            if tid == 0:
                T.cuda.tile.apply(op_store, B, tile, coords=(c0, c1, c2))
                T.cuda.tile.apply(T.ptx["cp.async.bulk.commit_group"])
                T.cuda.tile.apply(T.ptx["cp.async.bulk.wait_group.read"], 0)
    body.__name__ = f"tma_copy_{rank}d"
    return tiledsl.jit(body), pshape


def expected(a: np.ndarray, pshape: tuple, fill) -> np.ndarray:
    """What Out holds: A padded to the grid's boxes with the fill."""
    out = np.full(pshape, fill, dtype=a.dtype)
    out[tuple(slice(0, s) for s in a.shape)] = a
    return out


# rank, tensor shape, box, dtype, swizzle, grid (x, y, z): ragged tails in every case
CASES = [
    (1, (100,), (64,), "float32", None, (2, 1, 1)),
    (2, (50, 120), (16, 32), "float16", 64, (4, 4, 1)),
    (2, (37, 72), (8, 64), "float16", 128, (2, 5, 1)),
    (2, (20, 24), (8, 16), "float16", 32, (2, 3, 1)),
    (2, (30, 48), (8, 8), "float32", 32, (6, 4, 1)),
    (2, (33, 40), (16, 16), "bfloat16", None, (3, 3, 1)),
    (3, (5, 9, 40), (2, 4, 32), "float32", 128, (2, 3, 3)),
    (3, (3, 10, 48), (2, 8, 32), "uint8", None, (2, 2, 2)),
]


def _data(shape, dtype, seed=0):
    rng = np.random.default_rng(seed)
    if dtype == "bfloat16":
        return rng.integers(0x3F00, 0x4100, size=shape).astype(np.uint16)
    if dtype == "uint8":
        return rng.integers(1, 255, size=shape).astype(np.uint8)
    return (rng.standard_normal(shape) * 10).astype(dtype)


@pytest.mark.parametrize("rank,shape,box,dtype,swizzle,grid", CASES)
def test_compiles_and_assembles_for_sm90(rank, shape, box, dtype, swizzle, grid):
    k, pshape = copy_kernel(rank, box, dtype, swizzle, grid=grid)
    a = _data(shape, dtype)
    ck = k.compile(a, np.zeros_like(a), np.zeros(pshape, a.dtype), target="sm_90")
    ptx = ck.asm["ptx"]
    assert f".param .align 64 .b8 {ck.name}_param_0[128]" in ptx
    assert "cvta.param.u64" in ptx and "__local_depot" not in ptx       # the map's own address, never a copy
    assert ptx.count(LOAD.format(r=rank)) == 1 and ptx.count(STORE.format(r=rank)) == 1
    align = {None: 128, 32: 256, 64: 512, 128: 1024}[swizzle]
    assert f".shared .align {align} .b8 tile" in ptx
    r = ptxas(ptx, "sm_90")
    assert r.returncode == 0, r.stderr


@pytest.mark.parametrize("rank,shape,box,dtype,swizzle,grid", CASES)
def test_interpreter_matches_numpy(rank, shape, box, dtype, swizzle, grid):
    k, pshape = copy_kernel(rank, box, dtype, swizzle, grid=grid)
    a = _data(shape, dtype, seed=rank)
    b = np.zeros_like(a)
    out = np.zeros(pshape, a.dtype)
    tiledsl.jit(k.fn, interpret=True)(a, b, out)
    np.testing.assert_array_equal(out, expected(a, pshape, 0))
    np.testing.assert_array_equal(b, a)


def test_nan_fill_of_a_ragged_tail():
    k, pshape = copy_kernel(2, (16, 32), "float16", 64, oob_fill="nan", grid=(4, 4, 1))
    a = _data((50, 120), "float16")
    out = np.zeros(pshape, np.float16)
    tiledsl.jit(k.fn, interpret=True)(a, np.zeros_like(a), out)
    np.testing.assert_array_equal(out[:50, :120], a)
    assert np.isnan(out[50:, :]).all() and np.isnan(out[:, 120:]).all()


def test_swizzled_bytes_sit_where_the_hardware_puts_them():
    """The 128-byte swizzle moves 16-byte chunk c of 128-byte row r to chunk c ^ (r % 8): read the raw tile."""
    from tiledsl.isa.tma.semantics import swizzle_bytes
    rows = np.arange(8 * 128).reshape(8, 128)
    sw = swizzle_bytes(rows.reshape(-1), 128).reshape(8, 128)
    for r in range(8):
        for c in range(8):
            assert sw[r, c * 16] == r * 128 + ((c ^ r) * 16)
    L = tma_layout((8, 64), "float16", 128)
    for r in range(8):
        for j in range(64):
            off, _ = L.locate((r, j), (8, 64))
            assert off * 2 == sw[r, j * 2]


def repeat_kernel():
    """Two boxes per load through one apply: dst (2, *box) with coord_steps, then each stored back."""
    box = (8, 32)
    L = tma_layout((2,) + box, "float32")

    @tiledsl.jit
    def rep(A: T.TensorMap(("M", "N"), "float32", box=box), B: T.TensorMap(("M", "N"), "float32", box=box)):
        T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
        tid = T.cuda.thread_id()
        tiles = T.alloc_shared((2,) + box, "float32", layout=L)
        bar = T.alloc_shared((1,), "uint64")
        if tid == 0:
            T.cuda.tile.apply(T.ptx["mbarrier.init.shared::cta.b64"], bar, 1)
            T.cuda.tile.apply(T.ptx["fence.mbarrier_init.release.cluster"])
        T.cuda.syncthreads()
        if tid == 0:
            T.cuda.tile.apply(T.ptx["mbarrier.arrive.expect_tx.shared::cta.b64"], bar, 2 * 8 * 32 * 4)
            T.cuda.tile.apply(T.ptx[LOAD2], tiles, A, bar, coords=(0, 0), coord_steps=((8, 0),))
        T.cuda.tile.apply(T.ptx["mbarrier.try_wait.parity.shared::cta.b64"], bar, 0)
        T.cuda.tile.apply(T.ptx["fence.proxy.async.shared::cta"])
        if tid == 0:
            T.cuda.tile.apply(T.ptx[STORE2], B, tiles, coords=(0, 0), coord_steps=((8, 0),))
            T.cuda.tile.apply(T.ptx["cp.async.bulk.commit_group"])
            T.cuda.tile.apply(T.ptx["cp.async.bulk.wait_group"], 0)
    return rep


def test_repeats_follow_coord_steps():
    a = _data((12, 32), "float32")
    b = np.zeros_like(a)
    k = repeat_kernel()
    ptx = k.compile(a, b, target="sm_90").asm["ptx"]
    assert ptx.count(LOAD.format(r=2)) == 2 and ptxas(ptx, "sm_90").returncode == 0
    tiledsl.jit(k.fn, interpret=True)(a, b)
    np.testing.assert_array_equal(b, a)


def multicast_kernel():
    box = (16, 32)
    L = tma_layout(box, "float16", 64)

    @tiledsl.jit
    def mc(A: T.TensorMap((64, 64), "float16", box=box, swizzle=64), mask: T.int32, policy: T.uint64):
        T.device_entry(launch=T.cuda.LaunchConfig(grid=2, block=32))
        tile = T.alloc_shared(box, "float16", layout=L)
        bar = T.alloc_shared((1,), "uint64")
        if T.cuda.thread_id() == 0:
            T.cuda.tile.apply(T.ptx["mbarrier.init.shared::cta.b64"], bar, 1)
            T.cuda.tile.apply(T.ptx["mbarrier.arrive.expect_tx.shared::cta.b64"], bar, 16 * 32 * 2)
            T.cuda.tile.apply(T.ptx[LOAD2_MC], tile, A, bar, coords=(0, 0),
                              cta_mask=mask)
            T.cuda.tile.apply(T.ptx[LOAD2_HINT], tile, A, bar, coords=(16, 0),
                              cache_policy=policy)
            T.cuda.tile.apply(T.ptx["cp.async.bulk.prefetch.tensor.2d.L2.global.tile"], A, coords=(32, 32))
    return mc


def test_multicast_cache_hint_and_prefetch_assemble():
    ptx = multicast_kernel().compile(np.zeros((64, 64), np.float16), 3, 0, target="sm_90").asm["ptx"]
    assert ".multicast::cluster [" in ptx and "], %rs" in ptx           # the 16-bit cta mask operand
    assert "cp.async.bulk.prefetch.tensor.2d.L2.global.tile [%rd" in ptx
    r = ptxas(ptx, "sm_90")
    assert r.returncode == 0, r.stderr


def test_multicast_beyond_one_cta_faults_on_the_interpreter():
    k = tiledsl.jit(multicast_kernel().fn, interpret=True)
    with pytest.raises(tiledsl.KernelFault, match="cta_mask 0x3"):
        k(np.zeros((64, 64), np.float16), 3, 0)


def test_a_wait_for_bytes_that_never_come_faults():
    box = (8, 32)

    @tiledsl.jit(interpret=True)
    def short(A: T.TensorMap((8, 32), "float32", box=box)):
        T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
        tile = T.alloc_shared(box, "float32")
        bar = T.alloc_shared((1,), "uint64")
        if T.cuda.thread_id() == 0:
            T.cuda.tile.apply(T.ptx["mbarrier.init.shared::cta.b64"], bar, 1)
            T.cuda.tile.apply(T.ptx["mbarrier.arrive.expect_tx.shared::cta.b64"], bar, 2 * 8 * 32 * 4)
            T.cuda.tile.apply(T.ptx[LOAD2], tile, A, bar, coords=(0, 0))
        T.cuda.tile.apply(T.ptx["mbarrier.try_wait.parity.shared::cta.b64"], bar, 0)
    with pytest.raises(tiledsl.KernelFault, match="1024 transaction bytes"):
        short(np.zeros((8, 32), np.float32))


def _load_at(c0, c1):
    """One 2-D f16 load of an (8, 32) box at (row c0, column c1)."""
    box = (8, 32)

    @tiledsl.jit(interpret=True)
    def at(A: T.TensorMap(("M", "N"), "float16", box=box), Out: T.Tensor(box, "float16")):
        T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
        tile = T.alloc_shared(box, "float16")
        bar = T.alloc_shared((1,), "uint64")
        tid = T.cuda.thread_id()
        if tid == 0:
            T.cuda.tile.apply(T.ptx["mbarrier.init.shared::cta.b64"], bar, 1)
            T.cuda.tile.apply(T.ptx["mbarrier.arrive.expect_tx.shared::cta.b64"], bar, 8 * 32 * 2)
            T.cuda.tile.apply(T.ptx[LOAD2], tile, A, bar, coords=(c0, c1))
        T.cuda.tile.apply(T.ptx["mbarrier.try_wait.parity.shared::cta.b64"], bar, 0)
        for e in range(tid, 8 * 32, 32):
            Out[e // 32, e % 32] = tile[e // 32, e % 32]
    return at


def test_an_innermost_coordinate_off_16_bytes_faults():
    """The TMA unit needs a box's innermost start 16-byte aligned: column 4 of an f16 tensor (8 bytes) stopped the
    K-grouped dW kernel's transposed-copies route with an illegal instruction on the H200 (its K tiles started at
    each expert's first token, the tensor's innermost dimension). Any outer coordinate is fine, and so is column 8."""
    a = _data((24, 64), "float16")
    with pytest.raises(tiledsl.KernelFault, match=r"innermost coordinate is 4 \(8 bytes\), not a multiple of 16"):
        _load_at(0, 4)(a, np.zeros((8, 32), np.float16))
    out = np.zeros((8, 32), np.float16)
    _load_at(3, 8)(a, out)
    np.testing.assert_array_equal(out, a[3:11, 8:40])


# ------------------------------------------------------------------ the map's encoding and the launch path

def test_encode_args_are_the_drivers_order():
    m = T.TensorMap(("M", "N"), "float16", box=(16, 32), swizzle=64, oob_fill="nan", l2_promotion=128)
    a = tensormap.encode_args(m, 0x7F0000001000, (50, 120))
    assert a == {"tensorDataType": "FLOAT16", "tensorRank": 2, "globalAddress": 0x7F0000001000,
                 "globalDim": [120, 50], "globalStrides": [240], "boxDim": [32, 16], "elementStrides": [1, 1],
                 "interleave": "NONE", "swizzle": "64B", "l2Promotion": "L2_128B",
                 "oobFill": "NAN_REQUEST_ZERO_FMA"}
    m3 = T.TensorMap((4, 6, 8), "float32", box=(1, 2, 8))
    a3 = tensormap.encode_args(m3, 0, (4, 6, 8))
    assert a3["globalDim"] == [8, 6, 4] and a3["globalStrides"] == [32, 192] and a3["boxDim"] == [8, 2, 1]


class _Enum:
    def __getattr__(self, name):
        return name


def reference_bytes(args: dict) -> bytes:
    """A pure-Python packing of the fields the stub encoder receives (the real layout is the driver's secret):
    the address, then per dimension (inner first) its size, stride and box."""
    import struct
    words = [args["globalAddress"], args["tensorRank"]]
    strides = [0] + list(args["globalStrides"])
    for d, s, b in zip(args["globalDim"], strides, args["boxDim"]):
        words += [d, s, b]
    words += [0] * (16 - len(words))
    return struct.pack("<16Q", *words)


def _stub_encoder(drv, calls):
    import ctypes
    keep = []

    def encode(dtype, rank, addr, dims, strides, box, estrides, inter, swz, l2, fill):
        calls.append(dict(tensorDataType=dtype, tensorRank=rank, globalAddress=addr, globalDim=list(dims),
                          globalStrides=list(strides), boxDim=list(box), swizzle=swz, oobFill=fill))
        raw = ctypes.create_string_buffer(reference_bytes(calls[-1]), 128)
        keep.append(raw)
        return 0, type("Map", (), {"getPtr": lambda self: ctypes.addressof(raw)})()
    drv.cuTensorMapEncodeTiled = encode
    drv.cuuint64_t = drv.cuuint32_t = int          # the real words convert with int() as well
    for name in ("CUtensorMapDataType", "CUtensorMapInterleave", "CUtensorMapSwizzle", "CUtensorMapL2promotion",
                 "CUtensorMapFloatOOBfill"):
        setattr(drv, name, _Enum())


def stub_setup(monkeypatch, tmp_path):
    """The stub driver (tests/launch_stubs.py) with the stub encoder, a fresh cache dir and no encoded maps:
    (driver, the encoder's calls)."""
    import launch_stubs
    monkeypatch.setenv("TILEDSL_CACHE_DIR", str(tmp_path))
    drv = launch_stubs.install(monkeypatch)
    calls = []
    _stub_encoder(drv, calls)
    tensormap.clear()
    return drv, calls


def test_launch_encodes_once_and_passes_the_map_by_value(monkeypatch, tmp_path):
    import ctypes
    import launch_stubs
    drv, calls = stub_setup(monkeypatch, tmp_path)
    packed = []
    from tiledsl.runtime.launchers import reference
    real = reference.launch
    monkeypatch.setattr(reference, "launch", lambda plan, values, *a: (real(plan, values, *a), packed.append(
        [bytes(s) if isinstance(s, reference.TensorMapSlot) else None for s in plan.slots])))
    k, pshape = copy_kernel(2, (16, 32), "float16", 64, grid=(4, 4, 1))
    a = launch_stubs.ndarray((50, 120), "float16", ptr=0x7F0000010000)
    b = launch_stubs.ndarray((50, 120), "float16", ptr=0x7F0000020000)
    out = launch_stubs.ndarray(pshape, "float16", ptr=0x7F0000030000)
    for _ in range(4):
        k(a, b, out)
    assert len(drv.launches) == 4
    assert [c["globalAddress"] for c in calls] == [0x7F0000010000, 0x7F0000020000]     # once per tensor
    assert calls[0]["globalDim"] == [120, 50] and calls[0]["globalStrides"] == [240]
    assert calls[0]["boxDim"] == [32, 16] and calls[0]["swizzle"] == "CU_TENSOR_MAP_SWIZZLE_64B"
    slot0, slot1 = packed[0][0], packed[0][1]
    assert slot0 == reference_bytes(calls[0]) and slot1 == reference_bytes(calls[1])
    assert ctypes.alignment(reference.TensorMapSlot) >= 8 and ctypes.sizeof(reference.TensorMapSlot) == 128


def test_launch_errors_name_the_argument(monkeypatch, tmp_path):
    import launch_stubs
    monkeypatch.setenv("TILEDSL_CACHE_DIR", str(tmp_path))
    drv = launch_stubs.install(monkeypatch)
    _stub_encoder(drv, [])
    k, pshape = copy_kernel(2, (16, 32), "float16", 64, grid=(4, 4, 1))
    out = launch_stubs.ndarray(pshape, "float16")
    good = launch_stubs.ndarray((50, 120), "float16")
    with pytest.raises(tiledsl.LaunchError, match="argument 'A' has dtype float32"):
        k(launch_stubs.ndarray((50, 120), "float32"), good, out)
    with pytest.raises(tiledsl.LaunchError, match="argument 'A' .* stride of 202 bytes"):
        k(launch_stubs.ndarray((50, 101), "float16"), launch_stubs.ndarray((50, 101), "float16"), out)
    with pytest.raises(tiledsl.LaunchError, match="argument 'A' starts at address 0x7f0000000008"):
        k(launch_stubs.ndarray((50, 120), "float16", ptr=0x7F0000000008), good, out)
    with pytest.raises(tiledsl.LaunchError, match="argument 'A' is not contiguous"):
        k(launch_stubs.ndarray((50, 120), "float16", strides=(2, 100)), good, out)


def test_signature_round_trips_through_the_cache_data():
    from tiledsl.abi.signature import KernelSignature
    k, pshape = copy_kernel(2, (16, 32), "float16", 64, grid=(4, 4, 1))
    a = _data((50, 120), "float16")
    sig = k.compile(a, a, np.zeros(pshape, np.float16), target="sm_90").signature
    again = KernelSignature.from_data(sig.to_data())
    assert again == sig and isinstance(again.params[0].tensormap, TensorMapType)
    assert [s.kind for s in sig.slots][:2] == ["tensormap", "tensormap"]


def test_the_page_runs_on_the_interpreter(tmp_path):
    """docs/patterns/tma.md: the seed sections, a GPU block, and its example (compiled and interpreted)."""
    from test_patterns_docs import GPU_MARK, SECTIONS, blocks, run_page
    text = (__import__("pathlib").Path(__file__).resolve().parent.parent / "docs/patterns/tma.md").read_text()
    assert all(s in text for s in SECTIONS)
    assert any(b.startswith(GPU_MARK) for b in blocks("tma"))
    ns = run_page("tma", tmp_path, with_gpu=False)
    assert ns["ck"].asm["ptx"]
    assert ptxas(ns["ck"].asm["ptx"], "sm_90").returncode == 0


def test_benchmark_kernel_with_two_maps_assembles():
    """benchmarks/launch.py's add3_maps (string annotations: `from __future__ import annotations`)."""
    import importlib.util
    import pathlib
    path = pathlib.Path(__file__).resolve().parent.parent / "benchmarks" / "launch.py"
    spec = importlib.util.spec_from_file_location("bench_launch", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    a = np.zeros(256, np.float32)
    ptx = mod.add3_maps.compile(a, a, a, a, target="sm_90").asm["ptx"]
    assert ptx.count(".param .align 64 .b8") == 2 and ptxas(ptx, "sm_90").returncode == 0


def test_annotations_that_differ_only_in_fill_compile_apart(tmp_path, monkeypatch):
    # the H200 run: a "nan"-fill copy kernel was served the "zero"-fill kernel's disk entry (its closure's
    # annotation fingerprinted as just its type), and the GPU filled zeros
    from tiledsl.cache.fingerprint import fingerprint_value
    a = T.TensorMap(("M", "N"), "float16", box=(16, 32), swizzle=64, oob_fill="nan")
    b = T.TensorMap(("M", "N"), "float16", box=(16, 32), swizzle=64)
    assert fingerprint_value(a) and fingerprint_value(a) != fingerprint_value(b)
    monkeypatch.setenv("TILEDSL_CACHE_DIR", str(tmp_path))
    kz, pshape = copy_kernel(2, (16, 32), "float16", 64, grid=(4, 4, 1))
    kn, _ = copy_kernel(2, (16, 32), "float16", 64, oob_fill="nan", grid=(4, 4, 1))
    x = _data((50, 120), "float16")
    sz = kz.compile(x, x, np.zeros(pshape, np.float16), target="sm_90").signature
    sn = kn.compile(x, x, np.zeros(pshape, np.float16), target="sm_90").signature
    assert sz.params[0].tensormap.oob_fill == "zero" and sn.params[0].tensormap.oob_fill == "nan"


def test_a_rank_one_map_passes_one_stride_word():
    # cuda-bindings turns an empty strides list into a null pointer, which the driver refuses (the H200 run of
    # benchmarks/launch.py's 1-D add3_maps): one ignored word, a multiple of 16, stands in
    m = T.TensorMap(("N",), "float32", box=(64,))
    a = tensormap.encode_args(m, 0, (250,))
    assert a["globalStrides"] == [] and tensormap._strides_arg(a, m) == [1008]
    m2 = T.TensorMap(("M", "N"), "float16", box=(16, 32))
    a2 = tensormap.encode_args(m2, 0, (50, 120))
    assert tensormap._strides_arg(a2, m2) == [240]
