"""The native launcher's direct reads of torch's TensorImpl (runtime/launchers/torch_layout.py) on CPU tensors:
the probe proves the layout on this torch, and the launcher then launches exactly the tensors that torch's own
accessors accept (dtype, device, extents, is_contiguous(), data_ptr()), sending everything else to Python."""
import itertools

import pytest

from tiledsl.runtime.launchers import native, torch_layout

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(not native.available(), reason="native launchers need CPython with a GIL")

from test_native_launch import MISSING, Driver  # noqa: E402


def layout():
    lay = torch_layout.probe(torch, "cpu")
    assert isinstance(lay, torch_layout.TorchLayout), lay
    return lay


def build(shapes, dtype=torch.float32, lay=None):
    """A launcher for tensors of `shapes` (named sizes allowed) on the CPU 'device', reading TensorImpl fields."""
    args = [(i, "tensor", (i, dtype, s)) for i, s in enumerate(shapes)]
    drv = Driver(["i64"] * len(shapes))
    fn = lambda: None  # noqa: E731
    spec = {"framework": "torch", "device": 0, "multi": False, "args": args, "slots": ["i64"] * len(shapes),
            "sizes": [], "block": (32, 1, 1), "shared": 0, "handle": 1, "ctx": 2, "fn": fn, "code": fn.__code__,
            "deps": [], "missing": MISSING, "array_type": torch.Tensor, "also_types": [torch.nn.Parameter],
            "stream_fn": lambda d: 0, "grid": [1, 1, 1], "torch_layout": layout() if lay is None else (lay or None)}
    fb = []
    launch, text = native.build(spec, lambda *a, **k: fb.append(a), None, drv.addrs)
    return launch, drv, fb, text


def test_the_probe_proves_every_field_once():
    lay = layout()
    assert lay.impl == 16 and lay.inline >= 5
    assert lay.dtype_code(torch.float16) != lay.dtype_code(torch.bfloat16)
    assert torch_layout.probe(torch, "cpu") == lay


def test_no_accessor_is_called_on_the_direct_path():
    _, _, _, text = build([(16,), ("n", 8)])
    for name in ("dtype", "is_cuda", "is_contiguous", "dim", "numel", "shape", "data_ptr"):
        how = native.direct(torch.Tensor, name)
        assert how is None or f"inttoptr (i64 {how[1]} to ptr)" not in text, name
    _, _, _, accessors = build([(16,), ("n", 8)], lay=False)
    assert f"inttoptr (i64 {native.direct(torch.Tensor, 'data_ptr')[1]} to ptr)" in accessors


def test_contiguous_tensors_and_views_launch_with_their_data_pointers():
    launch, drv, fb, _ = build([(16,), ("n", 8)])
    base = torch.zeros(100)
    cases = [(torch.zeros(16), torch.zeros(3, 8)), (base[8:24], base[20:60].view(5, 8)),
             (torch.nn.Parameter(torch.ones(16)), torch.zeros(0, 8)), (base[84:], base[:8].view(1, 8))]
    for x, y in cases:
        launch(x, y)
        assert drv.launches[-1]["params"] == [x.data_ptr(), y.data_ptr()], (x.shape, y.shape)
    assert fb == []


@pytest.mark.parametrize("bad", [
    lambda: (torch.zeros(32)[::2], torch.zeros(2, 8)),                      # strided
    lambda: (torch.zeros(16), torch.zeros(8, 2).t()),                       # transposed
    lambda: (torch.zeros(16, dtype=torch.float64), torch.zeros(2, 8)),      # dtype
    lambda: (torch.zeros(15), torch.zeros(2, 8)),                           # extent
    lambda: (torch.zeros(16), torch.zeros(2, 9)),
    lambda: (torch.zeros(16, 1), torch.zeros(2, 8)),                        # dimensions
    lambda: (torch.zeros(16, device="meta"), torch.zeros(2, 8)),            # device
    lambda: (torch.zeros(16).as_subclass(type("Sub", (torch.Tensor,), {})), torch.zeros(2, 8)),
    lambda: (torch._lazy_clone(torch.zeros(16)), torch.zeros(2, 8)),       # copy-on-write storage
])
def test_anything_else_takes_the_python_path(bad):
    if "lazy" in bad.__code__.co_names and not hasattr(torch, "_lazy_clone"):
        pytest.skip("no copy-on-write in this torch")
    launch, drv, fb, _ = build([(16,), ("n", 8)])
    launch(*bad())
    assert drv.launches == [] and len(fb) == 1


def test_contiguity_is_torchs_for_every_small_view():
    """Every as_strided view of 2x3x4-ish extents and small strides: launched natively exactly when torch calls it
    contiguous (size-1 and empty dimensions included)."""
    launch, drv, fb, _ = build([("a", "b", "c")])
    store = torch.zeros(200)
    n = 0
    for shape in itertools.product((0, 1, 2, 3), repeat=3):
        for stride in itertools.product((0, 1, 2, 3, 6, 12), repeat=3):
            t = store.as_strided(shape, stride, 1)
            before = len(drv.launches)
            launch(t)
            assert (len(drv.launches) > before) == t.is_contiguous(), (shape, stride)
            if t.is_contiguous():
                assert drv.launches[-1]["params"] == [t.data_ptr()]
            n += 1
    assert n == 64 * 216


def test_a_failed_proof_is_a_reason_not_a_crash(monkeypatch):
    monkeypatch.setattr(torch_layout, "OBJECT_SPAN", (24, 32))
    got = torch_layout.probe(torch, "cpu")
    assert isinstance(got, str) and "TensorImpl pointer" in got
