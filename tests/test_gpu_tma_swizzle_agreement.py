"""One verdict on both sides for TMA swizzles (issue 33, case 5): every swizzle (none, 32, 64, 128 bytes) x box
row width x element size that T.TensorMap accepts, loaded by TMA into shared memory, then
  - the shared bytes copied out in storage order (what the swizzle did to them),
  - the box copied out through its T.tma_layout view (what indexing reads),
  - the box stored back by TMA,
on the GPU and on the interpreter: the three outputs must be equal byte for byte (test_gpu_*, marked gpu). The shared
buffer is twice the box, zeroed before the load and copied out whole: a load that wrote past the box (say, rows
padded to the swizzle's span) shows as a difference in the second half instead of a fault. Without
a GPU, the interpreter half runs against the swizzle the PTX ISA documents, computed here in numpy (16-byte chunk
c of the 128-byte line L of shared memory lands at chunk c ^ (L mod 2^b), b = 1, 2, 3 for 32, 64, 128 bytes).

    pytest tests/test_gpu_tma_swizzle_agreement.py           # on the H200: both halves
"""
import numpy as np
import pytest

import tiledsl
from tiledsl import T
from tiledsl.lang.tensormap import tma_layout

LOAD = "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
STORE = "cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group"
ROWS = 16                           # box rows: a 1024-byte swizzle period holds whole boxes of 64-byte rows
GRID = (2, 2, 1)                    # 2 x 2 boxes: the boxes of the second row and column start off 0
DTYPES = {"uint8": np.uint8, "float16": np.float16, "float32": np.float32}
SPAN = {None: 256, 32: 32, 64: 64, 128: 128}        # the widest box row (bytes) each swizzle takes (None: 256)


def combinations(narrower=False):
    """(swizzle, dtype, box row in bytes): without a swizzle every row of 16 * 2^k bytes up to 256; with one, the
    row of exactly its span (T.TensorMap refuses narrower rows: on an H100 in session 34 all 18 of them disagreed
    with the address-based swizzle, every row of the span agreed); `narrower`: those refused combinations."""
    out = []
    for sw in (None, 32, 64, 128):
        for dtype in DTYPES:
            row = 16
            while row <= SPAN[sw]:
                if (sw is None or row == sw) != narrower:
                    out.append((sw, dtype, row))
                row *= 2
    return out


CASES = combinations()


def ids(c):
    return f"sw{c[0] or 0}-{c[1]}-row{c[2]}B"


@pytest.mark.parametrize("case", combinations(narrower=True), ids=ids)
def test_a_row_narrower_than_the_swizzle_is_refused(case):
    sw, dtype, row_bytes = case
    esize = np.dtype(DTYPES[dtype]).itemsize
    with pytest.raises(tiledsl.TiledslError, match=f"must span exactly {sw} bytes"):
        T.TensorMap(("M", "N"), dtype, box=(ROWS, row_bytes // esize), swizzle=sw)


def slack(sw, row_bytes):
    """Boxes of shared memory the kernel holds: room for rows padded to the swizzle's span, and at least 2."""
    return max(2, (sw or 0) // row_bytes)


def make(sw, dtype, row_bytes):
    """The kernel of one combination and its (rows, columns) box."""
    esize = np.dtype(DTYPES[dtype]).itemsize
    box = (ROWS, row_bytes // esize)
    nbytes = ROWS * row_bytes
    words = nbytes // 4
    SLACK = slack(sw, row_bytes)                    # the buffer holds SLACK boxes: see the module docstring
    L = tma_layout((SLACK * box[0], box[1]), dtype, sw)         # the box's rows, then the slack's
    A_ann = T.TensorMap(("M", "N"), dtype, box=box, swizzle=sw)
    B_ann = T.TensorMap(("M", "N"), dtype, box=box, swizzle=sw)
    B0, B1 = box
    NB = B0 * B1

    def tma_swizzle_copy(A: A_ann, B: B_ann, Out: T.Tensor((2 * B0, 2 * B1), dtype),
                         Raw: T.Tensor((4, SLACK * words), "int32")):
        T.device_entry(launch=T.cuda.LaunchConfig(grid=GRID, block=32))
        tid = T.cuda.thread_id()
        raw = T.alloc_shared((SLACK * words,), "int32")
        tile = raw.view(dtype=dtype).view(SLACK * B0, B1, layout=L)[0:B0, :]
        bar = T.alloc_shared((1,), "uint64")
        c0 = T.cuda.block_id(1) * B0
        c1 = T.cuda.block_id(0) * B1
        for w in range(tid, SLACK * words, 32):         # zeros where the load should not write
            raw[w] = 0
        if tid == 0:
            T.cuda.tile.apply(T.ptx["mbarrier.init.shared::cta.b64"], bar, 1)
            T.cuda.tile.apply(T.ptx["fence.mbarrier_init.release.cluster"])
        T.cuda.tile.apply(T.ptx["fence.proxy.async.shared::cta"])     # the zeros before the async proxy's writes
        T.cuda.syncthreads()
        if tid == 0:
            T.cuda.tile.apply(T.ptx["mbarrier.arrive.expect_tx.shared::cta.b64"], bar, nbytes)
            T.cuda.tile.apply(T.ptx[LOAD], tile, A, bar, coords=(c0, c1))
        T.cuda.tile.apply(T.ptx["mbarrier.try_wait.parity.shared::cta.b64"], bar, 0)
        for w in range(tid, SLACK * words, 32):         # the shared bytes in storage order
            Raw[T.cuda.block_id(1) * 2 + T.cuda.block_id(0), w] = raw[w]
        for e in range(tid, NB, 32):                    # the box through its layout
            Out[c0 + e // B1, c1 + e % B1] = tile[e // B1, e % B1]
        T.cuda.tile.apply(T.ptx["fence.proxy.async.shared::cta"])
        T.cuda.syncthreads()
        if tid == 0:
            T.cuda.tile.apply(T.ptx[STORE], B, tile, coords=(c0, c1))
            T.cuda.tile.apply(T.ptx["cp.async.bulk.commit_group"])
            T.cuda.tile.apply(T.ptx["cp.async.bulk.wait_group.read"], 0)

    return tiledsl.jit(tma_swizzle_copy), box


def data(box, dtype):
    """Distinct bytes everywhere (no NaN patterns: a float copy must keep every bit)."""
    shape = (2 * box[0], 2 * box[1])
    n = int(np.prod(shape)) * np.dtype(DTYPES[dtype]).itemsize
    bits = (np.arange(n, dtype=np.uint32) * 7 + 3) % 251
    if dtype == "float16":
        bits = bits % 0x7B                              # high bytes below 0x7C: finite halves
    if dtype == "float32":
        bits = bits % 0x7F                              # high bytes below 0x7F: finite floats
    return bits.astype(np.uint8).view(DTYPES[dtype]).reshape(shape)


def host_outputs(box, dtype, sw):
    a = data(box, dtype)
    row_bytes = box[1] * np.dtype(DTYPES[dtype]).itemsize
    words = box[0] * row_bytes // 4
    return a, np.zeros_like(a), np.zeros_like(a), np.zeros((4, slack(sw, row_bytes) * words), np.int32)


def documented_swizzle(a, box, sw):
    """Raw's expected words: each box's bytes, row-major, 16-byte chunk c of 128-byte line L moved to chunk
    c ^ (L mod 2^b) (the PTX ISA's swizzle modes, which act on shared-memory addresses)."""
    out = []
    for by in range(2):
        for bx in range(2):
            blk = np.ascontiguousarray(a[by * box[0]:(by + 1) * box[0], bx * box[1]:(bx + 1) * box[1]])
            flat = blk.view(np.uint8).reshape(-1)
            if sw is None:
                out.append(flat.copy())
                continue
            bits = {32: 1, 64: 2, 128: 3}[sw]
            addr = np.arange(flat.size)
            moved = addr ^ (((addr >> 7) & ((1 << bits) - 1)) << 4)
            dst = np.empty_like(flat)
            dst[moved] = flat
            out.append(dst)
    swizzled = np.stack(out)
    rest = np.zeros((4, (slack(sw, flat.size // box[0]) - 1) * flat.size), np.uint8)    # the slack stays zero
    return np.concatenate([swizzled, rest], axis=1).view(np.int32)


@pytest.mark.parametrize("case", CASES, ids=ids)
def test_the_interpreter_follows_the_documented_swizzle(case):
    sw, dtype, row = case
    k, box = make(sw, dtype, row)
    a, b, out, raw = host_outputs(box, dtype, sw)
    tiledsl.jit(k.fn, interpret=True)(a, b, out, raw)
    np.testing.assert_array_equal(raw, documented_swizzle(a, box, sw))
    assert out.tobytes() == a.tobytes() and b.tobytes() == a.tobytes()


@pytest.mark.parametrize("case", CASES, ids=ids)
def test_each_combination_compiles_for_sm90a(case):
    sw, dtype, row = case
    k, box = make(sw, dtype, row)
    a, b, out, raw = host_outputs(box, dtype, sw)
    k.compile(a, b, out, raw, target="sm_90a")


def _torch():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    major, minor = torch.cuda.get_device_capability()
    if major * 10 + minor < 90:
        pytest.skip("needs sm_90")
    return torch


@pytest.mark.gpu
@pytest.mark.parametrize("case", CASES, ids=ids)
def test_gpu_and_interpreter_agree_byte_for_byte(case):
    torch = _torch()
    sw, dtype, row = case
    k, box = make(sw, dtype, row)
    a, b, out, raw = host_outputs(box, dtype, sw)
    tiledsl.jit(k.fn, interpret=True)(a, b, out, raw)
    ga = torch.from_numpy(a).cuda()
    gb, gout = torch.zeros_like(ga), torch.zeros_like(ga)
    graw = torch.zeros(raw.shape, dtype=torch.int32, device="cuda")
    k(ga, gb, gout, graw)
    torch.cuda.synchronize()
    got_raw = graw.cpu().numpy()
    np.testing.assert_array_equal(got_raw, raw, err_msg="shared bytes (storage order) differ")
    assert gout.cpu().numpy().tobytes() == out.tobytes(), "the box read through T.tma_layout differs"
    assert gb.cpu().numpy().tobytes() == b.tobytes(), "the TMA store differs"
