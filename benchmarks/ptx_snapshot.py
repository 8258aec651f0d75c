"""Write the PTX of the reference kernels to a folder, one file each, to prove a refactoring emits the same code.

    python benchmarks/ptx_snapshot.py OUT_DIR [--attention] [--hopper] [--ops] [--moe]   # then: diff -r BEFORE AFTER

The kernels: every GEMM configuration (f16 and bf16 inputs; f16 and f32 outputs; specialised to a shape and
dynamic), the mma.sync ceiling kernels, the two seed examples and the compile examples of docs/patterns/; with
--attention also the FA3-style forward (tiledsl/ops/flash/fa3.py) in every configuration its lists name (the
defaults and the candidates, causal and not, on a ragged grouped-query shape; sm_90a, about 2-3 minutes); with
--hopper the other kernels built on wgmma, and the FA2 forward: the Hopper GEMM (f16 / bf16 / f32 out, TMA store,
persistent, multicast, one consumer) and its FP8 form, the FA3 backward (MHA / GQA / the benchmark's shape, causal
or not, tail split and tma_kv), the FP8 attention forward and the FA2 attention forward (every candidate, causal or
not, with and without lazy), about 3 minutes; with --ops the rest of the kernels tiledsl.ops ships and the examples
that build on tiledsl.lib: softmax, layer norm, reduce, histogram, the FA2 backward's kernels, the FA3 backward's dQ
cast, and the Hopper GEMM's fused epilogues, split-K, stream-K and deferred epilogue (f16 and FP8); with --moe the
grouped kernel (tiledsl/ops/gemm/grouped_kernel.py) in each of its forms: grouped f16/bf16 (both tiles, masked,
transposed weights, both weight gradients) and block-scaled FP8 (dense and grouped, BN 128 and 256).
No GPU is needed (kernel.compile with target sm_90).
"""
import os
import pathlib
import re
import runpy
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
for p in (ROOT, ROOT / "examples", ROOT / "benchmarks"):     # this checkout's tiledsl, the examples, mma_ceiling
    sys.path.insert(0, str(p))

import numpy as np  # noqa: E402

# every kernel compiled here, never read from a disk cache (an entry under a stale key would hide a difference)
os.environ["TILEDSL_DISABLE_DISK_CACHE"] = "1"


def gemm_kernels():
    from tiledsl.ops.gemm import mma as G
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
    from tiledsl.ops.flash import fa3 as AH
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
    from tiledsl.ops.flash import fa2 as A
    from tiledsl.ops.flash import fa3_backward as ABH
    from tiledsl.ops.flash import fp8 as F
    from tiledsl.ops.gemm import hopper as H
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


def ops_kernels():
    """The kernels the other lists leave out: softmax, layer norm, the reduction and histogram examples, the FA2
    backward (main, delta and cast kernels), the FA3 backward's dQ cast, and the Hopper GEMM's fused epilogues,
    split-K, stream-K and deferred epilogue (f16 and FP8)."""
    import histogram
    import reduce
    from tiledsl.ops.flash import fa2_backward as AB
    from tiledsl.ops.flash import fa3_backward as ABH
    from tiledsl.ops.gemm import hopper as H
    from tiledsl.ops.rowwise import layernorm, softmax
    half = {"float16": np.float16, "bfloat16": np.uint16, "float32": np.float32}     # (host bfloat16: its bits)
    for n, threads, pipelined, sms in ((4096, None, None, 132), (8192, None, None, 132), (16384, None, None, 132),
                                       (32768, None, None, 132), (512, 32, True, 3), (2048, 64, True, 3)):
        x = np.zeros((8, n), np.float16)
        k = softmax.make_softmax(n, threads, pipelined=pipelined, sms=sms)
        yield f"softmax_{n}_{threads}_{pipelined}_{sms}", k.compile(x, x, target="sm_90").asm["ptx"]
    for n in (512, 4096, 8192, 16384):
        x, w = np.zeros((8, n), np.float16), np.zeros(n, np.float16)
        k = layernorm.make_layernorm(n)
        yield f"layernorm_{n}", k.compile(x, w, w, x, 1e-5, target="sm_90").asm["ptx"]
    x, p, o = np.zeros(1 << 20, np.float32), np.zeros(512, np.float32), np.zeros(1, np.float32)
    for op in ("add", "max"):
        k1, k2 = reduce.KERNELS[op]
        yield f"reduce_{op}_partials", k1.compile(x, p, target="sm_90").asm["ptx"]
        yield f"reduce_{op}_final", k2.compile(p, o, target="sm_90").asm["ptx"]
    for bins in (7, 256, 512):
        k = histogram.make_histogram(bins)
        yield f"histogram_{bins}", k.compile(np.zeros(1 << 20, np.int32), np.zeros(bins, np.uint32),
                                             target="sm_90").asm["ptx"]
    for dtype in ("float16", "bfloat16"):
        for D in (64, 128):
            for shape in ((2, 4, 4, 1000, 1000), (2, 4, 2, 1024, 1024)):
                B, H_, HK, N, NK = shape
                NP = -(-N // AB.QTILE[D]) * AB.QTILE[D]
                q, kv = np.zeros((B, H_, N, D), half[dtype]), np.zeros((B, HK, NK, D), half[dtype])
                stats = np.zeros((B * H_, NP), np.float32)
                acc = kv if H_ == HK else np.zeros((B * HK * NK, D), np.float32)
                for causal in (False, True):
                    k = AB.make_attention_backward(dtype, D, causal, shape, D ** -0.5)
                    for target in ("sm_80", "sm_90"):
                        yield (f"fa2bwd_{dtype}_d{D}_{'x'.join(map(str, shape))}_{'causal' if causal else 'full'}_"
                               f"{target}", k.compile(q, kv, kv, q, stats, stats, np.zeros((B * H_ * N, D), np.float32),
                                                      acc, acc, N, target=target).asm["ptx"])
            o = np.zeros((8000, D), half[dtype])
            k = AB.make_delta(dtype, D, 8, 1000, 1024)
            yield f"fa2bwd_delta_{dtype}_d{D}", k.compile(o, o, np.zeros(8000, np.float32), np.zeros(8192, np.float32),
                                                          np.zeros(8192, np.float32), target="sm_80").asm["ptx"]
            n8 = 8000 * D // 8
            k = AB.make_cast(dtype, n8)
            yield f"fa2bwd_cast_{dtype}_d{D}", k.compile(np.zeros((n8, 8), np.float32), np.zeros((n8, 8), half[dtype]),
                                                         target="sm_80").asm["ptx"]
        BH, N = 8, 1000
        NQT = -(-N // ABH.BM)
        k = ABH.make_cast_dq(dtype, BH, N)
        yield f"fa3bwd_cast_dq_{dtype}", k.compile(np.zeros((BH * NQT * ABH.BM * 16, 8), np.float32),
                                                   np.zeros((BH * N * 16, 8), half[dtype])).asm["ptx"]
    a = np.zeros((256, 512), np.float16)
    for bias in (None, "float16", "float32"):
        for act in (None, "relu", "gelu", "silu"):
            for cfg in (dict(), dict(persistent=True, bn=256, tma_store=True)):
                if bias is None and act is None:
                    continue
                k = H.make_hopper_gemm("float16", "float16", bias=bias, activation=act, **cfg)
                extra = () if bias is None else (np.zeros(256, half[bias]),)
                name = "_".join(f"{key}{v}" for key, v in sorted(cfg.items())) or "default"
                yield (f"hgemm_epi_{bias}_{act}_{name}",
                       k.compile(a, a, np.zeros((256, 256), np.float16), *extra).asm["ptx"])
    for ab, out in (("float16", "float16"), ("bfloat16", "bfloat16"), ("float16", "float32")):
        a = np.zeros((1024, 512), half[ab])
        c = np.zeros((1024, 1024), half[out])
        for cfg in (dict(bn=128, split_k=2), dict(bn=128, split_k=4, stages=6), dict(bn=128, consumers=1, stages=8),
                    dict(persistent=True, bn=256, tma_store=True, stream_k=True),
                    dict(persistent=True, bn=128, tma_store=True, stream_k=True),
                    dict(persistent=True, bn=192, tma_store=True),
                    dict(persistent=True, bn=256, tma_store=True, defer_epilogue=True)):
            if cfg.get("defer_epilogue") and out == "float32":
                continue
            k = H.make_hopper_gemm(ab, out, **cfg)
            extra = (np.zeros(k.slots, np.float32), np.zeros(k.flags, np.int32)) if cfg.get("stream_k") else ()
            name = "_".join(f"{key}{v}" for key, v in sorted(cfg.items()))
            yield f"hgemm_{ab}_{out}_{name}", k.compile(a, a, c, *extra).asm["ptx"]
    a8, one = np.zeros((1024, 512), np.uint8), np.ones(1, np.float32)
    c = np.zeros((1024, 1024), np.uint16)
    for cfg in (dict(bias="float32", activation="gelu"), dict(bn=128, persistent=False, split_k=2),
                dict(stream_k=True), dict(bn=128, stream_k=True)):
        k = H.make_hopper_gemm_fp8("e4m3", "e5m2" if cfg.get("stream_k") else "e4m3", "bfloat16", **cfg)
        extra = (np.zeros(1024, np.float32),) if cfg.get("bias") else ()
        extra += (one, one)
        if cfg.get("stream_k"):
            extra += (np.zeros(k.slots, np.float32), np.zeros(k.flags, np.int32))
        name = "_".join(f"{key}{v}" for key, v in sorted(cfg.items()))
        yield f"hgemm_fp8_{name}", k.compile(a8, a8, c, *extra).asm["ptx"]


def moe_kernels():
    """The grouped kernel's forms as the host API builds them (grouped.py), each compiled for sm_90a."""
    from tiledsl.ops.gemm import grouped_kernel as GK
    E, M, N, K = 4, 512, 256, 512
    off = np.array([100, 100, 300, M], np.int32)
    u16, u8 = np.zeros((M, K), np.uint16), np.zeros((M, K), np.uint8)
    for bn in (128, 256):
        k = GK.build("bfloat16", "bfloat16", 4, 2, bn, 132, GK.GROUP_M, True, False, max_groups=16)
        yield f"grouped_bf16_bn{bn}", k.compile(u16, np.zeros((E * N, K), np.uint16), np.zeros((M, N), np.uint16),
                                                off).asm["ptx"]
    k = GK.build("float16", "float32", 4, 2, 128, 132, GK.GROUP_M, True, False, max_groups=16, masked=True)
    yield "grouped_f16_masked", k.compile(np.zeros((M, K), np.float16), np.zeros((E * N, K), np.float16),
                                          np.zeros((M, N), np.float32),
                                          np.array([100, 0, 128, 7], np.int32)).asm["ptx"]
    k = GK.build("bfloat16", "bfloat16", 4, 2, 128, 132, GK.GROUP_M, True, False, max_groups=16, trans_w=True)
    yield "grouped_bf16_trans_w", k.compile(u16, np.zeros((E * K, N), np.uint16), np.zeros((M, N), np.uint16),
                                            off).asm["ptx"]
    k = GK.build("bfloat16", "bfloat16", 4, 2, 256, 132, GK.GROUP_M, True, False, kgrouped=True, max_groups=16)
    yield "grouped_bf16_kgrouped", k.compile(np.zeros((256, M), np.uint16), np.zeros((K, M), np.uint16),
                                             np.zeros((E * 256, K), np.uint16), off).asm["ptx"]
    k = GK.build("bfloat16", "float32", 4, 2, 128, 132, GK.GROUP_M, True, False, kgrouped=True, max_groups=16,
                 trans_w=True)
    yield "grouped_bf16_kgrouped_tokm", k.compile(np.zeros((M, 256), np.uint16), u16,
                                                  np.zeros((E * 256, K), np.float32), off).asm["ptx"]
    for out, bn in (("bfloat16", 128), ("float32", 128), ("bfloat16", 256)):
        sc = (np.zeros((M, K // 128), np.float32), np.zeros((1, N // 128, K // 128), np.float32))
        k = GK.build("e4m3", out, 4, 2, bn, 132, GK.GROUP_M, False, True)
        c = np.zeros((M, N), np.uint16 if out == "bfloat16" else np.float32)
        yield f"fp8_blockwise_{out}_bn{bn}", k.compile(u8, np.zeros((N, K), np.uint8), c, *sc).asm["ptx"]
        k = GK.build("e4m3", out, 4, 2, bn, 132, GK.GROUP_M, True, True, max_groups=256)
        yield f"fp8_blockwise_grouped_{out}_bn{bn}", k.compile(
            u8, np.zeros((E * N, K), np.uint8), c, off, sc[0], np.zeros((E, N // 128, K // 128), np.float32)
        ).asm["ptx"]


def main(out, *flags):
    out = pathlib.Path(out)
    out.mkdir(parents=True, exist_ok=True)
    n = 0
    sources = (seed_kernels, doc_kernels, ceiling_kernels, gemm_kernels)
    if "--attention" in flags:
        sources += (attention_kernels,)
    if "--hopper" in flags:
        sources += (hopper_kernels,)
    if "--ops" in flags:
        sources += (ops_kernels,)
    if "--moe" in flags:
        sources += (moe_kernels,)
    for source in sources:
        for name, ptx in source():
            (out / f"{name}.ptx").write_text(ptx)
            n += 1
    print(f"{n} kernels -> {out}")


if __name__ == "__main__":
    flags = {"--attention", "--hopper", "--ops", "--moe"}
    if len(sys.argv) < 2 or sys.argv[1].startswith("-") or set(sys.argv[2:]) - flags:
        sys.exit("usage: python benchmarks/ptx_snapshot.py OUT_DIR [--attention] [--hopper] [--ops] [--moe]")
    main(*sys.argv[1:])
