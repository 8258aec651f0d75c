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

    x = np.zeros((32, 4), np.float32)
    for kern, words in ((through_lanes, "spreads over execution axes"),
                        (shared_lanes, "belong to register layouts"), (memory_lanes, "belong to register layouts"),
                        (layout_inside, "build layouts outside the kernel")):
        with pytest.raises(tiledsl.CompilationError, match=words):
            kern(x)
    with pytest.raises(tiledsl.KernelFault, match="outside dimension 1"):
        run_time_index(np.zeros((4, 8), np.float32), 9)
