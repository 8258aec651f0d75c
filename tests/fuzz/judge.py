"""Compile one mutant and say what happened; the worker process that does it for the runner.

Outcomes: "compiled", "located" (a TiledslError that says where), "not_a_kernel" (not Python, or the mutant's own
code failed before tiledsl was involved), and the failures "internal" (a non-tiledsl exception escaping tiledsl),
"leak" (a message with compiler internals in it), "unlocated" (a CompilationError without the user's file:line
and caret). The runner adds "hang" and "crash" (the worker stopped answering or died).
"""
from __future__ import annotations

import contextlib
import importlib.util
import inspect
import io
import os
import re
import sys
import traceback

FAILURES = ("internal", "leak", "unlocated", "hang", "crash")
# what a user must never read: the compiler's own failures, the tools under it, Python's internals
LEAKS = [r"internal (compiler )?error", r"ptxas", r"llvm", r"nvjitlink", r"nvvm", r"Traceback", r"object at 0x",
         r"<class 'tiledsl", r"<tiledsl\.", r"tiledsl\.(ir|isa|lower|passes|frontend)\."]
LEAK_RE = re.compile("|".join(LEAKS), re.I)
SIZE = 64             # what a named size ("M") becomes in the arrays made from annotations


def _tiledsl_dir():
    import tiledsl
    return os.path.dirname(os.path.abspath(tiledsl.__file__))


def _load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    try:
        spec.loader.exec_module(mod)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return mod


def annotation_args(fn):
    """Arrays and scalars standing for a kernel's parameters, made from its annotations."""
    import numpy as np
    from tiledsl.lang import language as L
    raw = getattr(fn, "fn", fn)
    out = []
    for p in inspect.signature(raw).parameters.values():
        ann = p.annotation
        if isinstance(ann, L.TensorType):
            shape = tuple(SIZE if isinstance(s, str) else s for s in ann.shape)
            out.append(np.zeros(shape, ann.dtype.np))
        elif ann is L.constexpr:
            out.append(1)
        elif getattr(ann, "is_float", False):
            out.append(1.0)
        else:
            out.append(1)
    return out


def _where(e):
    """The innermost frame of the traceback that is tiledsl's ('tiledsl') or the mutant's ('mutant')."""
    tdir = _tiledsl_dir() + os.sep
    last = None
    for fs in traceback.extract_tb(e.__traceback__):
        if fs.filename.startswith(tdir):
            last = ("tiledsl", f"{os.path.relpath(fs.filename, os.path.dirname(tdir))}:{fs.lineno}")
        elif fs.filename == _where.path:
            last = ("mutant", f"line {fs.lineno}")
    return last


def _missing_attribute(e):
    """`T.no_such_name` or `ck.asm["no such key"]` in the mutant's own module-level code: Python's AttributeError
    from a __getattr__ (KeyError from a mapping's __missing__) is the right answer there; inside a kernel the
    front end must locate it."""
    want = {AttributeError: "__getattr__", KeyError: "__missing__"}.get(type(e))
    frames = traceback.extract_tb(e.__traceback__)
    return len(frames) >= 2 and frames[-1].name == want and frames[-2].filename == _where.path


def _plain(e):
    """A non-tiledsl exception: a failure when it escaped from tiledsl's code, else the mutant's own error."""
    where = _where(e)
    if isinstance(e, SyntaxError) or where is None or where[0] == "mutant" or _missing_attribute(e):
        return "not_a_kernel", f"{type(e).__name__}: {e}"[:300], None
    tb = "".join(traceback.format_exception(e))[-4000:]
    return "internal", f"{type(e).__name__} at {where[1]}: {e}"[:500], tb


def check_error(e, path):
    """A TiledslError: located and clean, or a failure."""
    import tiledsl
    msg = str(e)
    m = LEAK_RE.search(msg)
    if m:
        return "leak", f"{type(e).__name__} says {m.group()!r}: {msg}"[:1500], None
    if isinstance(e, tiledsl.CompilationError):
        loc = e.loc
        lines = msg.splitlines()
        if loc is None and "target" in msg:
            # a bad target= is the call's mistake, not a line of the kernel's
            return "located", f"CompilationError: {lines[0]}"[:300], None
        if loc is None or loc.file != path:
            return "unlocated", f"CompilationError at {loc and loc.file}: {msg}"[:1500], None
        if not lines[0].startswith(f"{path}:{loc.line}:") or len(lines) < 3 or "^" not in lines[2]:
            return "unlocated", f"CompilationError without file:line and caret: {msg}"[:1500], None
    return "located", f"{type(e).__name__}: {msg.splitlines()[0] if msg else ''}"[:300], None


def _attempt(step, path):
    """Run step(); (outcome, detail, traceback) if it raised, else None."""
    import tiledsl
    try:
        step()
    except tiledsl.TiledslError as e:
        return check_error(e, path)
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as e:                     # noqa: BLE001 - every escape is judged
        return _plain(e)
    return None


def judge(path, driver, module_name):
    """Import the mutant at `path` and compile its kernels as `driver` (see seeds.py) says."""
    _where.path = path
    box = {}

    def load():
        box["mod"] = _load(path, module_name)

    try:
        bad = _attempt(load, path)
        if bad:
            return bad
        mod = box["mod"]
        kind, spec = driver
        if kind == "import":
            return "compiled", "", None
        if kind == "gemm":
            ab, out, config, shape = spec

            def build():
                box["kernels"] = [mod.make_gemm(ab, out, config, shape)]
            bad = _attempt(build, path)
            if bad:
                return bad
        else:
            try:
                box["kernels"] = [getattr(mod, n) for n in spec]
            except AttributeError as e:
                return "not_a_kernel", str(e), None
        for k in box["kernels"]:
            if not hasattr(k, "compile"):
                return "not_a_kernel", f"{k!r} is no longer a kernel", None
            try:
                args = annotation_args(k)
            except Exception as e:                  # noqa: BLE001 - the driver's own arrays, not tiledsl's doing
                return "not_a_kernel", f"no arguments for the annotations: {type(e).__name__}: {e}"[:300], None
            bad = _attempt(lambda: k.compile(*args, target="sm_90"), path)
            if bad:
                return bad
        return "compiled", "", None
    finally:
        sys.modules.pop(module_name, None)


def hung_in(dump, path):
    """Where a hung worker was, from the stack faulthandler dumped: 'mutant' when the innermost frame of tiledsl or
    the mutant is the mutant's own code (a slow Python loop of its own), else 'tiledsl'."""
    tdir = _tiledsl_dir() + os.sep
    for line in dump.splitlines():                  # faulthandler prints the innermost frame first
        m = re.match(r'\s*File "([^"]+)", line (\d+)', line)
        if m and m.group(1).startswith(tdir):
            return "tiledsl", f"{os.path.relpath(m.group(1), os.path.dirname(tdir))}:{m.group(2)}"
        if m and m.group(1) == path:
            return "mutant", f"line {m.group(2)}"
    return "tiledsl", "?"


def worker_main(conn, dump_path=None, memory_gb=4):
    """Answer (path, driver, module name, timeout) requests with judge()'s outcome until told to stop (None).
    Shortly before the runner's timeout the worker dumps its stack to dump_path, so a hang can be placed."""
    import faulthandler
    import resource
    os.environ["TILEDSL_DISABLE_DISK_CACHE"] = "1"
    if memory_gb:               # a mutant that asks for a 2^40-element array gets a MemoryError, not the machine
        lim = memory_gb << 30
        resource.setrlimit(resource.RLIMIT_AS, (lim, lim))
    dump = open(dump_path, "w") if dump_path else None
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 1000))
    import tiledsl  # noqa: F401  (imported once, before the first timed case)
    while True:
        req = conn.recv()
        if req is None:
            return
        *req, timeout = req
        if dump:
            dump.seek(0)
            dump.truncate()
            faulthandler.dump_traceback_later(max(1.0, timeout - 2), file=dump)
        sink = io.StringIO()
        with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
            try:
                res = judge(*req)
            except BaseException as e:              # noqa: BLE001 - the judge itself must never stop the worker
                res = ("internal", f"judge: {type(e).__name__}: {e}", traceback.format_exc()[-4000:])
        if dump:
            faulthandler.cancel_dump_traceback_later()
        conn.send(res)
