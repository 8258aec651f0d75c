"""Device buffers a kernel keeps from launch to launch: the stream-K GEMM's and the split backward's workspaces,
the dynamic attention walk's counters (examples/hopper_gemm.py, attention_backward_hopper.py, attention_hopper.py).
Their kernels leave the integer parts at zero for the next launch, so a buffer is made once; but two launches
running at once on different streams must not share one, so there is one per (device, stream, what)."""

_BUFFERS = {}


def stream_buffers(a, what, make):
    """make(torch, device)'s buffers for launches on torch tensor a's device and current stream, made on the first
    call for that (device, stream, what) and the same objects after (`what`: a hashable naming the kernel's need,
    its sizes included)."""
    import torch
    key = (str(a.device), torch.cuda.current_stream(a.device).cuda_stream, what)
    if key not in _BUFFERS:
        _BUFFERS[key] = make(torch, a.device)
    return _BUFFERS[key]
