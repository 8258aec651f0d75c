"""Wrong fast-math instructions: qualifiers out of PTX order or missing (.approx, the .ftz that bf16 ex2 and the f64
reciprocal need), qualifiers a form does not have (.ftz on f16 ex2 or on tanh, .rn on rsqrt), types an op lacks,
forms the target lacks (bf16 tanh on sm_80, three-input min/max on sm_90) and operand counts no form of the opcode
takes. Each is a CompilationError at the apply's line naming the opcode and what is wrong."""
import pytest

from badcase import Case, run
from tiledsl import T


def _unary(op, dtype):
    def k():
        T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
        d = T.alloc_local((1,), dtype)
        T.cuda.tile.apply(T.ptx[op], d, d)
    k.__name__ = f"k_{op.replace('.', '_')}_{dtype}"
    return k


def _binary(op, dtype):
    def k():
        T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
        d = T.alloc_local((1,), dtype)
        T.cuda.tile.apply(T.ptx[op], d, d, d)
    k.__name__ = f"k2_{op.replace('.', '_')}_{dtype}"
    return k


def _ternary(op, dtype):
    def k():
        T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
        d = T.alloc_local((1,), dtype)
        T.cuda.tile.apply(T.ptx[op], d, d, d, d)
    k.__name__ = f"k3_{op.replace('.', '_')}_{dtype}"
    return k


NEEDLE = "T.cuda.tile.apply(T.ptx[op]"


def C(id, fn, words, target="sm_90"):
    return Case(id, fn, NEEDLE, words, target=target)


CASES = [
    C("qualifiers_out_of_order", _unary("ex2.ftz.approx.f32", "float32"), ("PTX order", "ex2.approx.ftz.f32")),
    C("ex2_without_approx", _unary("ex2.f32", "float32"), ("ex2.f32", "needs .approx")),
    C("sin_without_approx", _unary("sin.ftz.f32", "float32"), ("sin.f32", "needs .approx")),
    C("tanh_with_rounding_instead_of_approx", _unary("tanh.rn.f32", "float32"), (".rn", "not valid for tanh.f32")),
    C("ftz_on_f16_ex2", _unary("ex2.approx.ftz.f16", "float16"), (".ftz", "not valid for ex2.f16")),
    C("ftz_on_f16x2_ex2", _unary("ex2.approx.ftz.f16x2", "uint32"), (".ftz", "not valid for ex2.f16x2")),
    C("bf16_ex2_without_ftz", _unary("ex2.approx.bf16", "bfloat16"), ("ex2.bf16 needs .ftz",)),
    C("bf16x2_ex2_without_ftz", _unary("ex2.approx.bf16x2", "uint32"), ("ex2.bf16x2 needs .ftz",)),
    C("ftz_on_tanh", _unary("tanh.approx.ftz.f32", "float32"), (".ftz", "not valid for tanh.f32")),
    C("tanh_f64", _unary("tanh.approx.f64", "float64"), ("'f64' is not a register type of tanh",)),
    C("lg2_f16", _unary("lg2.approx.f16", "float16"), ("'f16' is not a register type of lg2",)),
    C("sin_bf16", _unary("sin.approx.bf16", "bfloat16"), ("'bf16' is not a register type of sin",)),
    C("rcp_approx_f64_without_ftz", _unary("rcp.approx.f64", "float64"), ("rcp.approx.f64 needs .ftz",
                                                                          "rcp.approx.ftz.f64")),
    C("rcp_rn_f64_with_ftz", _unary("rcp.rn.ftz.f64", "float64"), ("rcp.rnd.f64 takes no .ftz",)),
    C("rsqrt_with_rounding", _unary("rsqrt.rn.f32", "float32"), (".rn", "not valid for rsqrt.f32")),
    C("approx_repeated", _unary("rsqrt.approx.approx.f32", "float32"), ("repeated",)),
    C("tanh_bf16_on_sm80", _unary("tanh.approx.bf16", "bfloat16"), ("needs sm_90 or newer; the target is sm_80",),
      target="sm_80"),
    C("ex2_bf16x2_on_sm80", _unary("ex2.approx.ftz.bf16x2", "uint32"),
      ("needs sm_90 or newer; the target is sm_80",), target="sm_80"),
    C("three_input_min_on_sm90", _ternary("min.f32", "float32"),
      ("three-input form", "needs sm_100 or newer; the target is sm_90")),
    C("three_input_max_nan_on_sm90", _ternary("max.NaN.f32", "float32"), ("needs sm_100 or newer; the target is sm_90",)),
    C("min_abs_on_sm90", _ternary("min.abs.f32", "float32"), ("needs sm_100 or newer; the target is sm_90",)),
    C("min_abs_with_two_inputs", _binary("min.abs.f32", "float32"), ("exists only with three inputs",), target="sm_100"),
    C("three_input_min_f16", _ternary("min.f16", "float16"), ("takes 3 operands", "got 4"), target="sm_100"),
    C("three_input_min_f64", _ternary("min.f64", "float64"), ("takes 3 operands", "got 4"), target="sm_100"),
    C("three_input_min_relu", _ternary("min.relu.f32", "float32"), (".relu", "not valid for min.f32"),
      target="sm_100"),
    C("xorsign_not_supported", _binary("min.xorsign.abs.f32", "float32"), ("unknown qualifier", ".xorsign")),
    C("ex2_f16_on_a_float32_register", _unary("ex2.approx.f16", "float32"), ("16 bits", "float32")),
    C("tanh_f16x2_on_a_float16_register", _unary("tanh.approx.f16x2", "float16"), ("32 bits", "float16")),
]


@pytest.mark.parametrize("case", [c.param() for c in CASES])
def test_bad_fastmath(case):
    run(case)
