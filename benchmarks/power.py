"""SM clock and board power while a kernel runs, sampled by nvidia-smi (the H200 caps board power at 700 W and
lowers the clock to stay under it, so a GEMM's rate depends on its energy per FLOP as much as on its schedule).

    with Sampler() as s:
        ...  # run the kernel for a second or more
    print(s.summary())   # "1650 MHz 692 W power-capped"
"""
import subprocess
import threading
import time

FIELDS = "clocks.sm,power.draw,clocks_event_reasons.active"
SW_POWER_CAP = 0x4       # nvidia-smi's "clocks event reasons" bits (nvml.h)
HW_SLOWDOWN = 0x8 | 0x40 | 0x80


class Sampler:
    """Samples every `period_ms` from enter to exit; the first `skip_s` seconds are left out (clocks settle)."""

    def __init__(self, period_ms=50, skip_s=0.5):
        self.period_ms, self.skip_s = period_ms, skip_s
        self.samples = []

    def __enter__(self):
        try:
            self.proc = subprocess.Popen(["nvidia-smi", f"--query-gpu={FIELDS}", "--format=csv,noheader,nounits",
                                          "-lms", str(self.period_ms)], stdout=subprocess.PIPE, text=True)
        except OSError:
            self.proc = None
            return self
        self.t0 = time.time()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()
        return self

    def _read(self):
        for line in self.proc.stdout:
            parts = [x.strip() for x in line.split(",")]
            if len(parts) == 3 and time.time() - self.t0 > self.skip_s:
                try:
                    self.samples.append((float(parts[0]), float(parts[1]), int(parts[2], 16)))
                except ValueError:
                    pass

    def __exit__(self, *exc):
        if self.proc:
            self.proc.terminate()
            self.proc.wait()

    def summary(self):
        if not self.samples:
            return "no nvidia-smi samples"
        mid = lambda xs: sorted(xs)[len(xs) // 2]  # noqa: E731
        reasons = 0
        for s in self.samples:
            reasons |= s[2]
        why = "power-capped" if reasons & SW_POWER_CAP else "hw-slowdown" if reasons & HW_SLOWDOWN else "full clock"
        return f"{mid([s[0] for s in self.samples]):.0f} MHz {mid([s[1] for s in self.samples]):.0f} W {why}"


def sustained(fn, torch, flops, seconds=2.0):
    """Runs fn back to back for `seconds` under a Sampler: (TFLOP/s, sampler summary)."""
    fn()
    torch.cuda.synchronize()
    with Sampler() as s:
        t0 = time.time()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        n = 0
        while time.time() - t0 < seconds:
            for _ in range(10):
                fn()
            n += 10
            torch.cuda.synchronize()
        end.record()
        end.synchronize()
    return flops * n / (start.elapsed_time(end) * 1e-3) / 1e12, s.summary()
