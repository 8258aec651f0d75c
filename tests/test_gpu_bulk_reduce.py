"""The bulk reduction cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 on the GPU (H200): two blocks add
their staged float32 values into one global array (tests/test_bulk_reduce.py's kernel, which the interpreter runs),
against numpy."""
import numpy as np
import pytest

from test_bulk_reduce import data, make

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("parts", [1, 4])
def test_two_blocks_add_into_one_array(parts):
    torch = pytest.importorskip("torch")
    major, minor = torch.cuda.get_device_capability()
    if major * 10 + minor < 90:
        pytest.skip("needs sm_90")
    a, out = data(parts)
    want = out + a[0] + a[1]
    dout = torch.from_numpy(out.copy()).cuda()
    make(parts)(torch.from_numpy(a).cuda(), dout)
    torch.cuda.synchronize()
    np.testing.assert_array_equal(dout.cpu().numpy(), want)
