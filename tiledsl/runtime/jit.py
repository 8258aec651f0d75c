"""`@tiledsl.jit`: bind a call, specialise, look up (memory and disk caches, compiling on a miss) and launch.

A call binds its arguments (abi/check.py), picks its specialization (constexpr values, block, target, options)
and hands the values to a launcher (runtime/launchers/). The first call of a specialization takes the reference
path: the checker, then compile or load, then launch; it leaves a generated steady launcher behind, which after
NATIVE_AFTER steady launches is replaced by a native one. `kernel[grid, block]` returns a cached launcher object
(one dict lookup); `kernel(...)` calls the stored `_call`, the Python entry or, once steady, the native launcher.
"""
from __future__ import annotations

import ast
import functools
import hashlib
import inspect
import json
import threading
import warnings
from operator import attrgetter
from typing import TYPE_CHECKING, Any, Callable

from ..abi import check as C
from ..abi.signature import KernelSignature, Param
from ..cache import disk as cache
from ..cache.fingerprint import fingerprint_value
from ..core import dtypes as dt
from ..core import knobs as config
from ..core.errors import CompilationError, LaunchError, TiledslError, user_frames
from ..core.options import Options
from ..core.target import Target
from ..core.version import __version__
from ..lang import language as L
from ..lang.tensormap import TensorMapType

if TYPE_CHECKING:
    from ..compiled import CompiledKernel

_MISSING = C.MISSING
NATIVE_AFTER = 2          # steady launches through Python before the native launcher is built
_PLAIN = (None, None, ())                # steady key of a call without overrides or constexprs


def jit(fn: Callable | None = None, **options: Any) -> JITFunction | Callable[[Callable], JITFunction]:
    """Make a Python function a tiledsl kernel: `@tiledsl.jit` or `@tiledsl.jit(**options)`.

    Options:
      interpret: run on the CPU interpreter (numpy arrays, CPU torch tensors) instead of the GPU (default False;
                 TILEDSL_INTERPRET=1 turns it on for every kernel).
      target:    e.g. "sm_80", "sm_90a"; default: the capability of the arguments' device, and
                 core.target.DEFAULT_SM (sm_90) for `kernel.compile(...)` without a GPU.
      debug:     a bounds check before every memory access; a violation raises KernelFault at the user's line
                 (default False; TILEDSL_DEBUG=1 turns it on).
      allow_spills: compile a kernel with a `T.alloc_local` larger than a thread's 255 registers, which ptxas can
                 only spill to local memory (default False: such a tile is refused, at its line, before ptxas).
    Compilation is lazy: the first call of each specialization (constexpr values, block, target, options)
    compiles or loads it from the disk cache."""
    unknown = sorted(set(options) - {"interpret", "target", "debug", "allow_spills"})
    try:
        if unknown:
            raise TiledslError(f"tiledsl.jit got unknown option(s) {', '.join(map(repr, unknown))}; it takes "
                               f"interpret=, target=, debug= and allow_spills=")
        if fn is None:
            return lambda f: jit(f, **options)
        return JITFunction(fn, **options)
    except TiledslError as e:
        user_frames(e)        # the user's frames only (core/errors.py); a bare raise adds none of ours
        raise


_COMPILER_HASH = []


def _llvm_version() -> str:
    """llvmlite's version and a hash of tiledsl's own sources: a changed compiler never reuses a disk entry (the
    content hash is memoized in the cache folder by the files' stat signature: `compiler_hash`)."""
    if not _COMPILER_HASH:
        import llvmlite
        from .compiler_hash import compiler_hash
        memo = config.cache_dir() if cache.usable() else None
        _COMPILER_HASH.append(compiler_hash(llvmlite.__version__, memo))
    return _COMPILER_HASH[0]


class JITFunction:
    """A kernel made by `tiledsl.jit`.

    `kernel(*args, stream=None)` launches with the body's `T.device_entry(launch=...)`; `kernel[grid, block]`
    gives a launcher with those dimensions (ints or tuples of up to 3 ints; `grid` may be a callable of the
    bound arguments). `kernel.compile(*args, target=...)` compiles without launching and returns a
    `CompiledKernel`. `kernel.native_unsupported` says why the steady state runs without a native launcher, when
    it does."""
    is_tiledsl_kernel = True       # how the front end tells a kernel from other globals (without importing us)

    def __init__(self, fn: Callable, interpret: bool = False, target: Target | str | int | None = None,
                 debug: bool = False, allow_spills: bool = False) -> None:
        if not inspect.isfunction(fn):
            raise TiledslError(f"@tiledsl.jit decorates a Python function, got {type(fn).__name__}")
        self.fn = fn
        self.interpret = interpret
        self.target = target
        self._target = Target.parse(target) if target is not None else None
        self.debug = debug
        self.allow_spills = bool(allow_spills)
        functools.update_wrapper(self, fn)
        self._lock = threading.RLock()
        self._params = None
        self._declared = None         # KernelSignature of the annotations (the first call's check)
        self._src_state = None        # (code object, [(dict, name, value)], source key)
        self._compiled = {}           # full key -> CompiledKernel
        self._plans = {}              # (full key, device) -> Plan
        self._steady = {}             # (grid, block, constexpr values) -> generated launcher
        self._bound = _BoundTable(self)   # kernel[grid, block] as written -> _Bound, or its native launcher
        self._getitem = self._lookup  # what kernel[grid, block] calls (the table's C lookup once a launch is native)
        self._interp_programs = {}    # specialization -> (interpreter Program, KernelSignature)
        self._constexpr_idx = None
        self._nparams = -1
        self.native_unsupported = None  # why the last native launcher was not built, if it was not
        self._call = self._call_python  # what kernel(...) runs: the Python entry, or once steady the native one
        self._plain_hits = 0

    def __repr__(self) -> str:
        return f"<tiledsl kernel {self.fn.__qualname__}>"

    # `kernel[grid, block]` and `kernel(...)` reach their launchers without a Python frame in between: each special
    # method is a property whose getter is C (attrgetter), and CPython calls what the getter returns: the table's
    # own C lookup for `kernel[...]`, and `_call` (the Python entry, or once steady the native builtin) for
    # `kernel(...)`. (A Python method here costs a frame per launch: about 5% of the driver's floor.)
    __getitem__ = property(attrgetter("_getitem"), doc="`kernel[grid, block]`: a launcher with those dimensions "
                                                       "(validated once, then one dict lookup).")
    __call__ = property(attrgetter("_call"), doc="`kernel(*args, stream=None)`: launch on the arguments' device "
                                                 "and the framework's current stream (or `stream=`).")

    # ------------------------------------------------------------ signature
    def params(self):
        if self._params is None:
            sig = inspect.signature(self.fn)
            out = []
            for name, p in sig.parameters.items():
                ann = p.annotation
                if isinstance(ann, str):
                    try:
                        ann = eval(ann, self.fn.__globals__)  # noqa: S307 - the user's own annotation
                    except Exception as e:
                        from ..frontend.source import Source
                        src = Source(self.fn)
                        node = next((a for a in src.fdef.args.args if a.arg == name), src.fdef)
                        raise CompilationError(f"cannot evaluate the annotation of '{name}': {e}",
                                               src.loc(node)) from None
                if isinstance(ann, L.TensorType):
                    kind = "tensor"
                elif isinstance(ann, TensorMapType):
                    kind = "tensormap"
                elif ann is L.constexpr:
                    kind = "constexpr"
                elif ann is inspect.Parameter.empty:
                    kind = "missing"
                else:
                    kind = "scalar"
                out.append((name, kind, ann, p.default))
            self._params = out
        return self._params

    def declared(self) -> KernelSignature:
        """The parameters as annotated (checked before the first compilation of a specialization)."""
        if self._declared is None:
            ps = []
            for name, kind, ann, _ in self.params():
                if kind == "tensor":
                    ps.append(Param(name, kind, ann.dtype, tuple(ann.shape)))
                elif kind == "tensormap":
                    ps.append(Param(name, kind, ann.dtype, tuple(ann.shape), tensormap=ann))
                elif kind == "scalar":
                    ps.append(Param(name, kind, ann if isinstance(ann, dt.DType) else None))
                else:
                    ps.append(Param(name, kind))
            self._declared = KernelSignature.declared(self.fn.__name__, tuple(ps))
        return self._declared

    def bind(self, args, kwargs) -> list:
        params = self.params()
        return C.bind(self.fn.__name__, [p[0] for p in params], [p[3] for p in params], args, kwargs)

    # ------------------------------------------------------------ keys
    def source_key(self) -> str:
        """Hash of the source and every global it names; recomputed when the code or a global changes."""
        st = self._src_state
        if st is not None and st[0] is self.fn.__code__ and all(d.get(n, _MISSING) is v for d, n, v in st[1]):
            return st[2]
        from ..frontend.source import Source
        src = Source(self.fn)
        deps, fps = [], []
        closure = {}
        if self.fn.__closure__:
            for n, c in zip(self.fn.__code__.co_freevars, self.fn.__closure__):
                try:
                    closure[n] = c.cell_contents
                except ValueError:
                    pass
        names = sorted({n.id for n in ast.walk(src.fdef) if isinstance(n, ast.Name)})
        g = self.fn.__globals__
        seen = set()
        for n in names:
            if n in closure:
                v = closure[n]
                fps.append(f"closure {n}={fingerprint_value(v) or type(v).__name__}")
                _helper_reads(v, deps, seen)
            elif n in g:
                v = g[n]
                deps.append((g, n, v))
                fps.append(f"global {n}={fingerprint_value(v) or 'object:' + type(v).__name__}")
                _helper_reads(v, deps, seen)
        # the annotations as evaluated when the def ran: a factory's locals (a TensorMap's fill, a shape) are
        # neither closure cells nor globals, yet decide the kernel
        for n, v in sorted(getattr(self.fn, "__annotations__", {}).items()):
            fps.append(f"annotation {n}={fingerprint_value(v) or repr(v)}")
        h = hashlib.sha256()
        h.update(src.text.encode())
        h.update("\n".join(fps).encode())
        key = h.hexdigest()
        if st is not None and st[2] != key:
            self._steady.clear()                  # steady-state launchers belong to the old code
        # native launchers check the old globals: new _Bound objects will earn new ones
        self._bound.clear()
        self._getitem = self._lookup
        self._call, self._plain_hits = self._call_python, 0
        self._src_state = (self.fn.__code__, deps, key)
        return key

    @property
    def options(self) -> Options:
        """The compile options: jit(debug=..., allow_spills=...), TILEDSL_DEBUG as it is when a specialization is
        made."""
        return Options(debug=bool(self.debug or config.debug()), allow_spills=self.allow_spills)

    def spec(self, values, block, target: Target) -> tuple:
        constexprs = {}
        parts = []
        for (name, kind, ann, _), v in zip(self.params(), values):
            if kind == "constexpr":
                fp = fingerprint_value(v)
                if fp is None:
                    raise LaunchError(f"constexpr argument '{name}' must be an int, float, bool, str, dtype, "
                                      f"layout or tuple of those, got {type(v).__name__}")
                constexprs[name] = v
                parts.append(f"{name}={fp}")
        parts.append(f"block={block}")
        parts.append(f"target={target.key}")
        parts.append(self.options.key())
        return constexprs, "|".join(parts)

    # ------------------------------------------------------------ compile
    def compile(self, *args: Any, target: Target | str | int | None = None, grid=None, block=None,
                **kwargs: Any) -> CompiledKernel:
        """Compile without launching (no GPU needed); arrays of any kind stand for their shape and dtype.
        The target: `target=`, else the kernel's jit(target=...), else core.target.DEFAULT_SM."""
        try:
            return self._compile(args, kwargs, target, grid, block)
        except TiledslError as e:
            user_frames(e)
            raise

    def _compile(self, args, kwargs, target, grid, block) -> CompiledKernel:
        from ..lower import ptx as backend
        tgt = Target.parse(target) if target is not None else (self._target or Target.default())
        values = self.bind(args, kwargs)
        block = C.dims(block) if block is not None else None
        grid = C.check_grid(C.dims(grid)) if grid is not None and not callable(grid) else None
        sizes = {}
        for p, v in zip(self.declared().params, values):
            if p.kind == "tensor":
                C.check_tensor(p.name, C.array_info(v), p.dtype, p.shape, sizes, gpu=False)
            elif p.kind == "tensormap":
                C.check_tensor_map(p, C.array_info(v), sizes, gpu=False)
            elif p.kind == "scalar" and p.dtype is not None:
                C.check_scalar(p.name, v, p.dtype)
        return self._get(values, tgt, block, grid, want_cubin=backend.ptxas_path() is not None)

    def _get(self, values, target: Target, block, grid, want_cubin=True) -> CompiledKernel:
        constexprs, spec = self.spec(values, block, target)
        from ..lower.ptx import assembler_id
        key = hashlib.sha256(f"{self.source_key()}|{spec}|tiledsl={__version__}|llvmlite={_llvm_version()}"
                             f"|cubin={want_cubin and assembler_id()}".encode()).hexdigest()
        ck = self._compiled.get(key)
        if ck is not None:
            return ck
        with self._lock:
            ck = self._compiled.get(key)
            if ck is not None:
                return ck
            ck = self._from_disk(key)
            if ck is None:
                from ..compiler import compile_kernel
                ck = compile_kernel(self.fn, constexprs, target, self.options, block, grid, want_cubin)
                self._to_disk(key, ck)
            else:       # the entry keeps text only: explain() expands the kernel again when asked (same key)
                ck.reexpand = functools.partial(_expand_again, self.fn, constexprs, target, self.options, block,
                                                grid)
            ck.key = key
            self._compiled[key] = ck
            return ck

    def _from_disk(self, key):
        entry = cache.load(key)
        if entry is None:
            return None
        try:
            ck = self._entry_kernel(entry)
        except (KeyError, TypeError, ValueError, AttributeError, UnicodeDecodeError) as e:
            # valid JSON and hashes, but not what _to_disk writes: a foreign or hand-edited entry
            cache.discard(key, f"{type(e).__name__}: {e}")
            return None
        ck.from_disk = True
        return ck

    def _entry_kernel(self, entry) -> CompiledKernel:
        """The CompiledKernel of a disk entry; raises ValueError (or KeyError, TypeError) for anything that is not
        what `_to_disk` writes."""
        from ..compiled import CompiledKernel, StageDict
        data = entry["data"]
        asm = json.loads(data["asm.json"].decode())
        if not isinstance(asm, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in asm.items()) \
                or "ptx" not in asm:
            raise ValueError("asm.json is not the stages' text")
        name, sm, metadata = entry["name"], entry["sm"], entry["metadata"]
        # the kernel is named by its def (the code object's name), not by a __name__ a factory assigned later
        if not isinstance(name, str) or name != self.fn.__code__.co_name or not isinstance(sm, int) or \
                isinstance(sm, bool) or not isinstance(metadata, dict):
            raise ValueError("name, sm or metadata")
        if not isinstance(metadata.get("dynamic_shared", 0), int) or \
                not isinstance(metadata.get("debug_sites", []), list):
            raise ValueError("metadata")
        sig = KernelSignature.from_data(entry["signature"])
        if [p.name for p in sig.params] != [p[0] for p in self.params()] or sig.name != name:
            raise ValueError("the signature is another kernel's")
        if sig.debug_buffer and not metadata.get("debug_sites"):
            raise ValueError("a debug kernel without its sites")
        cubin = data.get("kernel.cubin")
        asm = StageDict(asm, cubin)
        return CompiledKernel(name, sm, asm, metadata, sig, cubin)

    def _to_disk(self, key, ck):
        files = {"asm.json": json.dumps({k: v for k, v in dict.items(ck.asm) if k != "sass"})}
        if ck.cubin is not None:
            files["kernel.cubin"] = ck.cubin
        cache.store(key, {"name": ck.name, "sm": ck.sm, "metadata": ck.metadata,
                          "signature": ck.signature.to_data()}, files)

    # ------------------------------------------------------------ launch
    def _lookup(self, cfg):
        """`kernel[grid, block]` until one of its launches is native: the table's lookup, and a LaunchError for a
        configuration that cannot key it (a list). Afterwards `kernel[...]` is the table's C lookup itself, which
        costs no Python frame per launch, and a list there meets Python's own TypeError (unhashable type)."""
        try:
            try:
                return self._bound[cfg]
            except TypeError:
                try:
                    hash(cfg)
                except TypeError:
                    raise LaunchError(f"kernel[grid, block]: grid and block are ints or tuples of up to 3 ints, "
                                      f"got {C.short_repr(cfg, 80)}; write a list as a tuple, e.g. "
                                      f"kernel[(2,), (32,)] (the launch cache is keyed on them)") from None
                raise
        except TiledslError as e:
            user_frames(e)        # the user's frames only (core/errors.py); a bare raise adds none of ours
            raise

    def _make_bound(self, cfg):
        try:
            return self._new_bound(cfg)
        except TiledslError as e:
            user_frames(e)
            raise

    def _new_bound(self, cfg):
        if not isinstance(cfg, tuple) or len(cfg) != 2:
            raise LaunchError("launch with kernel[grid, block](*args)")
        grid = cfg[0] if callable(cfg[0]) else C.check_grid(C.dims(cfg[0]))
        block = C.dims(cfg[1])
        C.check_block(block)
        b = _Bound(self, grid, block, cfg if not callable(grid) else None)
        if not callable(grid) and len(self._bound) < 256:
            self._bound[cfg] = b
        return b

    def _call_python(self, *args, stream=None, **kwargs):
        # Steady state with no constexprs and no overrides: straight to the prepared launcher.
        if not kwargs and self._constexpr_idx == []:
            f = self._steady.get(_PLAIN)
            if f is not None and len(args) == self._nparams and self._fresh() and \
                    f.try_launch(args, None if stream is None else _stream(stream)):
                if stream is None and self._plain_hits >= 0:
                    self._plain_hits, n = self._count_steady(self._plain_hits, f, self._call_python)
                    if n is not None:                 # kernel(...) now calls it with no Python between
                        self._call = n
                return None
        try:
            return self.run(args, kwargs, None, None, stream)
        except TiledslError as e:
            user_frames(e)        # the user's frames only (core/errors.py); a bare raise adds none of ours
            raise

    def _count_steady(self, hits: int, f, fallback):
        """(new count, native launcher or None) after one more steady launch through the Python launcher `f`:
        at NATIVE_AFTER the native one is tried once (the count then never reaches it again, even when threads
        race here)."""
        hits += 1
        if hits < NATIVE_AFTER:
            return hits, None
        return -(1 << 62), self._native_for(f, fallback)

    def _native_for(self, f, fallback):
        """The native launcher replacing the generated Python one `f` (launchers/native.py), or None."""
        if not config.native_launch():
            return None
        from .launchers import native
        try:
            st = self._src_state
            spec = native.spec_for(f.sig, f.plan, f.framework, f.device, f.grid, (self.fn, st[0], st[1], _MISSING))
            return native.build(spec, fallback, native.raise_launch_error)[0]
        except native.Unsupported as e:
            self.native_unsupported = str(e)  # why this kernel keeps the Python launcher (benchmarks print it)
            return None
        except Exception as e:  # a machine where LLVM cannot JIT: the Python launcher is as correct, only slower
            warnings.warn(f"tiledsl: no native launcher for {self.fn.__name__} ({type(e).__name__}: {e}); "
                          f"launching through Python")
            return None

    def _interpreting(self) -> bool:
        return self.interpret or config.interpret()

    def run(self, args, kwargs, grid, block, stream):
        values = self.bind(args, kwargs)
        if block is not None and (block.__class__ is not tuple or len(block) != 3):
            block = C.dims(block)
        if grid is not None and not callable(grid) and (grid.__class__ is not tuple or len(grid) != 3):
            grid = C.check_grid(C.dims(grid))
        steady = self._steady_entry(values, grid, block)
        if steady is not None and self._fresh() and \
                steady.try_launch(values, None if stream is None else _stream(stream)):
            return None
        return self._run_reference(values, grid, block, stream)

    def _steady_key(self, values, grid, block):
        cx = self._constexpr_idx
        try:
            key = (grid if not callable(grid) else None, block, tuple(values[i] for i in cx) if cx else ())
            hash(key)
        except TypeError:
            return None
        return key

    def _steady_entry(self, values, grid, block):
        if grid is not None and callable(grid):
            return None
        if self._constexpr_idx is None:
            if self._interpreting():
                return None
            self._constexpr_idx = [i for i, p in enumerate(self.params()) if p[1] == "constexpr"]
            self._nparams = len(self.params())
        key = self._steady_key(values, grid, block)
        return self._steady.get(key) if key is not None else None

    def _fresh(self) -> bool:
        st = self._src_state
        if st is None or st[0] is not self.fn.__code__:
            return False
        for d, n, v in st[1]:
            if d.get(n, _MISSING) is not v:
                return False
        return True

    def _run_reference(self, values, grid, block, stream):
        """The reference path: check (the one checker), compile or load, launch; leaves a steady launcher."""
        if block is not None:
            C.check_block(block)
        if self._interpreting():
            if stream is not None:      # the interpreter runs synchronously, but a stream= the GPU path would
                _stream(stream)         # refuse is refused here too (LaunchError), so CPU tests catch it
            return self._interpret(values, grid, block)
        from . import driver
        from .launchers.generated import GeneratedLauncher, Unsupported
        from .launchers.reference import Plan, ReferenceLauncher
        checked = C.check_call(self.declared(), values, gpu=True)
        device = checked.device if checked.device is not None else 0
        driver.context(device)
        target = self._target or Target.default(driver.compute_capability(device))
        gridv = grid if grid is not None and not callable(grid) else None
        ck = self._get(values, target, block, gridv)
        plan = self._plans.get((ck.key, device))
        if plan is None:
            plan = Plan(ck, device)
            self._plans[(ck.key, device)] = plan
        ReferenceLauncher(ck.signature, plan, grid, ck.signature.block, checked.framework, device)(values, stream)
        if not callable(grid) and checked.framework in ("torch", "cupy") and self._constexpr_idx is not None:
            key = self._steady_key(values, grid, block)
            if key is not None:
                try:
                    steady = GeneratedLauncher(ck.signature, plan, gridv, ck.signature.block, checked.framework,
                                               device, self._reference_for(grid, block))
                except Unsupported:
                    return None
                if len(self._steady) > 64:
                    self._steady.clear()
                self._steady[key] = steady
        return None

    def _reference_for(self, grid, block):
        return lambda values, stream: self._run_reference(values, grid, block, stream)

    def _interpret(self, values, grid, block):
        from .launchers.interpret import InterpretLauncher, expand
        target = self._target or Target.default()      # the patterns gate forms by target
        constexprs, spec = self.spec(values, block, target)
        key = f"{self.source_key()}|{spec}"
        entry = self._interp_programs.get(key)
        if entry is None:
            entry = expand(self.fn, constexprs, block, target)
            self._interp_programs[key] = entry
        prog, sig = entry
        InterpretLauncher(sig, prog, grid, sig.block, None, None)(values)


def _expand_again(fn, constexprs, target, options, block, grid):
    """The expanded IR of a specialization served from the disk cache (for explain()): the front end and the
    pattern expansion run again, no codegen."""
    from ..compiler import expand
    return expand(fn, constexprs, target, options, block, grid)[1]


def _helper_reads(v, deps: list, seen: set) -> None:
    """Add to `deps` the (globals, name, value) that the @tiledsl.inline helper `v` reads, and those of the
    helpers it reads, to any depth: the staleness checks (source_key's, _fresh, the native launcher's) then see an
    edited global that only a helper reads. (Their values are in the key through the helper's fingerprint.)"""
    reads = getattr(type(v), "__tiledsl_reads__", None)
    if reads is None:
        return
    if id(v) in seen:
        return
    seen.add(id(v))
    for d, n in reads(v):
        w = d.get(n, _MISSING)
        deps.append((d, n, w))
        _helper_reads(w, deps, seen)


def _stream(s) -> int:
    if s.__class__ is int and 0 <= s < 1 << 64:
        return s
    from ..abi.arrays import stream_handle
    return stream_handle(s)


class _BoundTable(dict):
    """kernel[grid, block]'s table; a missing entry is made (and validated) by the kernel."""
    __slots__ = ("kernel",)

    def __init__(self, kernel):
        super().__init__()
        self.kernel = kernel

    def __missing__(self, cfg):
        return self.kernel._make_bound(cfg)


class _Bound:
    """kernel[grid, block]: launches with fixed dimensions; after NATIVE_AFTER steady launches it is replaced in
    the kernel's table by a native launcher, and forwards to it."""
    __slots__ = ("kernel", "grid", "block", "cfg", "hits", "native")

    def __init__(self, kernel, grid, block, cfg=None):
        self.kernel, self.grid, self.block, self.cfg = kernel, grid, block, cfg
        self.hits, self.native = 0, None

    def __call__(self, *args, **kwargs):
        n = self.native
        if n is not None:
            return n(*args, **kwargs)
        return self.call_python(*args, **kwargs)

    def call_python(self, *args, stream=None, **kwargs):
        k = self.kernel
        if not kwargs and k._constexpr_idx == [] and not callable(self.grid):
            f = k._steady.get((self.grid, self.block, ()))
            if f is not None and k._fresh() and f.try_launch(args, None if stream is None else _stream(stream)):
                if stream is None and self.native is None:
                    self.hits, n = k._count_steady(self.hits, f, self.call_python)
                    if n is not None:
                        self.native = n
                        if self.cfg is not None and k._bound.get(self.cfg) is self:
                            k._bound[self.cfg] = n
                            k._getitem = k._bound.__getitem__     # kernel[...] straight to C from now on
                return None
        try:
            return k.run(args, kwargs, self.grid, self.block, stream)
        except TiledslError as e:
            user_frames(e)
            raise
