"""The reference pages' examples run: docs/views.md and docs/from-triton.md (their ```python blocks, in order, as one
module, on the CPU interpreter), and docs/semantics.md's operator table says what the PTX shows."""
import pathlib
import re
import runpy

import pytest

DOCS = pathlib.Path(__file__).resolve().parent.parent / "docs"


def blocks(page):
    return re.findall(r"```python\n(.*?)```", (DOCS / page).read_text(), re.S)


GPU_MARK = "# needs a GPU"


def run_page(page, tmp_path):
    path = tmp_path / ("doc_" + page.replace("-", "_").replace(".md", ".py"))
    path.write_text("\n\n".join(b for b in blocks(page) if not b.startswith(GPU_MARK)))
    return runpy.run_path(str(path), run_name=path.stem)


@pytest.mark.parametrize("page", ["views.md", "from-triton.md"])
def test_page_examples_run(page, tmp_path):
    assert blocks(page)
    run_page(page, tmp_path)


def test_views_page_error_claims():
    """The refusals docs/views.md quotes, with those words."""
    import numpy as np

    import tiledsl
    from tiledsl import T
    from tiledsl.layout import S, TileLayout, laneid
    PL = TileLayout(S[(32, 4, 1) : (1 @ laneid, 1, 1)])

    @tiledsl.jit(interpret=True)
    def through_lanes(X: T.Tensor((32, 4), "float32")):
        T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
        r = T.alloc_local((4,), "float32")
        X[0, 0] = r.view(32, 4, 1, layout=PL)[3, 0, 0]

    @tiledsl.jit(interpret=True)
    def shared_lanes(X: T.Tensor((32, 4), "float32")):
        T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
        T.alloc_shared((32, 4), "float32", layout=PL)

    @tiledsl.jit(interpret=True)
    def memory_lanes(X: T.Tensor((32, 4), "float32")):
        T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
        X.view(32, 4, 1, layout=PL)

    @tiledsl.jit(interpret=True)
    def layout_inside(X: T.Tensor((32, 4), "float32")):
        T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
        T.alloc_local((4,), "float32", layout=TileLayout(S[(2, 2) : (2, 1)]))

    @tiledsl.jit(interpret=True)
    def run_time_index(X: T.Tensor((4, 8), "float32"), i: T.int32):
        T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
        X[0, 0] = X[1, i]

    ONE_REG = TileLayout(S[(32, 4, 1) : (1 @ laneid, 0, 1)])

    @tiledsl.jit(interpret=True)
    def shared_destination(X: T.Tensor((32, 4), "float32")):
        T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
        s = T.alloc_local((1,), "float32")
        T.cuda.tile.apply(T.ptx["ld.global.f32"], s.view(32, 4, 1, layout=ONE_REG), X.view(32, 4, 1), scope="warp")

    x = np.zeros((32, 4), np.float32)
    for kern, words in ((through_lanes, "spreads over execution axes"),
                        (shared_destination, "destination registers overlap: register 0 of s would be written by two"),
                        (shared_lanes, "belong to register layouts"), (memory_lanes, "belong to register layouts"),
                        (layout_inside, "build layouts outside the kernel")):
        with pytest.raises(tiledsl.CompilationError, match=words):
            kern(x)
    with pytest.raises(tiledsl.KernelFault, match="outside dimension 1"):
        run_time_index(np.zeros((4, 8), np.float32), 9)


# docs/semantics.md's operator table: (expression, dtype of a, dtype of b, out dtype, PTX the page names)
OPERATORS = [
    ("a + b", "float32", "float32", "float32", ["add.rn.f32"]),
    ("a - b", "float32", "float32", "float32", ["sub.rn.f32"]),
    ("a * b", "float64", "float64", "float64", ["mul.rn.f64"]),
    ("a / b", "float32", "float32", "float32", ["div.rn.f32"]),
    ("a / b", "float64", "float64", "float64", ["div.rn.f64"]),
    ("a / b", "int32", "int32", "float32", ["cvt.rn.f32.s32", "div.rn.f32"]),
    ("a // b", "int32", "int32", "int32", ["div.s32"]),
    ("a % b", "int32", "int32", "int32", ["rem.s32"]),
    ("a // b", "uint32", "uint32", "uint32", ["div.u32"]),
    ("a % b", "uint32", "uint32", "uint32", ["rem.u32"]),
    ("a << b", "int32", "int32", "int32", ["shl.b32"]),
    ("a >> b", "int32", "int32", "int32", ["shr.s32"]),
    ("a >> b", "uint32", "uint32", "uint32", ["shr.u32"]),
    ("a * b + a", "float32", "float32", "float32", ["mul.rn.f32", "add.rn.f32"]),
    ("T.cast(a, 'int32') + b", "float32", "int32", "int32", ["cvt.rzi.s32.f32"]),
    ("T.cast(a, 'float16')", "float32", "float32", "float16", ["cvt.rn.f16.f32"]),
    ("a + b", "float16", "int32", "float16", ["cvt.rn.f16.s32"]),
    ("1.0 if a != b else 0.0", "float32", "float32", "float32", ["setp.neu.f32"]),
    ("1.0 if a < b else 0.0", "float32", "float32", "float32", ["setp.lt.f32"]),
    ("1 if a < b else 0", "uint32", "uint32", "int32", ["setp.lt.u32"]),
]

KERNEL = '''
import tiledsl
from tiledsl import T


@tiledsl.jit
def op(A: T.Tensor((1,), "{a}"), B: T.Tensor((1,), "{b}"), Out: T.Tensor((1,), "{o}")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    a = A[0]
    b = B[0]
    Out[0] = {expr}
'''


@pytest.mark.parametrize("expr, a, b, o, ptx", OPERATORS)
def test_semantics_operator_table(expr, a, b, o, ptx, tmp_path):
    import numpy as np
    path = tmp_path / "op_kernel.py"
    path.write_text(KERNEL.format(expr=expr, a=a, b=b, o=o))
    kern = runpy.run_path(str(path))["op"]
    arr = {"float32": np.float32, "float64": np.float64, "float16": np.float16, "int32": np.int32,
           "uint32": np.uint32}
    text = kern.compile(*(np.ones(1, arr[t]) for t in (a, b, o)), target="sm_90").asm["ptx"]
    for p in ptx:
        assert p in text, (expr, p)
    if expr == "a * b + a":
        assert "fma" not in text                # not fused: T.fma is the fused form


def test_semantics_floor_division_and_modulo_as_python(tmp_path):
    import numpy as np

    import tiledsl
    path = tmp_path / "floor_kernel.py"
    path.write_text('''
import tiledsl
from tiledsl import T


@tiledsl.jit(interpret=True)
def floors(A: T.Tensor((8,), "int32"), B: T.Tensor((8,), "int32"), Q: T.Tensor((8,), "int32"),
           R: T.Tensor((8,), "int32"), Q4: T.Tensor((8,), "int32"), D: T.Tensor((8,), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=8))
    i = T.cuda.thread_id()
    Q[i] = A[i] // B[i]
    R[i] = A[i] % B[i]
    Q4[i] = A[i] // 4
    D[i] = A[i] / B[i]
''')
    kern = runpy.run_path(str(path))["floors"]
    a = np.array([-7, 7, -7, 7, -8, 0, 13, -1], np.int32)
    b = np.array([2, 2, -2, -2, 3, 5, -4, 4], np.int32)
    q, r, q4, d = (np.zeros(8, np.int32), np.zeros(8, np.int32), np.zeros(8, np.int32), np.zeros(8, np.float32))
    kern(a, b, q, r, q4, d)
    assert list(q) == [x // y for x, y in zip(a.tolist(), b.tolist())]      # -7 // 2 == -4, as Python
    assert list(r) == [x % y for x, y in zip(a.tolist(), b.tolist())]       # -7 % 2 == 1
    assert list(q4) == [x // 4 for x in a.tolist()]
    assert list(d) == list((a.astype(np.float32) / b.astype(np.float32)))  # float32 true division
    ck = tiledsl.jit(kern.fn).compile(a, b, q, r, q4, d, target="sm_90")
    assert "shr.s32" in ck.asm["ptx"]                                          # // 4 by a shift
