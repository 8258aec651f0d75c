"""Runtime on the GPU: sizes, scalars, grid expressions, overrides, streams, the fast path, threads."""
import threading

import numpy as np
import pytest

import tiledsl
from tiledsl import T

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")

OFFSET = 1.0


@tiledsl.jit
def axpb(X: T.Tensor(("N",), "float32"), Y: T.Tensor(("N",), "float32"), a: T.float32):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=(N + 255) // 256, block=256))  # noqa: F821
    i = T.cuda.block_id() * 256 + T.cuda.thread_id()
    if i < N:  # noqa: F821
        Y[i] = a * X[i] + OFFSET


def test_sizes_scalars_grid_expression_and_fast_path():
    for n in (1, 1000, 4097, 1 << 20):
        x = torch.randn(n, device="cuda")
        y = torch.full((n,), float("nan"), device="cuda")
        for _ in range(3):                        # first call compiles, later ones take the fast path
            axpb(x, y, 2.5)
        torch.testing.assert_close(y, (2.5 * x) + 1.0, rtol=0, atol=1e-6)


def test_changed_global_recompiles_on_gpu():
    global OFFSET
    x = torch.ones(10, device="cuda")
    y = torch.zeros(10, device="cuda")
    axpb(x, y, 1.0)
    assert y[0].item() == 2.0
    OFFSET = 10.0
    try:
        axpb(x, y, 1.0)
        assert y[0].item() == 11.0
    finally:
        OFFSET = 1.0


def test_launch_override_and_stream():
    x = torch.arange(512, dtype=torch.float32, device="cuda")
    y = torch.zeros(512, device="cuda")
    axpb[(1,), (256,)](x, y, 1.0)                 # only the first 256 elements
    torch.cuda.synchronize()
    assert y[:256].eq(x[:256] + 1).all() and y[256:].eq(0).all()
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        axpb(x, y, 3.0)
    s.synchronize()
    assert y.eq(3 * x + 1).all()
    axpb(x, y, 4.0, stream=s)
    s.synchronize()
    assert y.eq(4 * x + 1).all()


def test_threads_launch_concurrently():
    errors = []

    def work(seed):
        try:
            g = torch.Generator(device="cuda").manual_seed(seed)
            for _ in range(50):
                x = torch.randn(3000, device="cuda", generator=g)
                y = torch.empty(3000, device="cuda")
                axpb(x, y, float(seed))
                torch.testing.assert_close(y, seed * x + 1.0, rtol=0, atol=1e-5)
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    ts = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors, errors[0]


def test_wrong_dtype_on_gpu_is_a_launch_error():
    with pytest.raises(tiledsl.LaunchError, match="float64"):
        axpb(torch.zeros(4, dtype=torch.float64, device="cuda"), torch.zeros(4, device="cuda"), 1.0)
    with pytest.raises(tiledsl.LaunchError, match="not contiguous"):
        axpb(torch.zeros(8, device="cuda")[::2], torch.zeros(4, device="cuda"), 1.0)


def test_native_launcher_is_used_and_exact():
    """After two steady launches kernel[grid, block] and kernel(...) are native builtins; they launch with the
    right arguments every time, and anything unexpected still gets the Python path's answer."""
    from tiledsl.runtime.launchers import native
    k = tiledsl.jit(axpb.fn)
    n = 3000
    xs = [torch.randn(n, device="cuda") for _ in range(3)]
    for i in range(6):
        for launch in (k, k[(n + 255) // 256, 256]):
            y = torch.full((n,), float("nan"), device="cuda")
            launch(xs[i % 3], y, float(i))
            torch.testing.assert_close(y, i * xs[i % 3] + OFFSET, rtol=0, atol=1e-5)
    from tiledsl.runtime import driver
    if native.available() and driver.device_count() == 1:     # (several devices keep the Python launcher)
        assert type(k[(n + 255) // 256, 256]).__name__ == "builtin_function_or_method"
        assert type(k._call).__name__ == "builtin_function_or_method"
    w = torch.nn.Parameter(torch.randn(n, device="cuda"), requires_grad=False)
    y = torch.zeros(n, device="cuda")
    k(w, y, 2.0)                                   # a Parameter launches like a tensor
    torch.testing.assert_close(y, 2.0 * w + OFFSET, rtol=0, atol=1e-5)
    with pytest.raises(tiledsl.LaunchError, match="float64"):
        k(xs[0].double(), y, 1.0)
    with pytest.raises(tiledsl.LaunchError):
        k(xs[0], torch.zeros(n + 1, device="cuda"), 1.0)
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):                     # the current stream is read at every launch
        y = torch.zeros(n, device="cuda")
        k(xs[1], y, 3.0)
    s.synchronize()
    torch.testing.assert_close(y, 3.0 * xs[1] + OFFSET, rtol=0, atol=1e-5)


def test_native_launcher_reads_torch_tensors_directly_and_exactly():
    """On this torch the TensorImpl layout is proved on the GPU's tensors, and the native launcher then launches
    views (offsets), Parameters and empty tensors with the right pointers, and sends strided, CPU, other-dtype,
    subclass and copy-on-write tensors to the Python path's answer."""
    from tiledsl.runtime import driver
    from tiledsl.runtime.launchers import native, torch_layout
    lay = torch_layout.for_device(torch, 0)
    assert isinstance(lay, torch_layout.TorchLayout), lay
    k = tiledsl.jit(axpb.fn)
    base = torch.randn(10000, device="cuda")
    for i in range(4):
        x, y = base[17 + i:17 + i + 3000], torch.full((3100,), float("nan"), device="cuda")[100:]
        k(x, y, float(i))
        torch.testing.assert_close(y, i * x + OFFSET, rtol=0, atol=1e-5)
    if native.available() and driver.device_count() == 1:
        assert type(k._call).__name__ == "builtin_function_or_method"
    with pytest.raises(tiledsl.LaunchError, match="not contiguous"):
        k(base[:6000:2], torch.zeros(3000, device="cuda"), 1.0)
    with pytest.raises(tiledsl.LaunchError):
        k(base[:3000].cpu(), torch.zeros(3000, device="cuda"), 1.0)
    if hasattr(torch, "_lazy_clone"):
        src = torch.randn(3000, device="cuda")
        before = src.clone()
        try:
            lazy = torch._lazy_clone(src)
        except RuntimeError:
            lazy = None
        if lazy is not None:           # the kernel writes Y: a copy-on-write Y must be copied first, not shared
            k(src, lazy, 2.0)
            torch.testing.assert_close(lazy, 2.0 * src + OFFSET, rtol=0, atol=1e-5)
            assert torch.equal(src, before)


def test_older_target_runs_through_its_ptx_and_newer_is_refused():
    # an sm_80 cubin is no machine code for an sm_90 device: the driver compiles the PTX instead (as a fat
    # binary's PTX); a kernel for an SM newer than the device's is a LaunchError, not a driver error
    k80 = tiledsl.jit(axpb.fn, target="sm_80")
    x = torch.randn(5000, device="cuda")
    y = torch.empty_like(x)
    k80(x, y, 2.0)
    torch.testing.assert_close(y, 2.0 * x + 1.0, rtol=0, atol=1e-6)
    major, minor = torch.cuda.get_device_capability()
    newer = tiledsl.jit(axpb.fn, target=f"sm_{major * 10 + minor + 10}")
    with pytest.raises(tiledsl.LaunchError, match="compile it for"):
        newer(x, y, 2.0)
