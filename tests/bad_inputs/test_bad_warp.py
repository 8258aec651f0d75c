"""Wrong warp-collective calls (shfl.sync, vote.sync, redux.sync, match.sync, activemask): a CompilationError at the
apply (or operand) line, naming the form, operand, keyword or target."""
import pytest

from tiledsl import T
from tiledsl.layout import S, TileLayout, laneid
from badcase import Case, run

one = TileLayout(S[(32, 1) : (1 @ laneid, 1)])
two = TileLayout(S[(32, 2, 1) : (1 @ laneid, 1, 1)])
swapped = TileLayout(S[(32, 1) : (1, 1 @ laneid)])          # the register axis on lanes: not each lane's own



def k_ok_baseline():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    a = T.alloc_local((1,), "uint32")
    d = T.alloc_local((1,), "uint32")
    p = T.alloc_local((1,), "uint32")
    T.cuda.tile.apply(T.ptx["shfl.sync.bfly.b32"], d, a, 1, 0x1F, 0xFFFFFFFF, p=p)


def k_shfl_without_sync():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    a = T.alloc_local((1,), "uint32")
    T.cuda.tile.apply(T.ptx["shfl.bfly.b32"], a, a, 1, 0x1F)


def k_shfl_b64():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    a = T.alloc_local((1,), "uint64")
    T.cuda.tile.apply(T.ptx["shfl.sync.bfly.b64"], a, a, 1, 0x1F, 0xFFFFFFFF)


def k_shfl_four_operands():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    a = T.alloc_local((1,), "uint32")
    T.cuda.tile.apply(T.ptx["shfl.sync.idx.b32"], a, a, 1, 0xFFFFFFFF)


def k_shfl_scalar_dst():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    a = T.alloc_local((1,), "uint32")
    T.cuda.tile.apply(T.ptx["shfl.sync.up.b32"], 5, a, 1, 0, 0xFFFFFFFF)


def k_shfl_16bit():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    h = T.alloc_local((1,), "float16")
    T.cuda.tile.apply(T.ptx["shfl.sync.down.b32"], h, h, 1, 0x1F, 0xFFFFFFFF)


def k_shfl_shared():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    a = T.alloc_local((1,), "uint32")
    sm = T.alloc_shared((1,), "uint32")
    T.cuda.tile.apply(T.ptx["shfl.sync.down.b32"], a, sm, 1, 0x1F, 0xFFFFFFFF)


def k_shfl_float_p():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    a = T.alloc_local((1,), "uint32")
    pf = T.alloc_local((1,), "float32")
    T.cuda.tile.apply(T.ptx["shfl.sync.down.b32"], a, a, 1, 0x1F, 0xFFFFFFFF, p=pf)


def k_shfl_pred_keyword():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    a = T.alloc_local((1,), "uint32")
    T.cuda.tile.apply(T.ptx["shfl.sync.down.b32"], a, a, 1, 0x1F, 0xFFFFFFFF, pred=T.cuda.lane_id() < 4)


def k_shfl_bool_mask():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    a = T.alloc_local((1,), "uint32")
    T.cuda.tile.apply(T.ptx["shfl.sync.idx.b32"], a, a, 0, 0x1F, T.cuda.lane_id() < 4)


def k_shfl_64bit_offset(off: T.int64):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    a = T.alloc_local((1,), "uint32")
    T.cuda.tile.apply(T.ptx["shfl.sync.idx.b32"], a, a, off, 0x1F, 0xFFFFFFFF)


def k_shfl_repeat_mismatch():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    a = T.alloc_local((2,), "uint32")
    b = T.alloc_local((1,), "uint32")
    T.cuda.tile.apply(T.ptx["shfl.sync.bfly.b32"], a.view(32, 2, 1, layout=two), b.view(32, 1, layout=one), 1, 0x1F, 0xFFFFFFFF, scope="warp")


def k_shfl_not_owner():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    a = T.alloc_local((32,), "uint32")
    b = T.alloc_local((1,), "uint32")
    T.cuda.tile.apply(T.ptx["shfl.sync.bfly.b32"], b.view(32, 1, layout=one), a.view(32, 1, layout=swapped), 1,
                      0x1F, 0xFFFFFFFF, scope="warp")


def k_shfl_warp_scope_partial_block():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=48))
    a = T.alloc_local((1,), "uint32")
    T.cuda.tile.apply(T.ptx["shfl.sync.bfly.b32"], a.view(32, 1, layout=one), a.view(32, 1, layout=one), 1,
                      0x1F, 0xFFFFFFFF, scope="warp")


def k_vote_ballot_pred():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    d = T.alloc_local((1,), "uint32")
    T.cuda.tile.apply(T.ptx["vote.sync.ballot.pred"], d, True, 0xFFFFFFFF)


def k_vote_all_b32():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    d = T.alloc_local((1,), "uint32")
    T.cuda.tile.apply(T.ptx["vote.sync.all.b32"], d, True, 0xFFFFFFFF)


def k_vote_float_predicate():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    d = T.alloc_local((1,), "uint32")
    T.cuda.tile.apply(T.ptx["vote.sync.any.pred"], d, 1.5, 0xFFFFFFFF)


def k_vote_float_dst():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    fd = T.alloc_local((1,), "float32")
    T.cuda.tile.apply(T.ptx["vote.sync.any.pred"], fd, True, 0xFFFFFFFF)


def k_vote_p_keyword():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    d = T.alloc_local((1,), "uint32")
    T.cuda.tile.apply(T.ptx["vote.sync.uni.pred"], d, True, 0xFFFFFFFF, p=d)


def k_redux_add_f32():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    f = T.alloc_local((1,), "float32")
    T.cuda.tile.apply(T.ptx["redux.sync.add.f32"], f, f, 0xFFFFFFFF)


def k_redux_and_u32():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    d = T.alloc_local((1,), "uint32")
    T.cuda.tile.apply(T.ptx["redux.sync.and.u32"], d, d, 0xFFFFFFFF)


def k_redux_qualifier_order():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    f = T.alloc_local((1,), "float32")
    T.cuda.tile.apply(T.ptx["redux.sync.min.NaN.abs.f32"], f, f, 0xFFFFFFFF)


def k_redux_abs_on_integers():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    d = T.alloc_local((1,), "uint32")
    T.cuda.tile.apply(T.ptx["redux.sync.min.abs.u32"], d, d, 0xFFFFFFFF)


def k_redux_on_sm75():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    d = T.alloc_local((1,), "uint32")
    T.cuda.tile.apply(T.ptx["redux.sync.add.u32"], d, d, 0xFFFFFFFF)


def k_redux_f32():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    f = T.alloc_local((1,), "float32")
    T.cuda.tile.apply(T.ptx["redux.sync.max.f32"], f, f, 0xFFFFFFFF)


def k_redux_float_in_u32():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    f = T.alloc_local((1,), "float32")
    T.cuda.tile.apply(T.ptx["redux.sync.max.u32"], f, f, 0xFFFFFFFF)


def k_redux_unknown_op():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    d = T.alloc_local((1,), "uint32")
    T.cuda.tile.apply(T.ptx["redux.sync.mul.u32"], d, d, 0xFFFFFFFF)


def k_match_u32():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    d = T.alloc_local((1,), "uint32")
    T.cuda.tile.apply(T.ptx["match.any.sync.u32"], d, d, 0xFFFFFFFF)


def k_match_b64_with_32bit():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    d = T.alloc_local((1,), "uint32")
    T.cuda.tile.apply(T.ptx["match.all.sync.b64"], d, d, 0xFFFFFFFF)


def k_match_any_with_p():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    d = T.alloc_local((1,), "uint32")
    T.cuda.tile.apply(T.ptx["match.any.sync.b32"], d, d, 0xFFFFFFFF, p=d)


def k_activemask_operand():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    d = T.alloc_local((1,), "uint32")
    T.cuda.tile.apply(T.ptx["activemask.b32"], d, 0xFFFFFFFF)


def k_activemask_b64():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    d = T.alloc_local((1,), "uint64")
    T.cuda.tile.apply(T.ptx["activemask.b64"], d)


C = Case
CASES = [
    C("shfl_without_sync", k_shfl_without_sync, "shfl.bfly.b32", ("shfl.sync.{up, down, bfly, idx}.b32",)),
    C("shfl_b64", k_shfl_b64, "shfl.sync.bfly.b64", ("the forms are shfl.sync",)),
    C("shfl_four_operands", k_shfl_four_operands, "shfl.sync.idx.b32", ("takes 5 operands", "got 4")),
    C("shfl_scalar_dst", k_shfl_scalar_dst, "shfl.sync.up.b32", ("operand d", "must be a register buffer")),
    C("shfl_16bit_register", k_shfl_16bit, "shfl.sync.down.b32", ("operand d", "32 bits", "float16")),
    C("shfl_source_in_shared", k_shfl_shared, "a, sm, 1", ("operand a", "registers", "shared memory")),
    C("shfl_float_p", k_shfl_float_p, "p=pf", ("operand p", "float32", "integer register")),
    C("shfl_pred_keyword", k_shfl_pred_keyword, "pred=T.cuda", ("unknown parameter 'pred'", "allowed: p")),
    C("shfl_bool_membermask", k_shfl_bool_mask, "shfl.sync.idx.b32", ("operand membermask", "a bool cannot")),
    C("shfl_64bit_offset", k_shfl_64bit_offset, "a, a, off", ("operand b", "int64", "32-bit")),
    C("shfl_repeat_mismatch", k_shfl_repeat_mismatch, "b.view(32, 1", ("operand a", "repeat shape")),
    C("shfl_lane_not_owner", k_shfl_not_owner, "layout=swapped", ("operand a", "ownership")),
    C("shfl_warp_scope_partial_block", k_shfl_warp_scope_partial_block, "shfl.sync.bfly.b32",
      ("needs whole warps", "48 threads")),
    C("vote_ballot_pred", k_vote_ballot_pred, "vote.sync.ballot.pred", ("takes .b32",)),
    C("vote_all_b32", k_vote_all_b32, "vote.sync.all.b32", ("takes .pred",)),
    C("vote_float_predicate", k_vote_float_predicate, "1.5", ("operand a", ".pred slot", "run-time bool")),
    C("vote_float_dst", k_vote_float_dst, "fd, True", ("operand d", "float32", "integer register")),
    C("vote_p_keyword", k_vote_p_keyword, "p=d", ("unknown parameter 'p'", "allowed: none")),
    C("redux_add_f32", k_redux_add_f32, "redux.sync.add.f32", ("no .f32 form",)),
    C("redux_and_u32", k_redux_and_u32, "redux.sync.and.u32", ("takes .b32",)),
    C("redux_qualifier_order", k_redux_qualifier_order, "NaN.abs", ("PTX order", "redux.sync.min.abs.NaN.f32")),
    C("redux_abs_on_integers", k_redux_abs_on_integers, "min.abs.u32", ("exist only for",)),
    C("redux_on_sm75", k_redux_on_sm75, "redux.sync.add.u32", ("needs sm_80 or newer", "sm_75"), target="sm_75"),
    C("redux_f32_on_sm90", k_redux_f32, "redux.sync.max.f32", ("needs sm_100 or newer", "sm_90")),
    C("redux_f32_on_sm100", k_redux_f32, "redux.sync.max.f32", ("sm_100a", "the target is sm_100"),
      target="sm_100"),
    C("redux_float_in_u32", k_redux_float_in_u32, "redux.sync.max.u32", ("operand d", "float32", ".u32 slot")),
    C("redux_unknown_op", k_redux_unknown_op, "redux.sync.mul", ("unknown operation .mul",)),
    C("match_u32", k_match_u32, "match.any.sync.u32", ("match.{any,all}.sync.{b32,b64}",)),
    C("match_b64_with_32bit", k_match_b64_with_32bit, "match.all.sync.b64", ("operand a", "64 bits")),
    C("match_any_with_p", k_match_any_with_p, "p=d", ("unknown parameter 'p'",)),
    C("activemask_operand", k_activemask_operand, "activemask.b32", ("takes 1 operands", "got 2")),
    C("activemask_b64", k_activemask_b64, "activemask.b64", ("activemask.b32",)),
]


def test_baseline_compiles():
    """The corpus' kernels differ from this valid one in one thing each."""
    import tiledsl
    ptx = tiledsl.jit(k_ok_baseline).compile(target="sm_90").asm["ptx"]
    assert "shfl.sync.bfly.b32" in ptx


@pytest.mark.parametrize("case", [c.param() for c in CASES])
def test_bad_warp(case):
    run(case)
