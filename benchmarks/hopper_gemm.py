"""The warp-specialised Hopper GEMM (examples/hopper_gemm.py) against cuBLAS (torch.matmul) in one run: TFLOP/s,
medians of CUDA-event timings after warm-up, inputs rotated past the L2, correctness checked at every size.

    python benchmarks/hopper_gemm.py [--sizes 4096,8192] [--dtype float16]
"""
import argparse
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [ROOT, os.path.join(ROOT, "examples"), os.path.join(ROOT, "benchmarks")]

from kernels import Rotating, bench  # noqa: E402

VARIANTS = {"persistent BN 256 TMA store": {"persistent": True, "bn": 256, "tma_store": True},
            "persistent BN 256 plain stores": {"persistent": True, "bn": 256, "tma_store": False},
            "persistent BN 256 TMA store + multicast": {"persistent": True, "bn": 256, "tma_store": True,
                                                        "multicast": True},
            "persistent BN 128 TMA store": {"persistent": True, "tma_store": True},
            "BN 256 4 stages TMA store (halves)": {"bn": 256, "stages": 4, "tma_store": True},
            "BN 256 3 stages TMA store": {"bn": 256, "stages": 3, "tma_store": True},
            "plain stores": {}, "TMA store": {"tma_store": True},
            "TMA store + multicast": {"tma_store": True, "multicast": True}}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", default="4096,8192")
    p.add_argument("--dtype", default="float16", choices=["float16", "bfloat16"])
    opts = p.parse_args(argv)
    import torch
    import hopper_gemm as H
    dt = getattr(torch, opts.dtype)
    print(f"{torch.cuda.get_device_name(0)}, torch {torch.__version__}; TFLOP/s of C = A B^T, {opts.dtype}")
    print("| M=N=K | variant | tiledsl TFLOP/s | cuBLAS TFLOP/s | vs cuBLAS | rel err |")
    print("| ---: | --- | ---: | ---: | ---: | ---: |")
    bad = 0
    for n in (int(x) for x in opts.sizes.split(",")):
        sets = [(torch.randn(n, n, device="cuda", dtype=dt), torch.randn(n, n, device="cuda", dtype=dt))
                for _ in range(2)]
        c = torch.empty(n, n, device="cuda", dtype=dt)
        rot = Rotating(sets)
        flop = 2 * n ** 3
        t_ref = bench(lambda: torch.matmul(*(lambda ab: (ab[0], ab[1].T))(rot.next())), torch)
        for name, kw in VARIANTS.items():
            a, b = sets[0]
            H.hopper_matmul(a, b, out=c, **kw)
            ref = a.float() @ b.float().T
            err = ((c.float() - ref).norm() / ref.norm()).item()
            bad += not err <= 1e-2
            t = bench(lambda: H.hopper_matmul(*rot.next(), out=c, **kw), torch)
            print(f"| {n} | {name} | {flop / t / 1e9:.0f} | {flop / t_ref / 1e9:.0f} | {t_ref / t:.2f} | "
                  f"{err:.1e} |")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
