"""Shared test helpers: fake CUDA arrays for launch checks on machines without a GPU, ptxas runs."""
import os
import shutil
import subprocess
import tempfile

import numpy as np


class FakeCudaArray:
    """Looks like a CUDA array (__cuda_array_interface__) so argument checks run without a GPU."""

    class _Dev:
        def __init__(self, i):
            self.id = i

    def __init__(self, shape, dtype="float32", device=0, strides=None):
        self.shape = tuple(shape)
        self.dtype = np.dtype(dtype)
        self.device = self._Dev(device)
        self.__cuda_array_interface__ = {
            "shape": self.shape, "typestr": self.dtype.str, "data": (0x7F0000000000, False),
            "strides": strides, "version": 3,
        }


def ptxas(ptx: str, arch: str) -> subprocess.CompletedProcess:
    exe = shutil.which("ptxas")
    assert exe is not None, "ptxas must be on PATH for the compile-only tests"
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "k.ptx")
        with open(path, "w") as f:
            f.write(ptx)
        return subprocess.run([exe, f"-arch={arch}", path, "-o", os.path.join(d, "k.cubin")],
                              capture_output=True, text=True)
