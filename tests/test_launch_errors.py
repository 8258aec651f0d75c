"""Bad calls raise LaunchError before any launch (checked here without a GPU, on fake CUDA arrays)."""
import numpy as np
import pytest

import tiledsl
from tiledsl import T
from helpers import FakeCudaArray


@tiledsl.jit
def k(A: T.Tensor(("M", 4), "float32"), B: T.Tensor(("M", 4), "float32"), n: T.int32):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    B[0, 0] = A[0, 0] + T.cast(n, "float32")


def call(*args, **kw):
    with pytest.raises(tiledsl.LaunchError) as ei:
        k(*args, **kw)
    return str(ei.value)


def test_argument_count():
    assert "missing argument 'n' (takes 3 arguments, got 2)" in call(FakeCudaArray((2, 4)), FakeCudaArray((2, 4)))
    assert "takes 3 arguments, got 4" in call(FakeCudaArray((2, 4)), FakeCudaArray((2, 4)), 1, 2)
    assert "missing argument 'n'" in call(FakeCudaArray((2, 4)), B=FakeCudaArray((2, 4)))


def test_dtype():
    msg = call(FakeCudaArray((2, 4), "float16"), FakeCudaArray((2, 4)), 1)
    assert "'A' has dtype float16, but the kernel declares float32" in msg


def test_static_shape():
    msg = call(FakeCudaArray((2, 5)), FakeCudaArray((2, 5)), 1)
    assert "argument 'A' has shape (2, 5)" in msg and "dimension 1: 5 != 4" in msg


def test_named_size_must_agree():
    msg = call(FakeCudaArray((2, 4)), FakeCudaArray((3, 4)), 1)
    assert "size 'M' is 2" in msg and "argument 'B'" in msg


def test_rank():
    assert "2 dimensions" in call(FakeCudaArray((8,)), FakeCudaArray((2, 4)), 1)


def test_devices_must_match():
    msg = call(FakeCudaArray((2, 4), device=0), FakeCudaArray((2, 4), device=1), 1)
    assert "device 1" in msg and "one device" in msg


def test_not_contiguous():
    msg = call(FakeCudaArray((2, 4), strides=(4, 8)), FakeCudaArray((2, 4)), 1)
    assert "not contiguous" in msg


def test_host_array_on_gpu_path():
    msg = call(np.zeros((2, 4), np.float32), FakeCudaArray((2, 4)), 1)
    assert "host memory" in msg and "interpret=True" in msg


def test_not_an_array():
    assert "must be an array" in call(3, FakeCudaArray((2, 4)), 1)


def test_scalar_type_and_range():
    assert "must be an integer" in call(FakeCudaArray((2, 4)), FakeCudaArray((2, 4)), 1.5)
    assert "does not fit in int32" in call(FakeCudaArray((2, 4)), FakeCudaArray((2, 4)), 2**40)


def test_block_too_large():
    with pytest.raises(tiledsl.LaunchError, match="1024"):
        k[1, 2048](FakeCudaArray((2, 4)), FakeCudaArray((2, 4)), 1)
    with pytest.raises(tiledsl.LaunchError, match="positive"):
        k[0, 32](FakeCudaArray((2, 4)), FakeCudaArray((2, 4)), 1)
