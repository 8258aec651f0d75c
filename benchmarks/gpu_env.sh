# Sourced by the gpu_*.sh scripts (GPU machine, repo root): the checkout on the path, unbuffered output, logs under
# $OUT, a fresh kernel cache unless TILEDSL_CACHE_DIR names one, and the card's name, clock and power first.
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
OUT=${OUT:-/tmp/tiledsl-out}; mkdir -p "$OUT"
export TILEDSL_CACHE_DIR=${TILEDSL_CACHE_DIR:-$(mktemp -d)}
nvidia-smi --query-gpu=name,clocks.sm,power.draw --format=csv,noheader

gpu_tests() {  # log name, pytest args: the gpu tests under timeout $T, then their rc, summary line and failures
  local name=$1; shift
  timeout "$T" python3 -m pytest -q -p no:cacheprovider --tb=short -rfE -m gpu "$@" >"$OUT/$name.log" 2>&1
  echo "$name rc=$? $(tail -n 1 "$OUT/$name.log")"; grep -E "^(FAILED|ERROR)" "$OUT/$name.log" | head -8
}
