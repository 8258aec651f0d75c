#!/usr/bin/env bash
# One device call for a session's GPU work: the GPU test files named in TESTS as parallel processes (each under a
# timeout, logs in $OUT), then the benchmark commands of BENCH one after another (each under its own timeout), then
# a short summary. Usage (GPU machine, repo root):
#   OUT=dir T=300 TESTS="tests/test_gpu_a.py tests/test_gpu_b.py::test_x" BENCH="ops.py --quick;gemm_skinny.py" \
#     bash benchmarks/gpu_session.sh
# A TESTS entry file.py@K runs that file as K processes side by side (pytest --shard 0/K .. K-1/K, tests/conftest.py):
# the long compile-bound files (test_gpu_attention_hopper.py: over 7 minutes as one process on an H100 host).
# BENCH entries are benchmarks/ scripts with their arguments, separated by ';' (BT: seconds each, default 150).
# PAR: shell commands separated by ';' run in the background beside the tests (correctness checks, CPU-only
# benchmarks), each under the tests' timeout, logs p<i>.log.
set -u
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
OUT=${OUT:-/tmp/tiledsl-out}; mkdir -p "$OUT"
export TILEDSL_CACHE_DIR=${TILEDSL_CACHE_DIR:-$(mktemp -d)}
T=${T:-300}; BT=${BT:-150}
nvidia-smi --query-gpu=name,clocks.sm,power.draw --format=csv,noheader
i=0
for entry in ${TESTS:-}; do
  t=${entry%@*}; k=1
  [ "$t" != "$entry" ] && k=${entry##*@}          # file.py@K: K processes, each a --shard of the file's tests
  for ((s = 0; s < k; s++)); do
    i=$((i + 1)); name="t$i-$(basename "${t%%::*}" .py)"; shard=()
    [ "$k" -gt 1 ] && { name="$name-s$s"; shard=(--shard "$s/$k"); }
    ( timeout "$T" python3 -m pytest -q -p no:cacheprovider --tb=short -rfE -m gpu "${shard[@]}" "$t" \
        >"$OUT/$name.log" 2>&1
      echo "$name rc=$? $(tail -n 1 "$OUT/$name.log")" ) &
  done
done
IFS=';' read -ra pars <<< "${PAR:-}"
k=0
for c in "${pars[@]}"; do
  [ -z "${c// }" ] && continue
  k=$((k + 1))
  ( timeout "$T" bash -c "$c" >"$OUT/p$k.log" 2>&1; echo "par $k rc=$? ($c)" ) &
done
wait
for f in "$OUT"/t*.log; do [ -f "$f" ] && grep -E "^(FAILED|ERROR)" "$f" | head -6; done
IFS=';' read -ra cmds <<< "${BENCH:-}"
j=0
for c in "${cmds[@]}"; do
  [ -z "${c// }" ] && continue
  j=$((j + 1)); script=${c%% *}; script=${script// }
  # shellcheck disable=SC2086
  timeout "$BT" python3 benchmarks/$c >"$OUT/b$j-${script%.py}.log" 2>&1
  echo "bench $c rc=$?"
done
