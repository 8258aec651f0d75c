"""`@tiledsl.jit`: specialise, compile (memory and disk caches), and launch."""
from __future__ import annotations

import ast
import functools
import hashlib
import inspect
import json
import threading
import warnings
from typing import TYPE_CHECKING

from .. import __version__
from ..lower import ptx as backend
from ..cache import disk as cache
from ..core import knobs as config
from ..core import dtypes as dt
from ..lang import language as L
from ..core.errors import CompilationError, LaunchError, TiledslError
from ..cache.fingerprint import fingerprint_value

if TYPE_CHECKING:
    from ..compiled import CompiledKernel

_MISSING = object()
NATIVE_AFTER = 2          # steady launches through Python before the native launcher is built
_PLAIN = (None, None, ())                # fast-path key of a call without overrides or constexprs


def jit(fn=None, **options):
    """Decorate a kernel. Options: interpret=False, target=None ('sm_90'), debug=False."""
    if fn is None:
        return lambda f: JITFunction(f, **options)
    return JITFunction(fn, **options)


_COMPILER_HASH = []


def _llvm_version() -> str:
    """llvmlite's version and a hash of tiledsl's own sources: a changed compiler never reuses a disk entry."""
    if not _COMPILER_HASH:
        import os
        import llvmlite
        h = hashlib.sha256(llvmlite.__version__.encode())
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))   # the whole package
        for d, _, files in sorted(os.walk(root)):
            for f in sorted(files):
                if f.endswith(".py"):
                    with open(os.path.join(d, f), "rb") as fh:
                        h.update(f.encode() + fh.read())
        _COMPILER_HASH.append(h.hexdigest()[:16])
    return _COMPILER_HASH[0]


class JITFunction:
    def __init__(self, fn, interpret=False, target=None, debug=False):
        if not inspect.isfunction(fn):
            raise TiledslError(f"@tiledsl.jit decorates a Python function, got {type(fn).__name__}")
        self.fn = fn
        self.interpret = interpret
        self.target = target
        self.debug = debug
        functools.update_wrapper(self, fn)
        self._lock = threading.RLock()
        self._params = None
        self._src_state = None        # (code object, [(dict, name, value)], source key)
        self._compiled = {}           # full key -> CompiledKernel
        self._plans = {}              # (full key, device) -> Plan
        self._fast = {}               # (grid, block, constexprs) -> FastLaunch for the steady state
        self._bound = _BoundTable(self)   # (grid, block) as written -> _Bound, or its native launcher
        # Each kernel gets its own subclass whose __getitem__ *is* the table's C-level lookup, so the steady
        # `kernel[grid, block](...)` runs no Python before the launcher (a miss goes to _BoundTable.__missing__).
        self.__class__ = type(type(self).__name__, (type(self),), {"__getitem__": self._bound.__getitem__,
                                                                   "__slots__": (), "__module__": __name__})
        self._constexpr_idx = None
        self._nparams = -1
        self.native_unsupported = None  # why the last native launcher was not built, if it was not
        self._plain_native = None      # native launcher for kernel(...) once it is steady
        self._plain_hits = 0

    def __repr__(self) -> str:
        return f"<tiledsl kernel {self.fn.__qualname__}>"

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
                elif ann is L.constexpr:
                    kind = "constexpr"
                elif ann is inspect.Parameter.empty:
                    kind = "missing"
                else:
                    kind = "scalar"
                out.append((name, kind, ann, p.default))
            self._params = out
        return self._params

    def bind(self, args, kwargs) -> list:
        params = self.params()
        if not kwargs and len(args) == len(params):
            return list(args)
        if len(args) > len(params):
            raise LaunchError(f"{self.fn.__name__}() takes {len(params)} arguments, got {len(args)}")
        values = list(args) + [_MISSING] * (len(params) - len(args))
        names = [p[0] for p in params]
        for k, v in kwargs.items():
            if k not in names:
                raise LaunchError(f"{self.fn.__name__}() got an unexpected argument '{k}'")
            i = names.index(k)
            if values[i] is not _MISSING:
                raise LaunchError(f"{self.fn.__name__}() got two values for argument '{k}'")
            values[i] = v
        for i, (name, kind, ann, default) in enumerate(params):
            if values[i] is _MISSING:
                if default is inspect.Parameter.empty:
                    raise LaunchError(f"{self.fn.__name__}() is missing argument '{name}' (takes {len(params)} "
                                      f"arguments, got {len(args) + len(kwargs)})")
                values[i] = default
        return values

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
        for n in names:
            if n in closure:
                v = closure[n]
                fps.append(f"closure {n}={fingerprint_value(v) or type(v).__name__}")
            elif n in g:
                v = g[n]
                deps.append((g, n, v))
                fps.append(f"global {n}={fingerprint_value(v) or 'object:' + type(v).__name__}")
        h = hashlib.sha256()
        h.update(src.text.encode())
        h.update("\n".join(fps).encode())
        key = h.hexdigest()
        if st is not None and st[2] != key:
            self._fast.clear()                    # steady-state launchers belong to the old code
        # native launchers check the old globals: new _Bound objects will earn new ones
        self._bound.clear()
        self._plain_native, self._plain_hits = None, 0
        if "__call__" in type(self).__dict__:
            del type(self).__call__
        self._src_state = (self.fn.__code__, deps, key)
        return key

    def spec(self, values, block, sm) -> tuple:
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
        parts.append(f"sm={sm}")
        parts.append(f"debug={self.debug or config.debug()}")
        return constexprs, "|".join(parts)

    # ------------------------------------------------------------ compile
    def compile(self, *args, target="sm_90", grid=None, block=None, **kwargs) -> CompiledKernel:
        """Compile without launching (no GPU needed); arrays of any kind stand for their shape and dtype."""
        sm = backend.parse_sm(target if target is not None else self.target)
        values = self.bind(args, kwargs)
        block = _dims(block) if block is not None else None
        grid = _dims(grid) if grid is not None and not callable(grid) else None
        from ..abi.arrays import array_info
        from .launch import check_scalar, check_tensor
        sizes = {}
        for (name, kind, ann, _), v in zip(self.params(), values):
            if kind == "tensor":
                check_tensor(name, array_info(v), ann.dtype, ann.shape, sizes, gpu=False)
            elif kind == "scalar" and isinstance(ann, dt.DType):
                check_scalar(name, v, ann)
        return self._get(values, sm, block, grid, want_cubin=backend.ptxas_path() is not None)

    def _get(self, values, sm, block, grid, want_cubin=True) -> CompiledKernel:
        constexprs, spec = self.spec(values, block, sm)
        key = hashlib.sha256(f"{self.source_key()}|{spec}|tiledsl={__version__}|llvmlite={_llvm_version()}"
                             f"|cubin={want_cubin}".encode()).hexdigest()
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
                from ..core.options import Options
                from ..core.target import Target
                ck = compile_kernel(self.fn, constexprs, Target(sm), Options(debug=self.debug or config.debug()),
                                    block, grid, want_cubin)
                self._to_disk(key, ck)
            ck.key = key
            self._compiled[key] = ck
            return ck

    def _from_disk(self, key):
        entry = cache.load(key)
        if entry is None:
            return None
        data = entry["data"]
        asm = json.loads(data["asm.json"].decode())
        from ..compiled import CompiledKernel, StageDict
        cubin = data.get("kernel.cubin")
        if cubin is not None:
            asm = StageDict(asm, cubin)
        ck = CompiledKernel(entry["name"], entry["sm"], asm, entry["metadata"], entry["signature"],
                            entry["launch"], cubin)
        ck.from_disk = True
        return ck

    def _to_disk(self, key, ck):
        files = {"asm.json": json.dumps({k: v for k, v in dict.items(ck.asm) if k != "sass"})}
        if ck.cubin is not None:
            files["kernel.cubin"] = ck.cubin
        cache.store(key, {"name": ck.name, "sm": ck.sm, "metadata": ck.metadata, "signature": ck.signature,
                          "launch": ck.launch_spec}, files)

    # ------------------------------------------------------------ launch
    def _make_bound(self, cfg):
        if not isinstance(cfg, tuple) or len(cfg) != 2:
            raise LaunchError("launch with kernel[grid, block](*args)")
        grid = cfg[0] if callable(cfg[0]) else _dims(cfg[0])
        block = _dims(cfg[1])
        from .launch import check_block
        check_block(block)
        b = _Bound(self, grid, block, cfg if not callable(grid) else None)
        if not callable(grid) and len(self._bound) < 256:
            self._bound[cfg] = b
        return b

    def __call__(self, *args, **kwargs):
        n = self._plain_native
        if n is not None:                     # the compiled launcher; it calls _call_python for anything else
            return n(*args, **kwargs)
        return self._call_python(*args, **kwargs)

    def _call_python(self, *args, stream=None, **kwargs):
        # Steady state with no constexprs and no overrides: straight to the prepared launcher.
        if not kwargs and self._constexpr_idx == []:
            f = self._fast.get(_PLAIN)
            if f is not None and len(args) == self._nparams and self._fresh() and \
                    f(args, None if stream is None else _stream(stream)):
                if stream is None and self._plain_native is None:
                    self._plain_hits, n = self._count_steady(self._plain_hits, f, self._call_python)
                    if n is not None:                 # kernel(...) now calls it with no Python between
                        self._plain_native = n
                        type(self).__call__ = n
                return None
        return self.run(args, kwargs, None, None, stream)

    def _count_steady(self, hits: int, f, fallback):
        """(new count, native launcher or None) after one more steady launch through the Python launcher `f`:
        at NATIVE_AFTER the native one is tried once (the count then never reaches it again, even when threads
        race here)."""
        hits += 1
        if hits < NATIVE_AFTER:
            return hits, None
        return -(1 << 62), self._native_for(f, fallback)

    def _native_for(self, f, fallback):
        """The native launcher replacing the generated Python one `f` (runtime/native.py), or None."""
        spec_args = getattr(f, "native_args", None)
        if spec_args is None or not config.native_launch():
            return None
        from . import native
        try:
            st = self._src_state
            spec = native.spec_for(*spec_args, (self.fn, st[0], st[1], _MISSING))
            return native.build(spec, fallback, native.raise_launch_error)[0]
        except native.Unsupported as e:
            self.native_unsupported = str(e)  # why this kernel keeps the Python launcher (benchmarks print it)
            return None
        except Exception as e:  # a machine where LLVM cannot JIT: the Python launcher is as correct, only slower
            warnings.warn(f"tiledsl: no native launcher for {self.fn.__name__} ({type(e).__name__}: {e}); "
                          f"launching through Python")
            return None

    def run(self, args, kwargs, grid, block, stream):
        values = self.bind(args, kwargs)
        if block is not None and block.__class__ is not tuple or (block is not None and len(block) != 3):
            block = _dims(block)
        if grid is not None and not callable(grid) and (grid.__class__ is not tuple or len(grid) != 3):
            grid = _dims(grid)
        fast = self._fast_entry(values, grid, block)
        if fast is not None and self._fresh() and fast(values, None if stream is None else _stream(stream)):
            return None
        return self._run_slow(values, grid, block, stream)

    def _fast_key(self, values, grid, block):
        cx = self._constexpr_idx
        try:
            key = (grid if not callable(grid) else None, block, tuple(values[i] for i in cx) if cx else ())
            hash(key)
        except TypeError:
            return None
        return key

    def _fast_entry(self, values, grid, block):
        if grid is not None and callable(grid):
            return None
        if self._constexpr_idx is None:
            if self.interpret or config.interpret():
                return None
            self._constexpr_idx = [i for i, p in enumerate(self.params()) if p[1] == "constexpr"]
            self._nparams = len(self.params())
        key = self._fast_key(values, grid, block)
        return self._fast.get(key) if key is not None else None

    def _fresh(self) -> bool:
        st = self._src_state
        if st is None or st[0] is not self.fn.__code__:
            return False
        for d, n, v in st[1]:
            if d.get(n, _MISSING) is not v:
                return False
        return True

    def _run_slow(self, values, grid, block, stream):
        grid_in = grid
        block = _dims(block) if block is not None else None
        if block is not None:
            from .launch import check_block
            check_block(block)
        if grid is not None and not callable(grid):
            grid = _dims(grid)
        if self.interpret or config.interpret():
            from ..interpreter import run_kernel
            return run_kernel(self, values, grid, block)
        from ..abi import arrays as A
        from . import driver
        from .launch import Plan, check_block, check_scalar, check_tensor, grid_of, launch
        params = self.params()
        if len(values) != len(params):
            raise LaunchError(f"{self.fn.__name__}() takes {len(params)} arguments, got {len(values)}")
        device, framework = None, None
        sizes, packed, env = {}, [], {}
        for (name, kind, ann, _), v in zip(params, values):
            if kind == "tensor":
                info = A.array_info(v)
                check_tensor(name, info, ann.dtype, ann.shape, sizes, gpu=True)
                if device is None:
                    device, framework = info.device, info.framework
                elif info.device != device:
                    raise LaunchError(f"argument '{name}' is on device {info.device} but earlier arguments are "
                                      f"on device {device}; all arrays must be on one device")
                packed.append(info.ptr)
            elif kind == "scalar":
                packed.append(check_scalar(name, v, ann))
                env[name] = v
            elif kind == "constexpr":
                env[name] = v
            else:
                raise CompilationError(f"parameter '{name}' needs an annotation: T.Tensor(shape, dtype), a scalar "
                                       f"type such as T.int32, or T.constexpr")
        if device is None:
            device = 0
        driver.context(device)
        sm = backend.parse_sm(self.target) if self.target is not None else driver.compute_capability(device)
        gridv = _dims(grid) if grid is not None and not callable(grid) else None
        ck = self._get(values, sm, block, gridv)
        plan = self._plans.get((ck.key, device))
        if plan is None:
            plan = Plan(ck, device)
            self._plans[(ck.key, device)] = plan
        for p in ck.signature:
            if p["kind"] == "size":
                packed.append(sizes[p["name"]])
        env.update(sizes)
        if callable(grid):
            gridv = _dims(grid(dict(zip([p[0] for p in params], values))))
        g = gridv or grid_of(ck.launch_spec["grid"], env)
        b = tuple(ck.launch_spec["block"])
        check_block(b)
        s = A.stream_handle(stream) if stream is not None else A.current_stream(framework, device)
        launch(plan, packed, g, b, s)
        if not callable(grid_in) and framework in ("torch", "cupy") and self._constexpr_idx is not None \
                and plan.debug_buf is None:
            from .fastpath import make_fast
            key = self._fast_key(values, grid_in, block)
            if key is not None:
                if len(self._fast) > 64:
                    self._fast.clear()
                self._fast[key] = make_fast(plan, params, framework, device, gridv, b)


def _stream(s) -> int:
    if s.__class__ is int:
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
            f = k._fast.get((self.grid, self.block, ()))
            if f is not None and k._fresh() and f(args, None if stream is None else _stream(stream)):
                if stream is None and self.native is None:
                    self.hits, n = k._count_steady(self.hits, f, self.call_python)
                    if n is not None:
                        self.native = n
                        if self.cfg is not None and k._bound.get(self.cfg) is self:
                            k._bound[self.cfg] = n
                return None
        return k.run(args, kwargs, self.grid, self.block, stream)


def _dims(v) -> tuple:
    vals = tuple(v) if isinstance(v, (tuple, list)) else (v,)
    if not 1 <= len(vals) <= 3 or not all(isinstance(x, int) and not isinstance(x, bool) for x in vals):
        raise LaunchError(f"grid and block take an int or a tuple of up to 3 ints, got {v!r}")
    if any(x <= 0 for x in vals):
        raise LaunchError(f"grid and block dimensions must be positive, got {v!r}")
    return vals + (1,) * (3 - len(vals))
