"""Unsupported Python syntax in a kernel: one CompilationError at the offending line, with a clear message."""
import pytest

import tiledsl
from tiledsl import T
from badcase import Case, run

FOUR = (4,)
LIMIT = 3




def k_try(A: T.Tensor((4,), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    try:
        A[0] = 1.0
    finally:
        pass


def k_with(A: T.Tensor((4,), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    with T.cuda.syncthreads():
        A[0] = 1.0


def k_lambda(A: T.Tensor((4,), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    sq = lambda v: v * v  # noqa: E731
    A[0] = sq(A[1])


def k_nested_def(A: T.Tensor((4,), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))

    def helper(v):
        return v + 1.0
    A[0] = helper(A[1])


def _closure_factory():
    scale = [2.0]                        # a closure over a list: not a value a kernel may read

    def k_closure_list(A: T.Tensor((4,), "float32")):
        T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
        A[0] = A[1] * scale[0]
    return k_closure_list


k_closure_list = _closure_factory()


@tiledsl.jit
def k_recursive(A: T.Tensor((4,), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    A[0] = 1.0
    k_recursive(A)


def k_calls_other(A: T.Tensor((4,), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    k_recursive(A)


def k_varargs(A: T.Tensor((4,), "float32"), *rest):
    A[0] = 1.0


def k_kwargs(A: T.Tensor((4,), "float32"), **opts):
    A[0] = 1.0


def k_kwonly(A: T.Tensor((4,), "float32"), *, n: T.int32):
    A[0] = 1.0


def k_global(A: T.Tensor((4,), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    global LIMIT
    A[0] = 1.0


def _nonlocal_factory():
    count = 0

    def k_nonlocal(A: T.Tensor((4,), "float32")):
        T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
        nonlocal count
        A[0] = 1.0
    return k_nonlocal


k_nonlocal = _nonlocal_factory()


def k_yield(A: T.Tensor((4,), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    yield A[0]


def k_listcomp(A: T.Tensor((4,), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    vals = [A[i] for i in range(4)]
    A[0] = vals[0]


def k_genexp(A: T.Tensor((4,), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    A[0] = T.max(A[i] for i in range(2))


def k_dictcomp(A: T.Tensor((4,), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    d = {i: i for i in range(4)}
    A[0] = 1.0


def k_fstring(A: T.Tensor((4,), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    name = f"lane{T.cuda.lane_id()}"
    A[0] = 1.0






async def k_async(A: T.Tensor((4,), "float32")):
    A[0] = 1.0


def k_raise(A: T.Tensor((4,), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    raise ValueError("no")


def k_import(A: T.Tensor((4,), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    import math
    A[0] = 1.0


def k_del(A: T.Tensor((4,), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    x = 1
    del x


def k_class(A: T.Tensor((4,), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))

    class Point:
        pass


def k_match(A: T.Tensor((4,), "float32"), n: T.int32):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    match n:
        case 1:
            A[0] = 1.0


def k_walrus(A: T.Tensor((4,), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    A[0] = (y := 2.0)


def k_set_literal(A: T.Tensor((4,), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    s = {1, 2}


def k_for_else(A: T.Tensor((4,), "float32"), n: T.int32):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    for i in range(n):
        A[0] = 1.0
    else:
        A[1] = 1.0


def k_return_value(A: T.Tensor((4,), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    return A[0]




def k_chained_assign(A: T.Tensor((4,), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    x = y = 1.0
    A[0] = x


def k_attr_assign(A: T.Tensor((4,), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    A.data = 1.0


def k_in_operator(A: T.Tensor((4,), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    if 1 in FOUR:
        A[0] = 1.0


def k_starred_call(A: T.Tensor((4,), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    A[0] = T.max(*FOUR)


def k_kwargs_call(A: T.Tensor((4,), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    A[0] = T.cast(**{"value": 1, "dtype": "float32"})


def k_runtime_assert(A: T.Tensor((4,), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    assert A[0] > 0.0


def k_static_assert(A: T.Tensor((4,), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    assert LIMIT > 5, "LIMIT too small"


def k_syntax_error_in_decorated_source(A: T.Tensor((4,), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    A[0] = A[1] @ A[2]


C = Case
CASES = [
    C("try", k_try, "try:", ("try/except is not supported",)),
    C("with", k_with, "with T.cuda", ("'with' is not supported",)),
    C("lambda", k_lambda, "lambda v", ("lambda is not supported",)),
    C("nested_def", k_nested_def, "def helper", ("nested function",)),
    C("closure_over_list", k_closure_list, "scale[0]", ("closure variable 'scale' is a list",)),
    C("recursion", k_recursive, "k_recursive(A)", ("recursion (a kernel calling itself) is not supported",)),
    C("calling_another_kernel", k_calls_other, "k_recursive(A)", ("calling another kernel is not supported",)),
    C("star_args_param", k_varargs, "def k_varargs", ("plain positional parameters",)),
    C("star_kwargs_param", k_kwargs, "def k_kwargs", ("plain positional parameters",)),
    C("keyword_only_param", k_kwonly, "def k_kwonly", ("plain positional parameters",)),
    C("global_stmt", k_global, "global LIMIT", ("'global' is not supported",)),
    C("nonlocal_stmt", k_nonlocal, "nonlocal count", ("'nonlocal' is not supported",)),
    C("yield", k_yield, "yield A[0]", ("yield is not supported",)),
    C("list_comprehension", k_listcomp, "vals = [", ("list comprehension is not supported",)),
    C("generator_expression", k_genexp, "for i in range(2)", ("generator expression is not supported",)),
    C("dict_comprehension", k_dictcomp, "d = {", ("dict comprehension is not supported",)),
    C("f_string", k_fstring, "name = f", ("f-string is not supported",)),
    C("async_def", k_async, "async def", ("async kernels are not supported",)),
    C("raise", k_raise, "raise ValueError", ("'raise' is not supported",)),
    C("import", k_import, "import math", ("'import' is not supported",)),
    C("del", k_del, "del x", ("'del' is not supported",)),
    C("class_def", k_class, "class Point", ("class definition is not supported",)),
    C("match", k_match, "match n:", ("'match' is not supported",)),
    C("walrus", k_walrus, "y := 2.0", ("':=' is not supported",)),
    C("set_literal", k_set_literal, "s = {1, 2}", ("a set is not supported",)),
    C("for_else", k_for_else, "for i in range(n)", ("for/else is not supported",)),
    C("return_value", k_return_value, "return A[0]", ("cannot return a value",)),
    C("chained_assignment", k_chained_assign, "x = y = 1.0", ("chained assignment",)),
    C("attribute_assignment", k_attr_assign, "A.data", ("assigning to an attribute is not supported",)),
    C("in_operator", k_in_operator, "if 1 in FOUR", ("'in' is not supported",)),
    C("starred_call", k_starred_call, "T.max(*FOUR)", ("*args in a call is not supported",)),
    C("double_star_call", k_kwargs_call, "T.cast(**", ("**kwargs in a call is not supported",)),
    C("runtime_assert", k_runtime_assert, "assert A[0]", ("compile-time condition",)),
    C("static_assert_fails", k_static_assert, "assert LIMIT", ("static assertion failed: LIMIT too small",)),
    C("matmul_operator", k_syntax_error_in_decorated_source, "A[1] @ A[2]", ("'@' operator is not supported",)),
]


@pytest.mark.parametrize("case", [c.param() for c in CASES])
def test_bad_syntax(case):
    run(case)
