"""Shared test helpers: fake CUDA arrays for launch checks on machines without a GPU, ptxas runs."""
import os
import re
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


def ptxas(ptx: str, arch: str, verbose: bool = False) -> subprocess.CompletedProcess:
    """ptxas on `ptx` for `arch` (verbose: -v, whose stderr gives registers, stack frame and spills)."""
    exe = shutil.which("ptxas")
    assert exe is not None, "ptxas must be on PATH for the compile-only tests"
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "k.ptx")
        with open(path, "w") as f:
            f.write(ptx)
        return subprocess.run([exe, f"-arch={arch}", *(["-v"] if verbose else []), path, "-o",
                               os.path.join(d, "k.cubin")], capture_output=True, text=True)


def check_register_split(ptx: str) -> None:
    """A warp-specialised kernel's setmaxnreg requests fit its block: one producer warpgroup's dec and the other
    warpgroups' inc stay within .maxntid x .maxnreg registers. ptxas accepts a split that does not fit, and on the
    GPU the consumers' inc then waits for registers nobody frees: the block hangs."""
    dec = set(re.findall(r"setmaxnreg\.dec\.sync\.aligned\.u32 (\d+);", ptx))
    inc = set(re.findall(r"setmaxnreg\.inc\.sync\.aligned\.u32 (\d+);", ptx))
    if not dec and not inc:
        return
    threads = np.prod([int(x) for x in re.search(r"\.maxntid (\d+), (\d+), (\d+)", ptx).groups()])
    cap = int(re.search(r"\.maxnreg (\d+)", ptx).group(1))
    assert len(dec) <= 1 and len(inc) <= 1, (dec, inc)
    low = int(dec.pop()) if dec else cap
    high = int(inc.pop()) if inc else cap
    assert 128 * low + (threads - 128) * high <= threads * cap, (threads, cap, low, high)


def check_assembles(ptx: str, max_spill: int = 0) -> str:
    """A one-kernel sm_90a PTX assembles with at most `max_spill` bytes of stack frame and spills, and ptxas keeps
    its wgmma asynchronous: it serializes wgmma (warning C7514) when other instructions touch in-flight
    accumulators, which the pipelines must not do. Returns ptxas -v's report."""
    check_register_split(ptx)
    r = ptxas(ptx, "sm_90a", verbose=True)
    assert r.returncode == 0, r.stderr
    m = re.search(r"\b(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", r.stderr)
    assert m and max(int(x) for x in m.groups()) <= max_spill, r.stderr
    assert "C7514" not in r.stderr and "serialized" not in r.stderr, r.stderr
    return r.stderr


def gpu_and_interpreter(fn, make):
    """(the arrays after a GPU launch of `fn`, the arrays after the interpreter's), both from `make()`'s inputs:
    the GPU test files' comparison of a kernel of a CASES table (torch moves the arrays)."""
    import torch
    import tiledsl
    host = make()
    tiledsl.jit(fn, interpret=True)(*host)
    dev = [torch.from_numpy(np.ascontiguousarray(a)).cuda() for a in make()]
    tiledsl.jit(fn)(*dev)
    torch.cuda.synchronize()
    return [d.cpu().numpy() for d in dev], host
