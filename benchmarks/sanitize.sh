#!/usr/bin/env bash
# compute-sanitizer memcheck and racecheck on every example (the seeds and the GEMM); prints one line each.
set -u
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
OUT=${OUT:-/tmp/tiledsl-out}; mkdir -p "$OUT"
for ex in "seed_mma" "seed_fma" "gemm --size 512"; do
  name=${ex%% *}; args=${ex#"$name"}
  for tool in memcheck racecheck; do
    # shellcheck disable=SC2086
    compute-sanitizer --tool $tool --error-exitcode 1 python3 examples/$name.py $args >"$OUT/$name.$tool.log" 2>&1
    rc=$?
    echo "$name $tool: rc=$rc | $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|OK on|relative error' "$OUT/$name.$tool.log" | tr '\n' ' ')"
  done
done
