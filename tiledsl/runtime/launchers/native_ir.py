"""The native launcher's LLVM IR (runtime/native.py compiles it): the CPython C API and driver calls it makes,
the checks it performs on each argument, and grid expressions with Python's integer semantics."""
from __future__ import annotations

import ctypes
import struct
import sys
from types import FunctionType, GetSetDescriptorType, MethodDescriptorType

from ...abi.check import FLOAT_OVERFLOW, INT_RANGE
from ...core.target import Target

# Where the native code reads CPython's structures; native.layout_problem() proves these on the running
# interpreter before any of them is used (direct() refuses until it has).
OB_TYPE = 8                 # PyObject: ob_refcnt, ob_type
DESCR_RECORD = 40           # PyDescr_COMMON (PyObject_HEAD, d_type, d_name, d_qualname), then the record
GETSET_SIZE = 40            # PyGetSetDef: name, get, set, doc, closure
GETSET_GET, GETSET_CLOSURE = 8, 32
METHOD_METH, METHOD_FLAGS = 8, 16      # PyMethodDef: name, meth, flags, doc
OFFSET_FLAG = 1 << 63                      # PY_VECTORCALL_ARGUMENTS_OFFSET
METH_FASTCALL_KEYWORDS = 0x0080 | 0x0002

_API = {   # name -> (LLVM return type, argument types)
    "PyObject_GetAttr": ("ptr", ["ptr", "ptr"]),
    "PyObject_VectorcallMethod": ("ptr", ["ptr", "ptr", "i64", "ptr"]),
    "PyObject_Vectorcall": ("ptr", ["ptr", "ptr", "i64", "ptr"]),
    "Py_DecRef": ("void", ["ptr"]),
    "Py_IncRef": ("void", ["ptr"]),
    "PyLong_AsLongLong": ("i64", ["ptr"]),
    "PyLong_AsUnsignedLongLong": ("i64", ["ptr"]),
    "PyLong_FromLongLong": ("ptr", ["i64"]),
    "PyFloat_AsDouble": ("double", ["ptr"]),
    "PyErr_Occurred": ("ptr", []),
    "PyErr_Clear": ("void", []),
    "PyTuple_Size": ("i64", ["ptr"]),
    "PyTuple_GetItem": ("ptr", ["ptr", "i64"]),
    "PyDict_GetItem": ("ptr", ["ptr", "ptr"]),
    "PyEval_SaveThread": ("ptr", []),
    "PyEval_RestoreThread": ("void", ["ptr"]),
}
_DRIVER = {
    "cuLaunchKernel": ("i32", ["ptr", "i32", "i32", "i32", "i32", "i32", "i32", "i32", "ptr", "ptr", "ptr"]),
    "cuCtxGetCurrent": ("i32", ["ptr"]),
    "cuCtxSetCurrent": ("i32", ["ptr"]),
    "cuLaunchKernelEx": ("i32", ["ptr", "ptr", "ptr", "ptr"]),     # clustered kernels (config, f, params, extra)
}
# CUlaunchConfig (cuda.h): grid x/y/z, block x/y/z, sharedMemBytes (u32 each), hStream, attrs, numAttrs; LLVM's
# natural layout of this struct is C's (the stream pointer at byte 32, numAttrs at 48, 56 bytes in all)
LAUNCH_CONFIG = "{ i32, i32, i32, i32, i32, i32, i32, ptr, ptr, i32 }"
MAP_WORDS = 16              # a CUtensorMap: 128 bytes, passed by value, 64-byte aligned
_SLOT = {"int8": "i8", "uint8": "i8", "int16": "i16", "uint16": "i16", "int32": "i32", "uint32": "i32",
         "int64": "i64", "uint64": "i64", "float32": "float", "float64": "double"}


class Unsupported(Exception):
    """This specialization keeps the Python launcher (a case the native one does not cover)."""


class _IR:
    """A tiny emitter: SSA names, labels, and calls through absolute addresses."""

    def __init__(self, funcs: dict, keep: list):
        self.lines, self.n, self.funcs, self.keep = [], 0, funcs, keep

    def tmp(self) -> str:
        self.n += 1
        return f"%t{self.n}"

    def label(self) -> str:
        self.n += 1
        return f"L{self.n}"

    def emit(self, s: str):
        self.lines.append("  " + s)

    def let(self, rhs: str) -> str:
        """A fresh SSA name bound to `rhs`."""
        r = self.tmp()
        self.emit(f"{r} = {rhs}")
        return r

    def place(self, label: str):
        self.lines.append(f"{label}:")

    def obj(self, o) -> str:
        """A Python object as a constant pointer; `keep` holds it so its address stays valid."""
        self.keep.append(o)
        return f"inttoptr (i64 {id(o)} to ptr)"

    def call(self, name: str, *args: str) -> str | None:
        addr, ret, types = self.funcs[name]
        return self.call_addr(addr, ret, types, args)

    def call_addr(self, addr: int, ret: str, types, args) -> str | None:
        fn = f"inttoptr (i64 {addr} to ptr)"
        a = ", ".join(f"{t} {v}" for t, v in zip(types, args))
        if ret == "void":
            self.emit(f"call void {fn}({a})")
            return None
        r = self.let(f"call {ret} {fn}({a})")
        return r

    def check(self, cond: str):
        """Continue when `cond` (an i1) holds, else take the Python path."""
        ok = self.label()
        self.emit(f"br i1 {cond}, label %{ok}, label %slow")
        self.place(ok)

    def cmp(self, op: str, ty: str, a: str, b: str) -> str:
        r = self.let(f"icmp {op} {ty} {a}, {b}")
        return r

    def not_null(self, p: str):
        self.check(self.cmp("ne", "ptr", p, "null"))

    def no_error_if(self, value: str, ty: str, sentinel: str):
        """After a conversion that returns `sentinel` on failure: go on unless an exception is pending."""
        is_s = self.cmp("eq", ty, value, sentinel) if ty != "double" else self._fcmp(value, sentinel)
        err = self.call("PyErr_Occurred")
        bad = self.let(f"icmp ne ptr {err}, null")
        both = self.let(f"and i1 {is_s}, {bad}")
        ok = self.let(f"xor i1 {both}, true")
        self.check(ok)

    def _fcmp(self, a, b):
        r = self.let(f"fcmp oeq double {a}, {b}")
        return r


_layout: dict = {}


def layout_problem() -> str | None:
    """None when this interpreter's object and descriptor layouts are the ones the native code reads (proved once
    per process by `_probe_layout`), else why not."""
    if "problem" not in _layout:
        try:
            _layout["problem"] = _probe_layout()
        except Exception as e:  # noqa: BLE001 - any surprise is a failed proof
            _layout["problem"] = f"layout self-test failed: {type(e).__name__}: {e}"
    return _layout["problem"]


def _probe_layout() -> str | None:
    if sys.implementation.name != "cpython":
        return f"{sys.implementation.name}, not CPython"
    word = ctypes.sizeof(ctypes.c_void_p)
    if word != 8:
        return f"{word * 8}-bit pointers"
    # ob_type at OB_TYPE: after the reference count, in every object
    for x in (0, 1.5, "s", (), [], {}, object(), ctypes, len, type):
        if ctypes.c_void_p.from_address(id(x) + OB_TYPE).value != id(type(x)):
            return f"ob_type is not at offset {OB_TYPE} (checked on a {type(x).__name__})"
    # PyDescr_COMMON then the record pointer (d_getset / d_method) at DESCR_RECORD; PyGetSetDef = name, get,
    # set, doc, closure (40 bytes); PyMethodDef = name, meth, flags, doc (32 bytes). int's getsets are declared
    # real, imag (in that order), so the record after "real" names "imag": that proves the record size, hence
    # where closure lies; methods with known calling conventions prove where flags lie.
    rec = ctypes.c_void_p.from_address(id(int.__dict__["real"]) + DESCR_RECORD).value
    if not rec or ctypes.c_char_p.from_address(rec).value != b"real":
        return "getset descriptors do not hold their PyGetSetDef where expected"
    if ctypes.c_char_p.from_address(rec + GETSET_SIZE).value != b"imag":
        return "PyGetSetDef records do not have the expected size"
    for tp, name, flags in ((list, "append", 0x8), (str, "upper", 0x4), (dict, "get", 0x80)):
        rec = ctypes.c_void_p.from_address(id(tp.__dict__[name]) + DESCR_RECORD).value
        if not rec or ctypes.c_char_p.from_address(rec).value != name.encode():
            return f"method descriptors do not hold their PyMethodDef where expected ({tp.__name__}.{name})"
        got = ctypes.c_int.from_address(rec + METHOD_FLAGS).value
        if got != flags:
            return f"PyMethodDef flags of {tp.__name__}.{name} are {got:#x}, expected {flags:#x}"
    return None



def _descriptor(tp, name: str):
    for k in tp.__mro__:
        if name in k.__dict__:
            return k.__dict__[name]
    return None


def direct(tp, name: str):
    """How to reach attribute or method `name` of exact type `tp` without a lookup: ("get", getter, closure) for
    a C getset descriptor, ("meth", function, flags) for a C method descriptor, or None (use the generic call).

    It reads the descriptor's C record (PyGetSetDef / PyMethodDef, behind PyDescr_COMMON, unchanged since
    CPython 3.3) and trusts it only when the record names `name` itself.
    """
    if layout_problem() is not None or not (3, 8) <= sys.version_info[:2] <= (3, 14):
        return None
    d = _descriptor(tp, name)
    if type(d) not in (GetSetDescriptorType, MethodDescriptorType):
        return None
    rec = ctypes.c_void_p.from_address(id(d) + DESCR_RECORD).value     # d_getset / d_method
    if not rec or ctypes.c_char_p.from_address(rec).value != name.encode():
        return None
    fn = ctypes.c_void_p.from_address(rec + METHOD_METH).value        # (== GETSET_GET)
    if not fn:
        return None
    if type(d) is GetSetDescriptorType:
        return ("get", fn, ctypes.c_void_p.from_address(rec + GETSET_CLOSURE).value or 0)
    flags = ctypes.c_int.from_address(rec + METHOD_FLAGS).value
    if flags & ~(0x1 | 0x2 | 0x4 | 0x80):                      # METH_CLASS/STATIC/COEXIST/METHOD: generic
        return None
    return ("meth", fn, flags)


def _py_api() -> dict:
    api = ctypes.pythonapi
    return {n: (ctypes.cast(getattr(api, n), ctypes.c_void_p).value, ret, args) for n, (ret, args) in _API.items()}


def build_ir(spec: dict, drv_addrs: dict, keep: list) -> str:
    """LLVM IR of the launcher for one specialization (see `build` for the fields of `spec`)."""
    funcs = _py_api()
    funcs.update({n: (drv_addrs[n],) + _DRIVER[n] for n in _DRIVER if n in drv_addrs})
    if spec.get("cluster") and "cuLaunchKernelEx" not in funcs:
        raise Unsupported("no cuLaunchKernelEx entry point")
    e = _IR(funcs, keep)
    names = {}

    def name(s: str) -> str:
        if s not in names:
            names[s] = e.obj(sys.intern(s))
        return names[s]

    nparams = len(spec["args"])
    nslots = len(spec["slots"])
    e.emit("%argv = alloca [2 x ptr]")
    e.emit(f"%params = alloca [{max(1, nslots)} x ptr]")
    e.emit("%cur = alloca ptr")
    if spec.get("cluster"):
        e.emit(f"%cfg = alloca {LAUNCH_CONFIG}, align 8")
    slot_ptrs = []
    for k, ty in enumerate(spec["slots"]):
        if ty == "map":            # a CUtensorMap by value: the kernel's `.param .align 64 .b8 [128]`
            e.emit(f"%s{k} = alloca [{MAP_WORDS} x i64], align 64")
        else:
            e.emit(f"%s{k} = alloca {ty}")
        p = e.let(f"getelementptr [{max(1, nslots)} x ptr], ptr %params, i64 0, i64 {k}")
        e.emit(f"store ptr %s{k}, ptr {p}")
        slot_ptrs.append(f"%s{k}")
    e.emit(f"%nargs = and i64 %nargsf, {OFFSET_FLAG - 1}")
    e.check(e.cmp("eq", "ptr", "%kwnames", "null"))
    e.check(e.cmp("eq", "i64", "%nargs", str(nparams)))

    empty = e.obj(())

    def direct_call(how, x: str) -> str:
        if how[0] == "get":
            return e.call_addr(how[1], "ptr", ["ptr", "ptr"], [x, f"inttoptr (i64 {how[2]} to ptr)"])
        flags = how[2]
        if flags & 0x80:
            tys, args = ["ptr", "ptr", "i64", "ptr"], [x, "null", "0", "null"]
            return e.call_addr(how[1], "ptr", tys[:4 if flags & 0x2 else 3], args)
        if flags & 0x4:
            return e.call_addr(how[1], "ptr", ["ptr", "ptr"], [x, "null"])
        return e.call_addr(how[1], "ptr", ["ptr", "ptr", "ptr"], [x, empty, "null"][:3 if flags & 0x2 else 2])

    def method(x: str, meth: str, tp=None) -> str:
        how = direct(tp, meth) if tp is not None else None
        if how is not None and how[0] == "meth":
            r = direct_call(how, x)
        else:
            e.emit(f"store ptr {x}, ptr %argv")
            r = e.call("PyObject_VectorcallMethod", name(meth), "%argv", "1", "null")
        e.not_null(r)
        return r

    def attr(x: str, a: str, tp=None) -> str:
        how = direct(tp, a) if tp is not None else None
        if how is not None and how[0] == "get":
            r = direct_call(how, x)
        else:
            r = e.call("PyObject_GetAttr", x, name(a))
        e.not_null(r)
        return r

    def as_int(o: str, unsigned=False) -> str:
        v = e.call("PyLong_AsUnsignedLongLong" if unsigned else "PyLong_AsLongLong", o)
        e.no_error_if(v, "i64", "-1")
        return v

    def shape_values(x: str, tp, ndim: int) -> list:
        """The extents of array `x` through its `shape` tuple (slow path unless it has `ndim` entries)."""
        s = attr(x, "shape", tp)
        n = e.call("PyTuple_Size", s)
        ok = e.cmp("eq", "i64", n, str(ndim))
        dims_ok = e.label()
        bad = e.label()
        e.emit(f"br i1 {ok}, label %{dims_ok}, label %{bad}")
        e.place(bad)
        e.call("Py_DecRef", s)
        e.emit("br label %slow")
        e.place(dims_ok)
        vals = []
        for k in range(ndim):
            it = e.call("PyTuple_GetItem", s, str(k))
            vals.append(e.call("PyLong_AsLongLong", it))
        e.call("Py_DecRef", s)
        return vals

    # the kernel's source and globals are those it was compiled from (JITFunction._fresh)
    code = attr(e.obj(spec["fn"]), "__code__", FunctionType)
    e.call("Py_DecRef", code)
    e.check(e.cmp("eq", "ptr", code, e.obj(spec["code"])))
    for d, n, v in spec["deps"]:
        got = e.call("PyDict_GetItem", e.obj(d), e.obj(n))
        want = "null" if v is spec["missing"] else e.obj(v)
        e.check(e.cmp("eq", "ptr", got, want))

    ints = {}          # named sizes and integer scalars -> i64 SSA value
    torch = spec["framework"] == "torch"
    for i, kind, info in spec["args"]:
        p = e.let(f"getelementptr ptr, ptr %args, i64 {i}")
        x = e.let(f"load ptr, ptr {p}")
        tp_p = e.let(f"getelementptr i8, ptr {x}, i64 {OB_TYPE}")
        tp = e.let(f"load ptr, ptr {tp_p}")
        if kind in ("tensor", "tensormap"):
            slot, dtype, shape = info[:3]
            ok = e.cmp("eq", "ptr", tp, e.obj(spec["array_type"]))
            for other in spec.get("also_types", ()):     # e.g. torch.nn.Parameter: the same C object
                is_o = e.cmp("eq", "ptr", tp, e.obj(other))
                either = e.let(f"or i1 {ok}, {is_o}")
                ok = either
            e.check(ok)
            at = spec["array_type"]
            lay = spec.get("torch_layout") if torch and not spec["multi"] else None
            if lay is not None and len(shape) <= lay.inline and lay.dtype_code(dtype) is not None:
                vals, ptr = torch_direct(e, lay, x, dtype, len(shape))
                bind_extents(e, vals, shape, ints)
                if kind == "tensormap":
                    map_from_memo(e, info[3], ptr, vals, slot_ptrs[slot])
                else:
                    e.emit(f"store i64 {ptr}, ptr {slot_ptrs[slot]}")
                continue
            d = attr(x, "dtype", at)
            e.call("Py_DecRef", d)
            e.check(e.cmp("eq", "ptr", d, e.obj(dtype)))
            if torch:
                if spec["multi"]:
                    dev = method(x, "get_device", at)
                    dv = as_int(dev)
                    e.call("Py_DecRef", dev)
                    e.check(e.cmp("eq", "i64", dv, str(spec["device"])))
                else:                               # one device: being a CUDA tensor says which
                    cu = attr(x, "is_cuda", at)
                    e.call("Py_DecRef", cu)
                    e.check(e.cmp("eq", "ptr", cu, e.obj(True)))
                c = method(x, "is_contiguous", at)
            else:
                c = attr(x, "_c_contiguous", at)
            e.call("Py_DecRef", c)
            e.check(e.cmp("eq", "ptr", c, e.obj(True)))
            if torch and len(shape) == 1:
                # one dimension: dim() and numel() give the extent without building a torch.Size (the shape
                # getter allocates a tuple; it is about half of what the checks of a tensor cost)
                nd = method(x, "dim", at)
                ndv = as_int(nd)
                e.call("Py_DecRef", nd)
                e.check(e.cmp("eq", "i64", ndv, "1"))
                ne = method(x, "numel", at)
                vals = [as_int(ne)]
                e.call("Py_DecRef", ne)
            else:
                vals = shape_values(x, at, len(shape))
            bind_extents(e, vals, shape, ints)
            if torch:
                ptr_o = method(x, "data_ptr", at)
            else:
                mem = attr(x, "data", at)
                if spec["multi"]:
                    dev = attr(mem, "device_id")
                    dv = as_int(dev)
                    e.call("Py_DecRef", dev)
                    e.check(e.cmp("eq", "i64", dv, str(spec["device"])))
                ptr_o = e.call("PyObject_GetAttr", mem, name("ptr"))
                e.call("Py_DecRef", mem)
                e.not_null(ptr_o)
            ptr = as_int(ptr_o, unsigned=True)
            e.call("Py_DecRef", ptr_o)
            if kind == "tensormap":
                map_from_memo(e, info[3], ptr, vals, slot_ptrs[slot])
            else:
                e.emit(f"store i64 {ptr}, ptr {slot_ptrs[slot]}")
        else:  # scalar
            slot, dname, pname = info
            ty = _SLOT[dname]
            if dname.startswith("float"):
                is_f = e.cmp("eq", "ptr", tp, e.obj(float))
                is_i = e.cmp("eq", "ptr", tp, e.obj(int))
                either = e.let(f"or i1 {is_f}, {is_i}")
                e.check(either)
                v = e.call("PyFloat_AsDouble", x)
                e.no_error_if(v, "double", "-1.0")
                if ty == "float":
                    # a finite double beyond float's range would become inf: the checker refuses it (and inf or
                    # NaN, which it accepts, take the Python path too)
                    most = _double_hex(FLOAT_OVERFLOW["float32"])
                    e.check(e.let(f"fcmp olt double {v}, {most}"))
                    e.check(e.let(f"fcmp ogt double {v}, {_double_hex(-FLOAT_OVERFLOW['float32'])}"))
                    f = e.let(f"fptrunc double {v} to float")
                    v = f
                e.emit(f"store {ty} {v}, ptr {slot_ptrs[slot]}")
            else:
                e.check(e.cmp("eq", "ptr", tp, e.obj(int)))     # exactly int: bool is refused by Python
                lo, hi = INT_RANGE[dname]
                unsigned = dname == "uint64"
                v = as_int(x, unsigned=unsigned)
                if not unsigned:
                    e.check(e.cmp("sge", "i64", v, str(lo)))
                    e.check(e.cmp("sle", "i64", v, str(hi - 1)))
                    ints[pname] = v
                if ty != "i64":
                    t = e.let(f"trunc i64 {v} to {ty}")
                    v = t
                e.emit(f"store {ty} {v}, ptr {slot_ptrs[slot]}")
    for slot, sname in spec["sizes"]:
        v = ints[sname]
        e.check(e.cmp("sle", "i64", v, str(Target.max_named_size)))
        t = e.let(f"trunc i64 {v} to i32")
        e.emit(f"store i32 {t}, ptr {slot_ptrs[slot]}")

    grid = [_grid_expr(e, g, ints) for g in spec["grid"]]
    for g, most in zip(grid, Target.max_grid):
        e.check(e.cmp("sgt", "i64", g, "0"))
        e.check(e.cmp("sle", "i64", g, str(most)))
    cluster = spec.get("cluster")
    if cluster:        # a grid that is not a whole number of clusters: the Python path names it
        for g, c in zip(grid, cluster):
            e.check(e.cmp("eq", "i64", e.let(f"srem i64 {g}, {c}"), "0"))
    g32 = []
    for g in grid:
        t = e.let(f"trunc i64 {g} to i32")
        g32.append(t)

    # the framework's current stream on this device
    if torch:
        e.emit(f"store ptr {e.obj(spec['device'])}, ptr %argv")
        so = e.call("PyObject_Vectorcall", e.obj(spec["stream_fn"]), "%argv", "1", "null")
    else:
        so = e.call("PyObject_Vectorcall", e.obj(spec["stream_fn"]), "%argv", "0", "null")
    e.not_null(so)
    if spec.get("stream_attr"):              # the call gave a stream object: its handle
        h = e.call("PyObject_GetAttr", so, name(spec["stream_attr"]))
        e.call("Py_DecRef", so)
        e.not_null(h)
        so = h
    stream_i = as_int(so, unsigned=True)
    e.call("Py_DecRef", so)
    stream = e.let(f"inttoptr i64 {stream_i} to ptr")

    # launch with the GIL released (the parameters live on this stack frame, so threads never share them)
    ts = e.call("PyEval_SaveThread")
    ctx = f"inttoptr (i64 {spec['ctx']} to ptr)"
    b = spec["block"]
    launch_args = [f"inttoptr (i64 {spec['handle']} to ptr)", *g32, str(b[0]), str(b[1]), str(b[2]),
                   str(spec["shared"]), stream, "%params", "null"]
    if spec["multi"]:        # several devices: make this one's context current first (driver.context)
        e.call("cuCtxGetCurrent", "%cur")
        cur = e.let("load ptr, ptr %cur")
        same = e.cmp("eq", "ptr", cur, ctx)
        set_l, go_l = e.label(), e.label()
        e.emit(f"br i1 {same}, label %{go_l}, label %{set_l}")
        e.place(set_l)
        e.call("cuCtxSetCurrent", ctx)
        e.emit(f"br label %{go_l}")
        e.place(go_l)
    if cluster:        # cuLaunchKernelEx: a config on this frame, pointing at the launcher's cluster attribute
        cfg = "%cfg"
        fields = [*g32, str(b[0]), str(b[1]), str(b[2]), str(spec["shared"])]
        for k, v in enumerate(fields):
            fp = e.let(f"getelementptr {LAUNCH_CONFIG}, ptr {cfg}, i32 0, i32 {k}")
            e.emit(f"store i32 {v}, ptr {fp}")
        for k, (ty, v) in enumerate((("ptr", stream), ("ptr", f"inttoptr (i64 {spec['cluster_attr']} to ptr)"),
                                     ("i32", "1")), start=7):
            fp = e.let(f"getelementptr {LAUNCH_CONFIG}, ptr {cfg}, i32 0, i32 {k}")
            e.emit(f"store {ty} {v}, ptr {fp}")
        launch_name, launch_args = "cuLaunchKernelEx", [cfg, launch_args[0], "%params", "null"]
    else:
        launch_name = "cuLaunchKernel"
    first = e.call(launch_name, *launch_args)
    # one device: a thread that never used it has no current context (CUDA_ERROR_INVALID_CONTEXT): set, retry
    retry_l, done_l, from_l = e.label(), e.label(), e.label()
    e.emit(f"br label %{from_l}")
    e.place(from_l)
    e.emit(f"br i1 {e.cmp('eq', 'i32', first, '201')}, label %{retry_l}, label %{done_l}")
    e.place(retry_l)
    e.call("cuCtxSetCurrent", ctx)
    again = e.call(launch_name, *launch_args)
    e.emit(f"br label %{done_l}")
    e.place(done_l)
    err = e.let(f"phi i32 [{first}, %{from_l}], [{again}, %{retry_l}]")
    e.call("PyEval_RestoreThread", ts)
    ok_l, err_l = e.label(), e.label()
    e.emit(f"br i1 {e.cmp('eq', 'i32', err, '0')}, label %{ok_l}, label %{err_l}")
    e.place(ok_l)
    none = e.obj(None)
    e.call("Py_IncRef", none)
    e.emit(f"ret ptr {none}")
    e.place(err_l)
    ext = e.let(f"sext i32 {err} to i64")
    code_o = e.call("PyLong_FromLongLong", ext)
    raiser = e.call("PyTuple_GetItem", "%self", "1")
    e.emit(f"store ptr {code_o}, ptr %argv")
    r = e.call("PyObject_Vectorcall", raiser, "%argv", "1", "null")
    e.call("Py_DecRef", code_o)
    e.emit(f"ret ptr {r}")
    e.place("slow")
    e.call("PyErr_Clear")
    fb = e.call("PyTuple_GetItem", "%self", "0")
    r = e.call("PyObject_Vectorcall", fb, "%args", "%nargsf", "%kwnames")
    e.emit(f"ret ptr {r}")
    body = "\n".join(e.lines)
    return ("define ptr @launch(ptr %self, ptr %args, i64 %nargsf, ptr %kwnames) {\nentry:\n" + body + "\n}\n"
            + _INTRINSICS)


def bind_extents(e: _IR, vals: list, shape, ints: dict) -> None:
    """Check an array's extents against its parameter's shape: constants equal, a named size equal to where it
    was first seen (the first sight binds it)."""
    for v, want in zip(vals, shape):
        e.check(e.cmp("sge", "i64", v, "0"))      # -1 is also the failed conversion
        if isinstance(want, int):
            e.check(e.cmp("eq", "i64", v, str(want)))
        elif want in ints:
            e.check(e.cmp("eq", "i64", v, ints[want]))
        else:
            ints[want] = v


def torch_direct(e: _IR, lay, x: str, dtype, ndim: int) -> tuple[list, str]:
    """A torch tensor's extents and data pointer read from its TensorImpl at the offsets torch_layout proved on
    this torch (its module doc lists the checks): the same answers as dtype, is_cuda, is_contiguous(), shape
    and data_ptr(), without a call. Anything unexpected takes the Python path."""
    def load(ty, base, off, align=""):
        p = e.let(f"getelementptr i8, ptr {base}, i64 {off}")
        return e.let(f"load {ty}, ptr {p}{align}")
    impl = load("ptr", x, lay.impl)
    e.check(e.cmp("eq", "i64", load("i64", impl, 0), str(lay.vtable)))
    e.check(e.cmp("eq", "i16", load("i16", impl, lay.dtype_at), str(lay.dtype_code(dtype))))
    dev = e.let(f"and i32 {load('i32', impl, lay.device_at, ', align 1')}, 16777215")
    e.check(e.cmp("eq", "i32", dev, str(lay.device_bytes)))
    e.check(e.cmp("eq", "i64", load("i64", impl, lay.ndim), str(ndim)))
    sizes = [load("i64", impl, lay.sizes_at() + 8 * k) for k in range(ndim)]
    strides = [load("i64", impl, lay.strides_at() + 8 * k) for k in range(ndim)]
    # torch's default is_contiguous: empty, or each dimension of extent != 1 has the stride of those after it
    ok, empty, expected = "true", "false", "1"
    for k in reversed(range(ndim)):
        one = e.cmp("eq", "i64", sizes[k], "1")
        same = e.cmp("eq", "i64", strides[k], expected)
        fine = e.let(f"or i1 {one}, {same}")
        ok = e.let(f"and i1 {ok}, {fine}")
        zero = e.cmp("eq", "i64", sizes[k], "0")
        empty = e.let(f"or i1 {empty}, {zero}")
        if k:
            grown = e.let(f"mul i64 {expected}, {sizes[k]}")
            expected = e.let(f"select i1 {one}, i64 {expected}, i64 {grown}")
    e.check(e.let(f"or i1 {ok}, {empty}"))
    storage = load("ptr", impl, lay.storage)
    e.not_null(storage)
    if lay.cow_at is not None:
        e.check(e.cmp("ne", "i64", load("i64", storage, lay.cow_at), str(lay.cow)))
    data = load("i64", storage, lay.data)
    offset = load("i64", impl, lay.storage_offset)
    scaled = e.let(f"mul i64 {offset}, {dtype.itemsize}")
    ptr = e.let(f"add i64 {data}, {scaled}")
    return sizes, e.let(f"select i1 {empty}, i64 0, i64 {ptr}")     # data_ptr() of an empty tensor is null


def map_from_memo(e: _IR, memo: tuple, ptr: str, extents: list, slot: str) -> None:
    """A tensor map's slot from its launcher's memo (native.MapMemo; `memo` = (address, ways, stride): `ways`
    entries `stride` bytes apart, each the 128 bytes of a map, then the data pointer and extents it was encoded
    for). The entry that holds this tensor is copied into the slot; with none, the Python path checks, encodes
    and refreshes the memo. Both run holding the GIL, so an entry never changes between comparison and copy."""
    addr, ways, stride = memo
    key = [ptr] + list(extents)
    done = e.label()
    nxt = e.label()
    e.emit(f"br label %{nxt}")
    for w in range(ways):
        base = addr + w * stride
        e.place(nxt)
        nxt = e.label() if w + 1 < ways else "slow"
        hit = "true"
        for k, v in enumerate(key):
            have = e.let(f"load i64, ptr inttoptr (i64 {base + 8 * (MAP_WORDS + k)} to ptr)")
            same = e.cmp("eq", "i64", have, v)
            hit = e.let(f"and i1 {hit}, {same}")
        copy = e.label()
        e.emit(f"br i1 {hit}, label %{copy}, label %{nxt}")
        e.place(copy)
        for word in range(MAP_WORDS):
            v = e.let(f"load i64, ptr inttoptr (i64 {base + 8 * word} to ptr), align 8")
            dst = e.let(f"getelementptr [{MAP_WORDS} x i64], ptr {slot}, i64 0, i64 {word}")
            e.emit(f"store i64 {v}, ptr {dst}, align 8")
        e.emit(f"br label %{done}")
    e.place(done)


_INTRINSICS = """
declare {i64, i1} @llvm.sadd.with.overflow.i64(i64, i64)
declare {i64, i1} @llvm.ssub.with.overflow.i64(i64, i64)
declare {i64, i1} @llvm.smul.with.overflow.i64(i64, i64)
"""


def _grid_expr(e: _IR, tree, ints: dict) -> str:
    """A host grid expression (ir/eval.py's trees) in i64 with Python's semantics; overflow takes the slow path."""
    if isinstance(tree, int):
        return str(tree)
    if tree[0] == "var":
        if tree[1] not in ints:
            raise Unsupported(f"grid uses {tree[1]}")
        return ints[tree[1]]
    a, b = _grid_expr(e, tree[1], ints), _grid_expr(e, tree[2], ints)
    op = tree[0]
    r = e.tmp()
    if op in ("add", "sub", "mul"):
        s = e.let(f"call {{i64, i1}} @llvm.{'s' + op}.with.overflow.i64(i64 {a}, i64 {b})")
        e.emit(f"{r} = extractvalue {{i64, i1}} {s}, 0")
        o = e.let(f"extractvalue {{i64, i1}} {s}, 1")
        no = e.let(f"xor i1 {o}, true")
        e.check(no)
        return r
    if op in ("min", "max"):
        c = e.cmp("slt" if op == "min" else "sgt", "i64", a, b)
        e.emit(f"{r} = select i1 {c}, i64 {a}, i64 {b}")
        return r
    if op in ("floordiv", "mod"):
        e.check(e.cmp("sgt", "i64", b, "0"))        # sizes and grids divide by positive numbers; else Python
        q, m = e.tmp(), e.tmp()
        e.emit(f"{q} = sdiv i64 {a}, {b}")
        e.emit(f"{m} = srem i64 {a}, {b}")
        neg = e.cmp("slt", "i64", m, "0")             # with b > 0, floor differs from truncation iff m < 0
        if op == "floordiv":
            d = e.let(f"zext i1 {neg} to i64")
            e.emit(f"{r} = sub i64 {q}, {d}")
        else:
            adj = e.let(f"select i1 {neg}, i64 {b}, i64 0")
            e.emit(f"{r} = add i64 {m}, {adj}")
        return r
    if op in ("shl", "shr"):
        e.check(e.cmp("sge", "i64", b, "0"))
        e.check(e.cmp("slt", "i64", b, "63"))
        if op == "shr":
            e.emit(f"{r} = ashr i64 {a}, {b}")
            return r
        e.emit(f"{r} = shl i64 {a}, {b}")
        back = e.let(f"ashr i64 {r}, {b}")
        e.check(e.cmp("eq", "i64", back, a))
        return r
    raise Unsupported(f"grid operation {op}")


def _double_hex(x: float) -> str:
    """An LLVM double constant, exactly (LLVM reads decimal constants only when they are exact)."""
    return "0x%016X" % struct.unpack("<Q", struct.pack("<d", x))[0]
