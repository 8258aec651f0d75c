"""Wrong ldmatrix/stmatrix and cp.async calls: CompilationError at the apply (or operand) line, naming the operand."""
import pytest

from tiledsl import T
from tiledsl.layout import S, TileLayout, laneid
from badcase import Case, run

LDM = "ldmatrix.sync.aligned.m8n8.x4.shared.b16"
frag = TileLayout(S[(4, 8, 4) : (1, 4 @ laneid, 1 @ laneid)])           # word (i, r, w): register i of lane 4r+w
frag_wrong = TileLayout(S[(4, 8, 4) : (1, 1 @ laneid, 8 @ laneid)])     # lanes transposed
split_rows = TileLayout(S[(4, 8, 2, 2) : (32, 4, 64, 1)])                 # a row's two halves 64 words apart


def k_ldmatrix_ok_baseline():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    sm = T.alloc_shared((4, 8, 4), "uint32")
    r = T.alloc_local((4,), "uint32")
    T.cuda.tile.apply(T.ptx[LDM], r.view(4, 8, 4, layout=frag), sm, scope="warp")


def k_ldmatrix_global_source(A: T.Tensor((4, 8, 4), "uint32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    r = T.alloc_local((4,), "uint32")
    T.cuda.tile.apply(T.ptx[LDM], r.view(4, 8, 4, layout=frag), A, scope="warp")


def k_ldmatrix_thread_scope():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    sm = T.alloc_shared((4, 8, 4), "uint32")
    r = T.alloc_local((4,), "uint32")
    T.cuda.tile.apply(T.ptx[LDM], r.view(4, 8, 4, layout=frag), sm)


def k_ldmatrix_atom_mismatch():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    sm = T.alloc_shared((2, 8, 4), "uint32")
    r = T.alloc_local((4,), "uint32")
    T.cuda.tile.apply(T.ptx[LDM], r.view(4, 8, 4, layout=frag), sm, scope="warp")


def k_ldmatrix_b16_registers():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    sm = T.alloc_shared((4, 8, 4), "uint32")
    r = T.alloc_local((4,), "float16")
    T.cuda.tile.apply(T.ptx[LDM], r.view(4, 8, 4, layout=frag), sm, scope="warp")


def k_ldmatrix_lane_not_owner():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    sm = T.alloc_shared((4, 8, 4), "uint32")
    r = T.alloc_local((4,), "uint32")
    T.cuda.tile.apply(T.ptx[LDM], r.view(4, 8, 4, layout=frag_wrong), sm, scope="warp")


def k_ldmatrix_row_split():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    sm = T.alloc_shared((256,), "uint32")
    r = T.alloc_local((4,), "uint32")
    T.cuda.tile.apply(T.ptx[LDM], r.view(4, 8, 4, layout=frag), sm.view(4, 8, 4, layout=split_rows), scope="warp")


def k_ldmatrix_bad_form():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    sm = T.alloc_shared((4, 8, 4), "uint32")
    r = T.alloc_local((4,), "uint32")
    T.cuda.tile.apply(T.ptx["ldmatrix.sync.aligned.m16n16.x4.shared.b16"], r, sm, scope="warp")


def k_stmatrix_on_sm80():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    sm = T.alloc_shared((4, 8, 4), "uint32")
    r = T.alloc_local((4,), "uint32")
    T.cuda.tile.apply(T.ptx["stmatrix.sync.aligned.m8n8.x4.shared.b16"], sm, r.view(4, 8, 4, layout=frag),
                      scope="warp")


def k_ldmatrix_keyword():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    sm = T.alloc_shared((4, 8, 4), "uint32")
    r = T.alloc_local((4,), "uint32")
    T.cuda.tile.apply(T.ptx[LDM], r.view(4, 8, 4, layout=frag), sm, scope="warp", trans=True)


def k_cp_async_no_chunk(A: T.Tensor((32, 4), "uint32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    sm = T.alloc_shared((32, 4), "uint32")
    T.cuda.tile.apply(T.ptx["cp.async.cg.shared.global"], sm, A)


def k_cp_async_cg_chunk8(A: T.Tensor((32, 2), "uint32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    sm = T.alloc_shared((32, 2), "uint32")
    T.cuda.tile.apply(T.ptx["cp.async.cg.shared.global"], sm, A, chunk_bytes=8)


def k_cp_async_swapped(A: T.Tensor((32, 4), "uint32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    sm = T.alloc_shared((32, 4), "uint32")
    T.cuda.tile.apply(T.ptx["cp.async.cg.shared.global"], A, sm, chunk_bytes=16)


def k_cp_async_both_tails(A: T.Tensor((32, 4), "uint32"), n: T.int32):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    sm = T.alloc_shared((32, 4), "uint32")
    T.cuda.tile.apply(T.ptx["cp.async.cg.shared.global"], sm, A, chunk_bytes=16, src_size=8, ignore_src=n > 0)


def k_cp_async_src_size_too_big(A: T.Tensor((32, 4), "uint32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    sm = T.alloc_shared((32, 4), "uint32")
    T.cuda.tile.apply(T.ptx["cp.async.cg.shared.global"], sm, A, chunk_bytes=16, src_size=32)


def k_cp_async_misaligned(A: T.Tensor((32, 5), "uint32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    sm = T.alloc_shared((32, 4), "uint32")
    T.cuda.tile.apply(T.ptx["cp.async.cg.shared.global"], sm, A[0:32, 1:5], chunk_bytes=16)


def k_cp_async_sm75(A: T.Tensor((32, 4), "uint32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    sm = T.alloc_shared((32, 4), "uint32")
    T.cuda.tile.apply(T.ptx["cp.async.cg.shared.global"], sm, A, chunk_bytes=16)


def k_cp_async_wait_runtime(A: T.Tensor((32, 4), "uint32"), n: T.int32):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    T.cuda.tile.apply(T.ptx["cp.async.wait_group"], n)


def k_cp_async_commit_with_operand(A: T.Tensor((32, 4), "uint32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    T.cuda.tile.apply(T.ptx["cp.async.commit_group"], A)


def k_cp_async_bad_form(A: T.Tensor((32, 4), "uint32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    sm = T.alloc_shared((32, 4), "uint32")
    T.cuda.tile.apply(T.ptx["cp.async.bulk.shared.global"], sm, A, chunk_bytes=16)


C = Case
CASES = [
    C("ldmatrix_global_source", k_ldmatrix_global_source, "], r.view(4, 8, 4, layout=frag), A,",
      ("operand src", "shared memory", "global memory")),
    C("ldmatrix_thread_scope", k_ldmatrix_thread_scope, "frag), sm)", ("warp instruction",)),
    C("ldmatrix_atom_mismatch", k_ldmatrix_atom_mismatch, "T.ptx[LDM]", ("operand src", "(4, 8, 4)")),
    C("ldmatrix_16bit_registers", k_ldmatrix_b16_registers, "T.ptx[LDM]", ("operand dst", "32 bits", "float16")),
    C("ldmatrix_lane_not_owner", k_ldmatrix_lane_not_owner, "frag_wrong", ("operand dst", "ownership")),
    C("ldmatrix_row_not_contiguous", k_ldmatrix_row_split, "split_rows", ("operand src", "16 contiguous bytes")),
    C("ldmatrix_unsupported_form", k_ldmatrix_bad_form, "m16n16", ("supported forms",)),
    C("stmatrix_on_sm80", k_stmatrix_on_sm80, "T.ptx[\"stmatrix.sync", ("needs sm_90", "sm_80"), target="sm_80"),
    C("ldmatrix_keyword", k_ldmatrix_keyword, "trans=True", ("unknown parameter 'trans'",)),
    C("cp_async_without_chunk_bytes", k_cp_async_no_chunk, "cp.async.cg", ("chunk_bytes= is required",)),
    C("cp_async_cg_chunk_8", k_cp_async_cg_chunk8, "chunk_bytes=8", ("chunk_bytes must be one of (16,)",)),
    C("cp_async_dst_in_global", k_cp_async_swapped, "A, sm, chunk", ("operand dst", "shared memory",
                                                                     "global memory")),
    C("cp_async_src_size_and_ignore_src", k_cp_async_both_tails, "ignore_src=", ("mutually exclusive",)),
    C("cp_async_src_size_too_big", k_cp_async_src_size_too_big, "src_size=32", ("outside 0..16",)),
    C("cp_async_misaligned_chunk", k_cp_async_misaligned, "A[0:32, 1:5]", ("operand src", "aligned to 16 bytes")),
    C("cp_async_on_sm75", k_cp_async_sm75, "cp.async.cg", ("needs sm_80", "sm_75"), target="sm_75"),
    C("cp_async_wait_runtime_count", k_cp_async_wait_runtime, "wait_group", ("compile-time non-negative int",)),
    C("cp_async_commit_with_operand", k_cp_async_commit_with_operand, "commit_group", ("takes 0 operands",)),
    C("cp_async_unsupported_form", k_cp_async_bad_form, "cp.async.bulk", ("supported: cp.async",)),
]


def test_baseline_compiles():
    """The corpus' ldmatrix kernels differ from this valid one in one thing each."""
    import tiledsl
    ptx = tiledsl.jit(k_ldmatrix_ok_baseline).compile(target="sm_90").asm["ptx"]
    assert "ldmatrix.sync.aligned" in ptx


@pytest.mark.parametrize("case", [c.param() for c in CASES])
def test_bad_ldmatrix_and_cp_async(case):
    run(case)
