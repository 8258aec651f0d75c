"""What the ops ask of the device their tensors live on: its SM count, which the persistent and wave-shaped kernels
size their grids by (gemm, flash, rowwise), and device buffers a kernel keeps from launch to launch (the stream-K
GEMM's workspace; the attention kernels' counters and workspaces are fresh torch allocations every launch, see
flash.fa3.counters for why).

A torch CUDA tensor's device is asked once (the answer is cached per device, so a launch path stays flat); any
other array (numpy on the interpreter, a host tensor) gets NUM_SMS, an H100/H200 SXM's.

The buffers' kernels leave the integer parts at zero for the next launch, so a buffer is made once; but two launches
running at once on different streams must not share one, so there is one per (device, stream, what)."""
import functools

NUM_SMS = 132


def sm_count(x) -> int:
    """The SMs of x's GPU, or NUM_SMS where x is not on a CUDA device."""
    dev = getattr(x, "device", None)
    if getattr(dev, "type", None) != "cuda":
        return NUM_SMS
    return _device_sms(dev)


@functools.lru_cache(maxsize=None)
def _device_sms(device) -> int:
    import torch
    return torch.cuda.get_device_properties(device).multi_processor_count


_BUFFERS = {}


def stream_buffers(a, what, make):
    """make(torch, device)'s buffers for launches on torch tensor a's device and current stream, made on the first
    call for that (device, stream, what) and the same objects after (`what`: a hashable naming the kernel's need,
    its sizes included).

    Under CUDA-graph capture the buffers are made afresh in the graph's pool (make's zero fill is captured, so every
    replay starts from zeros) and not kept. Kept buffers are made by a thread of their own, on a side stream: torch
    routes the allocations of the thread that captures (or runs torch.compile's cudagraph warm-up) to the graph's
    pool, and a kept buffer must not live in a pool that believes it free."""
    import torch
    if torch.cuda.is_current_stream_capturing():
        return make(torch, a.device)
    cur = torch.cuda.current_stream(a.device)
    key = (str(a.device), cur.cuda_stream, what)
    if key not in _BUFFERS:
        _BUFFERS[key] = _made_aside(torch, a.device, cur, make)
    return _BUFFERS[key]


def _made_aside(torch, device, cur, make):
    """make(torch, device) run by another thread on a side stream that follows `cur`; `cur` then waits for it (the
    zero fill is done before this stream's first launch reads the buffers)."""
    import threading
    got = {}

    def work():
        try:
            side = torch.cuda.Stream(device)
            side.wait_stream(cur)
            with torch.cuda.stream(side):
                got["bufs"] = make(torch, device)
            got["side"] = side
        except BaseException as e:     # handed to the caller's thread
            got["error"] = e
    t = threading.Thread(target=work, name="tiledsl-buffers")
    t.start()
    t.join()
    if "error" in got:
        raise got["error"]
    cur.wait_stream(got["side"])
    return got["bufs"]
