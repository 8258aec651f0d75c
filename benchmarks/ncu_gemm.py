"""Runs the GEMM a few times so Nsight Compute can profile one launch:
    ncu --clock-control none --launch-skip 2 --launch-count 1 -k regex:gemm python benchmarks/ncu_gemm.py 128,128,64,2,2,3,0
"""
import sys
import torch
import tiledsl.ops as G
from tiledsl.ops.gemm.mma import CONFIGS
cfg = tuple(int(x) for x in sys.argv[1].split(",")) if len(sys.argv) > 1 else CONFIGS[1]
n = 4096
a = torch.randn(n, n, device="cuda", dtype=torch.float16)
b = torch.randn(n, n, device="cuda", dtype=torch.float16)
c = torch.empty(n, n, device="cuda", dtype=torch.float16)
for _ in range(3):
    G.matmul(a, b, out=c, config=cfg)
torch.cuda.synchronize()
