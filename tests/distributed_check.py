"""One process per GPU under torch.distributed: each rank runs the seed mma kernel and the GEMM on its own
device, then the ranks all-reduce their errors. Run: torchrun --nproc-per-node=2 tests/distributed_check.py"""
import os
import sys

import numpy as np
import torch
import torch.distributed as dist

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [ROOT, os.path.join(ROOT, "examples")]
from tiledsl.ops.gemm import matmul as MM  # noqa: E402
import seed_mma  # noqa: E402


def main():
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    torch.cuda.set_device(rank)
    a, b, ap, bp = seed_mma.inputs()
    out = torch.zeros((16, 8), device="cuda")
    seed_mma.warp_mma(torch.from_numpy(ap).cuda(), torch.from_numpy(bp).cuda(), out)
    err = float(np.abs(out.cpu().numpy() - a.astype("float32") @ b.astype("float32").T).max())
    x = torch.randn(256, 128, device="cuda", dtype=torch.float16)
    y = torch.randn(128, 128, device="cuda", dtype=torch.float16)
    ref = x.float() @ y.float().T
    err += ((MM.matmul(x, y).float() - ref).norm() / ref.norm()).item()
    t = torch.tensor([err], device="cuda")
    dist.all_reduce(t)
    if rank == 0:
        print(f"distributed: {dist.get_world_size()} ranks, summed error {t.item():.2e}")
        assert t.item() < 1e-2
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
