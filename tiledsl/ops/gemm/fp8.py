"""matmul_fp8: C = (scale_a * scale_b) * (A · Bᵀ) (+ bias) for FP8 torch tensors, on the Hopper kernel's FP8 form
(hopper.py), its configuration tuned per shape (tuning.py) over the candidates hopper_plan.py's rules keep; at M <= 64
without a bias the skinny kernel's FP8 form (skinny.py), where gates.enabled("gemm_skinny")."""
import tiledsl

from .. import gates
from ..device import sm_count
from . import hopper as H
from . import hopper_plan as HP
from . import schedule_model as SM
from . import skinny as SKN
from . import tuning as HT
from .plan import device_capability

_FP8_PLANS = {}     # matmul_fp8's keywords per (sizes, dtypes, device, config)
# CPU tensors: one 64 x 64 tile per block, a 2-stage ring (the fibered interpreter simulates every lane: the
# smallest tile keeps a small product quick)
INTERPRETER_CONFIG = dict(stages=2, consumers=1, bn=64, persistent=False)


def matmul_fp8(a, b, scale_a, scale_b, out_dtype=None, bias=None, *, out=None, config=None, tune=True):
    """C = (scale_a * scale_b) * (a @ b.T) (+ bias) for FP8 torch CUDA tensors a (M, K) and b (N, K) (e4m3 or
    e5m2), per-tensor scales as one-element float32 tensors; C of `out_dtype` (default bfloat16). Runs the
    Hopper kernel's FP8 form (hopper_matmul_fp8 of hopper.py) on an sm_90 GPU; elsewhere a LaunchError says so.
    CPU tensors run the same kernel on the interpreter (INTERPRETER_CONFIG unless config= names one; small sizes).
    config= is a dict of its keywords; by default the configuration is tuned per shape on the first call
    (tuning.FP8_CONFIGS, kept on disk), or with tune=False choose_hopper's."""
    import torch
    out_dtype = out_dtype or torch.bfloat16
    if a.device.type == "cpu":      # the same kernel on the interpreter, in a small configuration
        return H.hopper_matmul_fp8(a, b, scale_a, scale_b, out_dtype, out=out, bias=bias,
                                   **(config or INTERPRETER_CONFIG))
    cap = device_capability(a)
    if cap != (9, 0):
        where = f"sm_{cap[0]}{cap[1]}" if cap else "the host"
        raise tiledsl.LaunchError(f"matmul_fp8 needs an sm_90 GPU (H100/H200: wgmma's e4m3/e5m2 forms); a is on "
                                  f"{where}")
    fp8 = H.hopper_matmul_fp8
    if a.dim() != 2 or b.dim() != 2 or a.shape[1] != b.shape[1] or "float8" not in str(a.dtype) + str(b.dtype):
        raise tiledsl.LaunchError(f"matmul_fp8: a is {tuple(a.shape)} {a.dtype}, b is {tuple(b.shape)} {b.dtype}: "
                                  f"need FP8 (M, K) and (N, K)")
    M, K = a.shape
    N = b.shape[0]
    cfg_key = tuple(sorted(config.items())) if isinstance(config, dict) else None
    key = (M, N, K, a.dtype, b.dtype, out_dtype, a.device, cfg_key, bool(tune), bias is None)
    kw = _FP8_PLANS.get(key)
    if kw is None and config is None and bias is None and M <= SKN.MAX_M and K % 16 == 0 and \
            gates.enabled("gemm_skinny") and SKN.worth_it(N, K, H.DTYPES[str(a.dtype)], a):
        # a decode-sized M reads the weight: the skinny kernel (swap-AB, split-K over every SM), gated
        kw = _FP8_PLANS[key] = {"skinny": SKN.choose_skinny(M, N, K, sm_count(a), H.DTYPES[str(a.dtype)])}
    if kw is not None and "skinny" in kw:
        return SKN.skinny_matmul_fp8(a, b, scale_a, scale_b, out_dtype, out=out, config=kw["skinny"])
    if kw is None:
        import inspect
        params = inspect.signature(fp8).parameters
        if config is not None:
            kw = dict(config)
        elif tune and a.is_cuda:
            kw = _tuned_fp8(fp8, a, b, scale_a, scale_b, out_dtype, bias, params)
        else:
            kw = HP.hopper_kwargs(HP.choose_hopper(M, N, K, "bfloat16", sm_count(a)), N,
                               torch.empty((), dtype=out_dtype).element_size())
            kw = {k: v for k, v in kw.items() if k in params}
            try:        # the FP8 form's own limits may refuse a configuration the f16 one takes: its defaults then
                c = fp8(a, b, scale_a, scale_b, out_dtype, out=out, bias=bias, **kw)
            except tiledsl.TiledslError:
                kw = {}
                c = fp8(a, b, scale_a, scale_b, out_dtype, out=out, bias=bias)
            _FP8_PLANS[key] = kw
            return c
        _FP8_PLANS[key] = kw
    return fp8(a, b, scale_a, scale_b, out_dtype, out=out, bias=bias, **kw)


def fp8_plan_of(a, b, out_dtype=None, *, config=None, tune=True, bias=None) -> str:
    """What matmul_fp8(a, b, ..., out_dtype, bias) runs for these operands (after its first call of the key), in
    describe_hopper's words; None before that first call."""
    import torch
    cfg_key = tuple(sorted(config.items())) if isinstance(config, dict) else None
    key = (a.shape[0], b.shape[0], a.shape[1], a.dtype, b.dtype, out_dtype or torch.bfloat16, a.device, cfg_key,
           bool(tune), bias is None)
    kw = _FP8_PLANS.get(key)
    if kw is None:
        return None
    if "skinny" in kw:
        return "fp8 " + SKN.describe_skinny(kw["skinny"])
    passed = ""
    if config is None and bias is None and a.shape[0] <= SKN.MAX_M and a.is_cuda and not gates.enabled("gemm_skinny"):
        passed = " (the skinny kernel was passed over: gated, gemm_skinny)"
    return "fp8 " + (HP.describe_hopper(kw) if kw else "hopper_matmul_fp8's defaults") + passed


def _tuned_fp8(fp8, a, b, scale_a, scale_b, out_dtype, bias, params) -> dict:
    """matmul_fp8's keywords for these operands: the fastest of tuning.fp8_candidates the schedule
    model finds sound, timed here."""
    import torch
    M, K = a.shape
    N = b.shape[0]
    sms = sm_count(a)
    size = torch.empty((), dtype=out_dtype).element_size()
    o = torch.empty((M, N), dtype=out_dtype, device=a.device)

    def kw_of(c):
        kw = HP.hopper_kwargs(c, N, size)
        return {k: v for k, v in kw.items() if k in params}

    def run_of(c):
        kw = kw_of(c)
        k = H.make_hopper_gemm_fp8(H.DTYPES[str(a.dtype)], H.DTYPES[str(b.dtype)], H.DTYPES[str(out_dtype)],
                                   num_sms=sms, **kw)
        why = SM.check(k, M, N, K)
        if why:
            raise tiledsl.LaunchError(f"the schedule model refuses it: {why}")       # never launched
        fp8(a, b, scale_a, scale_b, out_dtype, out=o, bias=bias, **kw)      # builds it, or refuses the config
        return lambda: fp8(a, b, scale_a, scale_b, out_dtype, out=o, bias=bias, **kw)
    key = {"M": str(M), "N": str(N), "K": str(K), "a": str(a.dtype), "b": str(b.dtype), "out": str(out_dtype),
           "bias": str(None if bias is None else bias.dtype), "sms": str(sms),
           "device": torch.cuda.get_device_name(a.device)}
    cands = HT.fp8_candidates(HP, M, N, sms, gates.allows("gemm_stream_k_last_wave", a))
    return kw_of(HT.pick(cands, run_of, key)[0])
