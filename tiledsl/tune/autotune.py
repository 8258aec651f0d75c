"""`@tiledsl.autotune(configs=[...], key=[...])` over `@tiledsl.jit`: pick the fastest configuration per key.

A call computes its key (the named arguments' values; a tensor's shape and dtype), and for a key it has not seen
looks in the store (tune/store.py) for the winner of (key, target, device name, kernel fingerprint, the list of
configurations). On a miss it compiles every candidate (in parallel), benchmarks each with `do_bench`, keeps the
fastest in memory and on disk, and launches it.

The decorated object is a `@tiledsl.jit` kernel (a config's constexprs are its `T.constexpr` arguments), or a
kernel factory: a plain function taking the call's arguments plus the config's constexprs as keywords and
returning a `@tiledsl.jit` kernel, for kernels whose configuration shapes Python-level code (tiledsl/ops/gemm/
matmul.py's tuned_gemm).

Parallel compilation: where the disk cache is usable and the platform can fork, the candidates compile in forked
worker processes that leave their cubins in the disk cache, and the parent then loads them (a disk hit each).
Threads do not help: the front end is Python (the GIL), and one kernel compiles under its own lock; see the
commit that chose processes for the numbers.
"""
from __future__ import annotations

import hashlib
import inspect
import multiprocessing
import os
import sys
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable

from ..core import knobs
from ..core.errors import CompilationError, TiledslError, user_frames
from ..core.target import Target
from ..core.version import __version__
from . import store
from .config import Config


def autotune(configs: list, key: list, warmup: float = 25, rep: float = 100, prune: Callable | None = None,
             reset_to_zero: list | None = None, *, do_bench: Callable | None = None,
             pool: str = "auto") -> Callable[[Any], "Autotuner"]:
    """Tune a `@tiledsl.jit` kernel (written above it) over `configs`, once per value of the `key` arguments.

    configs: `tiledsl.Config` candidates (constexpr values and launch options).
    key: argument names; a new value (for a tensor: its shape and dtype) tunes again.
    warmup, rep: milliseconds of warm-up and of measurement per candidate (`tiledsl.testing.do_bench`).
    prune: optional `prune(configs, args) -> configs`, `args` the bound arguments by name.
    reset_to_zero: names of tensor arguments zeroed before each benchmarked launch (kernels that accumulate).
    do_bench: the benchmark function, `do_bench(fn, warmup=, rep=) -> ms` (default tiledsl.testing.do_bench).
    pool: "processes", "threads" or "auto" (processes where the disk cache is usable and fork exists).
    The winner is `kernel.best_config`; tuning needs a GPU (with interpret=True the first config is used)."""
    configs = list(configs) if isinstance(configs, (list, tuple)) else configs
    if not isinstance(configs, list) or not configs or not all(isinstance(c, Config) for c in configs):
        raise TiledslError("tiledsl.autotune(configs=...) takes a non-empty list of tiledsl.Config")
    if isinstance(key, str):
        key = [key]
    if not isinstance(key, (list, tuple)) or not all(isinstance(k, str) for k in key):
        raise TiledslError("tiledsl.autotune(key=...) takes a list of argument names")
    if len({c.fingerprint() for c in configs}) != len(configs):
        raise TiledslError("tiledsl.autotune: two configs are the same")
    for n, v in (("warmup", warmup), ("rep", rep)):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or v <= 0:
            raise TiledslError(f"tiledsl.autotune: {n} is a positive number of milliseconds, got {v!r}")
    if prune is not None and not callable(prune):
        raise TiledslError("tiledsl.autotune: prune is a function prune(configs, args) -> configs")
    if pool not in ("auto", "processes", "threads"):
        raise TiledslError(f"tiledsl.autotune: pool is 'auto', 'processes' or 'threads', got {pool!r}")

    def wrap(fn):
        return Autotuner(fn, configs, list(key), warmup, rep, prune, list(reset_to_zero or ()), do_bench, pool)
    return wrap


def _key_value(v):
    """A key argument's value: (shape, dtype) for arrays, the value itself for scalars."""
    shape = getattr(v, "shape", None)
    if shape is not None and hasattr(v, "dtype"):
        return (tuple(int(s) for s in shape), str(v.dtype))
    try:
        hash(v)
        return v
    except TypeError:
        return repr(v)


def _progress(line: str, final: bool) -> None:
    """One progress line on stderr: rewritten in place on a terminal, printed once at the end elsewhere."""
    err = sys.stderr
    tty = getattr(err, "isatty", lambda: False)()
    if tty:
        err.write("\r\x1b[K" + line + ("\n" if final else ""))
        err.flush()
    elif final:
        err.write(line + "\n")
        err.flush()


_FORK_JOBS: list = []      # what forked compile workers read (inherited through fork, never pickled)


def _fork_compile(i: int) -> str | None:
    compile_one = _FORK_JOBS[i]
    return compile_one()


class Autotuner:
    """A tuned kernel: call it like the kernel; `best_config` is the last winner, `best_configs` every key's."""

    def __init__(self, fn, configs, key, warmup, rep, prune, reset_to_zero, bench, pool):
        self.is_factory = not getattr(fn, "is_tiledsl_kernel", False)
        if self.is_factory and not inspect.isfunction(fn):
            raise TiledslError(f"tiledsl.autotune decorates a @tiledsl.jit kernel or a kernel factory function, "
                               f"got {type(fn).__name__}")
        self.fn = fn
        self.configs = configs
        self.key = key
        self.warmup, self.rep = warmup, rep
        self.prune = prune
        self.reset_to_zero = reset_to_zero
        self.bench = bench
        self.pool = pool
        self.best_config: Config | None = None
        self.best_configs: dict = {}            # key values -> Config
        self.timings: dict = {}                 # key values -> {config fingerprint: ms or reason}
        self._chosen: dict = {}                 # key values -> (kernel, Config)
        self._names = None
        self._warned_interpret = False
        self.__name__ = getattr(fn, "__name__", "kernel")
        self.__doc__ = getattr(fn, "__doc__", None)

    def __repr__(self) -> str:
        return f"<tiledsl autotuned {self.__name__} over {len(self.configs)} configs>"

    # ------------------------------------------------------------ arguments and keys
    def names(self) -> list:
        """The call's argument names (the kernel's, less the constexprs the configs give)."""
        if self._names is None:
            given = set().union(*(c.constexprs for c in self.configs))
            if self.is_factory:
                params = list(inspect.signature(self.fn).parameters)
                missing = sorted(given - set(params))
                if missing and not any(p.kind == p.VAR_KEYWORD for p in inspect.signature(self.fn).parameters
                                       .values()):
                    raise TiledslError(f"tiledsl.autotune: the configs set {missing}, which the factory "
                                       f"{self.__name__} does not take")
            else:
                ps = self.fn.params()
                params = [p[0] for p in ps]
                cx = {p[0] for p in ps if p[1] == "constexpr"}
                bad = sorted(given - cx)
                if bad:
                    raise TiledslError(f"tiledsl.autotune: the configs set {bad}, which are not T.constexpr "
                                       f"parameters of {self.__name__}")
            names = [p for p in params if p not in given]
            unknown = [k for k in self.key if k not in names]
            if unknown:
                raise TiledslError(f"tiledsl.autotune: key names {unknown} are not arguments of {self.__name__} "
                                   f"(its arguments: {names})")
            self._names = names
        return self._names

    def bind(self, args, kwargs) -> dict:
        names = self.names()
        if len(args) > len(names):
            from ..core.errors import LaunchError
            raise LaunchError(f"{self.__name__} takes {len(names)} arguments besides the tuned constexprs, got "
                              f"{len(args)}")
        out = dict(zip(names, args))
        out.update(kwargs)
        return out

    def key_of(self, args, kwargs) -> tuple:
        """The tuning key of a call: the named arguments' values (arrays: shape and dtype)."""
        bound = self.bind(args, kwargs)
        from ..core.errors import LaunchError
        for k in self.key:
            if k not in bound:
                raise LaunchError(f"{self.__name__}: the tuning key argument '{k}' is missing")
        return tuple(_key_value(bound[k]) for k in self.key)

    # ------------------------------------------------------------ one candidate
    def kernel_for(self, cfg: Config, args, kwargs):
        """The @tiledsl.jit kernel that runs `cfg` (the factory's product, or the kernel itself)."""
        if not self.is_factory:
            return self.fn
        k = self.fn(*args, **kwargs, **cfg.constexprs)
        if not getattr(k, "is_tiledsl_kernel", False):
            raise TiledslError(f"the kernel factory {self.__name__} returned {type(k).__name__}, not a "
                               f"@tiledsl.jit kernel")
        return k

    def _call_kwargs(self, cfg, kwargs) -> dict:
        return kwargs if self.is_factory else dict(kwargs, **cfg.constexprs)

    def _compile(self, cfg: Config, args, kwargs, target: Target):
        """Compile (or load) `cfg` for `target` exactly as its launch will look it up; returns the kernel."""
        k, build = self._prepare(cfg, args, kwargs, target)
        build()
        return k

    def _prepare(self, cfg: Config, args, kwargs, target: Target):
        """(the kernel of `cfg`, a function compiling it for `target` as its launch will look it up). The kernel
        factory and the argument binding run here, in the calling process: they may ask the GPU's driver (a
        factory reading the SM count, torch placing a tensor), which a forked compile worker must never do."""
        from ..abi import check as C
        k = self.kernel_for(cfg, args, kwargs)
        values = k.bind(args, self._call_kwargs(cfg, kwargs))
        block = C.dims(cfg.block) if cfg.block is not None else None
        grid = cfg.grid if cfg.grid is not None and not callable(cfg.grid) else None
        grid = C.check_grid(C.dims(grid)) if grid is not None else None
        return k, lambda: k._get(values, target, block, grid)

    def _launcher(self, k, cfg: Config, kwargs):
        """A callable launching `k` with `cfg` on the call's arguments."""
        ckw = self._call_kwargs(cfg, kwargs)
        if cfg.grid is None and cfg.block is None and not ckw:
            return k
        return lambda *a, stream=None: k.run(a, ckw, cfg.grid, cfg.block, stream)

    # ------------------------------------------------------------ the call
    def __call__(self, *args, stream=None, **kwargs):
        try:
            launch = self.pick(*args, **kwargs)[0]
            return launch(*args, stream=stream)
        except TiledslError as e:
            user_frames(e)        # the user's frames only (core/errors.py); a bare raise adds none of ours
            raise

    def pick(self, *args, **kwargs):
        """(launcher, Config) for these arguments, tuning on the first call of a key; the launcher takes the
        same positional arguments (and `stream=`)."""
        kv = self.key_of(args, kwargs)
        hit = self._chosen.get(kv)
        if hit is not None:
            self.best_config = hit[1]
            return hit
        interpreted, first = self._interpreted(args, kwargs)
        if interpreted:
            if not self._warned_interpret:
                self._warned_interpret = True
                warnings.warn(f"tiledsl.autotune: {self.__name__} runs on the interpreter, which cannot time "
                              f"kernels; using the first config {first!r}", stacklevel=3)
            cfg = first
            out = (self._launcher(self.kernel_for(cfg, args, kwargs), cfg, kwargs), cfg)
        else:
            device, target, name = self.device_of(args, kwargs)
            cfg = self.tune(args, kwargs, target, name, device)
            k = self._compile(cfg, args, kwargs, target)
            out = (self._launcher(k, cfg, kwargs), cfg)
        self._chosen[kv] = out
        self.best_config = cfg
        return out

    def _interpreted(self, args, kwargs) -> tuple:
        """(whether these arguments run on the interpreter, the first config that serves them): asked of the
        first config (after `prune`) whose kernel the factory makes for them; a factory refuses, with a
        LaunchError, a config that cannot serve them."""
        cands = self.configs
        if self.prune is not None:
            cands = list(self.prune(list(cands), self.bind(args, kwargs))) or cands
        for cfg in cands:
            try:
                k = self.kernel_for(cfg, args, kwargs)
            except TiledslError:
                continue
            return knobs.interpret() or bool(getattr(k, "interpret", False)), cfg
        # no config serves them: tuning says so, config by config
        return knobs.interpret(), cands[0]

    def compile(self, *args, target=None, config: Config | None = None, **kwargs):
        """Compile one config without launching (no GPU needed): `config`, else the key's winner when one is
        known in this process, else the first config. Returns the CompiledKernel."""
        try:
            cfg = config
            if cfg is None:
                hit = self._chosen.get(self.key_of(args, kwargs))
                cfg = hit[1] if hit is not None else self.configs[0]
            k = self.kernel_for(cfg, args, kwargs)
            return k.compile(*args, target=target, grid=cfg.grid if not callable(cfg.grid) else None,
                             block=cfg.block, **self._call_kwargs(cfg, kwargs))
        except TiledslError as e:
            user_frames(e)
            raise

    def device_of(self, args, kwargs):
        """(device index, Target, device name) of the call's arrays (the GPU they are on)."""
        from ..abi.arrays import array_info
        from ..runtime import driver
        device = 0
        for v in list(args) + list(kwargs.values()):
            info = array_info(v)
            if info is not None and info.device is not None:
                device = info.device
                break
        driver.context(device)
        k = None if self.is_factory else self.fn
        tgt = getattr(k, "_target", None) or Target.default(driver.compute_capability(device))
        drv = driver._drv()
        dev = driver.check(drv.cuDeviceGet(device), "cuDeviceGet")
        name = driver.check(drv.cuDeviceGetName(64, dev), "cuDeviceGetName")
        name = name.split(b"\0")[0].decode(errors="replace") if isinstance(name, bytes) else str(name)
        return device, tgt, name

    def fingerprint(self, args, kwargs) -> str:
        """What makes a stored winner stale: the kernel's source and globals (for a factory, its source and the
        first kernel it builds), the compiler's version and sources, the kernel's options."""
        from ..runtime.jit import _llvm_version
        h = hashlib.sha256(f"tiledsl={__version__}|compiler={_llvm_version()}".encode())
        if self.is_factory:
            try:
                h.update(inspect.getsource(self.fn).encode())
            except (OSError, TypeError):
                h.update(self.fn.__code__.co_code)
            for cfg in self.configs:
                try:
                    k = self.kernel_for(cfg, args, kwargs)
                except TiledslError:
                    continue
                h.update(f"|{k.source_key()}|{k.options.key()}".encode())
                break
        else:
            h.update(f"|{self.fn.source_key()}|{self.fn.options.key()}".encode())
        return h.hexdigest()

    # ------------------------------------------------------------ tuning
    def tune(self, args, kwargs, target: Target, device_name: str, device: int = 0) -> Config:
        """The winner for this call's key: from the store, else by compiling and benchmarking every candidate."""
        kv = self.key_of(args, kwargs)
        fps = [c.fingerprint() for c in self.configs]
        skey = store.entry_key({"kernel": self.fingerprint(args, kwargs), "key": repr(kv), "target": target.name,
                                "device": device_name, "configs": fps})
        rec = store.load(skey)
        if rec is not None:
            if rec["config"] in fps:
                cfg = self.configs[fps.index(rec["config"])]
                self.best_configs[kv] = cfg
                self.timings[kv] = rec.get("timings", {})
                return cfg
            store.discard(skey, "its winner is not one of the configs")
        cands = list(self.configs)
        if self.prune is not None:
            cands = list(self.prune(list(cands), self.bind(args, kwargs)))
            if not cands or not all(isinstance(c, Config) for c in cands):
                raise TiledslError(f"tiledsl.autotune: prune returned no configs for {self.__name__}")
        t0 = time.perf_counter()
        head = f"tiledsl.autotune: {self.__name__} key={kv!r}"
        n = len(cands)
        reasons = self._compile_all(cands, args, kwargs, target)
        _progress(f"{head} compiled {n - len(reasons)}/{n} configs ({time.perf_counter() - t0:.1f} s)", False)
        timings = {}
        bench = self.bench
        if bench is None:
            from ..testing import do_bench as bench
        for i, cfg in enumerate(cands):
            fp = cfg.fingerprint()
            if fp in reasons:
                timings[fp] = reasons[fp]
                continue
            try:
                k = self._compile(cfg, args, kwargs, target)     # loads what the workers compiled
                launch = self._launcher(k, cfg, kwargs)
                fn = self._bench_fn(launch, args, kwargs)
                ms = float(bench(fn, warmup=self.warmup, rep=self.rep))
                timings[fp] = ms
            except TiledslError as e:
                reasons[fp] = f"{type(e).__name__}: {e}"
                timings[fp] = reasons[fp]
            best = min((v for v in timings.values() if isinstance(v, float)), default=None)
            _progress(f"{head} {i + 1}/{n} configs" + (f", best {best:.4f} ms" if best is not None else ""),
                      False)
        ok = {fp: ms for fp, ms in timings.items() if isinstance(ms, float)}
        if not ok:
            lines = "\n".join(f"  {c!r}: {reasons.get(c.fingerprint(), '?')}" for c in cands)
            _progress(f"{head} 0/{n} configs usable", True)
            raise CompilationError(f"tiledsl.autotune: no config of {self.__name__} compiled and ran for key "
                                   f"{kv!r}:\n{lines}")
        win_fp = min(ok, key=ok.get)
        cfg = next(c for c in cands if c.fingerprint() == win_fp)
        skipped = f", {len(reasons)} skipped" if reasons else ""
        _progress(f"{head} {n}/{n} configs{skipped}, best {ok[win_fp]:.4f} ms: {cfg!r} "
                  f"({time.perf_counter() - t0:.1f} s)", True)
        self.best_configs[kv] = cfg
        self.timings[kv] = timings
        store.save(skey, {"config": win_fp, "ms": ok[win_fp], "timings": timings, "name": self.__name__,
                          "key_repr": repr(kv), "target": target.name, "device": device_name})
        return cfg

    def _bench_fn(self, launch, args, kwargs):
        zero = [self.bind(args, kwargs)[n] for n in self.reset_to_zero]
        if not zero:
            return lambda: launch(*args)

        def run():
            for z in zero:
                z.zero_()
            launch(*args)
        return run

    def _compile_all(self, cands, args, kwargs, target) -> dict:
        """Compile every candidate; returns {config fingerprint: reason} for those that failed."""
        from ..cache import disk

        def one(cfg):
            try:
                build = self._prepare(cfg, args, kwargs, target)[1]
            except TiledslError as e:
                reason = f"{type(e).__name__}: {e}"
                return lambda: reason

            def compile_one():
                try:
                    build()
                    return None
                except TiledslError as e:
                    return f"{type(e).__name__}: {e}"
            return compile_one

        jobs = [one(c) for c in cands]
        pool = self.pool
        if pool == "auto":
            pool = "processes" if len(jobs) > 1 and disk.usable() and hasattr(os, "fork") else "threads"
        results = None
        if pool == "processes" and len(jobs) > 1 and disk.usable() and hasattr(os, "fork"):
            results = self._compile_forked(jobs)
        if results is None:
            workers = max(1, min(len(jobs), os.cpu_count() or 1))
            with ThreadPoolExecutor(workers) as ex:
                results = list(ex.map(lambda j: j(), jobs))
        return {c.fingerprint(): r for c, r in zip(cands, results) if r is not None}

    def _compile_forked(self, jobs):
        """Compile in forked processes that write the disk cache; None when that cannot be done here."""
        from .. import compiler  # noqa: F401 - load the stages once, before forking, not in every worker
        from ..lower import ptx  # noqa: F401
        global _FORK_JOBS
        _FORK_JOBS = jobs
        workers = max(1, min(len(jobs), os.cpu_count() or 1))
        try:
            ctx = multiprocessing.get_context("fork")
            with ctx.Pool(workers) as p:
                return p.map_async(_fork_compile, range(len(jobs)), chunksize=1).get(timeout=900)
        except Exception as e:    # a worker died or hung: compile here instead (slower, never wrong)
            warnings.warn(f"tiledsl.autotune: parallel compilation failed ({type(e).__name__}: {e}); compiling "
                          f"in this process", stacklevel=4)
            return None
        finally:
            _FORK_JOBS = []
