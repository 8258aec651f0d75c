"""The front end: one AST visitor that turns a kernel's Python source into tile IR.

It partially evaluates as it goes: compile-time values (ints, layouts, constexprs, `T.unroll` loop indices) stay
Python values; anything that depends on run-time data becomes an IR expression. Every failure surfaces as a
`CompilationError` at the user's line; compiler internals never reach the message.
"""
from __future__ import annotations

import ast
import builtins as _py
import keyword
import linecache

from ..core import dtypes as dt
from ..ir import nodes as ir
from ..lang import language as L
from ..core.errors import CompilationError
from ..core.target import Target
from ..layout import LayoutError
from ..lang.views import RootView, View
from ..lang.tensormap import TensorMapArg, TensorMapType
from ..ir import ops
from ..ir.ranges import value_range
from .builtins import BuiltinCalls, BoundMethod, Unrolled, RuntimeRange, check_block_override
from .source import Source
from .control import ControlFlow, leaves_early, terminates
from .scalar_math import ScalarMath, host_math_message
from .shortcircuit import ShortCircuit
from .dim_checks import dim_checks, prune
from . import names as N

BINOPS = {ast.Add: "add", ast.Sub: "sub", ast.Mult: "mul", ast.Div: "div", ast.FloorDiv: "floordiv",
          ast.Mod: "mod", ast.Pow: "pow", ast.BitAnd: "and", ast.BitOr: "or", ast.BitXor: "xor",
          ast.LShift: "shl", ast.RShift: "shr"}
UNOPS = {ast.USub: "neg", ast.UAdd: "pos", ast.Not: "not", ast.Invert: "invert"}
PY_BUILTINS = {"range", "min", "max", "abs", "int", "float", "bool", "len", "True", "False", "None"}


class Poisoned:
    """A name bound to a non-scalar inside run-time control flow: using it after that flow is an error."""

    def __init__(self, name):
        self.name = name


class Unassigned:
    """A name bound on some paths only (one branch of a run-time `if`, the body of a loop that may run zero
    times): reading it is an error, as Python would raise NameError on the other paths. `var` is the variable
    the assigning path wrote (a later assignment on another path writes the same one), None for non-scalars."""

    def __init__(self, name, var, why):
        self.name, self.var, self.why = name, var, why


# how many statements `T.unroll` and tuple loops may produce in all, nested ones multiplied (checked before
# expanding, so a mistaken T.unroll(4096) inside another stops at once instead of after minutes)
UNROLL_BUDGET = 1_000_000

# code object -> (its file's lines as linecache holds them, the Source read from them). A kernel built again
# (a tuning loop's closures share one code object) or a helper inlined many times reads its source once; the
# entry holds only while linecache returns the very same lines list (checkcache drops it when the file changes).
_SOURCES: dict = {}


def read_source(fn) -> Source:
    code = getattr(fn, "__code__", None)
    if code is None:
        return Source(fn)
    file = code.co_filename
    linecache.checkcache(file)
    lines = linecache.getlines(file, getattr(fn, "__globals__", None))
    hit = _SOURCES.get(code)
    if hit is not None and lines and hit[0] is lines:
        return hit[1]
    src = Source(fn)
    lines = linecache.getlines(file, getattr(fn, "__globals__", None))
    if lines:
        if len(_SOURCES) >= 1024:               # a bound for processes that generate kernels without end
            _SOURCES.clear()
        _SOURCES[code] = (lines, src)
    return src


class Parser(ControlFlow, BuiltinCalls, ScalarMath, ShortCircuit):
    def __init__(self, fn, constexprs: dict, block_override=None, grid_override=None, target: Target | None = None):
        self.fn = fn
        self.target = Target.parse(target)        # the hardware limits the front end checks
        self.src = read_source(fn)
        self.reads, self.writes = _names(self.src)
        self.globals = fn.__globals__
        self._stmt_counts = {}                    # For node -> statements in its body (the unroll budget)
        self._assigned = {}                       # statement node -> the names it assigns (assigned_names)
        self._fingerprints = {}                   # id(value) -> (value, fingerprint) of the globals read
        self.closure = {}
        if fn.__closure__:
            for name, cell in zip(fn.__code__.co_freevars, fn.__closure__):
                try:
                    self.closure[name] = cell.cell_contents
                except ValueError:
                    pass
        self.constexprs = constexprs
        self.block_override = block_override
        self.grid_override = grid_override
        self.globals_read: dict = {}
        self.scope: dict = {}
        self.body_stack: list = [[]]
        self.runtime_depth = 0
        self.var_count = 0
        self.allocs: list = []
        self.launch = None
        self.sizes: dict = {}
        self.params: list = []
        self.name_hint = None
        self.loop_vars: set = set()
        self.unrolled = 1                 # product of the trip counts of the enclosing compile-time loops
        self.loop_kinds: list = []        # the enclosing loops, innermost last: "runtime", "grid" or "static"
        self.loop_bounds: dict = {}       # id(run-time loop variable) -> (start, stop, step), outer loops first

    # ------------------------------------------------------------ entry
    def parse(self) -> ir.Kernel:
        f = self.src.fdef
        if isinstance(f, ast.AsyncFunctionDef):
            raise self.error("async kernels are not supported", f)
        if self.block_override:
            check_block_override(self.block_override, self.target)      # a bad call: LaunchError, before any parsing
        self._params(f)
        body = list(f.body)
        if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                and isinstance(body[0].value.value, str):
            body = body[1:]
        self.block(body)
        self._prune_dim_checks()
        if self.launch is None:
            # no T.device_entry launch: compile() may still build the kernel, but a call must give
            # kernel[grid, block] (the launch paths raise LaunchError otherwise; there is no default launch)
            self.launch = ir.LaunchSpec(self.grid_override or (1, 1, 1), self.block_override or (1, 1, 1),
                                        given=False)
        return ir.Kernel(f.name, self.params, self.body_stack[0], self.launch, self.allocs, self.sizes,
                         self.src.loc(f))

    def _prune_dim_checks(self):
        """The sides of the per-dimension checks the index ranges prove are dropped, knowing the ranges of the
        run-time loops' indices and of the thread ids of the launch parsed."""
        known = {}
        block = self.launch.block if self.launch is not None else self.block_override
        if block is not None:
            for k in range(3):
                known[("tid", k)] = (0, block[k] - 1)
        for v, (start, stop, step) in self.loop_bounds.items():      # an inner loop's bounds may use outer indices
            span = _loop_range(start, stop, step, known)
            if span is not None:
                known[v] = span
        prune(self.body_stack[0], known)

    def inline_call(self, helper, node: ast.Call):
        """Expand a @tiledsl.inline helper here: its statements go into the current block, its names stay its own."""
        stack = getattr(self, "inline_stack", [])
        if any(h.fn is helper.fn for h in stack):
            raise self.error(f"'{helper.fn.__name__}' calls itself: recursion is not supported (helpers are "
                             f"expanded at compile time)", node)
        if len(stack) >= 32:
            raise self.error("helpers nested more than 32 deep", node)
        args = [self.eval(a) for a in node.args]
        kwargs = {k.arg: self.eval(k.value) for k in node.keywords}
        child = Parser.__new__(Parser)
        child.__dict__.update(self.__dict__)        # shares the current block, allocations, params and sizes
        child.fn = helper.fn
        child.src = read_source(helper.fn)
        child.reads, child.writes = _names(child.src)
        child.globals = helper.fn.__globals__
        child.closure = {}
        if helper.fn.__closure__:
            for name, cell in zip(helper.fn.__code__.co_freevars, helper.fn.__closure__):
                try:
                    child.closure[name] = cell.cell_contents
                except ValueError:
                    pass
        child.scope = {}
        child.name_hint = None
        child._loop_names = set()
        child.loop_kinds = []             # a helper's break/continue belong to its own loops
        child.inline_stack = stack + [helper]
        f = child.src.fdef
        a = f.args
        if a.vararg or a.kwarg or a.kwonlyargs or a.posonlyargs:
            raise child.error("helpers take plain positional parameters only", f)
        names = [x.arg for x in a.args]
        if len(args) > len(names):
            raise self.error(f"{f.name}() takes {len(names)} arguments, got {len(args)}", node)
        bound = dict(zip(names, args))
        for k, v in kwargs.items():
            if k not in names:
                raise self.error(f"{f.name}() got an unexpected argument '{k}'", node)
            if k in bound:
                raise self.error(f"{f.name}() got two values for argument '{k}'", node)
            bound[k] = v
        defaults = dict(zip(names[len(names) - len(helper.fn.__defaults__ or ()):], helper.fn.__defaults__ or ()))
        for n in names:
            if n not in bound:
                if n not in defaults:
                    raise self.error(f"{f.name}() is missing argument '{n}'", node)
                bound[n] = defaults[n]
        child.scope.update(bound)
        body = list(f.body)
        if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                and isinstance(body[0].value.value, str):
            body = body[1:]
        result = None
        last = body[-1] if body else None
        if isinstance(last, ast.Return):
            body = body[:-1]
        for st in body:
            if isinstance(st, ast.Return):
                raise child.error("a helper may only return as its last statement", st)
        child.block(body)
        if isinstance(last, ast.Return) and last.value is not None:
            result = child.eval(last.value)
        self.var_count = child.var_count
        return result

    def error(self, msg, node) -> CompilationError:
        return CompilationError(msg, self.src.loc(node) if node is not None else None)

    def loc(self, node):
        return self.src.loc(node)

    def emit(self, stmt):
        self.body_stack[-1].append(stmt)

    def new_var(self, name, dtype, loc) -> ir.Var:
        self.var_count += 1
        v = ir.Var(dtype, loc, f"{name}.{self.var_count}" if name else f"t.{self.var_count}")
        v.serial = self.var_count                 # made after another variable: shortcircuit.speculatable asks
        return v

    # ------------------------------------------------------------ parameters
    def _params(self, f: ast.FunctionDef):
        a = f.args
        if a.vararg or a.kwarg or a.kwonlyargs or a.posonlyargs:
            node = a.vararg or a.kwarg or (a.kwonlyargs[0] if a.kwonlyargs else a.posonlyargs[0])
            raise self.error("kernels take plain positional parameters only (no *args, **kwargs, keyword-only)",
                             node)
        tensor_index = 0
        size_nodes = {}
        for arg in a.args:
            if arg.annotation is None:
                raise self.error(f"parameter '{arg.arg}' needs an annotation: T.Tensor(shape, dtype), a scalar "
                                 f"type such as T.int32, or T.constexpr", arg)
            ann = getattr(self.fn, "__annotations__", {}).get(arg.arg)
            if isinstance(ann, str):
                # a string annotation (from __future__ import annotations): evaluate it like kernel code
                try:
                    ann = self.eval(arg.annotation)
                except CompilationError as e:     # keep what was wrong, at the annotation
                    raise self.error(f"parameter '{arg.arg}': {e.msg}", arg.annotation) from None
            loc = self.loc(arg)
            if isinstance(ann, L.TensorType):
                for s in ann.shape:
                    if isinstance(s, str):
                        size_nodes.setdefault(s, N.size_node(arg.annotation, s))
                st = ir.Storage(arg.arg, "global", ann.dtype, None, loc, param_index=tensor_index)
                tensor_index += 1
                shape = []
                for s in ann.shape:
                    if isinstance(s, str):
                        if s not in self.sizes:
                            if not s.isidentifier():
                                raise self.error(f"size name {s!r} is not an identifier", arg.annotation)
                            self.sizes[s] = ir.Var(dt.int32, loc, s)
                        shape.append(self.sizes[s])
                    else:
                        shape.append(s)
                view = _root_view(st, ann.dtype, shape, arg.arg)
                self.params.append(ir.Param(arg.arg, "tensor", ann.dtype, ann.shape, storage=st))
                self.scope[arg.arg] = view
            elif isinstance(ann, TensorMapType):
                # a tensor passed as a TMA tensor map: its memory is a global storage (the interpreter copies from
                # it), but the kernel reaches it only through the cp.async.bulk.tensor family
                st = ir.Storage(arg.arg, "global", ann.dtype, None, loc, param_index=tensor_index)
                tensor_index += 1
                dims = []
                for s in ann.shape:
                    if isinstance(s, str):
                        size_nodes.setdefault(s, N.size_node(arg.annotation, s))
                        if s not in self.sizes:
                            self.sizes[s] = ir.Var(dt.int32, loc, s)
                        dims.append(self.sizes[s])
                    else:
                        dims.append(s)
                self.params.append(ir.Param(arg.arg, "tensormap", ann.dtype, ann.shape, storage=st, tensormap=ann))
                self.scope[arg.arg] = TensorMapArg(arg.arg, st, ann, tuple(dims))
            elif isinstance(ann, dt.DType):
                if ann.bits < 32 and ann.kind != "bool" and not ann.is_float:
                    raise self.error(f"scalar parameters of type {ann.name} are not supported; use int32", arg)
                v = ir.Var(ann, loc, arg.arg)
                self.params.append(ir.Param(arg.arg, "scalar", ann, var=v))
                self.scope[arg.arg] = v
            elif ann is L.constexpr:
                if arg.arg not in self.constexprs:
                    raise self.error(f"constexpr parameter '{arg.arg}' has no value", arg)
                self.params.append(ir.Param(arg.arg, "constexpr"))
                self.scope[arg.arg] = self.constexprs[arg.arg]
            else:
                raise self.error(f"parameter '{arg.arg}': annotation must be T.Tensor(shape, dtype), a scalar type "
                                 f"or T.constexpr, not {ops.describe(ann)}", arg.annotation)
        params = {x.arg for x in a.args}
        for name in self.sizes:
            node = size_nodes.get(name, f)
            if name in params:
                raise self.error(f"size name '{name}' is also the name of parameter '{name}': the size is read from "
                                 f"the tensor's shape at call time and the parameter is passed separately, so the "
                                 f"kernel could not tell which '{name}' it means; rename one of them", node)
            if keyword.iskeyword(name) or name in PY_BUILTINS:
                raise self.error(f"size name '{name}' is a Python keyword or builtin; choose another name", node)
            if self.globals.get(name) is L.T or self.closure.get(name) is L.T:
                raise self.error(f"size name '{name}' would hide the kernel language module '{name}'; choose "
                                 f"another name", node)
            clash = N.size_collision(self, name, self.reads)
            if clash is not None:
                raise self.error(clash, node)
        for name, v in self.sizes.items():
            self.scope[name] = v

    # ------------------------------------------------------------ statements
    def block(self, stmts):
        for s in stmts:
            self.stmt(s)

    def stmt(self, node):
        method = getattr(self, "stmt_" + type(node).__name__, None)
        if method is None:
            raise self.error(f"{_stmt_name(node)} is not supported in a kernel", node)
        try:
            method(node)
        except CompilationError:
            raise
        except LayoutError as e:
            raise self.error(str(e), node) from None
        except RecursionError:
            raise self.error("the kernel is nested too deeply", node) from None
        except Exception as e:  # a bug in tiledsl: still report it at the user's line, without our frames
            raise self.error(f"internal compiler error ({type(e).__name__}: {e}); please report it", node) from None

    def stmt_Pass(self, node):
        pass

    def stmt_Expr(self, node):
        if isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            return                                              # a docstring or comment string
        v = self.eval(node.value)
        if isinstance(v, ir.Expr) and not isinstance(node.value, ast.Call):
            return
        if v is not None and not isinstance(v, (ir.Expr, int, float)):
            if isinstance(node.value, ast.Call):
                return
            raise self.error("this expression has no effect", node)

    def stmt_Return(self, node):
        if node.value is not None:
            raise self.error("kernels cannot return a value; write results into a tensor argument", node)
        if getattr(self, "inline_stack", None):
            raise self.error("a helper may only return as its last statement", node)
        if node is not self.src.fdef.body[-1]:
            self.emit(ir.Return(self.loc(node)))        # an early return: the thread leaves the kernel here

    def stmt_Assert(self, node):
        cond = self.eval(node.test)
        if isinstance(cond, ir.Expr):
            raise self.error("assert needs a compile-time condition (run-time checks: use debug=True)", node)
        if not cond:
            msg = self.eval(node.msg) if node.msg is not None else "assertion failed"
            raise self.error(f"static assertion failed: {msg}", node)

    def stmt_Assign(self, node):
        if len(node.targets) != 1:
            raise self.error("chained assignment (a = b = c) is not supported", node)
        target = node.targets[0]
        if isinstance(target, ast.Name):
            self.name_hint = target.id
        try:
            value = self.eval(node.value)
        finally:
            self.name_hint = None
        self.assign(target, value, node)

    def stmt_AnnAssign(self, node):
        if not isinstance(node.target, ast.Name):
            raise self.error("annotated assignment needs a plain name", node)
        ann = self.eval(node.annotation)
        if not isinstance(ann, dt.DType):
            raise self.error("a variable annotation must be a scalar type such as T.float32", node.annotation)
        if node.value is None:
            raise self.error("declare a variable with a value: x: T.float32 = 0.0", node)
        value = self.eval(node.value)
        if ops.is_number(value):
            value = ops.cast(value, ann, self.loc(node.value))
        elif not isinstance(value, ir.Expr):
            raise self.error(f"cannot assign {ops.describe(value)} to {ops.article(ann.name)} variable", node.value)
        if value.dtype != ann:
            raise self.error(f"value is {value.dtype.name} but the annotation says {ann.name}; use T.cast",
                             node.value)
        name = node.target.id
        cur = self.scope.get(name)
        if isinstance(cur, Unassigned):
            cur = cur.var if self.runtime_depth else None
            if cur is not None:
                self.scope[name] = cur
        if isinstance(cur, ir.Var) and cur.dtype != ann:
            raise self.error(f"'{name}' is already {ops.article(cur.dtype.name)} variable", node)
        if not isinstance(cur, ir.Var) or self._is_param_var(cur):
            cur = self.new_var(name, ann, self.loc(node))
            self.scope[name] = cur
        else:
            cur.defn = None                           # assigned again: no single defining expression
        self.emit(ir.Assign(self.loc(node), cur, value))

    def stmt_AugAssign(self, node):
        op = BINOPS.get(type(node.op))
        if op is None:
            raise self.error("unsupported augmented assignment", node)
        if isinstance(node.target, ast.Name):
            cur = self.load_name(node.target.id, node.target)
        elif isinstance(node.target, ast.Subscript):
            cur = self.eval(node.target)
        else:
            raise self.error("unsupported augmented assignment target", node.target)
        rhs = self.eval(node.value)
        value = self.power(cur, rhs, node) if op == "pow" else ops.binop(op, cur, rhs, self.loc(node))
        self.assign(node.target, value, node)

    def assign(self, target, value, node):
        if isinstance(target, ast.Name):
            self.assign_name(target.id, value, target)
        elif isinstance(target, (ast.Tuple, ast.List)):
            if not isinstance(value, tuple) or len(value) != len(target.elts):
                raise self.error("tuple assignment needs a tuple of the same length on the right", node)
            for t, v in zip(target.elts, value):
                self.assign(t, v, node)
        elif isinstance(target, ast.Subscript):
            self.store(target, value)
        elif isinstance(target, ast.Attribute):
            raise self.error("assigning to an attribute is not supported", target)
        else:
            raise self.error("unsupported assignment target", target)

    def _is_param_var(self, v) -> bool:
        return any(p.var is v for p in self.params) or v in self.sizes.values() or id(v) in self.loop_vars

    def assign_name(self, name, value, node):
        loc = self.loc(node)
        if name in self.loop_vars_by_name():
            raise self.error(f"cannot assign to the loop variable '{name}'", node)
        cur = self.scope.get(name)
        if isinstance(cur, Unassigned):
            # bound on another path only: inside control flow this path writes the same variable (so the paths
            # join); in straight-line code it is a fresh binding
            cur = cur.var if self.runtime_depth else None
            if cur is not None:
                self.scope[name] = cur
        if isinstance(cur, ir.Var) and not self._is_param_var(cur) and self.runtime_depth and (
                ops.is_number(value) or isinstance(value, ir.Expr)):
            # inside run-time control flow the variable itself changes (it may be loop-carried)
            self.emit(ir.Assign(loc, cur, self._fit(value, cur, node)))
            cur.defn = None                         # assigned more than once: no single defining expression
            return
        if isinstance(cur, ir.Var) and self._is_param_var(cur):
            if not (ops.is_number(value) or isinstance(value, ir.Expr)):
                raise self.error(f"cannot rebind parameter '{name}' to {ops.describe(value)}", node)
        if isinstance(cur, ir.Var) and not self._is_param_var(cur) and isinstance(value, ir.Expr):
            self._fit(value, cur, node)             # straight-line code rebinds to a fresh variable, same type
        if ops.is_number(value) and self.runtime_depth == 0:
            self.scope[name] = value
            return
        if ops.is_number(value) or isinstance(value, ir.Expr):
            e = ops.to_expr(value, loc)
            var = self.new_var(name, e.dtype, loc)
            self.emit(ir.Assign(loc, var, e))
            var.defn = e                            # static checks may look through a single definition
            self.scope[name] = var
            return
        if self.runtime_depth:
            self.bound_in_runtime.add(name)
        self.scope[name] = value

    def loop_vars_by_name(self):
        return getattr(self, "_loop_names", set())

    def _fit(self, value, var: ir.Var, node):
        if ops.is_number(value):
            return ops.const_of(value, var.dtype, self.loc(node))
        if value.dtype != var.dtype:
            raise self.error(f"'{var.name.split('.')[0]}' holds {var.dtype.name} but this assigns {value.dtype.name}"
                             f"; convert explicitly with T.cast(value, '{var.dtype.name}')", node)
        return value

    def store(self, target: ast.Subscript, value):
        base = self.eval(target.value)
        if not isinstance(base, View):
            raise self.error(f"cannot assign into {ops.describe(base)}", target.value)
        coords, kind = self.indices(base, target)
        if kind != "element":
            raise self.error("assign to single elements; tile copies are written with T.cuda.tile.apply", target)
        off, axes = base.locate(coords)
        self._no_exec_axes(base, axes, target)
        loc = self.loc(target)
        if ops.is_number(value):
            value = ops.const_of(value, base.dtype, loc)
        elif not isinstance(value, ir.Expr):
            raise self.error(f"cannot store {ops.describe(value)} into an element of {base.describe()}", target)
        elif value.dtype != base.dtype:
            raise self.error(f"storing {ops.article(value.dtype.name)} value into {ops.article(base.dtype.name)} "
                             f"element; convert it explicitly with T.cast(value, '{base.dtype.name}')", target)
        self.emit(ir.Store(loc, base.storage, base.dtype, ops.to_expr(off, loc), value,
                           self.dim_checks(base, coords, target)))

    def dim_checks(self, view, coords, node: ast.Subscript) -> tuple:
        """The per-dimension bounds of element `coords` of `view` (frontend/dim_checks.py); the sides the indices'
        ranges prove are dropped when the kernel is parsed (parse, dim_checks.prune)."""
        if len(coords) < 2 and isinstance(view, RootView) and view.whole:
            return ()                                 # one dimension of a whole buffer: the buffer's own check
        sl = node.slice
        return dim_checks(view, coords, list(sl.elts) if isinstance(sl, ast.Tuple) else [sl])

    def _no_exec_axes(self, view, axes, node):
        if any(not (isinstance(v, int) and v == 0) for v in axes.values()):
            raise self.error(f"{view.describe()} spreads over execution axes ({', '.join(axes)}); read and write "
                             f"its elements through the buffer it views", node)

    # ------------------------------------------------------------ control flow
    def assigned_names(self, stmts) -> set:
        out = set()
        for s in stmts:
            # per statement, walked once: an unrolled loop's body asks again for every step
            hit = self._assigned.get(s)
            if hit is None:
                hit = self._assigned[s] = frozenset(n.id for n in ast.walk(s)
                                                    if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store))
            out |= hit
        return out

    def demote(self, names, node):
        """Before run-time control flow, names it assigns that hold constants become variables."""
        for name in sorted(names):
            cur = self.scope.get(name)
            if ops.is_number(cur):
                loc = self.loc(node)
                e = ops.to_expr(cur, loc)
                var = self.new_var(name, e.dtype, loc)
                self.emit(ir.Assign(loc, var, e))
                self.scope[name] = var

    def enter_runtime(self):
        self.runtime_depth += 1
        saved = getattr(self, "bound_in_runtime", set())
        self.bound_in_runtime = set()
        return saved

    def leave_runtime(self, saved, before: dict):
        for name in self.bound_in_runtime:
            if self.scope.get(name) is not before.get(name):
                self.scope[name] = Poisoned(name)
        self.bound_in_runtime = saved | self.bound_in_runtime if self.runtime_depth > 1 else saved
        self.runtime_depth -= 1

    def stmt_If(self, node):
        cond = ops.truth(self.eval(node.test), self.loc(node.test))
        if isinstance(cond, bool):
            self.block(node.body if cond else node.orelse)
            return
        self.demote(self.assigned_names(node.body + node.orelse), node)
        before = dict(self.scope)
        saved = self.enter_runtime()
        then = self.sub_block(node.body)
        line = self.loc(node).line
        # names the then-branch bound afresh are not bound in the else-branch: hide them there
        fresh = {n: v for n, v in self.scope.items() if self._fresh(n, v, before)}
        hidden = {n: Unassigned(n, v if isinstance(v, ir.Var) else None,
                                f"it is assigned only in the other branch of the if at line {line}")
                  for n, v in fresh.items()}
        self.scope.update(hidden)
        orelse = self.sub_block(node.orelse)
        # a branch that ends in break/continue/return never reaches the code after the if: what the other branch
        # binds is bound on every path that does
        then_ends, else_ends = terminates(node.body), terminates(node.orelse)
        for n, v in list(self.scope.items()):
            only_then = n in hidden and hidden[n] is v
            if only_then and else_ends:
                self.scope[n] = fresh[n]
            elif (only_then or (n not in fresh and self._fresh(n, v, before))) and not (then_ends and not only_then):
                var = v.var if isinstance(v, Unassigned) else v if isinstance(v, ir.Var) else None
                self.scope[n] = Unassigned(n, var, f"it is assigned only in one branch of the if at line {line}")
        self.leave_runtime(saved, before)
        self.emit(ir.If(self.loc(node), cond, then, orelse))

    def unassign_fresh(self, before: dict, why: str):
        """After a loop whose body may not run to its end: names it bound afresh may be unbound after it."""
        for n, v in list(self.scope.items()):
            if self._fresh(n, v, before):
                var = v.var if isinstance(v, Unassigned) else v if isinstance(v, ir.Var) else None
                self.scope[n] = Unassigned(n, var, why)

    @staticmethod
    def _fresh(name, value, before) -> bool:
        """Was `name` bound by the code since `before` on a path where it was not bound already?"""
        if name not in before:
            return True
        old = before[name]
        return value is not old and isinstance(old, (Unassigned, Poisoned))

    def sub_block(self, stmts):
        self.body_stack.append([])
        try:
            self.block(stmts)
        finally:
            out = self.body_stack.pop()
        return out

    def stmt_For(self, node):
        if node.orelse:
            raise self.error("for/else is not supported", node)
        it = self.eval(node.iter)
        if isinstance(it, Unrolled) or isinstance(it, tuple):
            values = it.values if isinstance(it, Unrolled) else it
            stmts = self._stmt_counts.get(node)
            if stmts is None:       # the loop body's size, counted once (an outer compile-time loop asks again)
                stmts = self._stmt_counts[node] = sum(isinstance(n, ast.stmt) for st in node.body
                                                      for n in ast.walk(st))
            if self.unrolled * len(values) * stmts > UNROLL_BUDGET:
                inside = f", inside compile-time loops of {self.unrolled:,} iterations" if self.unrolled > 1 else ""
                raise self.error(f"this compile-time loop would expand to {self.unrolled * len(values) * stmts:,} "
                                 f"statements ({len(values):,} iterations of {stmts} statement"
                                 f"{'s' if stmts != 1 else ''}{inside}), more than the limit of {UNROLL_BUDGET:,}; "
                                 f"use range(...) for a run-time loop", node)
            outer = self.unrolled
            self.unrolled = outer * max(1, len(values))
            self.loop_kinds.append("static")
            try:
                for v in values:
                    self.bind_loop_target(node.target, v, node)
                    self.block(node.body)
            finally:
                self.unrolled = outer
                self.loop_kinds.pop()
            return
        if not isinstance(it, RuntimeRange):
            raise self.error(f"cannot iterate over {ops.describe(it)}; use range, T.grid or T.unroll", node.iter)
        targets = node.target.elts if isinstance(node.target, ast.Tuple) else [node.target]
        if len(targets) != len(it.dims):
            raise self.error(f"the loop unpacks {len(targets)} names from {len(it.dims)} loop dimensions", node)
        for t in targets:
            if not isinstance(t, ast.Name):
                raise self.error("loop variables must be plain names", t)
        self.demote(self.assigned_names(node.body) - {t.id for t in targets}, node)
        it = self._bounds_read_once(node, it)
        down = None
        if len(it.dims) == 1 and it.dims[0][2] < 0:
            down, it = self._count_down(targets[0], it)
        before = dict(self.scope)
        saved = self.enter_runtime()
        names = getattr(self, "_loop_names", set())
        loop_vars = []
        for t, (start, stop, step) in zip(targets, it.dims):
            d = _loop_dtype(start, stop)
            v = ir.Var(d, self.loc(t), f"{t.id}.{self.var_count + 1}")
            self.var_count += 1
            self.loop_vars.add(id(v))
            loop_vars.append(v)
            self.loop_bounds[id(v)] = (start, stop, step)
            self.scope[t.id] = v
        self._loop_names = names | {t.id for t in targets}
        self.body_stack.append([])
        if down is not None:             # the name counts down from the first value as the counter counts up
            first, by, user = down
            loc = self.loc(targets[0])
            value = ops.binop("sub", first, ops.binop("mul", loop_vars[0], by, loc), loc)
            self.emit(ir.Assign(loc, user, ops.cast(value, user.dtype, loc) if value.dtype != user.dtype else value))
            self.scope[targets[0].id] = user
        self.loop_kinds.append("runtime" if len(targets) == 1 else "grid")
        try:
            self.block(node.body)
        finally:
            inner = self.body_stack.pop()
            self._loop_names = names
            self.loop_kinds.pop()
        loc = self.loc(node)
        for v, (start, stop, step) in reversed(list(zip(loop_vars, it.dims))):
            start, stop = (ops.convert(x, v.dtype, loc) if isinstance(x, ir.Expr) else x for x in (start, stop))
            inner = [ir.For(loc, v, ops.to_expr(start, loc, v.dtype), ops.to_expr(stop, loc, v.dtype),
                            ops.to_expr(step, loc, v.dtype), inner, it.unroll)]
        early = leaves_early(node.body)
        if not _runs(it.dims) or early:
            why = "may be left early (break, continue or return)" if _runs(it.dims) else "may run zero times"
            self.unassign_fresh(before, f"it is assigned only inside the loop at line {loc.line}, which {why}")
        self.leave_runtime(saved, before)
        for t in targets:
            self.scope[t.id] = Poisoned(t.id)
        self.body_stack[-1].extend(inner)

    def _bounds_read_once(self, node, it):
        """Python evaluates range()'s arguments once, before the loop. A run-time loop tests its stop at every
        iteration (and a loop that counts down computes its index from its start: _count_down), so such a bound
        that the body could change (it reads memory, or a name the body assigns) is read into a variable of its
        own first; one built from constants, ids and names the body leaves alone is kept as it is (the same value
        every time)."""
        assigned = {id(self.scope.get(n)) for n in self.assigned_names(node.body)}

        def stable(e):
            if isinstance(e, (ir.Const, ir.Special)) or ops.is_number(e):
                return True
            if isinstance(e, ir.Var):
                return id(e) not in assigned
            if isinstance(e, (ir.Binary, ir.Compare)):
                return stable(e.a) and stable(e.b)
            if isinstance(e, (ir.Unary, ir.Cast)):
                return stable(e.a)
            if isinstance(e, ir.Select):
                return stable(e.cond) and stable(e.a) and stable(e.b)
            return False

        def once(e, name):
            if stable(e):
                return e
            loc = self.loc(node.iter)
            v = self.new_var(name, e.dtype, loc)
            self.emit(ir.Assign(loc, v, e))
            return v

        dims = [(once(start, "range.start") if step < 0 else start, once(stop, "range.stop"), step)
                for start, stop, step in it.dims]
        return RuntimeRange(dims, it.unroll)

    def _count_down(self, target, it):
        """`range(start, stop, -k)`: a counter j over range(0, n), n = ceil((start - stop) / k) (at most 0: no
        iteration), and the name `target` = start - j * k, assigned first in the body (start and stop as
        _bounds_read_once left them: read once, as Python reads them). Returns ((start, k, the name's variable), the
        counter's RuntimeRange)."""
        (start, stop, step), = it.dims
        loc = self.loc(target)
        d = _loop_dtype(start, stop)
        cd = d if d.kind == "int" else dt.int64          # the count in a signed type: start - stop may be negative
        a, b = (ops.cast(x, cd, loc) if isinstance(x, ir.Expr) and x.dtype != cd else x for x in (start, stop))
        n = ops.binop("floordiv", ops.binop("add", ops.binop("sub", a, b, loc), -step - 1, loc), -step, loc)
        if isinstance(n, int):
            n = max(n, 0)
        return (a, -step, self.new_var(target.id, d, loc)), RuntimeRange([(0, n, 1)], it.unroll)

    def bind_loop_target(self, target, value, node):
        if isinstance(target, ast.Name):
            self.scope[target.id] = value
        elif isinstance(target, ast.Tuple) and isinstance(value, tuple) and len(value) == len(target.elts):
            for t, v in zip(target.elts, value):
                self.bind_loop_target(t, v, node)
        else:
            raise self.error("cannot unpack the loop value into these names", target)

    # ------------------------------------------------------------ expressions
    def eval(self, node):
        method = getattr(self, "expr_" + type(node).__name__, None)
        if method is None:
            raise self.error(f"{_expr_name(node)} is not supported in a kernel", node)
        try:
            v = method(node)
        except CompilationError as e:
            if e.loc is None:
                raise self.error(e.msg, node) from None
            raise
        except LayoutError as e:
            raise self.error(str(e), node) from None
        except RecursionError:
            raise self.error("the expression is nested too deeply", node) from None
        except Exception as e:
            raise self.error(f"internal compiler error ({type(e).__name__}: {e}); please report it", node) from None
        return v

    def expr_Constant(self, node):
        if isinstance(node.value, (int, float, bool, str)) or node.value is None:
            return node.value
        raise self.error(f"constants of type {type(node.value).__name__} are not supported", node)

    def expr_Name(self, node):
        return self.load_name(node.id, node)

    def load_name(self, name, node):
        if name in self.scope:
            v = self.scope[name]
            if isinstance(v, Poisoned):
                raise self.error(f"'{name}' was bound inside a run-time loop or branch and cannot be used after it",
                                 node)
            if isinstance(v, Unassigned):
                raise self.error(f"'{name}' may be unassigned here: {v.why}; assign it before the "
                                 f"{'loop' if 'loop' in v.why else 'if'} (or on every path)", node)
            return v
        if name in self.writes:                   # assigned later in this kernel: local, as in Python
            unbound = N.read_before_assignment(self, name, self.writes)
            if unbound is not None:
                raise self.error(unbound, node)
        if name in self.closure:
            return self._global(name, self.closure[name], node, "closure variable")
        if name in self.globals:
            return self._global(name, self.globals[name], node)
        if name in PY_BUILTINS:
            return getattr(_py, name)
        raise self.error(f"name '{name}' is not defined", node)

    def _global(self, name, value, node, kind="global"):
        from ..cache.fingerprint import fingerprint_value
        # a value read again in this compile has the fingerprint it had (a helper's is its source and its reads)
        hit = self._fingerprints.get(id(value))
        if hit is not None and hit[0] is value:
            fp = hit[1]
        else:
            fp = fingerprint_value(value)
            self._fingerprints[id(value)] = (value, fp)
        if fp is None:
            host = host_math_message(value)
            if host is not None:                  # `from math import sqrt`, then sqrt(x)
                raise self.error(host, node)
            if getattr(type(value), "is_tiledsl_kernel", False):      # a @tiledsl.jit kernel (runtime/jit.py)
                what = "recursion (a kernel calling itself)" if value.fn.__code__ is self.fn.__code__ else \
                    "calling another kernel"
                raise self.error(f"'{name}' is a @tiledsl.jit kernel: {what} is not supported inside a kernel",
                                 node)
            raise self.error(f"{kind} '{name}' is a {type(value).__name__}; a kernel can read ints, floats, bools, "
                             f"strings, tuples of them, dtypes, layouts, and tiledsl/math modules", node)
        self.globals_read[name] = (value, fp)
        return value

    def expr_Attribute(self, node):
        base = self.eval(node.value)
        attr = node.attr
        if isinstance(base, View):
            if attr == "shape":
                return tuple(base.shape)
            if attr == "dtype":
                return base.dtype
            if attr == "ndim":
                return base.ndim
            if attr == "view":
                return BoundMethod(base, "view")
            raise self.error(f"buffer views have no attribute '{attr}'", node)
        if isinstance(base, ir.Expr):
            if attr == "dtype":
                return base.dtype
            raise self.error(f"scalar values have no attribute '{attr}'", node)
        if attr.startswith("_"):
            raise self.error(f"attribute '{attr}' is not accessible in a kernel", node)
        try:
            value = getattr(base, attr)
        except AttributeError:
            raise self.error(f"{_short(base)} has no attribute '{attr}'", node) from None
        return value

    def expr_Subscript(self, node):
        base = self.eval(node.value)
        if isinstance(base, View):
            coords, kind = self.indices(base, node)
            if kind == "element":
                off, axes = base.locate(coords)
                self._no_exec_axes(base, axes, node)
                loc = self.loc(node)
                return ir.Load(base.dtype, loc, base.storage, ops.to_expr(off, loc),
                               self.dim_checks(base, coords, node))
            return coords
        if isinstance(base, L._Ptx):
            text = self.eval(node.slice)
            if not isinstance(text, str):
                raise self.error("T.ptx[...] takes the opcode as a string", node.slice)
            return L.Opcode(text)
        if isinstance(base, (tuple, list)):
            idx = self.eval(node.slice)
            if isinstance(idx, ir.Expr):
                raise self.error("tuples can only be indexed with compile-time ints", node.slice)
            try:
                return base[idx]
            except (IndexError, TypeError) as e:
                raise self.error(f"bad tuple index: {e}", node.slice) from None
        raise self.error(f"{ops.describe(base)} cannot be indexed", node.value)

    def indices(self, view: View, node: ast.Subscript):
        """Read `view[...]`: returns (coords, "element") or (SubView, "view")."""
        from ..lang.views import SubView
        sl = node.slice
        items = list(sl.elts) if isinstance(sl, ast.Tuple) else [sl]
        if len(items) > view.ndim:
            raise self.error(f"{len(items)} indices for {view.describe()}, which has {view.ndim} dimensions", node)
        picks, all_scalar = [], True
        for k, item in enumerate(items):
            extent = view.shape[k]
            if isinstance(item, ast.Slice):
                all_scalar = False
                picks.append(self._slice(item, extent, k, view))
                continue
            v = self.eval(item)
            if ops.is_number(v) and not isinstance(v, bool):
                if not isinstance(v, int):
                    raise self.error(f"index must be an int, got {ops.show(v)}", item)
                if v < 0 or (isinstance(extent, int) and v >= extent):
                    raise self.error(f"index {ops.show(v)} is out of range for dimension {k} of {view.describe()} "
                                     f"(extent {extent})", item)
            elif isinstance(v, ir.Expr):
                if not v.dtype.is_int:
                    raise self.error(f"index must be an integer, got {v.dtype.name}", item)
                v = ops.convert(v, dt.int32, self.loc(item))   # offsets are int32: one type for every index
            else:
                raise self.error(f"index must be an integer, got {ops.describe(v)}", item)
            picks.append(("fix", v))
        if all_scalar and len(items) == view.ndim:
            return [p[1] for p in picks], "element"
        for k in range(len(items), view.ndim):
            picks.append(("range", 0, view.shape[k]))
        return SubView(view, picks), "view"

    def _slice(self, item: ast.Slice, extent, k, view):
        if item.step is not None:
            raise self.error("slices with a step are not supported", item)
        start = 0 if item.lower is None else self.eval(item.lower)
        if isinstance(start, ir.Expr):
            if not start.dtype.is_int:
                raise self.error(f"a slice start must be an integer, got {start.dtype.name}", item.lower)
            start = ops.convert(start, dt.int32, self.loc(item.lower))
        if item.upper is None:
            stop = extent
        else:
            stop = self.eval(item.upper)
        n = ops.binop("sub", stop, start, self.loc(item)) if not isinstance(stop, ir.Expr) or not isinstance(
            start, ir.Expr) else None
        if n is None or isinstance(n, ir.Expr):
            # `x[s : s + n]` with a run-time start: the extent is the added constant
            up = item.upper
            if isinstance(up, ast.BinOp) and isinstance(up.op, ast.Add) and item.lower is not None and \
                    ast.dump(up.left) == ast.dump(item.lower):
                n = self.eval(up.right)
            if not isinstance(n, int):
                raise self.error("a slice's length must be a compile-time int (write x[s : s + n])", item)
        if not isinstance(n, int) or n <= 0:
            raise self.error(f"empty or negative slice length {ops.show(n) if ops.is_number(n) else n}", item)
        if isinstance(start, int) and isinstance(extent, int) and (start < 0 or start + n > extent):
            raise self.error(f"slice {ops.show(start)}:{ops.show(start + n)} is out of range for dimension {k} of {view.describe()} "
                             f"(extent {extent})", item)
        return ("range", start, n)

    def expr_Tuple(self, node):
        return tuple(self.eval(e) for e in node.elts)

    expr_List = expr_Tuple

    def expr_BinOp(self, node):
        op = BINOPS.get(type(node.op))
        if op is None:
            raise self.error("the '@' operator is not supported in a kernel (matrix products are written with "
                             "T.cuda.tile.apply and an mma opcode)", node)
        a, b = self.eval(node.left), self.eval(node.right)
        if isinstance(a, tuple) and isinstance(b, tuple) and op == "add":
            return a + b
        if op == "pow":
            return self.power(a, b, node)
        return ops.binop(op, a, b, self.loc(node))

    def expr_UnaryOp(self, node):
        return ops.unary(UNOPS[type(node.op)], self.eval(node.operand), self.loc(node))

    def expr_Call(self, node):
        fn = self.eval(node.func)
        for a in node.args:
            if isinstance(a, ast.Starred):
                raise self.error("*args in a call is not supported in a kernel", a)
        for k in node.keywords:
            if k.arg is None:
                raise self.error("**kwargs in a call is not supported in a kernel", k)
        return self.call(fn, node)


def _names(src: Source) -> tuple[dict, dict]:
    """The names `src`'s function body reads and assigns (names.scan), worked out once per source."""
    hit = getattr(src, "names", None)
    if hit is None:
        hit = src.names = N.scan(src.fdef)
    return hit


def _loop_range(start, stop, step, known):
    """(lo, hi) of a run-time loop's index inside its body, when the step's sign is known at compile time."""
    if not isinstance(step, int) or step == 0:
        return None
    a, b = value_range(start, known), value_range(stop, known)
    if a is None or b is None:
        return None
    return (a[0], b[1] - 1) if step > 0 else (b[0] + 1, a[1])


def _loop_dtype(start, stop) -> dt.DType:
    """A run-time loop's index type: the bounds' common type, at least 32 bits (an int8 or int16 bound counts
    in int32, as C promotes it)."""
    d = dt.promote(*(x.dtype if isinstance(x, ir.Expr) else dt.int32 for x in (start, stop)))
    return dt.int32 if d.bits < 32 else d


def _runs(dims) -> bool:
    """Does a run-time loop over `dims` certainly run its body at least once (static bounds, start < stop)?"""
    return all(isinstance(a, int) and isinstance(b, int) and a < b for a, b, _ in dims)


def _root_view(storage, dtype, shape, name):
    from ..lang.views import RootView
    v = RootView(storage, dtype, tuple(shape), None, name)
    v.whole = True                    # a tensor parameter's own view: its shape is the storage's
    return v


def _short(x) -> str:
    if x is L.T:
        return "T"
    names = {id(L.cuda): "T.cuda", id(L.cuda.tile): "T.cuda.tile", id(L.ptx): "T.ptx"}
    if id(x) in names:
        return names[id(x)]
    return type(x).__name__ if not isinstance(x, (int, float, str)) else repr(x)


def _stmt_name(node) -> str:
    names = {"Try": "try/except", "TryStar": "try/except*", "With": "'with'", "AsyncWith": "'async with'",
             "FunctionDef": "a nested function (closure)", "ClassDef": "a class definition",
             "Lambda": "lambda", "Global": "'global'", "Nonlocal": "'nonlocal'", "Delete": "'del'",
             "Raise": "'raise'", "Import": "'import'", "ImportFrom": "'import'", "Break": "'break'",
             "Continue": "'continue'", "AsyncFor": "'async for'", "Match": "'match'"}
    return names.get(type(node).__name__, f"the statement {type(node).__name__}")


def _expr_name(node) -> str:
    names = {"Lambda": "lambda", "ListComp": "a list comprehension", "DictComp": "a dict comprehension",
             "SetComp": "a set comprehension", "GeneratorExp": "a generator expression", "Dict": "a dict",
             "Set": "a set", "JoinedStr": "an f-string", "Await": "await", "Yield": "yield",
             "YieldFrom": "yield from", "NamedExpr": "':='", "Starred": "'*'"}
    return names.get(type(node).__name__, f"the expression {type(node).__name__}")
