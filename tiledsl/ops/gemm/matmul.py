"""matmul: C = A · Bᵀ (+ bias, activation) for torch tensors, through the kernel that serves the shape and device.

`route()` picks the path: the warp-specialised Hopper kernel (hopper.py; its configuration chosen by hopper_plan.py),
the mma.sync kernel (mma.py) where a configuration tiles the shape, or the mma.sync kernel on zero-padded operands.
A `Plan` per (sizes, dtypes, device, config) is made, and tuned, on the first call of its key: the steady call is
one dict lookup and the kernel's launch. `plan_of` names the plan; the mma.sync path's tuning lives here too.
"""
import tiledsl

from .. import gates
from ..device import NUM_SMS, sm_count
from .hopper import major_of
from .hopper_plan import hopper_plan, is_hopper_config
from .mma import DYNAMIC_PREFERRED, PREFERRED, make_gemm, usable
from .plan import DTYPES, Plan, device_capability, host_epilogue


def matmul(a, b, bias=None, activation=None, out_dtype=None, *, out=None, config=None, static=True, tune=True):
    """C = a @ b.T (+ bias, then activation) for torch CUDA tensors a (M, K) and b (N, K) (CPU tensors: the
    mma.sync kernel on the interpreter, small sizes; the torch ops of tiledsl.ops.library.gemm call this).

    On an sm_90 GPU (H100/H200) the product runs on the warp-specialised TMA + wgmma kernel of hopper.py (any M
    and N; K a multiple of 8), elsewhere, and for shapes that kernel cannot take, on the mma.sync kernel of mma.py;
    `route()` is the decision. Shapes that no mma.sync block tile divides are padded with
    zeros to one (never refused); config= naming an mma.sync tuple keeps that kernel and refuses sizes it does not
    tile.

    The configuration is autotuned per (M, N, K, dtypes) by `tiledsl.autotune` (Hopper: over HOPPER_CONFIGS,
    pruned by shape; mma.sync: over TUNE_CONFIGS), the winner kept on disk (a later process reuses it);
    tune=False takes the heuristic (`choose_hopper()` / `choose()`) instead, and config= names one (a Hopper
    configuration as a dict of hopper_matmul's keywords or a HOPPER_CONFIGS tuple; an mma.sync one as a tuple of
    CONFIGS' form). static: compile one mma.sync kernel per (M, N, K) (the default), or one that reads the sizes at
    launch (not tuned; static=False also keeps the mma.sync path). `plan_of(a, b, out)` names the choice.
    bias (N,) and activation ("relu", "gelu", "silu" or a callable on the output) are fused into the Hopper
    kernel's epilogue where hopper.py has one, else applied by torch after the kernel, in place.

    Operand layouts: a (M, K) and b (N, K) may be transposed views (a = x.t() of a contiguous (K, M) x: stride
    (1, M)); the strides decide (hopper.major_of), and the plan is kept per layout. On the Hopper path such an
    operand is read as stored (MN-major: wgmma's transposed shared-memory operand, no copy) where the gated path
    "gemm_mn_major" is enabled (tiledsl.ops.gates: verified; TILEDSL_DISABLE=gemm_mn_major closes it); everywhere
    else, and with the gate closed, it is copied K-major (`.contiguous()`), which describe() says."""
    import torch
    M, K = a.shape
    N, K2 = b.shape
    if K2 != K or a.dtype != b.dtype:
        raise tiledsl.LaunchError(f"a is {tuple(a.shape)} {a.dtype}, b is {tuple(b.shape)} {b.dtype}: need (M, K) "
                                  f"and (N, K) of one dtype")
    if out is None:
        out = torch.empty((M, N), dtype=out_dtype or a.dtype, device=a.device)
    if config is not None:
        config = tuple(sorted(config.items())) if isinstance(config, dict) else tuple(config)
    lay = _layout(a, b)
    key = (M, N, K, a.dtype, out.dtype, a.device, config, static, tune, lay)
    plan = _PLANS.get(key)
    if plan is None:
        plan = _PLANS[key] = _make_plan(a, b, out, config, static, tune, lay)
    if lay is not KK:
        # what the plan does not read as stored is copied K-major
        a = a if plan.majors[0] == "mn" else a.contiguous()
        b = b if plan.majors[1] == "mn" else b.contiguous()
    plan.run(a, b, out, bias, activation)
    return out


KK = ("k", "k")


def _layout(a, b):
    """(major_of(a), major_of(b)): KK itself (one object: the common case's test is `is`) where both are K-major."""
    am, bm = major_of(a), major_of(b)
    return KK if am == bm == "k" else (am, bm)


def plan_of(a, b, out=None, *, config=None, static=True, tune=True):
    """The `Plan` matmul(a, b, out=out, ...) runs (made, and tuned, on the first call of its key); `.describe`
    names the path and configuration (the benchmark prints it)."""
    import torch
    if out is None:
        out = torch.empty((a.shape[0], b.shape[0]), dtype=a.dtype, device=a.device)
    if config is not None:
        config = tuple(sorted(config.items())) if isinstance(config, dict) else tuple(config)
    lay = _layout(a, b)
    key = (a.shape[0], b.shape[0], a.shape[1], a.dtype, out.dtype, a.device, config, static, tune, lay)
    plan = _PLANS.get(key)
    if plan is None:
        plan = _PLANS[key] = _make_plan(a, b, out, config, static, tune, lay)
    return plan


def route(capability, M: int, N: int, K: int, ab: str, out: str) -> str:
    """Which kernel serves C (M x N, dtype `out`) = A (M x K) B^T (N x K), inputs of dtype `ab`, on a device of
    compute capability `capability` ((major, minor), None for no GPU): "hopper" (hopper.py: sm_90,
    f16/bf16 in, f16/bf16/f32 out, K a multiple of 8 for the TMA unit's 16-byte rows), "mma" (the mma.sync kernel:
    some configuration tiles the shape) or "mma-padded" (the mma.sync kernel on operands padded with zeros to a
    tile multiple, the result copied back). A pure function of its arguments."""
    if (capability is not None and tuple(capability) == (9, 0) and ab in ("float16", "bfloat16")
            and out in ("float16", "bfloat16", "float32") and K % 8 == 0 and min(M, N, K) > 0):
        return "hopper"
    if any(_serves(c, M, N, K, out) for c in PREFERRED):
        return "mma"
    return "mma-padded"


GATED_NOTE = "; MN-major operands copied K-major (the gated path gemm_mn_major passed over: TILEDSL_DISABLE)"


def mn_choice(a, lay):
    """(majors, describe's note) of the Hopper plan for operands (a's device) of layout `lay`: read as stored where
    the gate allows (CPU tensors, on the interpreter, always may), else copied K-major, the note saying so."""
    if lay is KK or gates.allows("gemm_mn_major", a):
        return lay, ""
    return KK, GATED_NOTE


def _make_plan(a, b, out, config, static, tune, lay=KK) -> Plan:
    """The plan of one matmul key: the route, then the configuration (given, tuned or the heuristic's); lay, the
    operands' majors (_layout): read as stored on the Hopper path where the gate allows, else copied K-major."""
    M, K = a.shape
    N = b.shape[0]
    ab, od = (DTYPES.get(str(t), str(t)) for t in (a.dtype, out.dtype))
    hopper_cfg = config is not None and is_hopper_config(config)
    if config is not None and not hopper_cfg or not static:
        path = "mma"                       # an mma.sync configuration (sizes it must tile), or sizes read at launch
    else:
        path = route(device_capability(a), M, N, K, ab, od)
    if hopper_cfg and path != "hopper":
        shown = dict(config) if isinstance(config[0], tuple) else config
        raise tiledsl.LaunchError(f"config={shown} is a Hopper configuration, but these operands take the mma.sync "
                                  f"path (route(): an sm_90 GPU, f16/bf16 inputs, K a multiple of 8; static=True)")
    sms = sm_count(a)
    if path == "hopper":
        majors, note = mn_choice(a, lay)
        return hopper_plan(a, b, out, config, tune, sms, majors, note)
    if lay is not KK:
        a, b = a.contiguous(), b.contiguous()   # the mma.sync kernels read K-major only (matmul copies)
    host = not a.is_cuda        # CPU tensors: the same mma.sync kernels on the interpreter
    if path == "mma-padded":
        return _padded_plan(M, N, K, ab, od, sms, host)
    tunable = any(_serves(c, M, N, K, od) for c in TUNE_CONFIGS)
    if tune and static and config is None and a.is_cuda and tunable:
        launch, cfg = tuned_gemm.pick(a, b, out)
        cfg = cfg.constexprs["config"]
    else:
        cfg = config or choose(M, N, K, od, static, sms)
        launch = _plan(M, N, K, ab, od, cfg, static, sms, host)

    def run(a, b, out, bias, activation):
        launch(a, b, out)
        host_epilogue(out, bias, activation)
    return Plan(run, f"mma.sync {cfg}{'' if static else ' dynamic'}{' (interpreter)' if host else ''}", "mma", cfg)


def _padded_plan(M, N, K, ab, od, sms, host=False) -> Plan:
    """The mma.sync kernel on zero-padded operands: A and B padded to multiples of 128 rows and 64 columns (zeros
    add nothing to the products), C computed in a padded buffer and its M x N corner copied into out (host: on
    the interpreter, for CPU tensors)."""
    import torch
    Mp, Np, Kp = -(-M // 128) * 128, -(-N // 128) * 128, -(-K // 64) * 64
    cfg = choose(Mp, Np, Kp, od, True, sms)
    kernel = _plan(Mp, Np, Kp, ab, od, cfg, True, sms, host)

    def run(a, b, out, bias, activation):
        ap = a.new_zeros((Mp, Kp))
        ap[:M, :K] = a
        bp = b.new_zeros((Np, Kp))
        bp[:N, :K] = b
        cp = torch.empty((Mp, Np), dtype=out.dtype, device=out.device)
        kernel(ap, bp, cp)
        out.copy_(cp[:M, :N])
        host_epilogue(out, bias, activation)
    return Plan(run, f"mma.sync {cfg} on operands padded to {Mp}x{Np}x{Kp}{' (interpreter)' if host else ''}",
                "mma-padded", cfg)


# what matmul tunes over (>= 8 candidates): the preferred tiles, and two more shapes of block tile
TUNE_CONFIGS = PREFERRED + [(128, 256, 64, 2, 4, 4, 1), (256, 128, 32, 4, 2, 6, 1, 1, 1, 0, 1)]


def _gemm_for(A, B, C, config):
    """The kernel factory matmul tunes: the shape-specialised kernel of `config` for these arrays (a LaunchError,
    so the tuner skips the config, when it cannot serve them)."""
    ab, out = (DTYPES.get(str(t.dtype), str(t.dtype)) for t in (A, C))
    if not usable(config, out):
        raise tiledsl.LaunchError(f"gemm configuration {config}: its shared-memory epilogue needs an f16/bf16 output")
    (M, K), N = A.shape, B.shape[0]
    return _plan(M, N, K, ab, out, config, True)


def _serves(config, M, N, K, out) -> bool:
    return usable(config, out) and not (M % config[0] or N % config[1] or K % config[2])


def _prune(configs, args):
    """The configs that tile these arrays and suit the output dtype (matmul never tunes when none does)."""
    (M, K), N = args["A"].shape, args["B"].shape[0]
    out = DTYPES.get(str(args["C"].dtype), str(args["C"].dtype))
    return [c for c in configs if _serves(c.constexprs["config"], M, N, K, out)]


tuned_gemm = tiledsl.autotune(configs=[tiledsl.Config({"config": c}) for c in TUNE_CONFIGS],
                              key=["A", "B", "C"], prune=_prune)(_gemm_for)


def choose(M, N, K, out, static=True, sms=NUM_SMS):
    """The first preferred configuration that tiles the shape with at least 90% of a wave of blocks (one per
    SM); when none does, the one that tiles it with the most blocks."""
    prefs = [c for c in (PREFERRED if static else DYNAMIC_PREFERRED) if usable(c, out)]
    fits = [c for c in prefs if M % c[0] == 0 and N % c[1] == 0 and K % c[2] == 0]
    if not fits:
        return prefs[-1]        # refused by the size check, which names the sizes it needs
    blocks = lambda c: (M // c[0]) * (N // c[1])  # noqa: E731
    return next((c for c in fits if blocks(c) >= 0.9 * sms), max(fits, key=blocks))


_PLANS = {}     # matmul's choice per (sizes, dtypes, config, static): the steady call is one dict lookup


_INTERPRETED = {}   # the interpreter's twin of each mma.sync kernel CPU tensors ran (compiled once)


def _plan(M, N, K, ab, out, config, static, sms=NUM_SMS, host=False):
    """The mma.sync kernel for these sizes and configuration (a LaunchError naming the sizes it needs where the
    configuration does not tile them); host: its twin on the interpreter, which CPU torch tensors and numpy
    arrays run (small sizes: every lane is simulated)."""
    if config is None:
        config = choose(M, N, K, out, static, sms)
    bm, bn, bk = config[:3]
    if M % bm or N % bn or K % bk:
        raise tiledsl.LaunchError(f"gemm supports M and N that are multiples of {bm} and {bn} and K a multiple of "
                                  f"{bk}; got M={M}, N={N}, K={K}")
    kernel = make_gemm(ab, out, config, (M, N, K) if static else None)
    if not host:
        return kernel
    if kernel not in _INTERPRETED:
        _INTERPRETED[kernel] = tiledsl.jit(kernel.fn, interpret=True)
    return _INTERPRETED[kernel]
