"""docs/language.md is generated from the T namespace (tiledsl/tools/langdoc.py): it must be current, and every
public T name must have its own docstring; dir(T) lists the names and help(T.x) shows the docstring."""
import pydoc
import subprocess
import sys

from tiledsl import T
from tiledsl.lang import language as L
from tiledsl.tools import langdoc


def test_language_doc_is_current():
    with open(langdoc.default_path()) as f:
        current = f.read()
    assert current == langdoc.render(), "docs/language.md is stale: run python -m tiledsl.tools.langdoc"


def test_every_public_name_is_documented():
    assert langdoc.undocumented() == []
    doc = langdoc.render()
    for qual, _ in langdoc.names():
        assert f"## {qual}\n" in doc
    # the API's names are all there
    for n in ("T.Tensor", "T.constexpr", "T.alloc_local", "T.alloc_shared", "T.cuda.lane_id", "T.cuda.tile.apply",
              "T.cuda.syncthreads", "T.min", "T.max", "T.cast", "T.grid", "T.float32", "T.ptx", "T.device_entry"):
        assert n in dict(langdoc.names()), n


def test_a_new_builtin_is_picked_up_and_must_be_documented(monkeypatch):
    monkeypatch.setattr(L, "frobnicate", L.Builtin("frobnicate"), raising=False)
    assert "frobnicate" in dir(T)
    assert langdoc.undocumented() == ["T.frobnicate"]
    monkeypatch.setattr(L, "frobnicate", L.Builtin("frobnicate", "T.frobnicate(x, n=1): frobnicates x n times."))
    assert langdoc.undocumented() == []
    d = langdoc.describe("T.frobnicate", T.frobnicate)
    assert d["signature"] == "T.frobnicate(x, n=1)" and d["meaning"] == "Frobnicates x n times."
    with open(langdoc.default_path()) as f:
        assert f.read() != langdoc.render()          # the file would now be stale


def test_dir_and_help():
    names = dir(T)
    assert names == sorted(names) and "cuda" in names and "min" in names and "float16" in names
    assert not [n for n in names if n.startswith("_")]
    for n in ("annotations", "dataclass", "builtins", "Builtin", "TensorType", "TiledslError", "shown", "T"):
        assert n not in names
    text = pydoc.render_doc(T.min, renderer=pydoc.plaintext)
    assert "T.min(a, b, ...): the smallest of two or more values" in text
    assert "a compile-time parameter" in pydoc.render_doc(T.constexpr, renderer=pydoc.plaintext)
    assert "tensor parameter's annotation" in pydoc.render_doc(T.Tensor, renderer=pydoc.plaintext)


def test_generator_check_mode():
    r = subprocess.run([sys.executable, "-m", "tiledsl.tools.langdoc", "--check"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_view_members_are_documented_and_work():
    """docs/language.md's "Buffers and views": every member the front end accepts has its entry, each entry's example
    compiles, and any other attribute is refused."""
    import numpy as np
    import pytest

    import tiledsl
    from tiledsl import layouts as Ls
    doc = langdoc.render()
    for shown, d in langdoc.view_members():
        assert f"## {shown}\n" in doc and d["meaning"] and d["example"] != shown, shown
    MI = 2
    A_FRAG = Ls.mma_a(MI, 1)

    @tiledsl.jit
    def members(A: T.Tensor(("M", 8), "float32"), X: T.Tensor((4, 8), "float32")):
        T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
        r = T.cuda.thread_id() % 4
        j = T.cuda.thread_id() % 8
        n = A.shape[0]
        acc = T.alloc_local((4,), A.dtype)
        T.static_assert(A.ndim == 2)
        ar = T.alloc_local((MI * 4,), "uint32")
        av = ar.view(MI, 1, 16, 8, layout=A_FRAG)   # A_FRAG = tiledsl.layouts.mma_a(MI, 1)  # noqa: F841
        row = X[r, :]; x = row[j]; X[r, j] = x * 2          # noqa: E702
        acc[0] = T.cast(n, "float32")
        A[0, 0] = acc[0]

    ck = members.compile(np.zeros((64, 8), np.float32), np.zeros((4, 8), np.float32), target="sm_90")
    assert ck.asm["ptx"]

    @tiledsl.jit
    def other(A: T.Tensor((4,), "float32")):
        T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
        A[0] = T.cast(A.size, "float32")

    with pytest.raises(tiledsl.CompilationError, match="buffer views have no attribute 'size'"):
        other.compile(np.zeros(4, np.float32), target="sm_90")
