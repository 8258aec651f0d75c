"""Timing helpers: `do_bench(fn)`, the GPU time of a launch, as the autotuner measures it.

Times come from CUDA events around each call, with the L2 cache flushed before each (a write of a buffer at least
the device's L2 size), so a kernel is not timed on inputs it left in L2 the call before. Warm-up and repetitions are
given in milliseconds and turned into counts from a first estimate, so short and long kernels both get a stable
median. torch's events are used where torch is installed; otherwise the driver's (cuda-python).
"""
from __future__ import annotations

import statistics
from typing import Callable

from .core.errors import TiledslError


def _quantile(xs: list, q: float) -> float:
    """Linear interpolation between order statistics (numpy's default)."""
    s = sorted(xs)
    pos = q * (len(s) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


class _TorchTimer:
    def __init__(self, torch):
        self.torch = torch
        dev = torch.cuda.current_device()
        l2 = getattr(torch.cuda.get_device_properties(dev), "L2_cache_size", 0) or 0
        self.flush_buf = torch.empty(max(int(l2), 256 << 20), dtype=torch.int8, device="cuda")

    def events(self, n):
        E = self.torch.cuda.Event
        return [E(enable_timing=True) for _ in range(n)], [E(enable_timing=True) for _ in range(n)]

    def flush(self):
        self.flush_buf.zero_()

    def sync(self):
        self.torch.cuda.synchronize()

    def elapsed(self, a, b) -> float:
        return a.elapsed_time(b)


class _DriverTimer:
    """CUDA events and an L2 flush through cuda-python, on the current context's default stream."""

    def __init__(self):
        from .runtime import driver
        self.driver = driver
        self.drv = drv = driver._drv()
        driver.context(0)
        l2 = driver.device_attribute(0, "CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE")
        self.size = max(int(l2), 256 << 20)
        self.buf = driver.check(drv.cuMemAlloc(self.size), "cuMemAlloc")

    def __del__(self):
        try:
            self.drv.cuMemFree(self.buf)
        except Exception:
            pass

    def events(self, n):
        mk = lambda: self.driver.check(self.drv.cuEventCreate(0), "cuEventCreate")  # noqa: E731
        return [mk() for _ in range(n)], [mk() for _ in range(n)]

    def flush(self):
        self.driver.check(self.drv.cuMemsetD8Async(self.buf, 0, self.size, 0), "cuMemsetD8Async")

    def sync(self):
        self.driver.check(self.drv.cuCtxSynchronize(), "cuCtxSynchronize")

    def record(self, e):
        self.driver.check(self.drv.cuEventRecord(e, 0), "cuEventRecord")

    def elapsed(self, a, b) -> float:
        return float(self.driver.check(self.drv.cuEventElapsedTime(a, b), "cuEventElapsedTime"))


_timers = {}


def _timer():
    if "t" not in _timers:
        try:
            import torch
            if torch.cuda.is_available():
                _timers["t"] = _TorchTimer(torch)
        except ImportError:
            pass
        if "t" not in _timers:
            _timers["t"] = _DriverTimer()
    return _timers["t"]


def do_bench(fn: Callable[[], object], warmup: float = 25, rep: float = 100, quantiles: list | None = None,
             flush_l2: bool = True) -> float | list:
    """The GPU time of `fn()` in milliseconds: the median over about `rep` ms of calls after about `warmup` ms of
    warm-up calls, each timed by CUDA events with the L2 cache flushed before it (flush_l2=False keeps L2 warm).
    With `quantiles=[0.2, 0.5, 0.8]`, the list of those quantiles instead of the median. Needs a GPU."""
    if quantiles is not None and (not isinstance(quantiles, (list, tuple)) or
                                  not all(isinstance(q, (int, float)) and 0 <= q <= 1 for q in quantiles)):
        raise TiledslError(f"do_bench: quantiles is a list of numbers in [0, 1], got {quantiles!r}")
    t = _timer()
    record = getattr(t, "record", None) or (lambda e: e.record())
    fn()
    t.sync()
    # estimate one call (5 calls, L2 flushed as in the measurement) to turn milliseconds into counts
    starts, ends = t.events(1)
    record(starts[0])
    for _ in range(5):
        if flush_l2:
            t.flush()
        fn()
    record(ends[0])
    t.sync()
    est = max(t.elapsed(starts[0], ends[0]) / 5, 1e-4)
    n_warm = max(1, int(warmup / est))
    n_rep = max(1, min(int(rep / est), 100000))
    for _ in range(n_warm):
        fn()
    starts, ends = t.events(n_rep)
    for i in range(n_rep):
        if flush_l2:
            t.flush()
        record(starts[i])
        fn()
        record(ends[i])
    t.sync()
    times = [t.elapsed(a, b) for a, b in zip(starts, ends)]
    if quantiles is not None:
        return [_quantile(times, q) for q in quantiles]
    return statistics.median(times)
