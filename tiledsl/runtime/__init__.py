"""Loading compiled kernels and launching them through the CUDA driver (cuda-python)."""
