"""What compiling costs: `import tiledsl`, a new kernel in a warm process, and the first call of a fresh process
with a cold and with a warm disk cache. Prints a markdown table (milliseconds).

    python benchmarks/compile.py            # on a GPU machine: first calls launch the seed fma kernel
    python benchmarks/compile.py --no-gpu   # anywhere: first calls are `kernel.compile(...)` instead
    python benchmarks/compile.py --no-gpu --only-examples   # only the GEMM and seed mma parse -> PTX times

Every run also reports parse -> PTX of the GEMM kernel (tiledsl/ops/gemm/mma.py) and the seed mma kernel
(examples/seed_mma.py), the GEMM's time per compiler stage, and the Hopper GEMM (tiledsl/ops/gemm/hopper.py, the
configuration matmul takes for the big shapes on the H200) from Python to cubin in a warm process with the disk
cache off, with its time per stage (issue 17's target: <= 0.5 s).

Compare with the figures in /work/shared/PEERS.md (Triton 3.6: ~40 ms per new kernel in a warm process,
~475 ms for a fresh process with a warm disk cache).
"""
from __future__ import annotations

import argparse
import importlib
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# The seed fma kernel; {c} makes each copy a different kernel (a different source, so a different cache key).
KERNEL = '''
@tiledsl.jit
def affine_fma(A: T.Tensor((4, 1), "float32"), Out: T.Tensor((4, 1), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    r = T.alloc_local((4, 1), "float32", layout="default")
    T.cuda.tile.apply(T.ptx["ld.global.f32"], r, A)
    T.cuda.tile.apply(T.ptx["fma.rn.f32"], r, r, T.float32({c}), T.float32(1))
    T.cuda.tile.apply(T.ptx["st.global.f32"], Out, r)
'''

# A fresh process: set up the arrays first (torch/cupy import and CUDA context are not tiledsl's cost), then
# time `import tiledsl`, the definition, and the first call (GPU) or compile (--no-gpu).
CHILD = '''
import json, sys, time
mode, target = sys.argv[1], sys.argv[2]
import numpy as np
a_host = np.arange(-2, 2, dtype="float32").reshape(4, 1)
if mode == "torch":
    import torch
    a, out = torch.from_numpy(a_host).cuda(), torch.zeros((4, 1), dtype=torch.float32, device="cuda")
    torch.cuda.synchronize()
    sync = torch.cuda.synchronize
elif mode == "cupy":
    import cupy
    a, out = cupy.asarray(a_host), cupy.zeros((4, 1), dtype="float32")
    cupy.cuda.Device().synchronize()
    sync = cupy.cuda.Device().synchronize
else:
    a, out = a_host, np.zeros((4, 1), dtype="float32")
t0 = time.perf_counter()
import tiledsl
from tiledsl import T
t1 = time.perf_counter()
{kernel}
t2 = time.perf_counter()
if mode == "compile":
    ck = affine_fma.compile(a, out, target=target)
else:
    affine_fma(a, out)
    sync()
t3 = time.perf_counter()
if mode != "compile":
    got = out.cpu().numpy() if mode == "torch" else cupy.asnumpy(out)
    assert (got == 2 * a_host + 1).all(), got
print(json.dumps({{"import": t1 - t0, "define": t2 - t1, "first": t3 - t2, "total": t3 - t0,
                  "llvmlite_binding": "llvmlite.binding" in sys.modules,
                  "from_disk": bool(getattr(next(iter(affine_fma._compiled.values()), None), "from_disk", False))}}))
'''


def child_env(cache_dir=None):
    env = dict(os.environ)
    # An installed package imports from its bytecode cache; with PYTHONDONTWRITEBYTECODE set (as on some dev
    # machines) no .pyc is ever written and every fresh process compiles tiledsl's sources (~30 ms more)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPATH"] = ROOT + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.pop("TILEDSL_DISABLE_DISK_CACHE", None)
    env.pop("TILEDSL_INTERPRET", None)
    if cache_dir is not None:
        env["TILEDSL_CACHE_DIR"] = cache_dir
    return env


def run_json(args, env):
    r = subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env, timeout=600)
    if r.returncode != 0:
        raise RuntimeError(f"child failed ({' '.join(args)}):\n{r.stderr[-3000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def bench_import(runs):
    code = "import time; t = time.perf_counter(); import tiledsl; print(time.perf_counter() - t)"
    out = []
    for _ in range(runs):
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=child_env(),
                           timeout=300)
        if r.returncode != 0:
            raise RuntimeError(r.stderr)
        out.append(float(r.stdout.strip()))
    return out


def bench_new_kernels(n, target, gpu_mode, tmp):
    """parse->PTX and parse->cubin of `n` freshly written kernels in this (warmed-up) process."""
    os.environ["TILEDSL_CACHE_DIR"] = os.path.join(tmp, "warm-process-cache")
    os.environ.pop("TILEDSL_DISABLE_DISK_CACHE", None)
    src_dir = os.path.join(tmp, "kernels")
    os.makedirs(src_dir)
    sys.path.insert(0, src_dir)
    import numpy as np

    a = np.arange(-2, 2, dtype="float32").reshape(4, 1)
    out = np.zeros((4, 1), dtype="float32")
    dev = None
    if gpu_mode == "torch":
        import torch
        dev = (torch.from_numpy(a).cuda(), torch.zeros((4, 1), device="cuda"), torch.cuda.synchronize)
    elif gpu_mode == "cupy":
        import cupy
        dev = (cupy.asarray(a), cupy.zeros((4, 1), dtype="float32"), cupy.cuda.Device().synchronize)

    def load(i, c):
        name = f"bench_kernel_{os.getpid()}_{i}"
        with open(os.path.join(src_dir, name + ".py"), "w") as f:
            f.write("import tiledsl\nfrom tiledsl import T\n" + KERNEL.format(c=c))
        return importlib.import_module(name).affine_fma

    # Warm up: llvmlite's targets, the first ptxas run, the driver, the first launch.
    k = load(-1, "0.5")
    k.compile(a, out, target=target)
    if dev is not None:
        k(dev[0], dev[1])
        dev[2]()
    ptx, cubin, launch, assembler = [], [], [], None
    for i in range(n):
        k = load(i, f"{i + 2}.0")
        t = time.perf_counter()
        ck = k.compile(a, out, target=target)
        cubin.append(time.perf_counter() - t)
        ptx.append(ck.metadata["compile_ms_to_ptx"] / 1e3)
        assembler = ck.metadata.get("assembler", "driver")
        if dev is not None:
            k2 = load(n + i, f"{n + i + 2}.0")
            t = time.perf_counter()
            k2(dev[0], dev[1])
            dev[2]()
            launch.append(time.perf_counter() - t)
    return ptx, cubin, launch, assembler


def bench_examples(reps, target):
    """parse -> PTX (CompiledKernel.metadata["compile_ms_to_ptx"]) of the GEMM kernel (tiledsl/ops/gemm/mma.py, f16,
    the 4096^3 shape) and the seed mma kernel (examples/seed_mma.py), each built afresh per repeat (a new
    JITFunction, new layouts: nothing of the previous compile is reused; the disk cache is off), plus the GEMM's
    stages."""
    import numpy as np
    from tiledsl.compiler import front
    from tiledsl.core.target import Target
    from tiledsl.ir.printer import kernel_str
    from tiledsl.lower import ptx as backend
    from tiledsl.lower.llvm import generate_llvm
    from tiledsl.passes.expand import expand_kernel
    saved = os.environ.get("TILEDSL_DISABLE_DISK_CACHE")
    os.environ["TILEDSL_DISABLE_DISK_CACHE"] = "1"
    try:
        gemm = importlib.import_module("tiledsl.ops.gemm.mma")
        seed_mma_src = os.path.join(ROOT, "examples", "seed_mma.py")

        def new_gemm():
            gemm._KERNELS.clear()              # make_gemm memoizes; a new kernel object (and layouts) each time
            return gemm.make_gemm("float16", "float16", None, (4096, 4096, 4096))

        def new_mma():
            import runpy
            return runpy.run_path(seed_mma_src, run_name="seed_mma_bench")

        a = np.zeros((4096, 4096), np.float16)
        c = np.zeros((4096, 4096), np.float16)
        out = {"gemm": [], "seed_mma": []}
        new_gemm().compile(a, a, c, target=target)          # warm up (llvmlite's targets, imports)
        for _ in range(reps):
            out["gemm"].append(new_gemm().compile(a, a, c, target=target).metadata["compile_ms_to_ptx"] / 1e3)
        for _ in range(reps * 4):
            g = new_mma()
            _, _, ap, bp = g["inputs"]()
            ck = g["warp_mma"].compile(ap, bp, np.zeros((16, 8), np.float32), target=target)
            out["seed_mma"].append(ck.metadata["compile_ms_to_ptx"] / 1e3)
        # the GEMM's stages, the same way compile_kernel runs them
        tgt = Target.parse(target)
        names = ("front end (parse -> tile IR)", "tile IR text", "pattern expansion", "expanded IR text",
                 "LLVM IR built (llvmlite)", "LLVM parse + O3 + NVPTX codegen")
        stages = {n: [] for n in names}
        for _ in range(reps):
            fn = new_gemm().fn
            t = [time.perf_counter()]
            k, _ = front(fn, {}, None, None, tgt)
            t.append(time.perf_counter())
            kernel_str(k)
            t.append(time.perf_counter())
            ek = expand_kernel(k, tgt)
            t.append(time.perf_counter())
            kernel_str(ek)
            t.append(time.perf_counter())
            raw, _ = generate_llvm(ek, tgt, debug_buffer=False)
            t.append(time.perf_counter())
            backend.llvm_to_ptx(raw, tgt)
            t.append(time.perf_counter())
            for n, t0, t1 in zip(names, t, t[1:]):
                stages[n].append(t1 - t0)
        out["hopper"], out["hopper_stages"] = bench_hopper(reps, target)
        return out, stages
    finally:
        if saved is None:
            os.environ.pop("TILEDSL_DISABLE_DISK_CACHE", None)
        else:
            os.environ["TILEDSL_DISABLE_DISK_CACHE"] = saved


HOPPER_CONFIG = dict(persistent=True, bn=256, tma_store=True)     # matmul's choice at 4096^3 and up on the H200


def bench_hopper(reps, target):
    """Python -> cubin of the Hopper GEMM (f16, 4096^3, HOPPER_CONFIG) in this warm process (other kernels compiled
    before; the disk cache off): a new kernel object per repeat (make_hopper_gemm's memo cleared), timed around
    `kernel.compile()`; and the same compile split by stage (front end, pattern expansion, LLVM IR, LLVM O3 +
    NVPTX codegen, ptxas), timed by wrapping the stage functions the compiler calls."""
    import numpy as np
    from tiledsl import compiler
    from tiledsl.lower import llvm as lower_llvm
    hopper_gemm = importlib.import_module("tiledsl.ops.gemm.hopper")
    arch = "sm_90a"          # the only target the kernel has (wgmma, setmaxnreg), whatever the GPU here
    a = np.zeros((4096, 4096), np.float16)

    def new_kernel():
        hopper_gemm._KERNELS.clear()
        return hopper_gemm.make_hopper_gemm("float16", "float16", **HOPPER_CONFIG)

    new_kernel().compile(a, a, a, target=arch)           # warm up (the wgmma and TMA families' first use)
    total = []
    for _ in range(reps):
        k = new_kernel()
        t = time.perf_counter()
        k.compile(a, a, a, target=arch)
        total.append(time.perf_counter() - t)
    names = {"front": "front end (parse -> tile IR)", "expand": "pattern expansion",
             "gen": "LLVM IR built (llvmlite)", "opt": "LLVM parse + O3 + NVPTX codegen", "cubin": "ptxas"}
    stages = {n: [] for n in names.values()}
    spots = [(compiler, "front", "front"), (compiler, "expand_kernel", "expand"), (lower_llvm, "generate_llvm", "gen"),
             (compiler.backend, "llvm_to_ptx", "opt"), (compiler.backend, "ptx_to_cubin", "cubin")]
    saved = [(m, a_, getattr(m, a_)) for m, a_, _ in spots]
    took = {}

    def timed(f, label):
        def run(*args, **kwargs):
            t0 = time.perf_counter()
            try:
                return f(*args, **kwargs)
            finally:
                took[label] = took.get(label, 0.0) + time.perf_counter() - t0
        return run
    try:
        for m, attr, label in spots:
            setattr(m, attr, timed(getattr(m, attr), label))
        for _ in range(reps):
            took.clear()
            new_kernel().compile(a, a, a, target=arch)
            for label, name in names.items():
                stages[name].append(took.get(label, 0.0))
    finally:
        for m, attr, f in saved:
            setattr(m, attr, f)
    return total, stages


def bench_fresh(runs, mode, target, tmp):
    """(cold, warm) child measurements: a new cache folder per run, the warm child reusing the cold one's."""
    script = os.path.join(tmp, "first_call.py")
    with open(script, "w") as f:
        f.write(CHILD.format(kernel=textwrap.dedent(KERNEL.format(c="2"))))
    cold, warm = [], []
    for i in range(runs):
        d = os.path.join(tmp, f"cache-{i}")
        cold.append(run_json([script, mode, target], child_env(d)))
        warm.append(run_json([script, mode, target], child_env(d)))
        assert not cold[-1]["from_disk"] and warm[-1]["from_disk"], (cold[-1], warm[-1])
        assert not warm[-1]["llvmlite_binding"], "a disk-cache hit loaded LLVM"
    return cold, warm


def ms(xs):
    return statistics.median(xs) * 1e3, min(xs) * 1e3


def environment(gpu_mode) -> str:
    import llvmlite
    from tiledsl.lower import ptx as backend
    gpu = "no GPU (--no-gpu)"
    if gpu_mode == "torch":
        import torch
        gpu = f"{torch.cuda.get_device_name(0)}, torch {torch.__version__}"
    elif gpu_mode == "cupy":
        import cupy
        gpu = f"cupy {cupy.__version__}, device 0"
    return (f"Python {platform.python_version()}, llvmlite {llvmlite.__version__}, "
            f"ptxas: {backend.ptxas_path() or 'none (cubin left to the driver)'}; {gpu}")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--no-gpu", action="store_true", help="compile instead of launching (no GPU needed)")
    p.add_argument("--runs", type=int, default=5, help="fresh processes per measurement (median)")
    p.add_argument("--kernels", type=int, default=10, help="new kernels compiled in the warm process")
    p.add_argument("--target", default=None, help="sm_XY (default: the GPU's, or sm_90 with --no-gpu)")
    p.add_argument("--examples", type=int, default=5,
                   help="repeats of the GEMM / seed mma parse -> PTX measurement (0: skip it)")
    p.add_argument("--only-examples", action="store_true", help="measure only the GEMM and seed mma kernels")
    opts = p.parse_args(argv)
    sys.path.insert(0, ROOT)

    gpu_mode = "compile"
    if not opts.no_gpu:
        from tiledsl.runtime.driver import compute_capability, gpu_available
        if not gpu_available():
            print("no GPU found: measuring compilation only (as with --no-gpu)\n")
        else:
            for fw in ("torch", "cupy"):
                try:
                    importlib.import_module(fw)
                    gpu_mode = fw
                    break
                except ImportError:
                    pass
            else:
                print("a GPU but neither torch nor cupy: measuring compilation only\n")
            if opts.target is None:
                opts.target = f"sm_{compute_capability(0)}"
    target = opts.target or "sm_90"

    if opts.only_examples:
        print_examples(*bench_examples(max(1, opts.examples), target), target, max(1, opts.examples))
        return
    tmp = tempfile.mkdtemp(prefix="tiledsl-bench-")
    try:
        imp = bench_import(opts.runs)
        ptx, cubin, launch, assembler = bench_new_kernels(opts.kernels, target, gpu_mode, tmp)
        cold, warm = bench_fresh(opts.runs, gpu_mode, target, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    examples = bench_examples(opts.examples, target) if opts.examples else None

    first = "first call (compile + load + launch + sync)" if gpu_mode != "compile" else "first `.compile()`"
    rows = [("`import tiledsl`, fresh process", imp, f"median of {opts.runs}; includes importing numpy")]
    rows.append(("new kernel, warm process: parse → PTX", ptx, f"median of {opts.kernels} distinct kernels"))
    cub = "parse → cubin (ptxas)" if assembler == "ptxas" else "parse → PTX, cubin left to the driver (no ptxas)"
    rows.append((f"new kernel, warm process: {cub}", cubin, "`kernel.compile()`, incl. disk-cache write"))
    if launch:
        rows.append(("new kernel, warm process: first launch", launch, "compile + module load + launch + sync"))
    for label, runs in (("cold", cold), ("warm", warm)):
        rows.append((f"fresh process, {label} disk cache: import + define + {first}", [r["total"] for r in runs],
                     f"median of {opts.runs}; numpy{', ' + gpu_mode if gpu_mode != 'compile' else ''} and "
                     f"the arrays are set up before the clock starts"))
        rows.append((f"  of which the {first}", [r["first"] for r in runs], ""))
        rows.append(("  of which `import tiledsl`", [r["import"] for r in runs],
                     "llvmlite and the compiler load only on a miss" if label == "warm" else ""))

    print(f"Compile cost, target {target} ({environment(gpu_mode)})\n")
    print("| what | median ms | min ms | notes |")
    print("| --- | ---: | ---: | --- |")
    for label, xs, note in rows:
        med, lo = ms(xs)
        print(f"| {label} | {med:.1f} | {lo:.1f} | {note} |")
    if examples:
        med, lo = ms(examples[0]["hopper"])
        print(f"| hopper gemm -> cubin, warm process | {med:.1f} | {lo:.1f} | tiledsl/ops/gemm/hopper.py f16 4096^3, "
              f"{HOPPER_CONFIG}; disk cache off, a new kernel object per repeat |")
        print()
        print_examples(*examples, target, opts.examples)


def print_examples(out, stages, target, reps):
    print(f"Example kernels, warm process, parse -> PTX (`compile_ms_to_ptx`), target {target}, a new kernel object "
          f"per repeat\n")
    print("| kernel | median ms | min ms | repeats |")
    print("| --- | ---: | ---: | ---: |")
    for name, label in (("gemm", "GEMM f16 4096^3 (tiledsl/ops/gemm/mma.py)"),
                        ("seed_mma", "seed mma (examples/seed_mma.py)")):
        med, lo = ms(out[name])
        print(f"| {label} | {med:.1f} | {lo:.1f} | {len(out[name])} |")
    med, lo = ms(out["hopper"])
    print(f"| hopper gemm -> cubin, warm process (ops/gemm/hopper.py f16 4096^3, {HOPPER_CONFIG}) | {med:.1f} | "
          f"{lo:.1f} | {len(out['hopper'])} |")
    print()
    print("| GEMM stage | median ms | min ms |")
    print("| --- | ---: | ---: |")
    for name, xs in stages.items():
        med, lo = ms(xs)
        print(f"| {name} | {med:.1f} | {lo:.1f} |")
    print()
    print("| Hopper GEMM stage (-> cubin) | median ms | min ms |")
    print("| --- | ---: | ---: |")
    for name, xs in out["hopper_stages"].items():
        med, lo = ms(xs)
        print(f"| {name} | {med:.1f} | {lo:.1f} |")


if __name__ == "__main__":
    main()
