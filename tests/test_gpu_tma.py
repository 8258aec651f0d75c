"""TMA tensor copies on the GPU (H200): 2-D and 3-D loads and stores with ragged tails against torch, the same
kernels as tests/test_tma.py (which assembles them with ptxas and runs them on the interpreter), and the page's
example, and a multicast into a 2-CTA cluster (tests/test_tma_multicast.py's kernel)."""
import numpy as np
import pytest

from test_tma import CASES, _data, copy_kernel, expected

pytestmark = pytest.mark.gpu


def _torch():
    torch = pytest.importorskip("torch")
    major, minor = torch.cuda.get_device_capability()
    if major * 10 + minor < 90:
        pytest.skip("needs sm_90")
    return torch


def _dev(torch, a):
    t = torch.from_numpy(np.ascontiguousarray(a))
    return t.cuda()


@pytest.mark.parametrize("rank,shape,box,dtype,swizzle,grid", [c for c in CASES if c[0] in (2, 3)])
def test_tma_load_and_store_ragged(rank, shape, box, dtype, swizzle, grid):
    torch = _torch()
    k, pshape = copy_kernel(rank, box, dtype, swizzle, grid=grid)
    a = _data(shape, dtype, seed=rank)
    if dtype == "bfloat16":
        ta = torch.from_numpy(a.view(np.int16)).view(torch.bfloat16).cuda()
        tb, tout = torch.zeros_like(ta), torch.zeros(pshape, dtype=torch.bfloat16, device="cuda")
    else:
        ta, tb = _dev(torch, a), _dev(torch, np.zeros_like(a))
        tout = _dev(torch, np.zeros(pshape, a.dtype))
    for _ in range(3):                   # reference, then generated launcher (the map from the cache)
        k(ta, tb, tout)
    torch.cuda.synchronize()
    view = (lambda t: t.view(torch.int16).cpu().numpy().view(np.uint16)) if dtype == "bfloat16" else \
        (lambda t: t.cpu().numpy())
    np.testing.assert_array_equal(view(tout), expected(a, pshape, 0))
    np.testing.assert_array_equal(view(tb), a)
    torch.testing.assert_close(tb, ta, rtol=0, atol=0)


def test_tma_nan_fill_on_the_gpu():
    torch = _torch()
    k, pshape = copy_kernel(2, (16, 32), "float16", 64, oob_fill="nan", grid=(4, 4, 1))
    a = _data((50, 120), "float16")
    out = torch.zeros(pshape, dtype=torch.float16, device="cuda")
    k(_dev(torch, a), torch.zeros(50, 120, dtype=torch.float16, device="cuda"), out)
    torch.cuda.synchronize()
    o = out.cpu().numpy()
    np.testing.assert_array_equal(o[:50, :120], a)
    assert np.isnan(o[50:]).all() and np.isnan(o[:, 120:]).all()


def test_tma_repeats_on_the_gpu():
    torch = _torch()
    from test_tma import repeat_kernel
    a = _data((12, 32), "float32")
    b = torch.zeros(12, 32, device="cuda")
    repeat_kernel()(_dev(torch, a), b)
    torch.cuda.synchronize()
    np.testing.assert_array_equal(b.cpu().numpy(), a)


def test_tma_sass_has_utmaldg_and_utmastg():
    _torch()
    k, pshape = copy_kernel(2, (16, 32), "float16", 64, grid=(4, 4, 1))
    a = _data((50, 120), "float16")
    sass = k.compile(a, a, np.zeros(pshape, np.float16), target="sm_90").asm["sass"]
    assert "UTMALDG" in sass and "UTMASTG" in sass


def test_tma_page_example_on_the_gpu(tmp_path):
    _torch()
    from test_patterns_docs import run_page
    run_page("tma", tmp_path, with_gpu=True)


def test_tma_multicast_into_a_two_cta_cluster():
    """Two CTAs of a (2, 1, 1) cluster, two clusters: each CTA multicasts its half of the cluster's box with
    cta_mask=0b11; both CTAs' barriers receive both halves' bytes and both tiles hold the whole box (each CTA
    writes it out; compared with torch's slices of A). The interpreter gives the same result
    (tests/test_tma_multicast.py)."""
    torch = _torch()
    from test_tma_multicast import inputs, multicast_kernel
    k, oshape = multicast_kernel()
    a, want = inputs()
    ta = _dev(torch, a)
    for _ in range(2):                   # reference launcher, then the generated one
        out = torch.zeros(oshape, dtype=torch.float16, device="cuda")
        k(ta, out)
        torch.cuda.synchronize()
        expect = ta.view(2, oshape[1], oshape[2]).repeat_interleave(2, dim=0)
        torch.testing.assert_close(out, expect, rtol=0, atol=0)
    np.testing.assert_array_equal(out.cpu().numpy(), want)
    import tiledsl
    host = np.zeros(oshape, np.float16)
    tiledsl.jit(k.fn, interpret=True)(a, host)
    np.testing.assert_array_equal(host, out.cpu().numpy())
    sass = k.compile(a, np.zeros(oshape, np.float16)).asm["sass"]
    if sass:
        assert "UTMALDG" in sass, sass[:2000]
