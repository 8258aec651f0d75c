"""matmul's routing (tiledsl/ops/gemm/matmul.py, hopper_plan.py) on any machine: route() as a pure function of
(capability, shape, dtypes), choose_hopper's configuration for every benchmark shape (a valid HOPPER_CONFIGS entry with
enough tiles, kept by the tuner's pruning), the configuration keywords, the plans host tensors get, matmul_fp8's refusal
off sm_90, and compile-only checks: the configurations matmul can pick on the H200 (tests/test_gpu_gemm_route.py runs
them) compile for sm_90a and assemble with ptxas without spills, and the padded mma.sync kernel of the ragged shape
assembles for sm_90."""
import numpy as np
import pytest

from tiledsl.ops.gemm import fp8 as FP8
from tiledsl.ops.gemm import hopper as H
from tiledsl.ops.gemm import hopper_plan as HP
from tiledsl.ops.gemm import matmul as MM
from tiledsl.ops.gemm import mma as MMA
import tiledsl
from helpers import ptxas

BENCH_SHAPES = [(1024, 1024, 1024), (2048, 2048, 2048), (4096, 4096, 4096), (8192, 8192, 8192),
                (16384, 4096, 4096), (4096, 14336, 4096)]


@pytest.mark.parametrize("M,N,K", BENCH_SHAPES + [(4095, 4097, 4096), (200, 136, 136), (128, 128, 8)])
@pytest.mark.parametrize("ab,out", [("float16", "float16"), ("bfloat16", "bfloat16"), ("float16", "float32")])
def test_sm90_takes_the_hopper_path(M, N, K, ab, out):
    assert MM.route((9, 0), M, N, K, ab, out) == "hopper"


@pytest.mark.parametrize("cap", [(8, 0), (8, 9), (10, 0), (12, 0), None])
def test_other_devices_take_mma_sync(cap):
    for M, N, K in BENCH_SHAPES:
        assert MM.route(cap, M, N, K, "float16", "float16") == "mma"
    # shapes no mma.sync block tile divides are padded there, never refused
    assert MM.route(cap, 4095, 4097, 4093, "float16", "float16") == "mma-padded"
    assert MM.route(cap, 100, 128, 64, "bfloat16", "float32") == "mma-padded"


def test_shapes_the_hopper_kernel_cannot_take_go_to_mma_sync():
    # K not a multiple of 8: the TMA unit's rows are multiples of 16 bytes
    assert MM.route((9, 0), 4095, 4097, 4093, "float16", "float16") == "mma-padded"
    assert MM.route((9, 0), 4096, 4096, 4100, "bfloat16", "bfloat16") == "mma-padded"
    assert MM.route((9, 0), 4096, 4096, 4160, "float16", "float16") == "hopper"
    # inputs the Hopper kernel does not take, and empty products
    assert MM.route((9, 0), 1024, 1024, 1024, "float32", "float32") == "mma"
    assert MM.route((9, 0), 0, 128, 64, "float16", "float16") != "hopper"


@pytest.mark.parametrize("M,N,K", BENCH_SHAPES)
def test_choose_hopper_picks_a_valid_configuration(M, N, K):
    for sms in (132, 114):
        cfg = HP.choose_hopper(M, N, K, "float16", sms)
        assert cfg in HP.HOPPER_CONFIGS
        # enough tiles for 90% of a wave where any preferred tile gives that, else the most tiles
        tiles = HP.hopper_tiles(cfg, M, N)
        assert tiles >= 0.9 * sms or tiles == max(HP.hopper_tiles(c, M, N) for c in HP.HOPPER_PREFERRED)
        # the tuner times it too, and never runs out of candidates
        kept = HP.prune_hopper(HP.HOPPER_CONFIGS, M, N, sms)
        assert cfg in kept and len(kept) >= 3
        kw = HP.hopper_kwargs(cfg, N, 2)
        H.make_hopper_gemm("float16", "float16", num_sms=sms, **kw)       # builds (no LaunchError)
    assert HP.choose_hopper(1024, 1024, 1024)[:3] == (128, 1, 8)  # 128 tiles of 64 x 128, 8 deep, not 32 of 128 x 256
    assert HP.choose_hopper(4096, 4096, 4096) == HP.HOPPER_CONFIGS[0]         # persistent 128 x 256, TMA store


def test_hopper_keywords_and_descriptions():
    kw = HP.hopper_kwargs(HP.HOPPER_CONFIGS[0], 4096, 2)
    assert kw == dict(bn=256, consumers=2, stages=4, persistent=True, tma_store=True, multicast=False)
    assert HP.hopper_kwargs(HP.HOPPER_CONFIGS[0], 4097, 2)["tma_store"] is False     # C's rows not 16-byte multiples
    assert HP.hopper_kwargs(HP.HOPPER_CONFIGS[0], 4098, 4)["tma_store"] is False
    assert HP.hopper_kwargs(HP.HOPPER_CONFIGS[0], 4100, 4)["tma_store"] is True
    assert HP.hopper_kwargs((("bn", 128), ("persistent", 1)), 256, 2) == dict(bn=128, persistent=True)
    assert HP.describe_hopper(kw) == "hopper 128x256 tiles, 4 stages, persistent, TMA store"
    assert HP.is_hopper_config(HP.HOPPER_CONFIGS[3]) and HP.is_hopper_config((("bn", 128),))
    assert not any(HP.is_hopper_config(c) for c in MMA.CONFIGS)


def test_plans_for_host_tensors_take_mma_sync():
    torch = pytest.importorskip("torch")
    a, b = torch.zeros(256, 128, dtype=torch.float16), torch.zeros(256, 128, dtype=torch.float16)
    plan = MM.plan_of(a, b, tune=False)
    assert plan.path == "mma" and plan.describe.startswith("mma.sync (")
    ragged = MM.plan_of(torch.zeros(100, 64, dtype=torch.float16), torch.zeros(130, 64, dtype=torch.float16),
                        tune=False)
    assert ragged.path == "mma-padded" and "padded to 128x256x64" in ragged.describe
    with pytest.raises(tiledsl.LaunchError, match="Hopper configuration"):
        MM.matmul(a, b, config=dict(bn=128))


def test_matmul_fp8_on_cpu_tensors_runs_the_kernel_on_the_interpreter():
    """CPU tensors run the Hopper FP8 kernel on the interpreter (the torch op's CPU route, fp8.INTERPRETER_CONFIG);
    a CUDA device other than sm_90 is refused (tests/test_gpu_gemm_route.py's GPUs are sm_90: not tested here)."""
    torch = pytest.importorskip("torch")
    if not hasattr(torch, "float8_e4m3fn"):
        pytest.skip("torch without float8")
    a = (torch.arange(32 * 32).reshape(32, 32) % 5 - 2).float().to(torch.float8_e4m3fn)
    b = (torch.arange(24 * 32).reshape(24, 32) % 3 - 1).float().to(torch.float8_e4m3fn)
    c = FP8.matmul_fp8(a, b, torch.tensor([0.5]), torch.tensor([2.0]), torch.float32)
    assert torch.equal(c, a.float() @ b.float().T)


def _compile_hopper(ab, out, kw, M, N, K):
    host = {"float16": np.float16, "bfloat16": np.uint16, "float32": np.float32}
    k = H.make_hopper_gemm(ab, out, **kw)
    return k.compile(np.zeros((M, K), host[ab]), np.zeros((N, K), host[ab]), np.zeros((M, N), host[out]))


@pytest.mark.parametrize("n", [1024, 2048])
def test_chosen_configurations_assemble_for_sm90a(n):
    kw = HP.hopper_kwargs(HP.choose_hopper(n, n, n), n, 2)
    ck = _compile_hopper("float16", "float16", kw, n, n, n)
    ptx = ck.asm["ptx"]
    assert ".target sm_90a" in ptx and f"m64n{kw['bn']}k16" in ptx
    r = ptxas(ptx, "sm_90a")
    assert r.returncode == 0, r.stderr
    assert ck.metadata.get("spill_stores", 0) == 0 and ck.metadata["dynamic_shared"] <= H.SMEM_LIMIT


@pytest.mark.slow
@pytest.mark.parametrize("cfg", HP.HOPPER_CONFIGS)
@pytest.mark.parametrize("ab,out", [("float16", "float16"), ("bfloat16", "float32")])
def test_every_tuning_candidate_assembles_for_sm90a(cfg, ab, out):
    """Every configuration the tuner may pick on the H200 (tests/test_gpu_gemm_route.py runs what it picks)."""
    kw = HP.hopper_kwargs(cfg, 4096, 4 if out == "float32" else 2)
    ck = _compile_hopper(ab, out, kw, 512, 512, 512)
    r = ptxas(ck.asm["ptx"], "sm_90a")
    assert r.returncode == 0, r.stderr
    assert ck.metadata.get("spill_stores", 0) == 0 and ck.metadata["dynamic_shared"] <= H.SMEM_LIMIT


def test_padded_mma_kernel_of_the_ragged_shape_assembles_for_sm90():
    """The kernel matmul runs for 4095 x 4097 x 4093 (K % 8 != 0) on the H200: mma.sync on padded operands."""
    Mp, Np, Kp = 4096, 4224, 4096
    cfg = MM.choose(Mp, Np, Kp, "float16")
    k = MMA.make_gemm("float16", "float16", cfg, (Mp, Np, Kp))
    ck = k.compile(np.zeros((Mp, Kp), np.float16), np.zeros((Np, Kp), np.float16), np.zeros((Mp, Np), np.float16),
                   target="sm_90")
    r = ptxas(ck.asm["ptx"], "sm_90")
    assert r.returncode == 0, r.stderr
    assert ck.metadata.get("spill_stores", 0) == 0
