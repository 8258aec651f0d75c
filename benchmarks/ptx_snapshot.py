"""Write the PTX of the reference kernels to a folder, one file each, to prove a refactoring emits the same code.

    python benchmarks/ptx_snapshot.py OUT_DIR [--attention]   # then: diff -r BEFORE_DIR AFTER_DIR

The kernels: every GEMM configuration (f16 and bf16 inputs; f16 and f32 outputs; specialised to a shape and
dynamic), the mma.sync ceiling kernels, the two seed examples and the compile examples of docs/patterns/; with
--attention also the FA3-style forward (examples/attention_hopper.py) in every configuration its lists name (the
defaults and the candidates, causal and not, on a ragged grouped-query shape; sm_90a, about 2-3 minutes).
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
                 AH.EARLY_K_CANDIDATES, {D: [AH.CONFIGS[D], AH.CAUSAL_CONFIGS[D]]})
        q, kv = np.zeros((B * H, N, D), np.float16), np.zeros((B * HK, NK, D), np.float16)
        for cfg in sorted({tuple(c) for lst in lists for c in lst[D]}):
            for causal in (False, True):
                k = AH.make_attention_hopper("float16", D, causal, shape, D ** -0.5, cfg)
                more = (np.zeros(2, np.int32),) if k.counters else ()
                ck = k.compile(q, kv, kv, q.reshape(B, H, N, D), np.zeros((B, H, N), np.float32), *more,
                               target="sm_90a")
                yield f"fa3_d{D}_{'causal' if causal else 'full'}_{'.'.join(map(str, cfg))}", ck.asm["ptx"]


def main(out, *flags):
    out = pathlib.Path(out)
    out.mkdir(parents=True, exist_ok=True)
    n = 0
    sources = (seed_kernels, doc_kernels, ceiling_kernels, gemm_kernels)
    if "--attention" in flags:
        sources += (attention_kernels,)
    for source in sources:
        for name, ptx in source():
            (out / f"{name}.ptx").write_text(ptx)
            n += 1
    print(f"{n} kernels -> {out}")


if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1].startswith("-") or set(sys.argv[2:]) - {"--attention"}:
        sys.exit("usage: python benchmarks/ptx_snapshot.py OUT_DIR [--attention]")
    main(*sys.argv[1:])
