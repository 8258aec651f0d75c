"""tiledsl's `matmul` (tiledsl.ops: the warp-specialised TMA + wgmma kernel on an sm_90 GPU, the mma.sync
kernel elsewhere) against torch (cuBLAS) and Triton's matmul, side by side in one run.

Square 1024..8192 and two LLM shapes, f16 and bf16; median of CUDA-event timings after warm-up, the peers
interleaved call by call (side_by_side), inputs rotated and L2 evicted by a 256 MB write before each timed call
(which also keeps host dispatch out of the events); every result checked against torch's fp32 product; the
configuration matmul chose (tuned on the first call) printed per row. Then FP8 e4m3 rows (4096^3, 8192^3: `matmul_fp8` against torch._scaled_mm, relative error <= 5e-2; "n/a"
where the device is not sm_90) and a fused bias + GELU row (4096^3 f16: matmul(bias=,
activation="gelu") against torch.addmm + gelu). A markdown table is printed last; `--plot FILE` writes a PNG chart
(needs matplotlib); `--power` adds the SM clock and board power of 2-second back-to-back runs.
"""
import argparse
import os
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

SHAPES = [(1024, 1024, 1024), (2048, 2048, 2048), (4096, 4096, 4096), (8192, 8192, 8192),
          (16384, 4096, 4096), (4096, 14336, 4096)]


def timeit(fn, torch, sets, reps=20):
    """Median of CUDA-event timings of fn(*set), rotating over the input sets (side_by_side of one)."""
    return side_by_side([fn], torch, sets, reps)[0]


def side_by_side(fns, torch, sets, reps=20, busy_us=0):
    """Medians of CUDA-event timings of each fn(*set), rotating over the input sets, the functions interleaved:
    round r times each once, starting with a different one each round, so that every peer sees the same clock
    and temperature (a GEMM here runs at the 700 W cap: whoever ran first after an idle spell had cooler silicon).

    Before each timed call a 256 MB read evicts L2, so inputs come from device memory, and it keeps the GPU busy
    while the host enqueues the call. A read, not the write triton.testing.do_bench uses: a write leaves L2 full of
    dirty lines whose write-back (up to the L2's 50-60 MB) then lands inside the timed call, 10-13 us on an H100
    (session 39: a decode reading 134 MB took 64 us after a write, 54 us after a read and 54 us back to back,
    cuDNN alike); the read writes back the previous call's outputs itself and leaves clean lines. With the flush
    ahead, the events time the kernel, not the host's dispatch (torch's or ours), which for a 4096^3 product would
    otherwise add an idle gap of several percent to every peer. busy_us: a spin kernel of about that long queued
    after the flush, for calls whose host path is longer than the flush (an autograd forward + backward:
    benchmarks/host_path.py times those paths on their own), so the events still time the device's work alone."""
    flush = torch.zeros(64 << 20, dtype=torch.float32, device="cuda")
    spin = int(busy_us * 1980)          # torch.cuda._sleep counts SM cycles: the H200's 1980 MHz boost clock
    for fn in fns:
        for i in range(3):
            fn(*sets[i % len(sets)])
    torch.cuda.synchronize()
    times = [[] for _ in fns]
    for r in range(reps):
        args = sets[r % len(sets)]
        for j in range(len(fns)):
            f = (r + j) % len(fns)
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            flush.sum()
            if spin:
                torch.cuda._sleep(spin)
            s.record()
            fns[f](*args)
            e.record()
            e.synchronize()
            times[f].append(s.elapsed_time(e))
    return [float(np.median(t)) for t in times]


def triton_matmul():
    try:
        import triton
        import triton.language as tl
    except ImportError:
        return None

    @triton.jit
    def kernel(a, b, c, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, G: tl.constexpr):
        pid = tl.program_id(0)
        nbm, nbn = tl.cdiv(M, BM), tl.cdiv(N, BN)
        group = pid // (G * nbn)
        first = group * G
        rows = min(nbm - first, G)
        bm = first + pid % rows
        bn = (pid % (G * nbn)) // rows
        rm = bm * BM + tl.arange(0, BM)
        rn = bn * BN + tl.arange(0, BN)
        rk = tl.arange(0, BK)
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for k in range(0, K, BK):
            x = tl.load(a + rm[:, None] * K + (k + rk)[None, :])
            y = tl.load(b + rn[:, None] * K + (k + rk)[None, :])
            acc += tl.dot(x, tl.trans(y))
        tl.store(c + rm[:, None] * N + rn[None, :], acc.to(c.dtype.element_ty))

    def run(a, b, c):
        M, K = a.shape
        N = b.shape[0]
        kernel[((M // 128) * (N // 256),)](a, b, c, M, N, K, BM=128, BN=256, BK=64, G=8, num_warps=8,
                                          num_stages=3)
    return run


def fp8_rows(G, torch, shapes, tf):
    """FP8 e4m3 rows: matmul_fp8 against torch._scaled_mm (b passed as b.T, the column-major operand it wants;
    per-tensor scales as one-element float32 tensors), bf16 out; relative error <= 5e-2 against fp32. The
    tiledsl column is None ("n/a") where matmul_fp8 refuses the device (not sm_90)."""
    import tiledsl
    rows = []
    e4m3 = torch.float8_e4m3fn
    for (M, N, K) in shapes:
        sets = [((torch.randn(M, K, device="cuda") / 2).to(e4m3), (torch.randn(N, K, device="cuda") / 2).to(e4m3),
                 torch.empty(M, N, device="cuda", dtype=torch.bfloat16)) for _ in range(2)]
        sa = torch.tensor([0.75], device="cuda")
        sb = torch.tensor([1.25], device="cuda")
        flops = 2 * M * N * K
        ref_mm = lambda x, y, z: torch._scaled_mm(x, y.T, scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16)  # noqa: E731
        label = "e4m3 -> bf16 (vs torch._scaled_mm)"
        try:
            a, b, c = sets[0]
            G.matmul_fp8(a, b, sa, sb, torch.bfloat16, out=c)
        except tiledsl.LaunchError as e:
            print(f"fp8 {M}x{N}x{K}: n/a ({e})", flush=True)
            rows.append((label, f"{M}x{N}x{K}", None, tf(flops, timeit(ref_mm, torch, sets)), None, None, "n/a"))
            continue
        ref = (a.float() @ b.float().T) * (sa * sb)
        err = ((c.float() - ref).norm() / ref.norm()).item()
        assert err <= 5e-2, f"fp8 {M}x{N}x{K}: relative error {err}"
        t, t_ref = side_by_side([lambda x, y, z: G.matmul_fp8(x, y, sa, sb, torch.bfloat16, out=z), ref_mm], torch,
                                sets)
        rows.append((label, f"{M}x{N}x{K}", tf(flops, t), tf(flops, t_ref), None, err,
                     G.fp8_plan_of(a, b, torch.bfloat16) or "fp8 (no plan)"))
        print(rows[-1], flush=True)
        del sets
        torch.cuda.empty_cache()
    return rows


def fused_rows(G, torch, tf):
    """The fused bias + GELU row at 4096^3 f16: matmul(bias=, activation="gelu") against torch.addmm + gelu."""
    F = torch.nn.functional
    M = N = K = 4096
    sets = [(torch.randn(M, K, device="cuda", dtype=torch.float16), torch.randn(N, K, device="cuda",
                                                                             dtype=torch.float16),
             torch.empty(M, N, device="cuda", dtype=torch.float16)) for _ in range(2)]
    bias = torch.randn(N, device="cuda", dtype=torch.float16)
    a, b, c = sets[0]
    G.matmul(a, b, bias=bias, activation="gelu", out=c)
    ref = F.gelu(a.float() @ b.float().T + bias.float())
    err = ((c.float() - ref).norm() / ref.norm()).item()
    assert err <= 1e-2, f"bias + gelu: relative error {err}"
    flops = 2 * M * N * K
    t, t_ref = side_by_side([lambda x, y, z: G.matmul(x, y, bias=bias, activation="gelu", out=z),
                             lambda x, y, z: F.gelu(torch.addmm(bias, x, y.T))], torch, sets)
    row = ("float16 bias + GELU (vs torch.addmm + gelu)", f"{M}x{N}x{K}", tf(flops, t), tf(flops, t_ref), None, err,
           f"{G.plan_of(a, b, c).describe}; fused")
    print(row, flush=True)
    del sets
    torch.cuda.empty_cache()
    return [row]


def sustained_str(fn, torch, n, flops=None):
    from power import sustained
    tf, how = sustained(fn, torch, flops or 2 * n ** 3)
    return f"{tf:.0f} TFLOP/s at {how}"


def sweep(G, torch, opts, dtname, dt, M, N, K):
    """Time every configuration (gemm.CONFIGS, and HOPPER_CONFIGS on an sm_90 GPU; or --configs) at one shape."""
    shape = f"{M}x{N}x{K}"
    flops = 2 * M * N * K
    sets = [(torch.randn(M, K, device="cuda", dtype=dt), torch.randn(N, K, device="cuda", dtype=dt),
             torch.empty(M, N, device="cuda", dtype=dt)) for _ in range(2)]
    t_cub = timeit(lambda x, y, z: torch.matmul(x, y.T, out=z), torch, sets)
    print(f"sweep {dtname} {shape} cuBLAS: {flops / t_cub / 1e9:.0f} TFLOP/s", flush=True)
    if opts.power:
        a0, b0, c0 = sets[0]
        how = sustained_str(lambda: torch.matmul(a0, b0.T, out=c0), torch, M, flops)
        print(f"sweep {dtname} {shape} cuBLAS back to back {how}", flush=True)
    hopper = torch.cuda.get_device_capability() == (9, 0)
    from tiledsl.ops.gemm import hopper_plan, mma
    configs = mma.CONFIGS + (hopper_plan.HOPPER_CONFIGS if hopper else []) if not opts.configs else \
        [tuple(int(x) for x in c.split(",")) for c in opts.configs.split(";")]
    for cfg in configs:
        for static in ((True, False) if opts.dynamic else (True,)):
            try:
                t = timeit(lambda x, y, z: G.matmul(x, y, out=z, config=cfg, static=static), torch, sets)
            except Exception as e:  # noqa: BLE001 - a configuration that does not build is reported
                print(f"sweep {dtname} {shape} {cfg}: {type(e).__name__}: {str(e).splitlines()[0]}", flush=True)
                continue
            a, b, c = sets[0]
            ref = a.float() @ b.float().T
            err = ((c.float() - ref).norm() / ref.norm()).item()
            print(f"sweep {dtname} {shape} {cfg} {'static' if static else 'dynamic'}: {flops / t / 1e9:.0f} "
                  f"TFLOP/s ({t_cub / t:.2f}x cuBLAS) err {err:.1e}", flush=True)
            if opts.power:
                run = lambda: G.matmul(a, b, out=c, config=cfg, static=static)  # noqa: E731
                print(f"    back to back {sustained_str(run, torch, M, flops)}", flush=True)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--plot", default=None)
    p.add_argument("--quick", action="store_true", help="only 4096^3")
    p.add_argument("--shapes", default=None, help="these M,N,K instead, e.g. '4096,4096,4096;8192,8192,8192'")
    p.add_argument("--sweep", action="store_true", help="time every configuration of matmul's two kernels at 4096^3 "
                                                         "(or at --shapes)")
    p.add_argument("--dtypes", default="float16,bfloat16", help="comma-separated input types")
    p.add_argument("--no-extras", action="store_true", help="skip the FP8 and fused bias + GELU rows")
    p.add_argument("--dynamic", action="store_true", help="sweep: also the kernels that read sizes at launch")
    p.add_argument("--power", action="store_true", help="also a 2-second back-to-back run (each swept "
                                                         "configuration, or tiledsl and cuBLAS at 4096^3), with "
                                                         "its SM clock and board power (nvidia-smi)")
    p.add_argument("--configs", default=None, help="sweep these configurations instead of gemm.CONFIGS, e.g. "
                                                   "'256,128,64,4,2,4,1;128,128,64,2,2,3,1' (mma.sync) or "
                                                   "'128,2,4,0,1,0,2;128,1,4,0,1,0' (Hopper)")
    p.add_argument("--sweep-shapes", action="store_true", help="tiledsl / cuBLAS over benchmarks/gemm_sweep.py's "
                                                                "LLM, square and ragged shapes (or --shapes); "
                                                                "--dtypes may name e4m3")
    p.add_argument("--reps", type=int, default=10, help="--sweep-shapes: timed calls per side and shape")
    p.add_argument("--json", default=None, help="--sweep-shapes: write the rows and summaries to this file")
    opts = p.parse_args(argv)
    from tiledsl.runtime.driver import gpu_available
    if not gpu_available():
        print("gemm benchmark: no GPU found")
        return
    import torch
    import tiledsl.ops as G                     # matmul, matmul_fp8, plan_of, fp8_plan_of
    if opts.sweep_shapes:
        import importlib.util                   # by path, as tests/test_gemm_sweep_shapes.py loads it
        spec = importlib.util.spec_from_file_location("gemm_sweep", os.path.join(ROOT, "benchmarks", "gemm_sweep.py"))
        gemm_sweep = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(gemm_sweep)
        if gemm_sweep.run(G, torch, side_by_side, opts):
            raise SystemExit(1)
        return
    if opts.sweep:
        sweep_shapes = [(4096, 4096, 4096)] if not opts.shapes else \
            [tuple(int(x) for x in sh.split(",")) for sh in opts.shapes.split(";")]
        for dtname in opts.dtypes.split(","):
            dt = getattr(torch, dtname)
            for (M, N, K) in sweep_shapes:
                sweep(G, torch, opts, dtname, dt, M, N, K)
        return
    tri = triton_matmul()
    rows, power_lines = [], []
    shapes = [(4096, 4096, 4096)] if opts.quick else SHAPES
    if opts.shapes:
        shapes = [tuple(int(x) for x in sh.split(",")) for sh in opts.shapes.split(";")]
    tf = lambda flops, t: flops / (t / 1e3) / 1e12  # noqa: E731
    print(f"{torch.cuda.get_device_name(0)}, torch {torch.__version__}", flush=True)
    for dtname in opts.dtypes.split(","):
        dt = getattr(torch, dtname)
        for (M, N, K) in shapes:
            nsets = 3 if M * K < 2**26 else 2
            sets = [(torch.randn(M, K, device="cuda", dtype=dt), torch.randn(N, K, device="cuda", dtype=dt),
                     torch.empty(M, N, device="cuda", dtype=dt)) for _ in range(nsets)]
            a, b, c = sets[0]
            c.fill_(float("nan"))
            G.matmul(a, b, out=c)               # the first call routes and tunes; the plan is printed below
            config = G.plan_of(a, b, c).describe
            ref = a.float() @ b.float().T
            err = ((c.float() - ref).norm() / ref.norm()).item()
            assert err <= 1e-2, f"{dtname} {M}x{N}x{K}: relative error {err}"
            flops = 2 * M * N * K
            peers = [lambda x, y, z: G.matmul(x, y, out=z), lambda x, y, z: torch.matmul(x, y.T, out=z)]
            if tri is not None:
                try:
                    tri(*sets[0])
                    peers.append(tri)
                except Exception as e:  # noqa: BLE001
                    print("triton failed:", e)
            t_ours, t_cublas, *t_tri = side_by_side(peers, torch, sets)
            t_tri = t_tri[0] if t_tri else None
            rows.append((dtname, f"{M}x{N}x{K}", tf(flops, t_ours), tf(flops, t_cublas),
                         tf(flops, t_tri) if t_tri else None, err, config))
            print(rows[-1], flush=True)
            if opts.power and (M, N, K) == (4096, 4096, 4096):
                for name, run in (("tiledsl", lambda: G.matmul(a, b, out=c)),
                                  ("cuBLAS", lambda: torch.matmul(a, b.T, out=c))):
                    power_lines.append(f"{dtname} 4096^3 {name} back to back: {sustained_str(run, torch, 4096)}")
                print(*power_lines[-2:], sep="\n", flush=True)
            del sets, ref
            torch.cuda.empty_cache()
    if not opts.no_extras:
        rows += fp8_rows(G, torch, [(4096, 4096, 4096), (8192, 8192, 8192)] if not opts.quick else
                         [(4096, 4096, 4096)], tf)
        rows += fused_rows(G, torch, tf)
    print("\n| dtype | M x N x K | tiledsl TFLOP/s | cuBLAS TFLOP/s | Triton TFLOP/s | vs cuBLAS | vs Triton | "
          "rel. err | configuration |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
    for d, s, ours, cub, tri_tf, err, config in rows:
        if ours is None:
            print(f"| {d} | {s} | n/a | {cub:.0f} | - | n/a | - | - | {config} |")
            continue
        t = f"{tri_tf:.0f}" if tri_tf else "-"
        vt = f"{ours / tri_tf:.2f}" if tri_tf else "-"
        print(f"| {d} | {s} | {ours:.0f} | {cub:.0f} | {t} | {ours / cub:.2f} | {vt} | {err:.1e} | {config} |")
    if power_lines:
        print("\nSM clock and board power over 2 s of back-to-back launches (nvidia-smi; the cap is 700 W):")
        print(*power_lines, sep="\n")
    rows = [r for r in rows if r[2] is not None]
    if opts.plot:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, ax = plt.subplots(figsize=(10, 4))
        labels = [f"{d[:4]} {s}" for d, s, *_ in rows]
        x = np.arange(len(rows))
        ax.bar(x - 0.2, [r[2] for r in rows], 0.4, label="tiledsl")
        ax.bar(x + 0.2, [r[3] for r in rows], 0.4, label="cuBLAS")
        ax.set_xticks(x, labels, rotation=45, ha="right")
        ax.set_ylabel("TFLOP/s")
        ax.legend()
        fig.tight_layout()
        fig.savefig(opts.plot)


if __name__ == "__main__":
    main()
