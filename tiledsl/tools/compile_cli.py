"""`python -m tiledsl compile FILE::KERNEL`: compile one kernel without running it and print one stage's text.

    python -m tiledsl compile examples/seed_mma.py::warp_mma --target sm_90 --emit ptx
    python -m tiledsl compile examples/reduce.py::"make_partials('add')" --sig N=16777216,G=132 --emit expanded
    python -m tiledsl compile mykernels.py::scaled --sig n=4096,dtype=float16 --block 256 --emit sass

FILE is a Python file (imported under a private module name; what it imports is found as `python -m` finds it:
the current folder, then PYTHONPATH) or a dotted module name; KERNEL is a name in it, or a Python expression
evaluated in its namespace (a factory call, `KERNELS['add']`) that gives a `@tiledsl.jit` kernel (a plain function
is compiled as one).

`--sig NAME=VALUE,...` binds what the specialisation needs and the annotations do not say:
  - a `T.constexpr` parameter: VALUE is a Python literal (4, 2.5, True, (64, 128), 'x'); anything else is taken
    as a string, so `dtype=float16` passes "float16";
  - a size name of a `T.Tensor` / tensor-map shape (`T.Tensor(("n",), ...)`): an int. Sizes are run-time values
    (int32 parameters): they do not change the code, but every named size needs one;
  - a scalar parameter (`n: T.int32`): its value (optional; 0 otherwise; it does not change the code either).
Tensor arguments are stand-ins made from the annotations (a shape and a dtype, no memory).
"""
from __future__ import annotations

import ast
import importlib
import importlib.util
import os
import sys

from ..core.errors import TiledslError

EMITS = ("ptx", "llvm", "tile", "expanded", "sass")


class CliError(Exception):
    """A usage mistake the command reports in one line (exit status 2)."""


class _StandIn:
    """An array argument with a shape and a dtype and no memory: what `kernel.compile` needs of it."""

    def __init__(self, shape, dtype):
        kind = {"float": "f", "int": "i", "uint": "u", "bool": "b"}[dtype.kind]
        if dtype.name == "bfloat16":
            kind = "u"                   # numpy has no bfloat16: host-side checks take uint16 bits for it
        order = "|" if dtype.nbytes == 1 else ("<" if sys.byteorder == "little" else ">")
        self.shape = tuple(shape)
        self.__array_interface__ = {"shape": self.shape, "typestr": f"{order}{kind}{dtype.nbytes}",
                                    "data": (1 << 20, False), "version": 3}


def load_kernel(spec: str):
    """The kernel `FILE::KERNEL` names (see the module docstring)."""
    if "::" not in spec:
        raise CliError(f"name the kernel as FILE::KERNEL (e.g. examples/seed_mma.py::warp_mma), got {spec!r}")
    where, expr = spec.rsplit("::", 1)
    if not expr.strip():
        raise CliError(f"no kernel named after '::' in {spec!r}")
    namespace = vars(_import(where))
    try:
        obj = eval(expr, namespace)                    # noqa: S307 - the user's own expression, in their module
    except NameError:
        names = sorted(n for n, v in namespace.items() if getattr(v, "is_tiledsl_kernel", False))
        raise CliError(f"{where} has no {expr!r}" + (f"; its kernels: {', '.join(names)}" if names else "")) from None
    import tiledsl
    if getattr(obj, "is_tiledsl_kernel", False):
        return obj
    import inspect
    if inspect.isfunction(obj):
        return tiledsl.jit(obj)
    raise CliError(f"{expr} in {where} is a {type(obj).__name__}, not a @tiledsl.jit kernel")


def _import(where: str):
    if os.path.exists(where) or where.endswith(".py"):
        path = os.path.abspath(where)
        if not os.path.isfile(path):
            raise CliError(f"no such file: {where}")
        name = "_tiledsl_cli_" + os.path.splitext(os.path.basename(path))[0]
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
        return module
    try:
        return importlib.import_module(where)
    except ModuleNotFoundError as e:
        raise CliError(f"{where} is neither a file nor an importable module ({e})") from None


def parse_sig(text: str | None) -> dict:
    """`n=4096,dtype=float16,tile=(64, 128)` -> {"n": 4096, "dtype": "float16", "tile": (64, 128)}; commas inside
    brackets or quotes do not split."""
    out = {}
    if not text:
        return out
    for item in _split(text):
        name, eq, value = item.partition("=")
        name, value = name.strip(), value.strip()
        if not eq or not name.isidentifier():
            raise CliError(f"--sig takes NAME=VALUE items separated by commas, got {item.strip()!r}")
        if name in out:
            raise CliError(f"--sig names {name!r} twice")
        try:
            out[name] = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            out[name] = value
    return out


def _split(text: str) -> list:
    items, depth, quote, cur = [], 0, None, []
    for c in text:
        if quote:
            quote = None if c == quote else quote
        elif c in "'\"":
            quote = c
        elif c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif c == "," and depth == 0:
            items.append("".join(cur))
            cur = []
            continue
        cur.append(c)
    if "".join(cur).strip():
        items.append("".join(cur))
    return items


def arguments(kernel, sig: dict) -> tuple:
    """The positional arguments for `kernel.compile`, from its annotations and `sig`."""
    import inspect
    params = kernel.params()
    sizes = {}
    for _, kind, ann, _ in params:
        if kind in ("tensor", "tensormap"):
            for s in ann.shape:
                if isinstance(s, str):
                    sizes.setdefault(s, [])
    known = {p[0] for p in params} | set(sizes)
    unknown = sorted(set(sig) - known)
    if unknown:
        raise CliError(f"--sig names {', '.join(map(repr, unknown))}, which {kernel.fn.__name__} does not have; it "
                       f"takes {_listing(params, sizes)}")
    missing = []
    for name, _, _, _ in params:
        if name in sizes:
            raise CliError(f"{kernel.fn.__name__} has a parameter and a size both named {name!r}")
    args = []
    for name, kind, ann, default in params:
        if kind in ("tensor", "tensormap"):
            shape = []
            for s in ann.shape:
                if isinstance(s, str):
                    if s not in sig:
                        if not any(m.startswith(f"size {s} ") for m in missing):
                            missing.append(f"size {s} (of {name})")
                        shape.append(1)
                        continue
                    v = sig[s]
                    if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                        raise CliError(f"size {s!r} is a positive int, got {v!r}")
                    shape.append(v)
                else:
                    shape.append(s)
            args.append(_StandIn(shape, ann.dtype))
        elif kind == "constexpr":
            if name in sig:
                args.append(sig[name])
            elif default is not inspect.Parameter.empty:
                args.append(default)
            else:
                missing.append(f"constexpr {name}")
                args.append(None)
        else:
            args.append(sig.get(name, default if default is not inspect.Parameter.empty else
                                (0.0 if getattr(ann, "is_float", False) else 0)))
    if missing:
        raise CliError(f"{kernel.fn.__name__} needs a value for {', '.join(missing)}: "
                       f"--sig {','.join(m.split()[1] + '=...' for m in missing)}")
    return args


def _listing(params, sizes) -> str:
    parts = [f"constexpr {n}" for n, k, _, _ in params if k == "constexpr"]
    parts += [f"size {s}" for s in sizes]
    parts += [f"scalar {n}" for n, k, _, _ in params if k == "scalar"]
    return ", ".join(parts) if parts else "nothing to bind (its annotations fix every shape)"


def _dims(text: str | None, what: str):
    if text is None:
        return None
    try:
        v = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        v = None
    if isinstance(v, int) and not isinstance(v, bool):
        return v
    if isinstance(v, tuple) and all(isinstance(x, int) and not isinstance(x, bool) for x in v):
        return v
    raise CliError(f"--{what} is an int or up to 3 ints separated by commas (e.g. 128 or 16,8), got {text!r}")


def run(opts) -> int:
    """The `compile` command: 0 and the stage's text on stdout, 1 on a kernel's error, 2 on a usage mistake."""
    try:
        kernel = load_kernel(opts.kernel)
        args = arguments(kernel, parse_sig(opts.sig))
        ck = kernel.compile(*args, target=opts.target, grid=_dims(opts.grid, "grid"),
                            block=_dims(opts.block, "block"))
        if opts.emit == "sass":
            from ..compiled import SassUnavailable
            try:
                text = ck.asm["sass"]
            except SassUnavailable as e:
                print(f"tiledsl compile: no SASS: {e}", file=sys.stderr)
                return 1
        else:
            text = ck.asm[opts.emit]
    except CliError as e:
        print(f"tiledsl compile: error: {e}", file=sys.stderr)
        return 2
    except TiledslError as e:
        print(f"{type(e).__name__}: {e}", file=sys.stderr)
        return 1
    if opts.output and opts.output != "-":
        with open(opts.output, "w") as f:
            f.write(text)
    else:
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
    return 0


def add_parser(sub) -> None:
    """The `compile` subcommand's arguments (tiledsl/__main__.py)."""
    import argparse
    c = sub.add_parser(
        "compile", help="compile one kernel (no GPU needed) and print a stage: ptx, llvm, tile, expanded or sass",
        description="Compile one kernel without running it and print one stage's text.",
        epilog=__doc__.split("\n\n", 1)[1], formatter_class=argparse.RawDescriptionHelpFormatter)
    c.add_argument("kernel", metavar="FILE::KERNEL",
                   help="a Python file (or dotted module) and a kernel in it: a name or an expression")
    c.add_argument("--target", default=None,
                   help="the SM to compile for, e.g. sm_80, sm_90, sm_90a (default: the kernel's jit(target=), "
                        "else sm_90)")
    c.add_argument("--sig", default=None, metavar="NAME=VALUE,...",
                   help="constexpr values and named sizes, e.g. n=4096,dtype=float16 (see below)")
    c.add_argument("--emit", choices=EMITS, default="ptx", help="the stage to print (default ptx); sass needs the "
                   "CUDA toolkit's cuobjdump or nvdisasm, and ptxas for the cubin")
    c.add_argument("--block", default=None, help="the block size where the kernel has no T.device_entry launch "
                   "(e.g. 128 or 16,8)")
    c.add_argument("--grid", default=None, help="the grid, likewise (only where the code depends on it)")
    c.add_argument("-o", "--output", default=None, help="write the text to this file instead of stdout")
    c.set_defaults(run=run)
