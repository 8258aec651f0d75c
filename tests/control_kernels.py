"""Kernels with while/break/continue/early return and device_print, and their numpy references: shared by
tests/test_control_flow.py (interpreter, PTX through ptxas) and tests/test_gpu_control.py (the GPU)."""
import numpy as np

import tiledsl
from tiledsl import T

N = 100            # threads that do work; the launch has 128, so 28 return early


def collatz(A: T.Tensor(("n",), "int32"), Out: T.Tensor(("n",), "int32")):
    """Per-thread while loop: the number of Collatz steps from A[i] to 1."""
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=128))
    i = T.cuda.thread_id()
    if i >= n:  # noqa: F821 - the named size
        return
    x = A[i]
    steps = 0
    while x != 1:
        if x % 2 == 0:
            x = x // 2
        else:
            x = 3 * x + 1
        steps += 1
    Out[i] = steps


def collatz_ref(a):
    out = []
    for x in a.tolist():
        s = 0
        while x != 1:
            x = x // 2 if x % 2 == 0 else 3 * x + 1
            s += 1
        out.append(s)
    return np.array(out, np.int32)


def first_match(A: T.Tensor((N, 64), "int32"), Key: T.Tensor((N,), "int32"), Out: T.Tensor((N,), "int32")):
    """A search loop that breaks at the first match (-1 when none)."""
    T.device_entry(launch=T.cuda.LaunchConfig(grid=4, block=32))
    i = T.cuda.block_id() * 32 + T.cuda.thread_id()
    if i < N:
        found = -1
        for j in range(64):
            if A[i, j] == Key[i]:
                found = j
                break
        Out[i] = found


def first_match_ref(a, key):
    out = []
    for row, k in zip(a, key):
        hits = np.flatnonzero(row == k)
        out.append(int(hits[0]) if len(hits) else -1)
    return np.array(out, np.int32)


def skip_odd(A: T.Tensor((128,), "float32"), Out: T.Tensor((128,), "float32")):
    """`continue` skips the odd i; each thread sums a different number of terms."""
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=128))
    t = T.cuda.thread_id()
    acc = 0.0
    for i in range(t):
        if i % 2 == 1:
            continue
        acc += A[i]
    Out[t] = acc


def skip_odd_ref(a):
    out = np.zeros(128, np.float32)
    for t in range(128):
        acc = np.float32(0)
        for i in range(0, t, 2):
            acc = np.float32(acc + a[i])             # the kernel adds in float32, in order
        out[t] = acc
    return out


def nested(A: T.Tensor((128, 16), "int32"), Out: T.Tensor((128, 2), "int32")):
    """Nested loops: an inner break, an outer continue, a while inside a for, a return from inside a loop."""
    T.device_entry(launch=T.cuda.LaunchConfig(grid=2, block=64))
    t = T.cuda.block_id() * 64 + T.cuda.thread_id()
    total = 0
    rows = 0
    Out[t, 1] = -1
    for r in range(4):
        if (t + r) % 3 == 0:
            continue
        rows += 1
        for c in range(16):
            v = A[t, c]
            if v > 90:
                break
            k = v
            while k > 0:
                total += 1
                k = k // 2
        if total > 200 and t % 5 == 0:
            Out[t, 0] = total
            Out[t, 1] = rows
            return
    Out[t, 0] = total
    Out[t, 1] = rows + 100


def nested_ref(a):
    out = np.zeros((128, 2), np.int32)
    for t in range(128):
        total, rows, done = 0, 0, False
        for r in range(4):
            if (t + r) % 3 == 0:
                continue
            rows += 1
            for c in range(16):
                v = int(a[t, c])
                if v > 90:
                    break
                k = v
                while k > 0:
                    total += 1
                    k //= 2
            if total > 200 and t % 5 == 0:
                out[t] = (total, rows)
                done = True
                break
        if not done:
            out[t] = (total, rows + 100)
    return out


def while_true(A: T.Tensor((64,), "int32"), Out: T.Tensor((64,), "int32")):
    """`while True` left by a break; the counter is read after the loop (it was assigned before it)."""
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=64))
    t = T.cuda.thread_id()
    s = 0
    k = 0
    while True:
        s += A[(t + k) % 64]
        k += 1
        if s > 500:
            break
    Out[t] = k


def while_true_ref(a):
    out = []
    for t in range(64):
        s = k = 0
        while True:
            s += int(a[(t + k) % 64])
            k += 1
            if s > 500:
                break
        out.append(k)
    return np.array(out, np.int32)


def printer(A: T.Tensor((4,), "float32"), B: T.Tensor((4,), "int64")):
    """device_print with ints of several widths, a float, a half and a literal percent sign."""
    T.device_entry(launch=T.cuda.LaunchConfig(grid=2, block=2))
    t = T.cuda.thread_id()
    b = T.cuda.block_id()
    i = b * 2 + t
    T.device_print("i=%d x=%.3f h=%g big=%lld hex=%#x 100%%\n", i, A[i], T.cast(A[i], "float16"), B[i],
                   T.cast(i + 1, "uint8"))


def printer_args():
    return (np.array([0.5, -1.25, 3.0, 1e3], np.float32), np.array([1, -2, 2**40, -(2**40)], np.int64))


def printer_lines():
    """What each thread prints (without the interpreter's prefix), in flat thread order."""
    a, bb = printer_args()
    out = []
    for i in range(4):
        out.append("i=%d x=%.3f h=%g big=%d hex=%#x 100%%\n" % (i, a[i], float(np.float16(a[i])), bb[i], i + 1))
    return out


@tiledsl.inline
def _capped(x, cap):
    """A helper with statements of its own (not one expression), called in a while condition below."""
    y = x
    if x > cap:
        y = cap
    return y


def inline_condition(A: T.Tensor((64,), "int32"), Out: T.Tensor((64, 2), "int32")):
    """A while condition calling an inline helper with statements: they run before every test (once, before the
    loop, they did: the loop never ended, or ran on a stale value); `continue` comes back to them."""
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=64))
    t = T.cuda.thread_id()
    i = 0
    odd = 0
    while _capped(i, A[t]) < A[t]:
        i += 1
        if i % 2 == 0:
            continue
        odd += 1
    Out[t, 0] = i
    Out[t, 1] = odd


def inline_condition_ref(a):
    return np.array([[x, (x + 1) // 2] for x in a.tolist()], np.int32)


def count_down(A: T.Tensor((64,), "int32"), Out: T.Tensor((64, 4), "int32")):
    """range with a negative step: down to a run-time bound, by a constant stride from a value read once, an
    unsigned first value, and a `break` in a loop that counts down; none, one or many iterations per thread."""
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=64))
    t = T.cuda.thread_id()
    s = 0
    for i in range(t, A[t] - 1, -1):
        s = s * 3 + i
    Out[t, 0] = s
    n = 0
    for i in range(A[t] + 40, t, -7):
        n += i
    Out[t, 1] = n
    u = 0
    for i in range(T.cast(t, "uint32"), 0, -2):
        u += T.cast(i, "int32")
    Out[t, 2] = u
    last = -1
    for i in range(63, -1, -1):
        if A[i] < A[t]:
            last = i
            break
    Out[t, 3] = last


def count_down_ref(a):
    out = np.zeros((64, 4), np.int64)
    for t in range(64):
        s = 0
        for i in range(t, int(a[t]) - 1, -1):
            s = (s * 3 + i) & 0xFFFFFFFF
        out[t, 0] = s - (1 << 32) if s >= 1 << 31 else s
        out[t, 1] = sum(range(int(a[t]) + 40, t, -7))
        out[t, 2] = sum(range(t, 0, -2))
        out[t, 3] = next((i for i in range(63, -1, -1) if a[i] < a[t]), -1)
    return out.astype(np.int32)


CASES = [
    ("collatz", collatz, lambda: (np.arange(1, N + 1, dtype=np.int32), np.zeros(N, np.int32)),
     lambda a, o: (collatz_ref(a),)),
    ("first_match", first_match,
     lambda: (np.random.default_rng(0).integers(0, 40, (N, 64)).astype(np.int32),
              np.random.default_rng(1).integers(0, 50, N).astype(np.int32), np.zeros(N, np.int32)),
     lambda a, k, o: (first_match_ref(a, k),)),
    ("skip_odd", skip_odd, lambda: (np.random.default_rng(2).standard_normal(128).astype(np.float32),
                                    np.zeros(128, np.float32)), lambda a, o: (skip_odd_ref(a),)),
    ("nested", nested, lambda: (np.random.default_rng(3).integers(0, 100, (128, 16)).astype(np.int32),
                                np.zeros((128, 2), np.int32)), lambda a, o: (nested_ref(a),)),
    ("while_true", while_true, lambda: (np.random.default_rng(4).integers(1, 60, 64).astype(np.int32),
                                        np.zeros(64, np.int32)), lambda a, o: (while_true_ref(a),)),
    ("inline_condition", inline_condition,
     lambda: (np.random.default_rng(6).integers(0, 40, 64).astype(np.int32), np.zeros((64, 2), np.int32)),
     lambda a, o: (inline_condition_ref(a),)),
    ("count_down", count_down,
     lambda: (np.random.default_rng(7).integers(0, 70, 64).astype(np.int32), np.zeros((64, 4), np.int32)),
     lambda a, o: (count_down_ref(a),)),
]
