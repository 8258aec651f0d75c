"""Where a torch tensor keeps its type, device, extents, strides and data pointer, proved on the running torch.

The native launcher's torch checks through torch's own accessors (dtype, is_cuda, is_contiguous, dim, numel,
data_ptr) cost 50-70 ns each: most of what separates a torch launch from a raw `cuLaunchKernel`. The same facts
are plain fields of the C++ `TensorImpl` behind the Python object, so the launcher may read them directly, but
their layout is no public API and changes between torch releases. `probe()` therefore finds every field on the
running torch by reading tensors it made, whose answers it knows from Python, and accepts the layout only when
each field is found at exactly one place and the data pointer it rebuilds equals `data_ptr()` for every tensor.
Any doubt is a reason (a string), and the launcher keeps calling the accessors.

What the native code then checks per tensor (native_ir.torch_direct), all read from the TensorImpl:
  * its vtable is the plain TensorImpl's: wrapper implementations (functorch batching, nested, sparse, ...) keep
    their sizes elsewhere and take the accessor path;
  * dtype code, device (type, index, present), number of dimensions;
  * extents and strides (inline storage: at most `inline` dimensions), contiguity computed from them exactly as
    torch's default `is_contiguous` does;
  * the storage's data pointer plus storage_offset x itemsize, and that the storage is not copy-on-write (whose
    first mutable access would copy it: such a tensor takes the Python path, which calls data_ptr()).
"""
from __future__ import annotations

import ctypes
from dataclasses import dataclass

WORD = 8
IMPL_SPAN = 192           # bytes of a TensorImpl searched (sizeof(TensorImpl) is 192 or more on 64-bit builds)
STORAGE_SPAN = 64         # bytes of a StorageImpl searched for the data pointer
OBJECT_SPAN = (16, 40)    # where in the Python object the TensorImpl pointer may lie (after PyObject_HEAD)


@dataclass(frozen=True)
class TorchLayout:
    """Byte offsets (and the values to compare with) that the native launcher reads; see the module doc."""
    impl: int                  # the TensorImpl pointer in the Python tensor object
    vtable: int                # word 0 of a plain TensorImpl
    ndim: int                  # SizesAndStrides' size; extents follow, strides `inline` words later
    inline: int
    storage_offset: int
    storage: int               # the StorageImpl pointer
    data: int                  # the data pointer inside StorageImpl
    cow_at: int | None         # the DataPtr's deleter inside StorageImpl, and its value for copy-on-write storage
    cow: int | None
    dtype_at: int              # TypeMeta's 16-bit index
    dtype_codes: tuple         # ((torch dtype, code), ...)
    device_at: int             # Device (type byte, index byte) and optional's has-value byte
    device_bytes: int          # those three bytes, little-endian, for the launch device

    def dtype_code(self, dtype) -> int | None:
        return dict(self.dtype_codes).get(dtype)

    def sizes_at(self) -> int:
        return self.ndim + WORD

    def strides_at(self) -> int:
        return self.ndim + WORD + WORD * self.inline


def _word(addr: int) -> int:
    return ctypes.c_uint64.from_address(addr).value


def _unique(cands: list, what: str):
    if len(cands) != 1:
        raise _Doubt(f"{what} found at {len(cands)} places ({cands[:4]})")
    return cands[0]


class _Doubt(Exception):
    pass


_DEVICE_TYPES = {"cpu": 0, "cuda": 1, "meta": 14}
_DTYPES = ("float16", "bfloat16", "float32", "float64", "int8", "uint8", "int16", "int32", "int64", "uint16",
           "uint32", "uint64", "bool", "float8_e4m3fn", "float8_e5m2")


def probe(torch, device) -> TorchLayout | str:
    """The layout on this torch for tensors on `device` (a torch.device), or why it could not be proved."""
    try:
        return _probe(torch, torch.device(device))
    except _Doubt as e:
        return f"torch tensor layout not proved: {e}"
    except Exception as e:  # noqa: BLE001 - any surprise is a failed proof, never a crash
        return f"torch tensor layout probe failed: {type(e).__name__}: {e}"


def _probe(torch, dev) -> TorchLayout:
    import numpy as np
    if ctypes.sizeof(ctypes.c_void_p) != WORD:
        raise _Doubt("not a 64-bit build")
    if not hasattr(torch.Tensor, "_cdata") or not hasattr(torch.UntypedStorage, "_cdata"):
        raise _Doubt("no Tensor._cdata")
    # tensors whose answers differ in every field: shapes of 1..5 dimensions, views with offsets and strides
    base = torch.empty(300, dtype=torch.bfloat16, device=dev)
    on_dev = [torch.empty((3, 5, 7), dtype=torch.float32, device=dev),
              torch.empty((11, 13), dtype=torch.float16, device=dev),
              torch.empty((2, 3, 4, 5, 6), dtype=torch.int32, device=dev),
              torch.empty((3, 5, 7), dtype=torch.float32, device=dev).transpose(0, 2),
              base[17:150], base[40:].view(26, 10)[1:, 3:],
              torch.empty((4, 9), dtype=torch.uint8, device=dev)[1:, 2:],
              torch.empty((19,), dtype=torch.int64, device=dev)]
    host = [torch.from_numpy(np.arange(23, dtype=np.int16)), torch.empty((6, 2), dtype=torch.float64)[2:],
            torch.empty((7, 3), dtype=torch.int8)]
    if dev.type == "cpu":
        host = [torch.empty((5, 2), dtype=torch.int16, device="meta")]
    every = on_dev + host
    concrete = on_dev + ([] if dev.type == "cpu" else host)

    impl = _unique([k for k in range(*OBJECT_SPAN, WORD) if all(_word(id(t) + k) == t._cdata for t in every)],
                   "the TensorImpl pointer")
    if impl != OBJECT_SPAN[0]:
        raise _Doubt(f"the TensorImpl pointer lies at {impl}, not right after the object header")
    vts = {_word(t._cdata) for t in every}
    if len(vts) != 1:
        raise _Doubt("plain tensors do not share one TensorImpl vtable")
    vtable = vts.pop()

    def where(pred, what, span=IMPL_SPAN, step=WORD):
        return _unique([k for k in range(WORD, span - WORD, step) if pred(k)], what)

    def dims_at(k, cap):
        for t in every:
            p = t._cdata
            n = t.dim()
            if _word(p + k) != n or n > cap:
                return False
            sizes = [_word(p + k + WORD + WORD * i) for i in range(n)]
            strides = [_word(p + k + WORD + WORD * cap + WORD * i) for i in range(n)]
            if sizes != list(t.shape) or strides != [s & (2**64 - 1) for s in t.stride()]:
                return False
        return True
    found = [(k, cap) for cap in range(5, 9) for k in range(WORD, IMPL_SPAN - WORD * (1 + 2 * cap), WORD)
             if dims_at(k, cap)]
    ndim, inline = _unique(found, "the extents and strides")
    storage_offset = where(lambda k: all(_word(t._cdata + k) == t.storage_offset() for t in every),
                           "storage_offset")
    storage = where(lambda k: all(_word(t._cdata + k) == t.untyped_storage()._cdata for t in concrete),
                    "the storage pointer")
    # the first word equal to the data pointer (UniqueVoidPtr's data_; the context after it may equal it too,
    # but not for the numpy-backed tensor)
    data = where(lambda k: all(_word(t.untyped_storage()._cdata + k) == t.untyped_storage().data_ptr()
                               for t in concrete + [torch.from_numpy(np.arange(9, dtype=np.int32))]),
                 "the storage's data pointer", STORAGE_SPAN + WORD)
    for t in concrete:
        st = _word(t._cdata + storage)
        got = _word(st + data) + _word(t._cdata + storage_offset) * t.element_size()
        if got != t.data_ptr():
            raise _Doubt("storage data + offset x itemsize is not data_ptr()")
    cow_at, cow = _cow(torch, data)

    dtypes = [getattr(torch, n) for n in _DTYPES if isinstance(getattr(torch, n, None), torch.dtype)]
    kinds = [torch.empty(3, dtype=d) for d in dtypes]

    def u16(t, k):
        return ctypes.c_uint16.from_address(t._cdata + k).value

    def names_dtype(k):
        codes = {}
        for t in every + kinds:
            if codes.setdefault(t.dtype, u16(t, k)) != u16(t, k):
                return False
        return len(set(codes.values())) == len(codes)
    dtype_at = where(names_dtype, "the dtype", step=2)
    dtype_codes = tuple((t.dtype, u16(t, dtype_at)) for t in kinds)

    def b3(t, k):
        return ctypes.c_uint32.from_address(t._cdata + k).value & 0xFFFFFF

    def expect(d):     # c10::Device (DeviceType byte: CPU 0, CUDA 1, Meta 14; index byte, -1 for none), present
        return _DEVICE_TYPES[d.type] | ((d.index if d.index is not None else -1) & 0xFF) << 8 | 1 << 16
    device_at = where(lambda k: all(b3(t, k) == expect(t.device) for t in every + kinds), "the device", step=2)
    want = expect(dev if dev.index is not None or dev.type == "cpu" else torch.device(dev.type, 0))
    return TorchLayout(impl, vtable, ndim, inline, storage_offset, storage, data, cow_at, cow, dtype_at,
                       dtype_codes, device_at, want)


def _cow(torch, data: int):
    """Where a copy-on-write storage differs from an ordinary one: the DataPtr's deleter, the word after the data
    pointer's context (libstdc++ keeps unique_ptr's deleter before its pointer); None when this torch has no
    lazy clone (no copy-on-write storage)."""
    clone = getattr(torch, "_lazy_clone", None)
    if clone is None:
        return None, None
    plain = torch.empty(8)
    pairs = []
    for _ in range(2):      # two independent copy-on-write pairs: the deleter is one function, the contexts differ
        src = torch.empty(8)
        pairs.append((src, clone(src)))
    p = plain.untyped_storage()._cdata
    st = [[t.untyped_storage()._cdata for t in pair] for pair in pairs]
    cands = [k for k in range(data + WORD, data + 3 * WORD, WORD)
             if len({_word(s + k) for pair in st for s in pair}) == 1 and _word(st[0][0] + k) != _word(p + k)]
    k = _unique(cands, "the copy-on-write mark")
    return k, _word(st[0][0] + k)


_layouts: dict = {}


def for_device(torch, index: int) -> TorchLayout | str:
    """The proved layout for CUDA device `index` (probed once per process and device), or why there is none."""
    if index not in _layouts:
        _layouts[index] = probe(torch, f"cuda:{index}")
    return _layouts[index]
