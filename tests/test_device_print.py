"""T.device_print (issue 15): the interpreter's text (captured), the vprintf call in the PTX (through ptxas), and
the format checks' promotion rules."""
import numpy as np
import pytest

import tiledsl
from tiledsl import T
from tiledsl.core import printf
from control_kernels import printer, printer_args, printer_lines
from helpers import ptxas


def _prefix(i):
    b, t = divmod(i, 2)
    return f"(block {b},0,0 thread {t},0,0) "


def test_interpreter_prints_each_thread_in_flat_order_with_a_prefix(capsys):
    tiledsl.jit(printer, interpret=True)(*printer_args())
    out = capsys.readouterr().out
    assert out == "".join(_prefix(i) + line for i, line in enumerate(printer_lines()))


def test_ptx_calls_vprintf_and_passes_ptxas():
    ck = tiledsl.jit(printer).compile(*printer_args(), target="sm_90")
    ptx = ck.asm["ptx"]
    assert ".extern .func" in ptx and "vprintf," in ptx.replace(" ", "")
    r = ptxas(ptx, "sm_90")
    assert r.returncode == 0, r.stderr


def test_print_without_values_and_under_a_condition(capsys):
    def k(A: T.Tensor((8,), "int32")):
        T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=(4, 2)))
        if T.cuda.thread_id(1) == 1 and T.cuda.thread_id(0) >= 2:
            T.device_print("hello\n")
    tiledsl.jit(k, interpret=True)(np.zeros(8, np.int32))
    assert capsys.readouterr().out == "(block 0,0,0 thread 2,1,0) hello\n(block 0,0,0 thread 3,1,0) hello\n"
    assert ptxas(tiledsl.jit(k).compile(np.zeros(8, np.int32), target="sm_90").asm["ptx"], "sm_90").returncode == 0


def test_c_semantics_of_signed_unsigned_and_chars(capsys):
    def k(A: T.Tensor((1,), "int32")):
        T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
        T.device_print("%u %x %d %c%c %5.1f|%-4d|%lu\n", -1, T.cast(-2, "int8"), T.cast(4294967295, "uint32"),
                       72, 105, T.cast(2.25, "bfloat16"), True, T.cast(-1, "int64"))
    tiledsl.jit(k, interpret=True)(np.zeros(1, np.int32))
    assert capsys.readouterr().out == "(block 0,0,0 thread 0,0,0) 4294967295 fffffffe -1 Hi   2.2|1   |" \
                                      "18446744073709551615\n"
    assert ptxas(tiledsl.jit(k).compile(np.zeros(1, np.int32), target="sm_90").asm["ptx"], "sm_90").returncode == 0


def test_format_reading():
    pieces, convs = printf.parse("a%%b %08.3f %lld %x")
    assert pieces == ["a%b ", " ", " ", ""] and [c.conv for c in convs] == ["f", "d", "x"]
    assert convs[1].length == "ll" and convs[0].host == "%08.3f"
    for bad in ("%s", "%p", "%n", "%*d", "%hd", "%", "%lf"):
        with pytest.raises(ValueError):
            printf.parse(bad)
    assert printf.promoted(tiledsl.core.dtypes.float16).name == "float64"
    assert printf.promoted(tiledsl.core.dtypes.uint8).name == "uint32"


def test_device_print_has_a_docstring():
    doc = T.device_print.__doc__
    assert "vprintf" in doc and "unspecified" in doc and "(block x,y,z thread x,y,z)" in doc
