"""Host time per launch, steady state: a tiledsl kernel with 4 tensor arguments against its peers.

    python benchmarks/launch.py                 # needs a GPU (and torch; cupy and triton are optional)
    python benchmarks/launch.py --profile       # also: where tiledsl's launch path spends its time (cProfile)

Every path launches a kernel reading three float32 vectors and writing a fourth (`d = a + b + c`, one block):
- tiledsl `kernel[grid, block](...)` and `kernel(...)` on torch tensors, and on cupy arrays;
- raw cuda-bindings `cuLaunchKernel` of the very same cubin, loaded with `cuModuleLoadData` in the torch
  primary context, with the parameter block packed once in advance (the floor for a Python launch);
- CuPy: the same cubin through `cupy.RawModule(path=...)`, and a CUDA C `RawKernel`;
- Triton `@jit` with 4 pointer arguments, when triton imports;
- the torch op `tiledsl.ops.linear` at a small shape (16 x 256 x 256 f16 with a bias), eager and replayed in a CUDA
  graph, beside torch's `F.linear` at the same shape (issue 32's target: the eager op call at most 1.5x F.linear's).
Each measurement is `--launches` back-to-back launches timed with time.perf_counter (no synchronisation inside
the loop), after a warm-up; rounds interleave the paths and the table shows the median round, and for each tiledsl
row which launcher its steady calls ran (native or Python) after the run. See
/work/shared/PEERS.md for the reference figures (raw prepacked 3.5-4.0 us, CuPy 4.8-5.7, Triton 11.4-16.7).
"""
from __future__ import annotations

import argparse
import ctypes
import os
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import tiledsl  # noqa: E402
from tiledsl import T  # noqa: E402

N = 256


@tiledsl.jit
def add3(A: T.Tensor((N,), "float32"), B: T.Tensor((N,), "float32"), C: T.Tensor((N,), "float32"),
         D: T.Tensor((N,), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=N))
    i = T.cuda.thread_id(0)
    D[i] = A[i] + B[i] + C[i]


@tiledsl.jit
def add3_maps(A: T.TensorMap((N,), "float32", box=(64,)), B: T.TensorMap((N,), "float32", box=(64,)),
              C: T.Tensor((N,), "float32"), D: T.Tensor((N,), "float32")):
    """add3 with two of its inputs passed as TMA tensor maps (prefetched to L2, read through the plain views of
    C): the launch cost of two 128-byte by-value parameters, each encoded once and looked up per launch."""
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=N))
    i = T.cuda.thread_id(0)
    if i == 0:
        T.cuda.tile.apply(T.ptx["cp.async.bulk.prefetch.tensor.1d.L2.global.tile"], A, coords=(0,))
        T.cuda.tile.apply(T.ptx["cp.async.bulk.prefetch.tensor.1d.L2.global.tile"], B, coords=(0,))
    D[i] = C[i] + C[i] + C[i]


CUDA_C = r"""
extern "C" __global__ void add3_c(const float* a, const float* b, const float* c, float* d) {
    int i = threadIdx.x;
    d[i] = a[i] + b[i] + c[i];
}
"""


def timed(fn, n: int) -> float:
    t = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - t) / n


def launcher_of(steady) -> str:
    """Which tiledsl launcher a steady call runs: `steady` is what the call reaches (`kernel[grid, block]`'s
    object, or `kernel._call`): the native builtin (runtime/launchers/native.py) or the Python launchers."""
    return "native" if type(steady).__name__ == "builtin_function_or_method" else "Python"


class Bench:
    def __init__(self, opts):
        self.opts = opts
        self.paths = {}          # label -> (launch fn, sync fn)
        self.which = {}          # label -> a callable naming the launcher the row used (read after the run)
        self.notes = []

    def add(self, label, fn, sync, check, which=None):
        try:
            fn()
            sync()
            check()
            self.paths[label] = (fn, sync)
            if which is not None:
                self.which[label] = which
        except Exception as e:  # a path that fails is reported, the others still run
            self.notes.append(f"{label}: skipped ({type(e).__name__}: {str(e).splitlines()[0][:160]})")

    def run(self) -> dict:
        n, warm = self.opts.launches, max(100, self.opts.launches // 10)
        for fn, sync in self.paths.values():
            timed(fn, warm)
            sync()
        rounds = {label: [] for label in self.paths}
        for _ in range(self.opts.rounds):
            for label, (fn, sync) in self.paths.items():
                sync()
                rounds[label].append(timed(fn, n))
                sync()
        self.rounds = rounds
        return {label: statistics.median(v) * 1e6 for label, v in rounds.items()}

    def ratio(self, label: str, ref: str | None):
        """Median over rounds of label's time / ref's time in the same round (the paths interleave within a
        round, so a drifting host clock cancels)."""
        if ref is None:
            return None
        return statistics.median(a / b for a, b in zip(self.rounds[label], self.rounds[ref]))


def setup(bench: Bench, opts):
    import numpy as np
    import torch
    from cuda.bindings import driver as drv

    dev = torch.device("cuda", 0)
    torch.cuda.set_device(dev)
    host = [np.random.default_rng(i).standard_normal(N).astype("float32") for i in range(3)]
    want = host[0] + host[1] + host[2]
    ta, tb, tc = (torch.from_numpy(h).to(dev) for h in host)
    td = torch.zeros(N, dtype=torch.float32, device=dev)
    tsync = torch.cuda.synchronize

    def tcheck(out):
        def check():
            got = out.cpu().numpy() if hasattr(out, "cpu") else out.get()
            np.testing.assert_allclose(got, want, rtol=1e-6)
            out.zero_() if hasattr(out, "zero_") else out.fill(0)
        return check

    major, minor = torch.cuda.get_device_capability(dev)
    target = f"sm_{major}{minor}"
    ck = add3.compile(ta, tb, tc, td, target=target)
    image = ck.cubin if ck.cubin is not None else ck.asm["ptx"].encode() + b"\0"
    bench.notes.append(f"tiledsl image: {'cubin (' + ck.metadata.get('assembler', '?') + ')' if ck.cubin else 'PTX'}"
                       f", {target}")

    # -- raw cuda-bindings: same image, torch's primary context, parameter block packed once
    err, ctx = drv.cuCtxGetCurrent()
    if int(err) != 0 or ctx is None or int(ctx) == 0:
        err, cudev = drv.cuDeviceGet(0)
        err, ctx = drv.cuDevicePrimaryCtxRetain(cudev)
        drv.cuCtxSetCurrent(ctx)
    err, module = drv.cuModuleLoadData(image)
    assert int(err) == 0, err
    err, func = drv.cuModuleGetFunction(module, ck.name.encode())
    assert int(err) == 0, err
    raw_td = torch.zeros_like(td)
    slots = [ctypes.c_uint64(t.data_ptr()) for t in (ta, tb, tc, raw_td)]
    block = (ctypes.c_void_p * 4)(*[ctypes.addressof(s) for s in slots])
    addr = ctypes.addressof(block)
    bench.keep = (slots, block, module)      # the driver reads these at every launch: keep them alive
    stream = torch.cuda.current_stream(dev).cuda_stream
    launch_kernel = drv.cuLaunchKernel

    def raw():
        launch_kernel(func, 1, 1, 1, N, 1, 1, 0, stream, addr, 0)
    bench.add("raw cuLaunchKernel, params packed in advance", raw, tsync, tcheck(raw_td))

    # -- tiledsl on torch tensors: the steady state (a native launcher after two launches), and the generated
    # Python launcher it replaces (kept for anything the native one does not cover)
    bound = add3[1, N]
    bench.add("tiledsl kernel[grid, block](...), torch", lambda: add3[1, N](ta, tb, tc, td), tsync, tcheck(td),
              lambda: launcher_of(add3[1, N]))
    bench.add("tiledsl kernel[grid, block](...), torch, Python launcher", lambda: bound.call_python(ta, tb, tc, td),
              tsync, tcheck(td), lambda: "Python")

    bench.add("tiledsl kernel(...), torch", lambda: add3(ta, tb, tc, td), tsync, tcheck(td),
              lambda: launcher_of(add3._call))
    if torch.cuda.get_device_capability()[0] >= 9:      # TMA needs sm_90
        tm_d = torch.zeros_like(td)

        def tm_check():
            np.testing.assert_allclose(tm_d.cpu().numpy(), host[2] * 3, rtol=1e-6)
            tm_d.zero_()
        bench.add("tiledsl kernel(...), torch, 2 tensor maps", lambda: add3_maps(ta, tb, tc, tm_d), tsync, tm_check,
                  lambda: launcher_of(add3_maps._call))

    # -- the torch op ops.linear at a small shape, eager and replayed in a CUDA graph, beside F.linear
    linear_rows(bench, torch)

    # -- cupy: tiledsl on cupy arrays, the same cubin through RawModule, a CUDA C RawKernel
    try:
        import cupy
    except ImportError:
        cupy = None
        bench.notes.append("cupy: not installed, its rows are skipped")
    if cupy is not None:
        ca, cb, cc = (cupy.asarray(h) for h in host)
        cd = cupy.zeros(N, dtype="float32")
        csync = cupy.cuda.Device(0).synchronize
        add3_cp = tiledsl.jit(add3.fn)      # its own kernel object: launchers are kept per framework
        cbound = add3_cp[1, N]
        bench.cupy_kernel = add3_cp
        bench.add("tiledsl kernel[grid, block](...), cupy", lambda: add3_cp[1, N](ca, cb, cc, cd), csync, tcheck(cd),
                  lambda: launcher_of(add3_cp[1, N]))
        bench.add("tiledsl kernel[grid, block](...), cupy, Python launcher",
                  lambda: cbound.call_python(ca, cb, cc, cd), csync, tcheck(cd), lambda: "Python")
        suffix = ".cubin" if ck.cubin is not None else ".ptx"
        fd, path = tempfile.mkstemp(suffix=suffix)
        with os.fdopen(fd, "wb") as f:
            f.write(ck.cubin if ck.cubin is not None else ck.asm["ptx"].encode())
        try:
            rm = cupy.RawModule(path=path)
            same = rm.get_function(ck.name)
            cd2 = cupy.zeros(N, dtype="float32")
            bench.add("CuPy RawModule, same cubin", lambda: same((1,), (N,), (ca, cb, cc, cd2)), csync, tcheck(cd2))
        except Exception as e:
            bench.notes.append(f"CuPy RawModule: skipped ({type(e).__name__}: {e})")
        finally:
            os.unlink(path)
        rk = cupy.RawKernel(CUDA_C, "add3_c")
        cd3 = cupy.zeros(N, dtype="float32")
        bench.add("CuPy RawKernel (CUDA C)", lambda: rk((1,), (N,), (ca, cb, cc, cd3)), csync, tcheck(cd3))

    # -- Triton
    if add3_triton is None:
        bench.notes.append(f"triton: not importable ({_triton_error}), its row is skipped")
        return
    td4 = torch.zeros_like(td)
    bench.add("Triton @jit, 4 pointer args", lambda: add3_triton[(1,)](ta, tb, tc, td4, BLOCK=N), tsync,
              tcheck(td4))


LINEAR = (16, 256, 256)      # ops.linear's rows: x (M, K), weight (N, K), f16, with a bias (GPU time << host time)
OPS_EAGER, TORCH_EAGER = "ops.linear 16x256x256 f16 + bias, eager", "F.linear, same shape, eager"


def linear_rows(bench: Bench, torch):
    """Rows for tiledsl.ops.linear (the torch op; issue 32's target: an eager call at most 1.5x F.linear's) and
    F.linear at LINEAR's shape: eager calls, and one call captured in a CUDA graph and replayed (the op's first
    call, which tunes, runs before the capture)."""
    import torch.nn.functional as F

    import tiledsl.ops as ops
    M, N, K = LINEAR
    g = torch.Generator(device="cuda").manual_seed(0)
    x, w, b = (torch.randn(*s, device="cuda", generator=g).half() for s in ((M, K), (N, K), (N,)))
    want = F.linear(x.float(), w.float(), b.float())
    tsync = torch.cuda.synchronize

    def check_of(result):
        def check():
            err = (result().float() - want).abs().max().item()
            assert err <= 2e-2 * want.abs().max().item(), f"max error {err}"
        return check
    calls = {"ops.linear": lambda: ops.linear(x, w, b), "F.linear": lambda: F.linear(x, w, b)}
    bench.add(OPS_EAGER, calls["ops.linear"], tsync, check_of(calls["ops.linear"]))
    bench.add(TORCH_EAGER, calls["F.linear"], tsync, check_of(calls["F.linear"]))
    for name, fn in calls.items():
        try:
            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):      # warm-up on the capture stream: tuning, compiling, workspaces
                fn()
                fn()
            torch.cuda.current_stream().wait_stream(s)
            torch.cuda.synchronize()
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, stream=s):
                out = fn()
            bench.add(f"{name}, same shape, CUDA graph replay", graph.replay, tsync, check_of(lambda out=out: out))
        except Exception as e:
            bench.notes.append(f"{name} under a CUDA graph: skipped ({type(e).__name__}: {e})")


try:
    import triton
    import triton.language as tl

    @triton.jit
    def add3_triton(a, b, c, d, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        tl.store(d + offs, tl.load(a + offs) + tl.load(b + offs) + tl.load(c + offs))
    _triton_error = None
except Exception as e:  # not installed, or installed without a usable backend
    add3_triton, _triton_error = None, f"{type(e).__name__}: {e}"


def table(results: dict, notes, bench) -> str:
    raw = next((k for k in results if k.startswith("raw")), None)
    tri = next((k for k in results if k.startswith("Triton")), None)
    lines = ["| path | tiledsl launcher | µs / launch | × raw | × Triton |", "| --- | --- | ---: | ---: | ---: |"]
    for label, us in sorted(results.items(), key=lambda kv: kv[1]):
        r, t = bench.ratio(label, raw), bench.ratio(label, tri)
        which = bench.which[label]() if label in bench.which else "–"
        lines.append(f"| {label} | {which} | {us:.2f} | {'–' if r is None else f'{r:.2f}'} | "
                     f"{'–' if t is None else f'{t:.2f}'} |")
    notes = notes + ["ratios: median over rounds of the ratio within a round (the paths interleave in every round)"]
    return "\n".join(lines + [""] + [f"- {n}" for n in notes])


def profile(opts):
    import cProfile
    import pstats

    import torch
    ts = [torch.zeros(N, device="cuda") for _ in range(4)]
    for _ in range(1000):
        add3[1, N](*ts)
    torch.cuda.synchronize()
    pr = cProfile.Profile()
    pr.enable()
    for _ in range(opts.launches):
        add3[1, N](*ts)
    pr.disable()
    torch.cuda.synchronize()
    print(f"\ncProfile of {opts.launches} launches of add3[1, {N}](...) on torch tensors:")
    pstats.Stats(pr).sort_stats("tottime").print_stats(15)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--launches", type=int, default=20000, help="launches per timed round")
    p.add_argument("--rounds", type=int, default=5, help="interleaved rounds; the median is shown")
    p.add_argument("--profile", action="store_true", help="also profile tiledsl's launch path with cProfile")
    p.add_argument("--no-gpu", action="store_true", help="do nothing but say so (for scripted runs)")
    opts = p.parse_args(argv)
    from tiledsl.runtime.driver import gpu_available
    if opts.no_gpu or not gpu_available():
        print("launch benchmark: no GPU here (or --no-gpu); nothing measured. Run it on a GPU machine.")
        return 0
    try:
        import torch
    except ImportError:
        print("launch benchmark: needs torch (the raw launch runs in torch's primary context); nothing measured.")
        return 0
    if not torch.cuda.is_available():
        print("launch benchmark: torch sees no CUDA device; nothing measured.")
        return 0
    bench = Bench(opts)
    setup(bench, opts)
    results = bench.run()
    steady = add3[1, N]
    bench.notes.append(f"tiledsl's steady launcher for add3[1, {N}]: "
                       f"{'native (runtime/native.py)' if type(steady).__name__ == 'builtin_function_or_method' else 'Python'}")
    maps, plain = "tiledsl kernel(...), torch, 2 tensor maps", "tiledsl kernel(...), torch"
    if maps in results and plain in results:
        bench.notes.append(f"2 tensor-map arguments vs a plain kernel: {bench.ratio(maps, plain):.2f}x the plain "
                           f"launch (target <= 1.3x)")
    if OPS_EAGER in results and TORCH_EAGER in results:
        bench.notes.append(f"ops.linear eager vs F.linear eager at {'x'.join(map(str, LINEAR))}: "
                           f"{bench.ratio(OPS_EAGER, TORCH_EAGER):.2f}x (issue 32's target <= 1.5x)")
    from tiledsl.runtime.launchers import torch_layout
    lay = torch_layout.for_device(torch, 0)
    bench.notes.append("torch tensors read from their TensorImpl (layout proved at first use): " +
                       ("yes" if isinstance(lay, torch_layout.TorchLayout) else f"no: {lay}"))
    for k in (add3, add3_maps, getattr(bench, "cupy_kernel", None)):
        if k is not None and k.native_unsupported:
            bench.notes.append(f"no native launcher: {k.native_unsupported}")
    print(f"Host time per launch, steady state: {opts.launches} launches per round, median of {opts.rounds} "
          f"rounds; {torch.cuda.get_device_name(0)}, torch {torch.__version__}, Python {sys.version.split()[0]}\n")
    print(table(results, bench.notes, bench))
    if opts.profile:
        profile(opts)
    return 0


if __name__ == "__main__":
    sys.exit(main())
