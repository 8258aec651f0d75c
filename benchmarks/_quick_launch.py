import cProfile, pstats, time, torch, tiledsl, numpy as np
from tiledsl import T
from cuda.bindings import driver as drv
import ctypes


@tiledsl.jit
def k4(A: T.Tensor(("N",), "float32"), B: T.Tensor(("N",), "float32"), C: T.Tensor(("N",), "float32"), D: T.Tensor(("N",), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    i = T.cuda.thread_id()
    if i < N:
        D[i] = A[i] + B[i] + C[i]


ts = [torch.zeros(1024, device="cuda") for _ in range(4)]
for _ in range(100):
    k4(*ts)
torch.cuda.synchronize()
plan = next(iter(k4._plans.values()))
slots = [ctypes.c_uint64(t.data_ptr()) for t in ts] + [ctypes.c_int32(1024)]
arr = (ctypes.c_void_p * 5)(*[ctypes.addressof(s) for s in slots])
addr = ctypes.addressof(arr)
h = plan.fn.handle
stream = torch.cuda.current_stream().cuda_stream


def raw():
    drv.cuLaunchKernel(h, 1, 1, 1, 32, 1, 1, 0, stream, addr, 0)


def ours():
    k4(*ts)


for rep in range(3):
    for name, f in (("raw prepacked", raw), ("tiledsl", ours)):
        n = 20000
        t = time.perf_counter()
        for _ in range(n):
            f()
        dt = (time.perf_counter() - t) / n * 1e6
        torch.cuda.synchronize()
        print(f"{name}: {dt:.2f} us")
pr = cProfile.Profile()
pr.enable()
for _ in range(20000):
    k4(*ts)
pr.disable()
torch.cuda.synchronize()
pstats.Stats(pr).sort_stats("tottime").print_stats(12)
