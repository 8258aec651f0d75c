"""`CompiledKernel.explain()`: each tile.apply with its line, opcode, repeats and native instructions."""
import re

import numpy as np
import pytest

import tiledsl
from tiledsl import T
from tiledsl.ir import nodes as ir
from tiledsl.core.errors import TiledslError
from tiledsl.tools.explain import explain

MMA = "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"


@pytest.fixture(autouse=True)
def _no_disk_cache(monkeypatch):
    # explain() reads the expanded IR, which only an in-process compilation has.
    monkeypatch.setenv("TILEDSL_DISABLE_DISK_CACHE", "1")


def seed_mma_compiled():
    import seed_mma
    _, _, ap, bp = seed_mma.inputs()
    kernel = tiledsl.jit(seed_mma.warp_mma.fn)            # a fresh JITFunction: nothing cached in memory
    return kernel.compile(ap, bp, np.zeros((16, 8), dtype="float32"), target="sm_90")


def test_seed_mma():
    ck = seed_mma_compiled()
    text = ck.explain()
    assert text == explain(ck) == explain(ck.expanded_ir).replace("kernel warp_mma:", "kernel warp_mma for sm_90:")
    assert text.startswith("kernel warp_mma for sm_90: 1 tile.apply call -> 2 native instructions")
    assert re.search(r"seed_mma\.py:\d+  T\.cuda\.tile\.apply\(T\.ptx\['" + re.escape(MMA) + r"'\], dv, av, bv, "
                     r"T\.float32\(0\), scope='warp'\)", text)
    assert f"  opcode:  {MMA}\n" in text
    assert "  repeats: 2 " in text
    issued = [line.strip() for line in text.splitlines() if line.strip().startswith("[")]
    assert issued == [
        f"[b() m0 n0 k0]  {MMA} {{dr[0], dr[1], dr[2], dr[3]}}, {{ar[0], ar[1], ar[2], ar[3]}}, {{br[0], br[1]}}, "
        "{float32(0.0), float32(0.0), float32(0.0), float32(0.0)};",
        f"[b() m0 n0 k1]  {MMA} {{dr[0], dr[1], dr[2], dr[3]}}, {{ar[4], ar[5], ar[6], ar[7]}}, {{br[2], br[3]}}, "
        "{dr[0], dr[1], dr[2], dr[3]};",
    ]
    assert text.count(MMA) == 1 + 1 + 2                     # the call, the opcode line, two instructions


@tiledsl.jit
def looped(A: T.Tensor((4, 2, 1), "float32"), Out: T.Tensor((4, 2, 1), "float32"), n: T.int32):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    r = T.alloc_local((2, 1), "float32", layout="default")
    for i in range(n):
        T.cuda.tile.apply(T.ptx["ld.global.f32"], r, A[i, 0:2, 0:1])
        T.cuda.tile.apply(T.ptx["fma.rn.f32"], r, r, T.float32(2), T.float32(1))
        if i > 1:
            T.cuda.tile.apply(T.ptx["st.global.f32"], Out[i, 0:2, 0:1], r)


def test_applies_in_loops_and_branches():
    x = np.zeros((4, 2, 1), dtype="float32")
    text = looped.compile(x, x, 3, target="sm_90").explain()
    assert text.startswith("kernel looped for sm_90: 3 tile.apply calls -> 6 native instructions")
    blocks = text.split("\n\n")[1:]
    assert [b.splitlines()[1] for b in blocks] == ["  opcode:  ld.global.f32", "  opcode:  fma.rn.f32",
                                                  "  opcode:  st.global.f32"]
    for b in blocks:
        assert "  repeats: 2 " in b and "inside:  for i" in b and "range(0, n)" in b
    assert "inside:  if (i" in blocks[2] and "if (" not in blocks[0]
    assert "fma.rn.f32 r[1], r[1], float32(2.0), float32(1.0);" in blocks[1]


def test_needs_the_expanded_ir():
    ck = seed_mma_compiled()
    ck.expanded_ir = None                                   # a kernel with neither the IR nor its function
    with pytest.raises(TiledslError, match="no expanded IR to explain"):
        ck.explain()
    with pytest.raises(TiledslError, match="CompiledKernel"):
        explain(42)
    assert isinstance(seed_mma_compiled().expanded_ir, ir.Kernel)


def test_served_from_the_disk_cache(tmp_path, monkeypatch):
    """explain() on a kernel served from the disk cache (a fresh cache folder: compile, then a new kernel object
    and a new process find the entry) expands it again and says the same as the in-process compile."""
    import os
    import subprocess
    import sys
    monkeypatch.delenv("TILEDSL_DISABLE_DISK_CACHE")
    monkeypatch.setenv("TILEDSL_CACHE_DIR", str(tmp_path / "cache"))
    first = seed_mma_compiled()
    assert not getattr(first, "from_disk", False)
    want = first.explain()
    again = seed_mma_compiled()                             # a new JITFunction: the entry comes from disk
    assert again.from_disk and again.expanded_ir is None
    assert again.explain() == want
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    script = (f"import sys; sys.path.insert(0, {os.path.join(root, 'tests')!r}); import test_explain as t; "
              f"ck = t.seed_mma_compiled(); assert ck.from_disk; print(ck.explain(), end='')")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([root, os.path.join(root, "examples")]))
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout == want
