#!/usr/bin/env bash
# One device call: GPU tests, examples on torch and cupy, sanitizers, benchmarks. Short table last.
# Usage (on the GPU machine, from the repo root): bash benchmarks/gpu_check.sh
set -u
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
OUT=${OUT:-/tmp/tiledsl-out}; mkdir -p "$OUT"
export TILEDSL_CACHE_DIR=$(mktemp -d)
summary=()
run() {  # name, command...
  local name=$1; shift
  if "$@" >"$OUT/$name.log" 2>&1; then summary+=("PASS $name"); else summary+=("FAIL $name (see $name.log)"); fi
  tail -n 5 "$OUT/$name.log"
}
run pytest_gpu python3 -m pytest -m gpu -q -p no:cacheprovider tests
for ex in seed_mma seed_fma; do
  run "${ex}_torch" python3 examples/$ex.py
  run "${ex}_cupy" python3 examples/$ex.py --cupy
done
if command -v compute-sanitizer >/dev/null; then
  for ex in "seed_mma" "seed_fma" "gemm --size 512"; do
    name=${ex%% *}
    args=${ex#"$name"}
    # shellcheck disable=SC2086
    run "${name}_memcheck" compute-sanitizer --tool memcheck --error-exitcode 1 python3 examples/$name.py $args
    # shellcheck disable=SC2086
    run "${name}_racecheck" compute-sanitizer --tool racecheck --error-exitcode 1 python3 examples/$name.py $args
  done
fi
run bench_gemm python3 benchmarks/gemm.py ${GEMM_ARGS:---power}   # --power: clock and board power at 4096^3
run bench_gemm_sweep python3 benchmarks/gemm.py --sweep --dtypes float16   # every configuration at 4096^3
run bench_elementwise python3 benchmarks/elementwise.py
run bench_launch python3 benchmarks/launch.py --rounds 9
run bench_compile python3 benchmarks/compile.py
run bench_interp python3 benchmarks/interpreter.py
echo; echo "== summary =="; printf '%s\n' "${summary[@]}"
for f in bench_gemm bench_gemm_sweep bench_elementwise bench_launch bench_compile bench_interp; do [ -f "$OUT/$f.log" ] && { echo "== $f =="; tail -n 25 "$OUT/$f.log"; }; done
grep -E "passed|failed" "$OUT/pytest_gpu.log" | tail -1
