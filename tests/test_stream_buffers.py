"""tiledsl/ops/device.py without a GPU: a stand-in torch whose current stream the test sets. One set of buffers
per (device, stream, what), made once and handed back after, as the stream-K GEMM's and the split backward's
workspaces and the dynamic attention walk's counters rely on (their kernels leave the integer parts at zero)."""
import sys
import types

from tiledsl.ops import device as SB


class _Stream:
    def __init__(self, handle):
        self.cuda_stream = handle


class _Side:
    def __init__(self, device):
        self.cuda_stream = -1

    def wait_stream(self, other):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def _fake_torch(current, capturing=False):
    def current_stream(device):
        s = _Stream(current[str(device)])
        s.wait_stream = lambda other: None
        return s
    cuda = types.SimpleNamespace(current_stream=current_stream, is_current_stream_capturing=lambda: capturing,
                                 Stream=_Side, stream=lambda s: s)
    return types.SimpleNamespace(cuda=cuda)


def test_one_set_per_device_stream_and_need(monkeypatch):
    current = {"cuda:0": 7, "cuda:1": 7}
    monkeypatch.setitem(sys.modules, "torch", _fake_torch(current))
    monkeypatch.setattr(SB, "_BUFFERS", {})
    made = []

    def make(torch, device):
        made.append(device)
        return object()
    a0, a1 = types.SimpleNamespace(device="cuda:0"), types.SimpleNamespace(device="cuda:1")
    first = SB.stream_buffers(a0, ("stream-k", (3, 8)), make)
    assert SB.stream_buffers(a0, ("stream-k", (3, 8)), make) is first and made == ["cuda:0"]
    assert SB.stream_buffers(a0, ("stream-k", (4, 8)), make) is not first          # other sizes
    assert SB.stream_buffers(a0, "dynamic walk", make) is not first                # another kernel's need
    assert SB.stream_buffers(a1, ("stream-k", (3, 8)), make) is not first          # another device
    current["cuda:0"] = 9
    assert SB.stream_buffers(a0, ("stream-k", (3, 8)), make) is not first          # another stream
    assert made == ["cuda:0", "cuda:0", "cuda:0", "cuda:1", "cuda:0"]


def test_under_capture_the_buffers_are_fresh_and_not_kept(monkeypatch):
    # made in the graph's pool, their zero fill captured: every replay starts from zeros; nothing kept that the
    # pool believes free
    monkeypatch.setitem(sys.modules, "torch", _fake_torch({"cuda:0": 7}, capturing=True))
    monkeypatch.setattr(SB, "_BUFFERS", {})
    a0 = types.SimpleNamespace(device="cuda:0")
    first = SB.stream_buffers(a0, "stream-k", lambda torch, device: object())
    assert SB.stream_buffers(a0, "stream-k", lambda torch, device: object()) is not first and SB._BUFFERS == {}
