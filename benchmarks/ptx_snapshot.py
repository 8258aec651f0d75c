"""Write the PTX of the reference kernels to a folder, one file each, to prove a refactoring emits the same code.

    python benchmarks/ptx_snapshot.py OUT_DIR [--attention] [--hopper]   # then: diff -r BEFORE_DIR AFTER_DIR

The kernels: every GEMM configuration (f16 and bf16 inputs; f16 and f32 outputs; specialised to a shape and
dynamic), the mma.sync ceiling kernels, the two seed examples and the compile examples of docs/patterns/; with
--attention also the FA3-style forward (examples/attention_hopper.py) in every configuration its lists name (the
defaults and the candidates, causal and not, on a ragged grouped-query shape; sm_90a, about 2-3 minutes); with
--hopper the other kernels built on wgmma or on the attention examples: the Hopper GEMM (f16 / bf16 / f32 out,
TMA store, persistent, multicast, one consumer) and its FP8 form, the FA3 backward (MHA / GQA / the benchmark's
shape, causal or not, tail split and tma_kv), the FP8 attention forward and the FA2 attention forward (every
candidate, causal or not, with and without lazy), about 3 minutes.
No GPU is needed (kernel.compile with target sm_90).
"""
import os
import pathlib
import re
import runpy
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
for p in (ROOT, ROOT / "examples", ROOT / "benchmarks"):
    sys.path.insert(0, str(p))

import numpy as np  # noqa: E402

# every kernel compiled here, never read from a disk cache (an entry under a stale key would hide a difference)
os.environ["TILEDSL_DISABLE_DISK_CACHE"] = "1"


def gemm_kernels():
    import gemm as G
    for ab in ("float16", "bfloat16"):
        a = np.zeros((512, 256), np.float16 if ab == "float16" else np.uint16)    # (host bfloat16: uint16 bits)
        for out in ("float16", "float32"):
            c = np.zeros((512, 512), {"float16": np.float16, "float32": np.float32}[out])
            for cfg in G.CONFIGS:
                if not G.usable(cfg, out):
                    continue
                for static in (True, False):
                    if not static and cfg[9:10] == (1,) and cfg[8:9] == (1,):
                        continue          # the unrolled bulk variant needs a static shape
                    name = f"gemm_{ab}_{out}_{'x'.join(map(str, cfg))}_{'static' if static else 'dynamic'}"
                    try:
                        k = G.make_gemm(ab, out, cfg, (512, 512, 256) if static else None)
                        yield name, k.compile(a, a, c, target="sm_90").asm["ptx"]
                    except Exception as e:      # a configuration that does not compile is part of the record
                        yield name, f"ERROR {type(e).__name__}: {e}"


def ceiling_kernels():
    import mma_ceiling as C
    for w, mi, ni in C.CASES:
        yield f"ceiling_{w}_{mi}x{ni}", C.make(w, mi, ni, 64).compile(np.zeros((132, 32 * w), np.float32),
                                                                      target="sm_90").asm["ptx"]


def seed_kernels():
    import seed_fma
    import seed_mma
    a = np.zeros((4, 1), np.float32)
    yield "seed_fma", seed_fma.affine_fma.compile(a, a, target="sm_90").asm["ptx"]
    _, _, ap, bp = seed_mma.inputs()
    yield "seed_mma", seed_mma.warp_mma.compile(ap, bp, np.zeros((16, 8), np.float32), target="sm_90").asm["ptx"]


def doc_kernels():
    for page in sorted((ROOT / "docs" / "patterns").glob("*.md")):
        code = [b for b in re.findall(r"```python\n(.*?)```", page.read_text(), re.S)
                if not b.startswith("# needs a GPU")]
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, f"doc_{page.stem}.py")
            with open(path, "w") as f:
                f.write("\n\n".join(code))
            ns = runpy.run_path(path, run_name=f"doc_{page.stem}")
        yield f"doc_{page.stem}", ns["ck"].asm["ptx"]


def attention_kernels():
    import attention_hopper as AH
    shape = (2, 4, 2, 1000, 1000)               # ragged N and grouped-query heads: every mask in the kernel
    B, H, HK, N, NK = shape
    for D in AH.SUPPORTED_D:
        lists = (AH.CANDIDATES, AH.PINGPONG_CANDIDATES, AH.POLY_CANDIDATES, AH.PERSISTENT_CANDIDATES,
                 AH.EARLY_K_CANDIDATES, {D: [AH.default_config(D, False, N), AH.default_config(D, True, N)]})
        q, kv = np.zeros((B * H, N, D), np.float16), np.zeros((B * HK, NK, D), np.float16)
        for cfg in sorted({tuple(c) for lst in lists for c in lst[D]}):
            for causal in (False, True):
                k = AH.make_attention_hopper("float16", D, causal, shape, D ** -0.5, cfg)
                more = (np.zeros(2, np.int32),) if k.counters else ()
                o = q if k.tma_o else q.reshape(B, H, N, D)         # tma_o: a tensor map of the 3-D view
                ck = k.compile(q, kv, kv, o, np.zeros((B, H, N), np.float32), *more,
                               target="sm_90a")
                yield f"fa3_d{D}_{'causal' if causal else 'full'}_{'.'.join(map(str, cfg))}", ck.asm["ptx"]


def hopper_kernels():
    import attention as A
    import attention_backward_hopper as ABH
    import attention_fp8 as F
    import hopper_gemm as H
    half = {"float16": np.float16, "bfloat16": np.uint16, "float32": np.float32}     # (host bfloat16: its bits)
    gemm = [{}, dict(tma_store=True), dict(persistent=True, bn=256, tma_store=True), dict(multicast=True),
            dict(stages=3, consumers=1, bn=64), dict(persistent=True, bn=256, tma_store=True, multicast=True)]
    for ab, out in (("float16", "float16"), ("bfloat16", "bfloat16"), ("float16", "float32")):
        a = np.zeros((256, 512), half[ab])
        for cfg in gemm:
            k = H.make_hopper_gemm(ab, out, **cfg)
            name = "_".join(f"{key}{v}" for key, v in sorted(cfg.items())) or "default"
            yield f"hgemm_{ab}_{out}_{name}", k.compile(a, a, np.zeros((256, 256), half[out])).asm["ptx"]
    a8 = np.zeros((256, 512), np.uint8)
    for out in ("bfloat16", "float16"):
        k = H.make_hopper_gemm_fp8("e4m3", None, out)
        yield f"hgemm_fp8_{out}", k.compile(a8, a8, np.zeros((256, 256), half[out]), np.ones(1, np.float32),
                                            np.ones(1, np.float32)).asm["ptx"]
    for shape in ((4, 16, 16, 4096, 4096), (2, 4, 2, 1000, 1000), (2, 4, 4, 1000, 1000)):
        B, H_, HK, N, NK = shape
        q, kv = np.zeros((B * H_, N, 128), np.float16), np.zeros((B * HK, NK, 128), np.float16)
        stats = np.zeros((B * H_, N), np.float32)
        for causal in (False, True):
            for extra in (dict(), dict(tail_split=True, sms=132), dict(tma_kv=True)):
                if extra.get("tma_kv") and H_ != HK:
                    continue
                k = ABH.make_attention_backward_hopper("float16", 128, causal, shape, 0.088, **extra)
                if k.slots is None and extra.get("tail_split"):
                    continue                                 # nothing to split: the plain kernel again
                NP = -(-N // ABH.BM) * ABH.BM
                stats = np.zeros((B * H_, NP), np.float32)
                acc = np.zeros((B, HK, NK, 128), np.float16) if H_ == HK else np.zeros((B * HK * NK, 128), np.float32)
                acc = ABH.kv_arg(acc, k)
                ws = (np.zeros(k.slots, np.float32), np.zeros(k.counters, np.int32)) if k.slots else ()
                name = "_".join(f"{key}" for key in sorted(extra)) or "plain"
                yield (f"bwd_{'x'.join(map(str, shape))}_{'causal' if causal else 'full'}_{name}",
                       k.compile(q, kv, kv, q, stats, stats, np.zeros((B * H_ * NP, 128), np.float32), acc, acc,
                                 *ws).asm["ptx"])
    shape = (1, 4, 2, 1000, 1000)
    B, H_, HK, N, NK = shape
    for D in F.SUPPORTED_D:
        for causal in (False, True):
            k = F.make_attention_fp8("float16", D, causal, shape, D ** -0.5)
            yield (f"fp8attn_d{D}_{'causal' if causal else 'full'}",
                   k.compile(np.zeros((B * H_, N, D), np.uint8), np.zeros((B * HK, NK, D), np.uint8),
                             np.zeros((B * HK, D, -(-NK // 16) * 16), np.uint8), np.zeros((B, H_, N, D), np.float16),
                             np.zeros((B, H_, N), np.float32), np.zeros(3, np.float32)).asm["ptx"])
    for D in (64, 128, 256):
        for cfg in A.CANDIDATES[D]:
            for causal in (False, True):
                for lazy in (False, True):
                    k = A.make_attention("float16", D, causal, shape, D ** -0.5, cfg, lazy)
                    q, kv = np.zeros((B, H_, N, D), np.float16), np.zeros((B, HK, NK, D), np.float16)
                    name = f"fa2_d{D}_{'causal' if causal else 'full'}_{'.'.join(map(str, cfg))}"
                    for target in ("sm_80", "sm_90"):
                        try:
                            ptx = k.compile(q, kv, kv, q, np.zeros((B, H_, N), np.float32), target=target).asm["ptx"]
                        except Exception as e:      # (8, 1, 0) at D = 256 needs sm_90's shared memory
                            ptx = f"ERROR {type(e).__name__}: {e}"
                        yield f"{name}_{target}{'_lazy' if lazy else ''}", ptx


def main(out, *flags):
    out = pathlib.Path(out)
    out.mkdir(parents=True, exist_ok=True)
    n = 0
    sources = (seed_kernels, doc_kernels, ceiling_kernels, gemm_kernels)
    if "--attention" in flags:
        sources += (attention_kernels,)
    if "--hopper" in flags:
        sources += (hopper_kernels,)
    for source in sources:
        for name, ptx in source():
            (out / f"{name}.ptx").write_text(ptx)
            n += 1
    print(f"{n} kernels -> {out}")


if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1].startswith("-") or set(sys.argv[2:]) - {"--attention", "--hopper"}:
        sys.exit("usage: python benchmarks/ptx_snapshot.py OUT_DIR [--attention] [--hopper]")
    main(*sys.argv[1:])
