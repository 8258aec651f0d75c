"""Wrong wgmma kernels (isa/wgmma/): each a CompilationError at the apply's (or operand's) line naming the form,
operand, parameter or target; layouts no matrix descriptor can express are refused with a counterexample."""
import pytest

from tiledsl import T
from tiledsl.layout import S, TileLayout, laneid, warpid
from badcase import Case, run
from wgmma_cases import acc_layout, d_layout, shared_layout

MMA8 = "wgmma.mma_async.sync.aligned.m64n8k16.f32.f16.f16"
LD = d_layout(8)
LA = shared_layout(64, 1, 16, 2, 128, False)
LB = shared_layout(8, 1, 16, 2, 0, False)
LAR = TileLayout(S[(1, 1, 4, 2, 8, 2, 4) : (1, 1, 1 @ warpid, 1, 4 @ laneid, 2, 1 @ laneid)])
# rows 8 and up on the wrong warp: row 16w + ... held by warp (w + 1) % 4 is not expressible, so swap lanes instead
LD_BAD = TileLayout(S[(1, 1, 4, 2, 8, 1, 4, 2) : (1, 1, 1 @ warpid, 2, 1 @ laneid, 4, 8 @ laneid, 1)])
ROW_MAJOR = TileLayout(S[(1, 1, 64, 16) : (1, 1, 16, 1)])        # rows 32 bytes apart, no swizzle
BAD_SWIZZLE = TileLayout(S[(1, 1, 64, 16) : (1, 1, 64, 1)], swizzle=(3, 2, 3))
LA2 = shared_layout(64, 2, 16, 2, 128, False)
LB2 = shared_layout(8, 2, 16, 2, 0, False)
B_STEP8 = TileLayout(S[(1, 2, 1, 8, 2, 8) : (1, 4, 1, 8, 64, 1)])   # the second K step starts 8 bytes in
A_ROW1 = TileLayout(S[(1, 2, 64, 16) : (1, 64, 64, 1)], swizzle=(3, 3, 3))   # the second K step starts at row 1


def k_ok():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=128))
    sa = T.alloc_shared((64 * 64,), "float16")
    sb = T.alloc_shared((8 * 16,), "float16")
    d = T.alloc_local((4,), "float32")
    T.cuda.tile.apply(T.ptx[MMA8], d.view(1, 1, 64, 8, layout=LD), sa.view(1, 1, 64, 16, layout=LA),
                      sb.view(1, 1, 8, 16, layout=LB), scope="warpgroup")


def k_scope_thread():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=128))
    sa = T.alloc_shared((64 * 64,), "float16")
    sb = T.alloc_shared((8 * 16,), "float16")
    d = T.alloc_local((4,), "float32")
    T.cuda.tile.apply(T.ptx[MMA8], d.view(1, 1, 64, 8, layout=LD), sa.view(1, 1, 64, 16, layout=LA), sb.view(1, 1, 8, 16, layout=LB))  # noqa: E501


def k_scope_warp():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=128))
    sa = T.alloc_shared((64 * 64,), "float16")
    sb = T.alloc_shared((8 * 16,), "float16")
    d = T.alloc_local((4,), "float32")
    T.cuda.tile.apply(T.ptx[MMA8], d.view(1, 1, 64, 8, layout=LD), sa.view(1, 1, 64, 16, layout=LA), sb.view(1, 1, 8, 16, layout=LB), scope="warp")  # noqa: E501


def k_not_warpgroups():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=96))
    sa = T.alloc_shared((64 * 64,), "float16")
    sb = T.alloc_shared((8 * 16,), "float16")
    d = T.alloc_local((4,), "float32")
    T.cuda.tile.apply(T.ptx[MMA8], d.view(1, 1, 64, 8, layout=LD), sa.view(1, 1, 64, 16, layout=LA), sb.view(1, 1, 8, 16, layout=LB), scope="warpgroup")  # noqa: E501


def _form(opcode):
    def k():
        T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=128))
        d = T.alloc_local((4,), "float32")
        T.cuda.tile.apply(T.ptx[opcode], d, d, d, scope="warpgroup")
    return k


def k_wrong_fragment():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=128))
    sa = T.alloc_shared((64 * 64,), "float16")
    sb = T.alloc_shared((8 * 16,), "float16")
    d = T.alloc_local((4,), "float32")
    T.cuda.tile.apply(T.ptx[MMA8], d.view(1, 1, 64, 8, layout=LD_BAD), sa.view(1, 1, 64, 16, layout=LA), sb.view(1, 1, 8, 16, layout=LB), scope="warpgroup")  # noqa: E501


def k_d_shared():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=128))
    sa = T.alloc_shared((64 * 64,), "float16")
    sb = T.alloc_shared((8 * 16,), "float16")
    sd = T.alloc_shared((64 * 8,), "float32")
    T.cuda.tile.apply(T.ptx[MMA8], sd.view(1, 1, 64, 8), sa.view(1, 1, 64, 16, layout=LA), sb.view(1, 1, 8, 16, layout=LB), scope="warpgroup")  # noqa: E501


def k_d_int():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=128))
    sa = T.alloc_shared((64 * 64,), "float16")
    sb = T.alloc_shared((8 * 16,), "float16")
    d = T.alloc_local((4,), "int32")
    T.cuda.tile.apply(T.ptx[MMA8], d.view(1, 1, 64, 8, layout=LD), sa.view(1, 1, 64, 16, layout=LA), sb.view(1, 1, 8, 16, layout=LB), scope="warpgroup")  # noqa: E501


def k_b_registers():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=128))
    sa = T.alloc_shared((64 * 64,), "float16")
    b = T.alloc_local((128,), "float16")
    d = T.alloc_local((4,), "float32")
    T.cuda.tile.apply(T.ptx[MMA8], d.view(1, 1, 64, 8, layout=LD), sa.view(1, 1, 64, 16, layout=LA), b.view(1, 1, 8, 16), scope="warpgroup")  # noqa: E501


def k_b_32bit():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=128))
    sa = T.alloc_shared((64 * 64,), "float16")
    sb = T.alloc_shared((8 * 16,), "float32")
    d = T.alloc_local((4,), "float32")
    T.cuda.tile.apply(T.ptx[MMA8], d.view(1, 1, 64, 8, layout=LD), sa.view(1, 1, 64, 16, layout=LA), sb.view(1, 1, 8, 16), scope="warpgroup")  # noqa: E501


def k_no_descriptor():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=128))
    sa = T.alloc_shared((64 * 16,), "float16")
    sb = T.alloc_shared((8 * 16,), "float16")
    d = T.alloc_local((4,), "float32")
    T.cuda.tile.apply(T.ptx[MMA8], d.view(1, 1, 64, 8, layout=LD), sa.view(1, 1, 64, 16, layout=ROW_MAJOR), sb.view(1, 1, 8, 16, layout=LB), scope="warpgroup")  # noqa: E501


def k_bad_swizzle():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=128))
    sa = T.alloc_shared((64 * 64,), "float16")
    sb = T.alloc_shared((8 * 16,), "float16")
    d = T.alloc_local((4,), "float32")
    T.cuda.tile.apply(T.ptx[MMA8], d.view(1, 1, 64, 8, layout=LD), sa.view(1, 1, 64, 16, layout=BAD_SWIZZLE), sb.view(1, 1, 8, 16, layout=LB), scope="warpgroup")  # noqa: E501


def k_misaligned():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=128))
    sa = T.alloc_shared((64 * 64,), "float16")
    sb = T.alloc_shared((8 * 16 + 4,), "float16")
    d = T.alloc_local((4,), "float32")
    T.cuda.tile.apply(T.ptx[MMA8], d.view(1, 1, 64, 8, layout=LD), sa.view(1, 2, 64, 16, layout=LA2), sb.view(1, 2, 8, 16, layout=B_STEP8), scope="warpgroup")  # noqa: E501


def k_swizzle_phase():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=128))
    sa = T.alloc_shared((65 * 128,), "float16")
    sb = T.alloc_shared((2 * 8 * 16,), "float16")
    d = T.alloc_local((4,), "float32")
    T.cuda.tile.apply(T.ptx[MMA8], d.view(1, 1, 64, 8, layout=LD), sa.view(1, 2, 64, 16, layout=A_ROW1), sb.view(1, 2, 8, 16, layout=LB2), scope="warpgroup")  # noqa: E501


def _params(**kw):
    def k():
        T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=128))
        sa = T.alloc_shared((64 * 64,), "float16")
        sb = T.alloc_shared((8 * 16,), "float16")
        d = T.alloc_local((4,), "float32")
        T.cuda.tile.apply(T.ptx[MMA8], d.view(1, 1, 64, 8, layout=LD), sa.view(1, 1, 64, 16, layout=LA), sb.view(1, 1, 8, 16, layout=LB), scope="warpgroup", **kw)  # noqa: E501
    return k


def k_scale_a():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=128))
    sa = T.alloc_shared((64 * 64,), "float16")
    sb = T.alloc_shared((8 * 16,), "float16")
    d = T.alloc_local((4,), "float32")
    T.cuda.tile.apply(T.ptx[MMA8], d.view(1, 1, 64, 8, layout=LD), sa.view(1, 1, 64, 16, layout=LA), sb.view(1, 1, 8, 16, layout=LB), scope="warpgroup", scale_a=2)  # noqa: E501


def k_scale_d():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=128))
    sa = T.alloc_shared((64 * 64,), "float16")
    sb = T.alloc_shared((8 * 16,), "float16")
    d = T.alloc_local((4,), "float32")
    T.cuda.tile.apply(T.ptx[MMA8], d.view(1, 1, 64, 8, layout=LD), sa.view(1, 1, 64, 16, layout=LA), sb.view(1, 1, 8, 16, layout=LB), scope="warpgroup", scale_d=2)  # noqa: E501


def k_unknown_param():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=128))
    sa = T.alloc_shared((64 * 64,), "float16")
    sb = T.alloc_shared((8 * 16,), "float16")
    d = T.alloc_local((4,), "float32")
    T.cuda.tile.apply(T.ptx[MMA8], d.view(1, 1, 64, 8, layout=LD), sa.view(1, 1, 64, 16, layout=LA), sb.view(1, 1, 8, 16, layout=LB), scope="warpgroup", alpha=1)  # noqa: E501


def k_trans_a_regs():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=128))
    ar = T.alloc_local((4,), "uint32")
    sb = T.alloc_shared((8 * 16,), "float16")
    d = T.alloc_local((4,), "float32")
    T.cuda.tile.apply(T.ptx[MMA8], d.view(1, 1, 64, 8, layout=LD), ar.view(1, 1, 64, 8, layout=LAR), sb.view(1, 1, 8, 16, layout=LB), scope="warpgroup", trans_a=1)  # noqa: E501


def k_trans_fp8():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=128))
    sa = T.alloc_shared((64 * 128,), "uint8")
    sb = T.alloc_shared((8 * 32,), "uint8")
    d = T.alloc_local((4,), "float32")
    T.cuda.tile.apply(T.ptx["wgmma.mma_async.sync.aligned.m64n8k32.f32.e4m3.e4m3"], d.view(1, 1, 64, 8, layout=LD), sa.view(1, 1, 64, 32), sb.view(1, 1, 8, 32), scope="warpgroup", trans_b=1)  # noqa: E501


def k_a_repeats():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=128))
    sa = T.alloc_shared((2 * 64 * 64,), "float16")
    sb = T.alloc_shared((8 * 16,), "float16")
    d = T.alloc_local((4,), "float32")
    T.cuda.tile.apply(T.ptx[MMA8], d.view(1, 1, 64, 8, layout=LD), sa.view(2, 1, 64, 16), sb.view(1, 1, 8, 16, layout=LB), scope="warpgroup")  # noqa: E501


def k_wait_eight():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=128))
    T.cuda.tile.apply(T.ptx["wgmma.wait_group.sync.aligned"], 8, scope="warpgroup")


def k_wait_runtime(n: T.int32):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=128))
    T.cuda.tile.apply(T.ptx["wgmma.wait_group.sync.aligned"], n, scope="warpgroup")


def k_fence_shared():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=128))
    sb = T.alloc_shared((8 * 16,), "float16")
    T.cuda.tile.apply(T.ptx["wgmma.fence.sync.aligned"], sb, scope="warpgroup")


MMA8_E4M3 = "wgmma.mma_async.sync.aligned.m64n8k32.f32.e4m3.e4m3"
MMA8_F16ACC = "wgmma.mma_async.sync.aligned.m64n8k16.f16.f16.f16"
LA_FP8 = shared_layout(64, 1, 32, 1, 128, False)
LB_FP8 = shared_layout(8, 1, 32, 1, 0, False)
LA_FP8_HALF_SWIZZLE = TileLayout(S[(1, 1, 64, 32) : (1, 1, 128, 1)], swizzle=(3, 3, 3))   # f16's 128B, on bytes
LD16 = acc_layout(8)


def k_fp8_half_elements():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=128))
    sa = T.alloc_shared((64 * 128,), "uint8")
    sb = T.alloc_shared((8 * 32,), "float16")
    d = T.alloc_local((4,), "float32")
    T.cuda.tile.apply(T.ptx[MMA8_E4M3], d.view(1, 1, 64, 8, layout=LD), sa.view(1, 1, 64, 32, layout=LA_FP8), sb.view(1, 1, 8, 32), scope="warpgroup")  # noqa: E501


def k_fp8_half_swizzle():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=128))
    sa = T.alloc_shared((64 * 128,), "uint8")
    sb = T.alloc_shared((8 * 32,), "uint8")
    d = T.alloc_local((4,), "float32")
    T.cuda.tile.apply(T.ptx[MMA8_E4M3], d.view(1, 1, 64, 8, layout=LD), sa.view(1, 1, 64, 32, layout=LA_FP8_HALF_SWIZZLE), sb.view(1, 1, 8, 32, layout=LB_FP8), scope="warpgroup")  # noqa: E501


def k_fp8_k16_view():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=128))
    sa = T.alloc_shared((64 * 128,), "uint8")
    sb = T.alloc_shared((8 * 32,), "uint8")
    d = T.alloc_local((4,), "float32")
    T.cuda.tile.apply(T.ptx[MMA8_E4M3], d.view(1, 1, 64, 8, layout=LD), sa.view(1, 1, 64, 16), sb.view(1, 1, 8, 32, layout=LB_FP8), scope="warpgroup")  # noqa: E501


def k_f16acc_float32():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=128))
    sa = T.alloc_shared((64 * 64,), "float16")
    sb = T.alloc_shared((8 * 16,), "float16")
    d = T.alloc_local((2,), "float32")
    T.cuda.tile.apply(T.ptx[MMA8_F16ACC], d.view(1, 1, 64, 4, layout=LD16), sa.view(1, 1, 64, 16, layout=LA), sb.view(1, 1, 8, 16, layout=LB), scope="warpgroup")  # noqa: E501


def k_f16acc_f32_shape():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=128))
    sa = T.alloc_shared((64 * 64,), "float16")
    sb = T.alloc_shared((8 * 16,), "float16")
    d = T.alloc_local((4,), "uint32")
    T.cuda.tile.apply(T.ptx[MMA8_F16ACC], d.view(1, 1, 64, 8, layout=LD), sa.view(1, 1, 64, 16, layout=LA), sb.view(1, 1, 8, 16, layout=LB), scope="warpgroup")  # noqa: E501


APPLY = "T.cuda.tile.apply(T.ptx[MMA8]"
APPLY8 = "T.cuda.tile.apply(T.ptx[MMA8_E4M3]"
APPLY16 = "T.cuda.tile.apply(T.ptx[MMA8_F16ACC]"
CASES = [
    Case("sm_90_named", k_ok, APPLY, ("needs the arch-specific target sm_90a", "the target is sm_90"),
         target="sm_90"),
    Case("sm_80", k_ok, APPLY, ("needs the arch-specific target sm_90a", "the target is sm_80"), target="sm_80"),
    Case("sm_100a", k_ok, APPLY, ("sm_90a", "the target is sm_100"), target="sm_100"),
    Case("scope_thread", k_scope_thread, APPLY, ("warpgroup instruction", "not 'thread'")),
    Case("scope_warp", k_scope_warp, APPLY, ("warpgroup instruction", "not 'warp'")),
    Case("not_whole_warpgroups", k_not_warpgroups, APPLY, ("whole aligned warpgroups", "96 threads")),
    Case("n_not_multiple_of_8", _form("wgmma.mma_async.sync.aligned.m64n12k16.f32.f16.f16"), "T.cuda.tile.apply",
         ("N = 12", "multiple of 8")),
    Case("n_too_big", _form("wgmma.mma_async.sync.aligned.m64n264k16.f32.f16.f16"), "T.cuda.tile.apply",
         ("N = 264",)),
    Case("mixed_types", _form("wgmma.mma_async.sync.aligned.m64n8k16.f32.f16.bf16"), "T.cuda.tile.apply",
         ("must both be f16 or both bf16",)),
    Case("k32_half", _form("wgmma.mma_async.sync.aligned.m64n8k32.f32.f16.f16"), "T.cuda.tile.apply",
         ("K = 16",)),
    Case("bf16_f16_accumulator", _form("wgmma.mma_async.sync.aligned.m64n8k16.f16.bf16.bf16"),
         "T.cuda.tile.apply", ("accumulate in f32",)),
    Case("unknown_form", _form("wgmma.mma_async.sp.sync.aligned.m64n8k32.f32.f16.f16"), "T.cuda.tile.apply",
         ("supported:",)),
    Case("wrong_d_fragment", k_wrong_fragment, APPLY, ("operand D", "ownership", "wgmma D fragment")),
    Case("d_in_shared", k_d_shared, APPLY, ("operand D", "register view")),
    Case("d_int32", k_d_int, APPLY, ("operand D", "holds int32", ".f32 slot")),
    Case("b_in_registers", k_b_registers, APPLY, ("operand B", "shared-memory view")),
    Case("b_32bit", k_b_32bit, APPLY, ("operand B", "elements must be f16")),
    Case("no_descriptor", k_no_descriptor, APPLY, ("operand A", "no matrix descriptor expresses",
                                                   "would read element", "the view places it at byte")),
    Case("not_a_swizzle_mode", k_bad_swizzle, APPLY, ("operand A", "no wgmma swizzle mode")),
    Case("start_misaligned", k_misaligned, APPLY, ("operand B", "multiple of 16 bytes")),
    Case("start_in_swizzle_pattern", k_swizzle_phase, APPLY, ("operand A", "inside a 128B swizzle pattern")),
    Case("scale_a_2", k_scale_a, APPLY, ("scale_a must be a compile-time 1 or -1",)),
    Case("scale_d_2", k_scale_d, APPLY, ("scale_d must be 0, 1 or a run-time predicate",)),
    Case("unknown_param", k_unknown_param, APPLY, ("unknown parameter 'alpha'",)),
    Case("trans_a_registers", k_trans_a_regs, APPLY, ("trans_a=1 applies to A in shared memory only",)),
    Case("trans_fp8", k_trans_fp8, "T.cuda.tile.apply", ("trans_b=1", "no transpose")),
    Case("fp8_half_elements", k_fp8_half_elements, APPLY8, ("operand B", "e4m3/e5m2 bytes (uint8)", "16-bit")),
    Case("fp8_half_swizzle", k_fp8_half_swizzle, APPLY8, ("operand A", "no wgmma swizzle mode",
                                                          "for 1-byte elements")),
    Case("fp8_k16_view", k_fp8_k16_view, APPLY8, ("operand A", "atom", "(64, 32)")),
    Case("fp8_k16_form", _form("wgmma.mma_async.sync.aligned.m64n8k16.f32.e4m3.e4m3"), "T.cuda.tile.apply",
         ("K = 32",)),
    Case("fp8_with_f16", _form("wgmma.mma_async.sync.aligned.m64n8k32.f32.e4m3.f16"), "T.cuda.tile.apply",
         (".e4m3.f16",)),
    Case("f16_acc_float32_registers", k_f16acc_float32, APPLY16, ("operand D", "holds float32", ".f16x2 slot")),
    Case("f16_acc_f32_shape", k_f16acc_f32_shape, APPLY16, ("operand D", "(64, 4)")),
    Case("a_repeats_mismatch", k_a_repeats, APPLY, ("operand A", "M_repeat=1")),
    Case("wait_8", k_wait_eight, "T.cuda.tile.apply", ("N must be a compile-time integer 0..7",)),
    Case("wait_runtime", k_wait_runtime, "T.cuda.tile.apply", ("N must be a compile-time integer 0..7",)),
    Case("fence_shared", k_fence_shared, "T.cuda.tile.apply", ("must be a register view",)),
]
for c in CASES:
    if c.target == "sm_90" and c.id != "sm_90_named":
        c.target = "sm_90a"


@pytest.mark.parametrize("case", [c.param() for c in CASES])
def test_bad_wgmma(case):
    run(case)
