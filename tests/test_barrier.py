"""Named barriers (tiledsl/isa/barrier/): the grammar and its refusals, the targets, the PTX each form becomes,
ptxas -arch=sm_90 on every kernel tests/test_gpu_barrier.py runs, and the interpreter's reading: a partial-CTA
sync, run-time barrier ids, two consumer warpgroups taking turns (ping-pong) inside a warp-specialised if/else
(the order shows in a log they write), and the deadlocks the GPU would hang on as KernelFaults."""
import re

import numpy as np
import pytest

import barrier_kernels as K
import tiledsl
from helpers import ptxas
from tiledsl.core.errors import CompilationError, Loc
from tiledsl.core.target import Target
from tiledsl.isa import registry
from tiledsl.isa.barrier import FAMILY, pattern

LOC = Loc("hand.py", 3, 4, 10, "    hand_built()")


@pytest.mark.parametrize("opcode,kind,spelling,aligned,cta", [
    ("bar.sync", "sync", "bar", True, False),
    ("bar.arrive", "arrive", "bar", True, False),
    ("bar.cta.sync", "sync", "bar", True, True),
    ("bar.cta.arrive", "arrive", "bar", True, True),
    ("barrier.sync", "sync", "barrier", False, False),
    ("barrier.sync.aligned", "sync", "barrier", True, False),
    ("barrier.arrive", "arrive", "barrier", False, False),
    ("barrier.cta.arrive.aligned", "arrive", "barrier", True, True),
])
def test_the_grammar(opcode, kind, spelling, aligned, cta):
    fam, form = registry.lookup(opcode, LOC, Target(90))
    assert fam is FAMILY and form == pattern.Form(opcode, kind, spelling, aligned, cta)


@pytest.mark.parametrize("opcode,words", [
    ("bar.red.popc.u32", "reductions"),
    ("barrier.red.and.pred", "reductions"),
    ("bar.gpu.sync", "only scope is .cta"),
    ("barrier.sys.arrive", "only scope is .cta"),
    ("bar.sync.aligned", "bar.sync takes no qualifier after .sync"),
    ("barrier.sync.relaxed", "takes only .aligned"),
    ("bar.wait", "no explicit tile pattern"),
    ("bar", "no explicit tile pattern for bar"),
])
def test_refusals(opcode, words):
    with pytest.raises(CompilationError) as ei:
        registry.lookup(opcode, LOC, Target(90))
    assert words in str(ei.value) and "hand.py:3" in str(ei.value)


def test_the_cluster_barrier_stays_with_the_cluster_family():
    fam, _ = registry.lookup("barrier.cluster.arrive", LOC, Target(90))
    assert fam.name == "cluster"


def test_targets():
    # bar.* with a count is sm_20, the barrier.* spellings sm_70 (PTX ISA 6.0), .cta PTX ISA 7.8
    assert FAMILY.requirements(pattern.match("bar.sync"))[0][0] == 20
    assert FAMILY.requirements(pattern.match("barrier.sync.aligned"))[0][0] == 70
    registry.lookup("barrier.sync", LOC, Target(70))
    with pytest.raises(CompilationError, match=r"\.cta needs PTX ISA 7\.8.*the target is sm_75"):
        registry.lookup("barrier.cta.sync", LOC, Target(75))
    registry.lookup("bar.cta.sync", LOC, Target(80))


def ptx_of(kernel, *args, target="sm_90"):
    return kernel.compile(*args, target=target).asm["ptx"]


def test_ptx_text():
    a = np.zeros(256, np.uint32)
    assert re.search(r"\tbar\.sync 1, 128;", ptx_of(K.partial, a, np.zeros((2, 256), np.uint32)))
    # a run-time id is a u32 register, the count stays an immediate
    assert re.search(r"\tbarrier\.sync\.aligned %r\d+, 128;", ptx_of(K.halves, a, a))
    text = ptx_of(K.pingpong, *K.pingpong_inputs())
    for line in ("bar.sync 1, 256;", "bar.arrive 2, 256;", "bar.sync 2, 256;", "bar.arrive 1, 256;",
                 "bar.sync 3, 128;", "bar.sync 4, 128;"):
        assert line in text, line


@pytest.mark.parametrize("form", ["bar.sync", "bar.cta.sync", "barrier.sync", "barrier.cta.sync.aligned"])
def test_the_whole_cta_form_and_every_spelling_assemble(form):
    @tiledsl.jit
    def whole(A: tiledsl.T.Tensor((128,), "uint32"), Out: tiledsl.T.Tensor((128,), "uint32")):
        T = tiledsl.T
        T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=128))
        tid = T.cuda.thread_id()
        buf = T.alloc_shared((128,), "uint32")
        buf[tid] = A[tid]
        T.cuda.tile.apply(T.ptx[form], 5)
        Out[tid] = buf[127 - tid]

    a = np.arange(128, dtype=np.uint32)
    text = ptx_of(whole, a, a)
    assert f"\t{form} 5;" in text
    assert ptxas(text, "sm_90").returncode == 0
    out = np.zeros_like(a)
    tiledsl.jit(whole.fn, interpret=True, target="sm_90")(a, out)
    np.testing.assert_array_equal(out, a[::-1])


@pytest.mark.parametrize("kernel", K.GPU_KERNELS + [K.too_few, K.stalemate], ids=lambda k: k.fn.__name__)
def test_ptxas_sm90(kernel):
    r = ptxas(ptx_of(kernel, *K.args_of(kernel)), "sm_90")
    assert r.returncode == 0, r.stderr


def interpret(kernel, *arrays):
    host = [np.array(a, copy=True) for a in arrays]
    tiledsl.jit(kernel.fn, interpret=True, target="sm_90")(*host)
    return host


def test_partial_cta_sync_on_the_interpreter():
    a = np.arange(256, dtype=np.uint32) * 5
    _, out = interpret(K.partial, a, np.zeros((2, 256), np.uint32))
    np.testing.assert_array_equal(out, K.partial_expected(a))


def test_run_time_barrier_ids_on_the_interpreter():
    a = np.arange(256, dtype=np.uint32) * 3
    _, out = interpret(K.halves, a, np.zeros_like(a))
    np.testing.assert_array_equal(out, K.halves_expected(a))


def test_ping_pong_order_on_the_interpreter():
    a, out, log = K.pingpong_inputs()
    _, out, log = interpret(K.pingpong, a, out, log)
    want_out, want_log = K.pingpong_expected(a)
    np.testing.assert_array_equal(log, want_log)          # 100, 200, 101, 201, ...: the turns alternate
    np.testing.assert_array_equal(out, want_out)


def test_ping_pong_in_shared_code_on_the_interpreter():
    # one copy of the consumer code, barrier ids per warpgroup: each warpgroup of the part is its own fiber
    a, out, log = K.pingpong_inputs()
    _, out, log = interpret(K.pingpong_shared, a, out, log)
    want_out, want_log = K.pingpong_expected(a)
    np.testing.assert_array_equal(log, want_log)
    np.testing.assert_array_equal(out, want_out)


@pytest.mark.parametrize("kernel,words", [
    (K.too_few, ("bar.sync on barrier 1 can never complete", "128 of the 256 threads", "hangs")),
    (K.stalemate, ("can never complete", "barrier", "of the 256 threads")),
], ids=["too-few-warps", "two-parts-wait-for-each-other"])
def test_deadlocks_are_kernel_faults(kernel, words):
    with pytest.raises(tiledsl.KernelFault) as ei:
        interpret(kernel, np.zeros(256, np.uint32))
    for w in words:
        assert w in str(ei.value), str(ei.value)
