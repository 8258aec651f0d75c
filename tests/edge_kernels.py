"""Kernels at the edges of the scalar semantics (docs/semantics.md, docs/control-flow.md), each with a numpy / Python
reference: shift amounts of the width and beyond (PTX clamps them; LLVM would make them poison and delete the code
that uses them), true division with an int beside float64 and float16, range bounds of 8 and 16 bits, a stop the
body changes (read once, as Python reads it), and a step that would wrap past the index type's largest value.
tests/test_edge_semantics.py runs them on the interpreter and through ptxas, tests/test_gpu_edge_semantics.py on the
GPU."""
import numpy as np

from tiledsl import T

_I32 = np.iinfo(np.int32)


def shifts(A: T.Tensor((8,), "int32"), S: T.Tensor((8,), "int32"), L: T.Tensor((8,), "int64"),
           Out: T.Tensor((8, 10), "int64")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=8))
    i = T.cuda.thread_id()
    a = A[i]
    s = S[i]
    u = T.cast(a, "uint32")
    Out[i, 0] = T.cast(a >> 40, "int64")
    Out[i, 1] = T.cast(u << 32, "int64")
    Out[i, 2] = T.cast(a << s, "int64")
    Out[i, 3] = T.cast(a >> s, "int64")
    Out[i, 4] = T.cast(u >> s, "int64")
    Out[i, 5] = T.cast(T.cast(a, "int8") >> 8, "int64")
    acc = 0
    for k in T.unroll(36):
        acc += (a >> k) & 1
    Out[i, 6] = T.cast(acc, "int64")
    Out[i, 7] = T.cast(a << (s | 32), "int64")
    Out[i, 8] = L[i] >> 64
    Out[i, 9] = L[i] << T.cast(s, "int64")


def _shift_ref(a, n, bits, op, signed):
    """The documented shift: an amount (read unsigned) of at least the width gives 0, or the sign for signed >>."""
    mask = (1 << bits) - 1
    n &= (1 << 32) - 1 if bits <= 32 else (1 << 64) - 1
    v = a & mask
    if op == "shl":
        r = 0 if n >= bits else (v << n) & mask
    elif signed:
        sv = v - (1 << bits) if v >> (bits - 1) else v
        r = (-1 if sv < 0 else 0) if n >= bits else sv >> n
    else:
        r = 0 if n >= bits else v >> n
    r &= mask
    return r - (1 << bits) if signed and r >> (bits - 1) else r


def shifts_ref(a, s, l, out):
    o = np.zeros((8, 10), np.int64)
    for i in range(8):
        x, n, y = int(a[i]), int(s[i]), int(l[i])
        u = x & 0xFFFFFFFF
        o[i] = [_shift_ref(x, 40, 32, "shr", True), _shift_ref(u, 32, 32, "shl", False),
                _shift_ref(x, n, 32, "shl", True), _shift_ref(x, n, 32, "shr", True),
                _shift_ref(u, n, 32, "shr", False), _shift_ref(x, 8, 8, "shr", True),
                sum(_shift_ref(x, k, 32, "shr", True) & 1 for k in range(36)),
                _shift_ref(x, n | 32, 32, "shl", True), _shift_ref(y, 64, 64, "shr", True),
                _shift_ref(y, n, 64, "shl", True)]
    return (o,)


def division(A: T.Tensor((4,), "int32"), D: T.Tensor((4,), "float64"), H: T.Tensor((4,), "float16"),
             Out: T.Tensor((4,), "float64"), OutH: T.Tensor((4,), "float16")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=4))
    i = T.cuda.thread_id()
    Out[i] = A[i] / D[i]                 # the int converted once, exactly, to float64
    OutH[i] = H[i] / (A[i] % 7 + 1)      # float16 with an int is float16


def division_ref(a, d, h, out, outh):
    return (a.astype(np.float64) / d,)


def ranges(N: T.Tensor((4,), "int32"), Out: T.Tensor((4, 5), "int32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=4))
    i = T.cuda.thread_id()
    n = N[i]
    c = 0
    for j in range(T.cast(n, "int8")):                 # an 8-bit bound counts in int32
        c += 1
    Out[i, 0] = c
    stop = n
    c = 0
    for j in range(0, stop):                            # stop read once: the body's change does not move it
        stop = 100
        c += 1
    Out[i, 1] = c
    c = 0
    for j in range(2147483640 + n % 3, 2147483647, 2):  # the step would wrap past int32's largest value
        c += 1
    Out[i, 2] = c
    c = 0
    for j in range(T.cast(n, "int16"), 40, 9):
        c += 1
    Out[i, 3] = c
    first = n
    c = 0
    for j in range(first, -1, -2):                      # counting down from a start the body changes: read once
        first = 100
        c += j
    Out[i, 4] = c


def ranges_ref(n, out):
    o = np.zeros((4, 5), np.int32)
    for i, x in enumerate(n.tolist()):
        o[i] = [max(x, 0), max(x, 0), len(range(2147483640 + x % 3, 2147483647, 2)), len(range(x, 40, 9)),
                sum(range(x, -1, -2))]
    return (o,)


CASES = [
    ("shifts", shifts, lambda: (np.array([-5, 7, -1, 123456, _I32.min, _I32.max, 0, 1], np.int32),
                                np.array([0, 1, 31, 32, 33, 40, -1, 7], np.int32),
                                np.array([-9, 9, -(2 ** 40), 2 ** 40, -1, 1, 3, -3], np.int64),
                                np.zeros((8, 10), np.int64)), shifts_ref),
    ("division", division, lambda: (np.array([16777217, -3, 7, 2 ** 31 - 1], np.int32),
                                    np.array([1.0, 3.0, -0.5, 7.0]), np.array([1, -2.5, 3, 0.125], np.float16),
                                    np.zeros(4), np.zeros(4, np.float16)), division_ref),
    ("ranges", ranges, lambda: (np.array([0, 5, 17, -3], np.int32), np.zeros((4, 5), np.int32)), ranges_ref),
]
