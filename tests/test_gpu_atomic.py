"""atom / red on the GPU against the interpreter: random kernels over the op/type/space/sem/scope classes, a
counter, a compare-and-swap loop and a shared-then-global histogram equal to numpy's bincount.

The GPU picks its own order between threads, so a result is compared where every order agrees: final memory
bit-exactly for the order-free ops (integer add/min/max/and/or/xor, float adds of exactly representable values,
red.inc/dec with one bound), returned values exactly where one thread alone touched a slot, and for every op the
chain rule (some serial order explains all old values and the final value). The same checks run with the
interpreter standing in for the GPU in tests/test_atomic.py, so a mistake in them shows without a GPU."""
import numpy as np
import pytest

import tiledsl
from test_atomic import (BINS, NS, NT, RANDOM_FORMS, TYPE_WIDTH, WIDTH, _case, arrays, cas_sum, chain_holds,
                         counter, histogram, nops, rmw_kernel)
from tiledsl.isa import registry

pytestmark = pytest.mark.gpu
ON_INTERPRETER = False          # test_atomic.py flips this to check the harness without a GPU

ORDER_FREE = {"add", "min", "max", "and", "or", "xor"}


def on_device(fn, arrays, *consts):
    """Run a kernel on copies of `arrays` (the GPU, or the interpreter when ON_INTERPRETER); return the copies."""
    if ON_INTERPRETER:
        host = [np.array(a, copy=True) for a in arrays]
        tiledsl.jit(fn.fn, interpret=True)(*host, *consts)
        return host
    torch = pytest.importorskip("torch")
    dev = [torch.from_numpy(np.ascontiguousarray(a)).cuda() for a in arrays]
    tiledsl.jit(fn.fn)(*dev, *consts)
    torch.cuda.synchronize()
    return [d.cpu().numpy() for d in dev]


def require_sm(sm):
    if not ON_INTERPRETER:
        torch = pytest.importorskip("torch")
        major, minor = torch.cuda.get_device_capability()
        if major * 10 + minor < sm:
            pytest.skip(f"needs sm_{sm}")


def random_kernel_agrees(k):
    opcode = RANDOM_FORMS[k % len(RANDOM_FORMS)]
    form = registry.lookup(opcode)[1]
    require_sm(form.min_sm)
    width = TYPE_WIDTH(opcode)
    u = np.dtype(WIDTH[width])
    init, slots, b, c = _case(opcode, width, 100 + k)
    if form.kind == "red" and form.op in ("inc", "dec"):
        b = np.full_like(b, b[0])                  # one bound: every order counts alike
    args = arrays()
    args[1] = slots.astype(np.int32)
    for i, v in ((0, init), (2, b), (3, c)):
        args[i].view(u)[:len(v)] = v
    consts = (opcode, WIDTH[width], form.space == "shared", nops(opcode))
    host = [np.array(a, copy=True) for a in args]
    tiledsl.jit(rmw_kernel.fn, interpret=True)(*host, *consts)
    dev = on_device(rmw_kernel, args, *consts)
    want_mem, got_mem = host[0].view(u)[:NS], dev[0].view(u)[:NS]
    if form.op in ORDER_FREE or form.kind == "red":
        np.testing.assert_array_equal(got_mem, want_mem, err_msg=opcode)
    if form.kind == "atom":
        want_old, got_old = host[4].view(u)[:NT], dev[4].view(u)[:NT]
        alone = np.bincount(slots, minlength=NS)[slots] == 1
        np.testing.assert_array_equal(got_old[alone], want_old[alone], err_msg=opcode)
        assert chain_holds(opcode, init, slots, b, c, got_mem, got_old), opcode


@pytest.mark.parametrize("k", range(len(RANDOM_FORMS)), ids=RANDOM_FORMS)
def test_random_kernel_gpu_agrees_with_interpreter(k):
    random_kernel_agrees(k)


def test_counter_hands_out_each_ticket_once():
    n = 100000
    c, old = on_device(counter, [np.zeros(1, np.uint32), np.zeros(n, np.uint32)])
    assert int(c[0]) == n
    np.testing.assert_array_equal(np.sort(old), np.arange(n))


def test_cas_loop_adds_every_thread_once():
    m, tries = on_device(cas_sum, [np.array([5], np.uint32), np.zeros(NT, np.int32)])
    assert int(m[0]) == 5 + NT * (NT + 1) // 2
    assert ((tries >= 1) & (tries <= NT)).all()


def test_shared_then_global_histogram_equals_bincount():
    rng = np.random.default_rng(11)
    x = rng.integers(0, BINS, 1 << 20).astype(np.int32)
    x[: 1 << 16] = 3                                                  # one hot bin: heavy contention
    (_, h) = on_device(histogram, [x, np.zeros(BINS, np.uint32)])
    np.testing.assert_array_equal(h, np.bincount(x, minlength=BINS))
