"""The number of SMs of the GPU a tensor lives on, which the persistent and wave-shaped kernels of these examples
size their grids by (examples/gemm.py, hopper_gemm.py, attention_hopper.py, attention_backward.py, softmax.py).

A torch CUDA tensor's device is asked once (the answer is cached per device, so a launch path stays flat); any
other array (numpy on the interpreter, a host tensor) gets NUM_SMS, an H100/H200 SXM's."""
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
