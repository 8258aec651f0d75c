"""Front-end handlers for calls: the `T.*` builtins, dtype constructors and the few Python builtins allowed."""
from __future__ import annotations

import ast
import builtins as _py
from dataclasses import dataclass

from ..core import dtypes as dt
from ..core.errors import MAX_INT_BITS, too_big
from ..core.target import Target
from ..ir import nodes as ir
from ..lang import language as L
from ..layout import TileLayout
from ..lang.tensormap import TensorMap, TensorMapArg
from ..lang.views import BitView, RootView, View
from ..ir import ops
from .scalar_math import host_math_message

SCOPES = ("thread", "warp", "warpgroup", "cta", "cluster")


@dataclass
class Unrolled:
    """`T.unroll(...)` or a tuple: iterated at compile time, the loop index is a Python int."""
    values: list


@dataclass
class RuntimeRange:
    dims: list                   # [(start, stop, step)] outermost first
    unroll: int | None = None


@dataclass
class BoundMethod:
    obj: object
    name: str


@dataclass
class LaunchValue:
    grid: tuple
    block: tuple
    max_registers: int | None = None
    min_blocks_per_sm: int | None = None
    cluster: tuple = (1, 1, 1)


class BuiltinCalls:
    """Mixed into the Parser: `call(fn, node)` evaluates a call expression."""

    def call(self, fn, node: ast.Call):
        if isinstance(fn, L.Builtin):
            handler = getattr(self, "b_" + fn.name.replace(".", "_"), None)
            if handler is None:
                raise self.error(f"T.{fn.name} is not supported yet", node)
            return handler(node)
        if isinstance(fn, dt.DType):
            args = self.args(node, ["value"])
            return ops.cast(args["value"], fn, self.loc(node))
        if isinstance(fn, BoundMethod):
            return getattr(self, "m_" + fn.name)(fn.obj, node)
        from ..lang.inline import InlineFunction
        if isinstance(fn, InlineFunction):
            return self.inline_call(fn, node)
        if fn is _py.range:
            return self.b_range(node)
        if fn in (_py.min, _py.max):
            return self.minmax("min" if fn is _py.min else "max", node)
        if fn is _py.abs:
            (x,) = self.positional(node, 1)
            if ops.is_number(x):
                return abs(x)
            if not isinstance(x, ir.Expr):
                raise self.error(f"abs() of {ops.describe(x)}", node)
            if x.dtype.kind == "uint":
                return x
            return ir.Unary(x.dtype, self.loc(node), "abs", x)
        if fn in (_py.int, _py.float, _py.bool):
            return self.py_number(fn, node)
        if fn is _py.len:
            (x,) = self.positional(node, 1)
            if isinstance(x, tuple):
                return len(x)
            if isinstance(x, View):
                return x.shape[0]
            raise self.error(f"len() of {ops.describe(x)}", node)
        if fn is L.Tensor:
            a = self.args(node, ["shape", "dtype"])
            try:
                return L.Tensor(a["shape"], a["dtype"])
            except Exception as e:
                raise self.error(str(e), node) from None
        if fn is TensorMap:                  # a string annotation (from __future__ import annotations)
            a = self.args(node, ["shape", "dtype", "box", "swizzle", "oob_fill", "l2_promotion"],
                          {"swizzle": None, "oob_fill": "zero", "l2_promotion": None})
            try:
                return TensorMap(**a)
            except Exception as e:
                raise self.error(str(e), node) from None
        if isinstance(fn, TileLayout) or fn is TileLayout:
            raise self.error("build layouts outside the kernel and refer to them by name", node)
        if getattr(fn, "__module__", None) == "tiledsl.layouts":      # L.mma_a(...) written inside the kernel
            raise self.error(f"build layouts outside the kernel and refer to them by name (e.g. "
                             f"`FRAG = tiledsl.layouts.{fn.__name__}(...)` at module level or in a factory)", node)
        host = host_math_message(fn)
        if host is not None:
            raise self.error(host, node.func)
        name = getattr(fn, "__name__", type(fn).__name__)
        raise self.error(f"calling '{name}' inside a kernel is not supported", node.func)

    # ------------------------------------------------------------ argument helpers
    def args(self, node, names, defaults=None, varargs=False):
        defaults = defaults or {}
        vals = [self.eval(a) for a in node.args]
        out = {}
        if len(vals) > len(names) and not varargs:
            raise self.error(f"takes at most {len(names)} positional arguments, got {len(vals)}", node)
        for n, v in zip(names, vals):
            out[n] = v
        for k in node.keywords:
            if k.arg not in names:
                raise self.error(f"unexpected keyword argument '{k.arg}'", k.value)
            if k.arg in out:
                raise self.error(f"argument '{k.arg}' given twice", k.value)
            out[k.arg] = self.eval(k.value)
        for n in names:
            if n not in out:
                if n in defaults:
                    out[n] = defaults[n]
                else:
                    raise self.error(f"missing argument '{n}'", node)
        return out

    def positional(self, node, n):
        if node.keywords:
            raise self.error("keyword arguments are not accepted here", node.keywords[0].value)
        if len(node.args) != n:
            raise self.error(f"expects {n} argument{'s' if n != 1 else ''}, got {len(node.args)}", node)
        return [self.eval(a) for a in node.args]

    def static_int(self, v, node, what, positive=False):
        if isinstance(v, bool) or not isinstance(v, int):
            raise self.error(f"{what} must be a compile-time int, got {ops.describe(v)}", node)
        if positive and v <= 0:
            raise self.error(f"{what} must be positive, got {ops.show(v)}", node)
        if positive and too_big(v):     # no extent needs more; later messages could not even print it
            raise self.error(f"{what} must fit in {MAX_INT_BITS} bits, got {ops.show(v)}", node)
        return v

    def axis_arg(self, node):
        a = self.args(node, ["axis"], {"axis": 0})["axis"]
        # 1.0 == 1 and True == 1 in Python: an axis must be the int itself
        if isinstance(a, bool) or not isinstance(a, int) or a not in (0, 1, 2):
            shown = ops.show(a) if ops.is_number(a) else ops.describe(a) if isinstance(a, (ir.Expr, View)) \
                else repr(a) if isinstance(a, str) else ops.describe(a)
            raise self.error(f"axis must be 0, 1 or 2, got {shown} (a compile-time int: x, y, z)", node)
        return a

    def py_number(self, fn, node):
        """`int(x)`, `float(x)`, `bool(x)` of a compile-time value, as Python computes it; float('nan') and
        float('inf') are the usual way to write those constants."""
        (x,) = self.positional(node, 1)
        name = fn.__name__
        if isinstance(x, str) and fn is not _py.bool:
            if len(x) > 100:
                raise self.error(f"{name}() of a string of {len(x)} characters", node)
            try:
                return fn(x)
            except ValueError:
                raise self.error(f"{name}({x!r}): not a number", node) from None
        if ops.is_number(x):
            try:
                return fn(x)
            except (ValueError, OverflowError):         # int(float('nan')), int(float('inf'))
                raise self.error(f"{name}({ops.show(x)}): {ops.show(x)} has no integer value", node) from None
        if isinstance(x, ir.Expr):
            raise self.error(f"{name}() works on compile-time values; use T.cast for run-time values", node)
        raise self.error(f"{name}() of {ops.describe(x)}", node)

    # ------------------------------------------------------------ loops
    def b_range(self, node):
        vals = self.positional(node, len(node.args)) if node.args else []
        if not 1 <= len(vals) <= 3:
            raise self.error("range takes 1 to 3 arguments", node)
        start, stop, step = (0, vals[0], 1) if len(vals) == 1 else (vals[0], vals[1], vals[2] if len(vals) == 3 else 1)
        for v, sub in zip((start, stop, step), node.args if len(vals) > 1 else [None, node.args[0], None]):
            if not (isinstance(v, ir.Expr) and v.dtype.is_int) and not (isinstance(v, int) and not isinstance(v, bool)):
                raise self.error(f"range bounds must be integers, got {ops.describe(v)}", sub or node)
        if not isinstance(step, int):
            raise self.error("range step must be a compile-time int (positive, or negative for a loop that counts "
                             "down); a run-time step is not supported", node.args[2])
        if step == 0:
            raise self.error("range step must not be zero", node.args[2])
        return RuntimeRange([(start, stop, step)])

    def b_grid(self, node):
        vals = self.positional(node, len(node.args))
        if not vals:
            raise self.error("T.grid needs at least one extent", node)
        for v, a in zip(vals, node.args):
            if not (isinstance(v, ir.Expr) and v.dtype.is_int) and not (isinstance(v, int) and not isinstance(v, bool)):
                raise self.error(f"T.grid extents must be integers, got {ops.describe(v)}", a)
        return RuntimeRange([(0, v, 1) for v in vals])

    def b_unroll(self, node):
        vals = self.positional(node, len(node.args))
        if not 1 <= len(vals) <= 3:
            raise self.error("T.unroll takes 1 to 3 compile-time ints", node)
        for v, a in zip(vals, node.args):
            self.static_int(v, a, "T.unroll bounds")
        if len(vals) == 3 and vals[2] == 0:
            raise self.error("T.unroll step must not be zero", node.args[2])
        r = _py.range(*vals)
        try:
            n = len(r)
        except OverflowError:                   # more iterations than a C ssize_t holds
            n = None
        if n is None or n > 4096:
            raise self.error(f"T.unroll over {ops.show(n) if n is not None else 'more than 2**63'} iterations; use "
                             f"range for long loops", node)
        return Unrolled(list(r))

    # ------------------------------------------------------------ launch and ids
    def b_device_entry(self, node):
        if self.launch is not None:
            raise self.error("T.device_entry is given twice; a kernel has one launch configuration", node)
        if self.runtime_depth or self.body_stack[-1]:
            raise self.error("T.device_entry must be the first statement of the kernel", node)
        launch = self.args(node, ["launch"])["launch"]
        if not isinstance(launch, LaunchValue):
            raise self.error("T.device_entry(launch=T.cuda.LaunchConfig(grid=..., block=...))", node)
        block = self.block_override or launch.block
        grid = self.grid_override or launch.grid
        # a grid given at the call (kernel[grid, block]) keeps the kernel's cluster; the launch checks it divides
        self.launch = ir.LaunchSpec(grid, block, launch.max_registers, launch.min_blocks_per_sm,
                                    cluster=launch.cluster)
        return None

    def b_LaunchConfig(self, node):
        a = self.args(node, ["grid", "block", "max_registers", "min_blocks_per_sm", "cluster"],
                      {"max_registers": None, "min_blocks_per_sm": None, "cluster": None})
        grid = self.dims3(a["grid"], node, "grid", static=False)
        block = self.dims3(a["block"], node, "block", static=True)
        n = block[0] * block[1] * block[2]
        # CUDA's limits, in the words every launch path uses (a grid expression is checked when it is evaluated)
        problem = self.target.block_problem(block)
        if problem is None and all(isinstance(g, int) for g in grid):
            problem = self.target.grid_problem(grid)
        for k, (g, most) in enumerate(zip(grid, self.target.max_grid)):
            if problem is None and isinstance(g, int) and g > most:
                problem = f"grid dimension {k} is {g}; CUDA allows at most {most}"
        if problem is not None:
            raise self.error(problem, node)
        # launch bounds (PTX .maxnreg and .minnctapersm): ptxas keeps to them, spilling if it must
        regs, blocks = a["max_registers"], a["min_blocks_per_sm"]
        tg = self.target
        for name, v, lo, hi in (("max_registers", regs, 24, tg.max_registers_per_thread),
                                ("min_blocks_per_sm", blocks, 1, tg.max_blocks_per_sm)):
            if v is not None and not lo <= self.static_int(v, node, name) <= hi:
                raise self.error(f"{name} must be a compile-time int from {lo} to {hi}, got {ops.show(v)}", node)
        if regs is not None and blocks is not None and regs * n * blocks > tg.registers_per_sm:
            raise self.error(f"{blocks} blocks of {n} threads at {regs} registers need {regs * n * blocks} "
                             f"registers; an SM has {tg.registers_per_sm}", node)
        cluster = self.cluster_dims(a["cluster"], grid, node)
        return LaunchValue(grid, block, regs, blocks, cluster)

    def cluster_dims(self, v, grid, node) -> tuple:
        """LaunchConfig's cluster=: static dims, at most the portable cluster size, dividing every static grid
        dimension (a run-time grid is checked at launch, as a LaunchError)."""
        if v is None:
            return (1, 1, 1)
        cluster = self.dims3(v, node, "cluster", static=True)
        tg = self.target
        if tg.sm < 90:
            raise self.error(f"clusters need sm_90 or newer; the target is {tg.name}", node)
        n = cluster[0] * cluster[1] * cluster[2]
        if n > tg.max_cluster_size:
            raise self.error(f"cluster {cluster} has {n} blocks; a portable cluster has at most "
                             f"{tg.max_cluster_size}", node)
        for k, (g, c) in enumerate(zip(grid, cluster)):
            if isinstance(g, int) and g % c:
                raise self.error(f"cluster {cluster} does not divide grid {tuple(grid)}: dimension {'xyz'[k]} is "
                                 f"{g}, not a multiple of {c}", node)
        return cluster

    def dims3(self, v, node, what, static):
        vals = v if isinstance(v, tuple) else (v,)
        if not 1 <= len(vals) <= 3:
            raise self.error(f"{what} takes 1 to 3 dimensions", node)
        out = []
        for x in vals:
            if isinstance(x, ir.Expr) and not static and x.dtype.is_int:
                out.append(x)
            elif isinstance(x, int) and not isinstance(x, bool) and x > 0:
                if too_big(x):          # far beyond CUDA's limits, and too long for the limit's message to print
                    raise self.error(f"each {what} dimension must fit in {MAX_INT_BITS} bits, got {ops.show(x)}", node)
                out.append(x)
            else:
                kind = "a positive compile-time int" if static else "a positive int or an integer expression"
                raise self.error(f"each {what} dimension must be {kind}, got {ops.describe(x)}", node)
        return tuple(out) + (1,) * (3 - len(out))

    def block_dims(self):
        if self.launch is not None:
            return self.launch.block
        return self.block_override

    def b_lane_id(self, node):
        self.positional(node, 0)
        return ir.Special(dt.int32, self.loc(node), "laneid")

    def b_warp_id(self, node):
        self.positional(node, 0)
        return ir.Special(dt.int32, self.loc(node), "warpid")

    def b_thread_id(self, node):
        return ir.Special(dt.int32, self.loc(node), "tid", self.axis_arg(node))

    def b_block_id(self, node):
        return ir.Special(dt.int32, self.loc(node), "ctaid", self.axis_arg(node))

    def b_block_dim(self, node):
        axis = self.axis_arg(node)
        b = self.block_dims()
        if b is not None:
            return b[axis]
        return ir.Special(dt.int32, self.loc(node), "ntid", axis)

    def b_grid_dim(self, node):
        return ir.Special(dt.int32, self.loc(node), "nctaid", self.axis_arg(node))

    def _cluster_special(self, node, name, axis=None):
        if self.target.sm < 90:
            raise self.error(f"cluster special registers need sm_90 or newer; the target is {self.target.name}", node)
        return ir.Special(dt.int32, self.loc(node), name, axis or 0)

    def b_cluster_ctarank(self, node):
        self.positional(node, 0)
        return self._cluster_special(node, "cluster.ctarank")

    def b_cluster_nctarank(self, node):
        self.positional(node, 0)
        return self._cluster_special(node, "cluster.nctarank")

    def b_cluster_id(self, node):
        return self._cluster_special(node, "clusterid", self.axis_arg(node))

    def b_cluster_ctaid(self, node):
        return self._cluster_special(node, "cluster.ctaid", self.axis_arg(node))

    def b_syncthreads(self, node):
        self.positional(node, 0)
        self.emit(ir.Barrier(self.loc(node)))

    # ------------------------------------------------------------ storage

    # (limit attribute of Target, whose memory, who has it, what the limit's name adds)
    _BUDGETS = {"local": ("max_local_per_thread", "each thread's local memory", "a thread", ""),
                "shared": ("shared_per_block", "the kernel's shared memory", "a block", ", {target}")}

    def _check_memory_budget(self, scope, nbytes, node):
        """Local memory per thread and shared memory per block against the target, at the allocation that
        crosses the limit."""
        if scope not in self._BUDGETS:
            return
        attr, whose, who, extra = self._BUDGETS[scope]
        used = sum(st.size * st.dtype.nbytes for st in self.allocs if st.scope == scope)
        total, limit = used + nbytes, getattr(self.target, attr)
        if total > limit:
            before = f" ({used} bytes before it)" if used else ""
            raise self.error(f"{scope} memory: this allocation of {nbytes} bytes{before} brings {whose} to {total} "
                             f"bytes; {who} can have at most {limit} bytes ({limit // 1024} KB"
                             f"{extra.format(target=self.target.name)})", node)

    def _alloc(self, node, scope):
        a = self.args(node, ["shape", "dtype", "layout"], {"layout": "default"})
        shape = a["shape"] if isinstance(a["shape"], tuple) else (a["shape"],)
        for s in shape:
            self.static_int(s, node, "allocation extents", positive=True)
        d = dt.lookup(a["dtype"])
        if d is None:
            raise self.error(dt.unknown_message(a["dtype"]), node)
        layout = a["layout"]
        if isinstance(layout, str) and layout == "default":
            layout = None
        elif not isinstance(layout, TileLayout):
            raise self.error("layout must be \"default\" or a TileLayout", node)
        size = 1
        for s in shape:
            size *= s
        if layout is not None:
            size = layout.storage_span(shape)
            if scope == "shared" and layout.exec_axes(shape):
                raise self.error(f"a shared-memory layout maps coordinates to storage only; this one names "
                                 f"execution axes ({', '.join(sorted(layout.exec_axes(shape)))}), which belong to "
                                 f"register layouts (T.alloc_local)", node)
        self._check_memory_budget(scope, size * d.nbytes, node)
        name = self.name_hint or f"{scope}{len(self.allocs)}"
        if any(s.name == name for s in self.allocs):
            name = f"{name}{len(self.allocs)}"
        st = ir.Storage(name, scope, d, size, self.loc(node))
        self.allocs.append(st)
        return RootView(st, d, shape, layout, name)

    def b_alloc_local(self, node):
        return self._alloc(node, "local")

    def b_alloc_shared(self, node):
        return self._alloc(node, "shared")

    def m_view(self, view: View, node):
        shape = [self.eval(a) for a in node.args]
        if len(shape) == 1 and isinstance(shape[0], tuple):
            shape = list(shape[0])
        kw = {k.arg: self.eval(k.value) for k in node.keywords}
        unknown = set(kw) - {"layout", "dtype"}
        if unknown:
            raise self.error(f"view() got an unexpected keyword argument '{unknown.pop()}'", node)
        out = view
        if "dtype" in kw:
            d = dt.lookup(kw["dtype"])
            if d is None:
                raise self.error(dt.unknown_message(kw["dtype"]), node)
            if d.kind == "bool" or view.dtype.kind == "bool":
                raise self.error(f"view(dtype=...) between bool and {(view.dtype if d.kind == 'bool' else d).name}: "
                                 f"a bool's byte is 0 or 1 and no other bits, so bool storage is not reinterpreted; "
                                 f"allocate uint8 and compare (x != 0), or convert with T.cast", node)
            last = view.shape[-1] if view.shape else 1
            if d.bits > view.dtype.bits and isinstance(last, int) and (last * view.dtype.bits) % d.bits:
                raise self.error(f"last extent {last} of {view.dtype.name} does not pack into {d.name}", node)
            out = BitView(view, d)
        if shape or "layout" in kw:
            if not isinstance(out, RootView) or out.layout is not None:
                if not (isinstance(out, BitView) and isinstance(out.parent, RootView) and out.parent.layout is None):
                    raise self.error("view(shape, layout=...) applies to a whole buffer, not to a view of one", node)
            for s in shape:
                self.static_int(s, node, "view extents", positive=True)
            layout = kw.get("layout")
            if layout is not None and not isinstance(layout, TileLayout):
                raise self.error("layout must be a TileLayout", node)
            if not shape:
                shape = list(out.shape)
            total = out.storage.size
            if isinstance(out, BitView):
                total = total * out.storage.dtype.bits // out.dtype.bits if total is not None else None
            if total is None and all(isinstance(e, int) for e in out.shape):
                total = 1                               # a tensor parameter of static shape: its elements
                for e in out.shape:
                    total *= e
            n = 1
            for s in shape:
                n *= s
            need = layout.storage_span(tuple(shape)) if layout is not None else n
            if total is not None and need > total:
                raise self.error(f"the view needs {need} elements of storage but {out.storage.name} has {total}",
                                 node)
            if layout is not None and layout.exec_axes(tuple(shape)) and out.storage.scope != "local":
                raise self.error("execution axes (laneid, ...) belong to register layouts; memory views map "
                                 "coordinates to storage only", node)
            if isinstance(out, BitView):
                out = _rebase(out)
            out = RootView(out.storage, out.dtype, tuple(shape), layout, view.name if hasattr(view, "name") else None)
        return out

    # ------------------------------------------------------------ arithmetic helpers
    def minmax(self, which, node):
        vals = self.positional(node, len(node.args))
        if len(vals) < 2:
            raise self.error(f"{which} needs at least two values", node)
        out = vals[0]
        for v in vals[1:]:
            out = ops.binop(which, out, v, self.loc(node))
        return out

    def b_min(self, node):
        return self.minmax("min", node)

    def b_max(self, node):
        return self.minmax("max", node)

    def b_cast(self, node):
        a = self.args(node, ["value", "dtype"])
        d = dt.lookup(a["dtype"])
        if d is None:
            raise self.error(dt.unknown_message(a["dtype"]), node)
        return ops.cast(a["value"], d, self.loc(node))

    def b_static_assert(self, node):
        a = self.args(node, ["cond", "msg"], {"msg": "static assertion failed"})
        if isinstance(a["cond"], ir.Expr):
            raise self.error("T.static_assert needs a compile-time condition", node)
        if not a["cond"]:
            raise self.error(str(a["msg"]), node)

    # ------------------------------------------------------------ tile patterns
    def b_tile_apply(self, node):
        if not node.args:
            raise self.error("T.cuda.tile.apply(T.ptx[opcode], *operands, scope=..., **params)", node)
        op = self.eval(node.args[0])
        if not isinstance(op, L.Opcode):
            raise self.error("the first argument of tile.apply must be T.ptx[\"opcode\"]", node.args[0])
        operands, locs = [], []
        for a in node.args[1:]:
            v = self.eval(a)
            if not (isinstance(v, (View, TensorMapArg)) or isinstance(v, ir.Expr) or ops.is_number(v)):
                raise self.error(f"a tile operand must be a buffer view or a scalar, got {ops.describe(v)}", a)
            if _unprintable(v):
                raise self.error(f"a tile operand must fit in {MAX_INT_BITS} bits, got {ops.show(v)}", a)
            operands.append(v)
            locs.append(self.loc(a))
        scope, params = "thread", {}
        for k in node.keywords:
            v = self.eval(k.value)
            if k.arg == "scope":
                if v not in SCOPES:
                    raise self.error(f"scope must be one of {', '.join(SCOPES)}, got {v!r}", k.value)
                scope = v
            else:
                if _unprintable(v):
                    raise self.error(f"{k.arg} must fit in {MAX_INT_BITS} bits, got {ops.show(v)}", k.value)
                params[k.arg] = (v, self.loc(k.value))
        self.emit(ir.Apply(self.loc(node), op.text, operands, scope, params, locs))


def check_block_override(block, target: Target) -> None:
    """A block given by the caller (compile(block=...), kernel[grid, block]) is a bad call when CUDA refuses it."""
    problem = target.block_problem(block)
    if problem is not None:
        from ..core.errors import LaunchError
        raise LaunchError(problem)


def _rebase(v: BitView):
    """A dtype view of a whole buffer, as a flat root view of the new dtype over the same storage."""
    n = 1
    for s in v.shape:
        n = ir.mul(n, s)
    return RootView(v.storage, v.dtype, (n,), None, v.name)


def _unprintable(v) -> bool:
    """An int too long for Python to print (ops.show abbreviates it): refused at the tile operand, since the
    families' range messages print the value (a merely too-big immediate gets the family's own range message)."""
    return isinstance(v, int) and not isinstance(v, bool) and v.bit_length() > 200
