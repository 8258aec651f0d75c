"""LLVM IR -> PTX with llvmlite's NVPTX target; PTX -> cubin with ptxas, else nvJitLink, else none (driver JIT).

The PTX ISA version is pinned per target (`Target.ptx_version`) so the installed driver accepts it; an
arch-specific target (sm_90a) is named as such to LLVM (`.target sm_90a`) and to the assembler (`-arch=sm_90a`).
Optimisation is LLVM's O3 pipeline less LICM's scalar promotion (llvm_to_ptx says why), with floating-point
contraction off: a written `a * b + c` stays a multiply and an add.
"""
from __future__ import annotations

import os
import re
import threading

from ..core.errors import CompilationError
from ..core.target import Target

def __getattr__(name):
    # `subprocess` is imported where ptxas runs (a process served from the disk cache never needs it); the module
    # attribute stays reachable for whoever patches it
    if name in ("subprocess", "shutil", "tempfile"):
        import importlib
        return importlib.import_module(name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


_lock = threading.Lock()
_ready = False


def _init():
    global _ready
    if _ready:
        return
    import llvmlite.binding as llvm
    llvm.initialize_all_targets()
    llvm.initialize_all_asmprinters()
    # Keep the user's arithmetic as written: no fmul+fadd -> fma fusion.
    llvm.set_option("tiledsl", "-nvptx-fma-level=0")
    _ready = True


_machines = {}
_PEEL_MAX_DEFAULT = 7           # LLVM's own -unroll-peel-max-count, restored after tiledsl's pipeline


def _machine(target: Target):
    """LLVM's NVPTX target machine for `target` (LLVM 22 knows the arch-specific CPUs such as sm_90a)."""
    tm = _machines.get(target)
    if tm is None:
        import llvmlite.binding as llvm
        nvptx = llvm.Target.from_triple("nvptx64-nvidia-cuda")
        tm = nvptx.create_target_machine(cpu=target.name, features=f"+ptx{target.ptx_version}", opt=3)
        _machines[target] = tm
    return tm


def llvm_to_ptx(llvm_ir: str, target: Target, opt: bool = True, lazy_text: bool = False) -> tuple:
    """Optimised LLVM IR text and PTX text for `target`; with `lazy_text`, a function that returns that text in
    place of it (printing a GEMM's module takes ~6 ms, which the compiler spends while ptxas runs)."""
    import llvmlite.binding as llvm
    with _lock:
        _init()
        tm = _machine(target)
        try:
            mod = llvm.parse_assembly(llvm_ir)
            mod.verify()
        except RuntimeError as e:
            raise CompilationError(f"internal error: generated LLVM IR is invalid ({e}); please report it") from None
        if opt:
            pto = llvm.create_pipeline_tuning_options(speed_level=3)
            pb = llvm.create_pass_builder(tm, pto)
            # LICM's scalar promotion turns a memory location that a loop reads and writes at one address into a
            # register. A kernel's register arrays are allocas with static indices, already registers after SROA,
            # and its loops' other memory accesses are to shared or global memory at addresses that move with the
            # loop (or inside asm): nothing to promote, but the candidate search asks alias analysis about every
            # pair of them (the Hopper GEMM: 35 of O3's 100 ms, and the PTX of the GEMMs and attention kernels
            # is byte-identical without it). The switch is LLVM-global, so it is on only while this pipeline runs.
            # Loop peeling copies a loop's first iteration where a phi is invariant after it: the Hopper GEMM's
            # and FA3's K loops (scale_d = 0 on the first K tile, no stage to release before it), which doubles
            # their wgmma code for every later pass and for ptxas (the GEMM: 28 of LLVM's 170 ms, 30 of ptxas's
            # 100 ms). Without it the loop keeps a run-time scale_d (setp + selp) and a predicated release
            # (and.pred): 3-4 scalar instructions per K tile beside its wgmmas.
            # Measured on the H200 (one process, on/off/on/off): GEMM 4096^3 764 / 763 TFLOP/s, FA3 D = 128 577-618
            # / 631 (causal 537-559 / 560), the Hopper GEMM to cubin 583 / 446-455 ms.
            llvm.set_option("tiledsl", "-disable-licm-promotion=true")
            llvm.set_option("tiledsl", "-unroll-peel-max-count=0")
            try:
                pb.getModulePassManager().run(mod, pb)
            finally:
                llvm.set_option("tiledsl", "-disable-licm-promotion=false")
                llvm.set_option("tiledsl", f"-unroll-peel-max-count={_PEEL_MAX_DEFAULT}")
        ptx = tm.emit_assembly(mod)
        if lazy_text:
            def text():
                with _lock:
                    return str(mod)
            return text, ptx
        return str(mod), ptx


def _which(name: str) -> str | None:
    """`shutil.which(name)` for a bare name on PATH (shutil and the compression modules it loads cost a fresh
    process ~4 ms, and `compile()` asks this before its disk-cache lookup)."""
    if os.name != "posix":
        import shutil
        return shutil.which(name)
    path = os.environ.get("PATH")
    if path is None:
        path = os.confstr("CS_PATH") or os.defpath
    for d in path.split(os.pathsep) if path else ():
        p = os.path.join(d, name)
        if os.path.exists(p) and os.access(p, os.F_OK | os.X_OK) and not os.path.isdir(p):
            return p
    return None


def ptxas_path() -> str | None:
    p = _which("ptxas")
    if p:
        return p
    for cand in ("/usr/local/cuda/bin/ptxas", "/usr/local/bin/ptxas"):
        if os.path.exists(cand):
            return cand
    return None


_ASSEMBLERS = {}


def assembler_id() -> str:
    """Which assembler ptx_to_cubin would run, for the disk cache's key (a cubin and its register report are that
    tool's): ptxas's path, size and modification time, else nvJitLink's version, else "none". Memoized per path."""
    exe = ptxas_path()
    got = _ASSEMBLERS.get(exe)
    if got is None:
        if exe is not None:
            st = os.stat(exe)
            got = f"ptxas:{exe}:{st.st_size}:{st.st_mtime_ns}"
        else:
            nj = _nvjitlink()
            got = f"nvJitLink:{nj.version()}" if nj is not None else "none"
        _ASSEMBLERS[exe] = got
    return got


_NVJITLINK = []


def _nvjitlink():
    """cuda-bindings' nvJitLink when its library is installed (in-process, no subprocess), else None."""
    if not _NVJITLINK:
        try:
            from cuda.bindings import nvjitlink
            nvjitlink.version()
            _NVJITLINK.append(nvjitlink)
        except Exception:
            _NVJITLINK.append(None)
    return _NVJITLINK[0]


def _link(nj, ptx: str, target: Target):
    opts = [f"-arch={target.name}", "-O3", "-Xptxas=-v"]
    h = nj.create(len(opts), [o.encode() for o in opts])
    try:
        data = ptx.encode()
        nj.add_data(h, nj.InputType.PTX, data, len(data), "kernel.ptx")
        try:
            nj.complete(h)
        except Exception:
            n = nj.get_error_log_size(h)
            log = bytearray(n)
            nj.get_error_log(h, log)
            raise CompilationError(f"the generated PTX was rejected for {target.name}:\n"
                                   f"{bytes(log).decode(errors='replace').strip()}") from None
        cubin = bytearray(nj.get_linked_cubin_size(h))
        nj.get_linked_cubin(h, cubin)
        log = bytearray(nj.get_info_log_size(h))
        nj.get_info_log(h, log)
        return bytes(cubin), bytes(log).decode(errors="replace")
    finally:
        nj.destroy(h)


def ptx_to_cubin(ptx: str, target: Target, name: str = "kernel") -> tuple[bytes | None, dict, str]:
    """(cubin or None, metadata from the assembler, which tool made it): ptxas, else nvJitLink, else none.

    The ptxas command comes first although nvJitLink runs in-process: nvJitLink is a linker and assembles PTX as
    relocatable code (ptxas -c), which must keep to the separate-compilation ABI. On the H200 (CUDA 13.0, both
    tools the same build) that gave the Hopper GEMM 24-48 bytes of stack and spills that the whole-program ptxas
    does not, at the same 168-register cap (`ptxas -c` reproduces them)."""
    exe = ptxas_path()
    if exe is not None:
        cubin, log, err = _ptxas(exe, ptx, target)
        if cubin is not None:
            return cubin, parse_ptxas_info(log), "ptxas"
    nj = _nvjitlink()                  # no ptxas, or one that refused (older than the PTX ISA or the target)
    if nj is not None:
        try:
            cubin, log = _link(nj, ptx, target)
            return cubin, parse_ptxas_info(log), "nvJitLink"
        except CompilationError:
            if exe is None:
                raise
        except Exception:
            pass                                  # an nvJitLink too old for this target
    if exe is not None:
        raise CompilationError(f"ptxas rejected the generated PTX for {target.name}:\n{err}")
    return None, {}, "driver"


def _ptxas(exe: str, ptx: str, target: Target) -> tuple[bytes | None, str, str]:
    """(cubin or None, ptxas's -v report, its error text) of a whole-program `ptxas -O3` run."""
    import tempfile
    with tempfile.TemporaryDirectory(prefix="tiledsl-") as d:
        src, out = os.path.join(d, "k.ptx"), os.path.join(d, "k.cubin")
        with open(src, "w") as f:
            f.write(ptx)
        import subprocess
        r = subprocess.run([exe, f"-arch={target.name}", "-v", "-O3", src, "-o", out], capture_output=True,
                           text=True)
        if r.returncode != 0:
            return None, "", r.stderr.strip()
        with open(out, "rb") as f:
            return f.read(), r.stderr, ""


def parse_ptxas_info(text: str) -> dict:
    md = {}
    m = re.search(r"Used (\d+) registers", text)
    if m:
        md["registers"] = int(m.group(1))
    m = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", text)
    if m:
        md["spill_stores"], md["spill_loads"] = int(m.group(1)), int(m.group(2))
    m = re.search(r"(\d+) bytes stack frame", text)
    if m:
        md["stack_frame"] = int(m.group(1))
    m = re.search(r"(\d+) bytes smem", text)
    md["shared_bytes"] = int(m.group(1)) if m else 0
    return md


def sass(cubin: bytes | None) -> tuple:
    """(the SASS text, None), or (None, why there is none): no cubin, no disassembler on PATH, or its failure."""
    import shutil
    import tempfile
    if cubin is None:
        return None, ("there is no cubin to disassemble: the PTX was not assembled (kernel.compile assembles with "
                      "ptxas, which is not on PATH; put the CUDA toolkit's bin folder on PATH)")
    exe = shutil.which("cuobjdump") or shutil.which("nvdisasm")
    if exe is None:
        return None, ("neither cuobjdump nor nvdisasm is on PATH: they come with the CUDA toolkit (its bin folder; "
                      "apt's cuda-cuobjdump-12-x, or conda's cuda-cuobjdump); asm['ptx'] needs neither")
    with tempfile.TemporaryDirectory(prefix="tiledsl-") as d:
        path = os.path.join(d, "k.cubin")
        with open(path, "wb") as f:
            f.write(cubin)
        args = [exe, "-sass", path] if exe.endswith("cuobjdump") else [exe, path]
        import subprocess
        r = subprocess.run(args, capture_output=True, text=True)
        if r.returncode != 0:
            return None, f"{os.path.basename(exe)} failed (exit {r.returncode}): {r.stderr.strip()[:500]}"
        return r.stdout, None
