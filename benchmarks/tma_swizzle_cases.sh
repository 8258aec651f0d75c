#!/usr/bin/env bash
# The TMA swizzle agreement test one process per case (a fault poisons the process it happens in, so one bad case
# must not fail the ones after it): PASS/FAIL per case, then a count. GPU machine, repo root.
set -u
export PYTHONPATH=$PWD
pass=0; fail=0
for t in $(python3 -m pytest -q --collect-only -m gpu tests/test_gpu_tma_swizzle_agreement.py | grep "::"); do
  if timeout 60 python3 -m pytest -q -p no:cacheprovider -m gpu "$t" >/dev/null 2>&1; then
    echo "PASS $t"; pass=$((pass + 1))
  else
    echo "FAIL $t"; fail=$((fail + 1))
  fi
done
echo "tma swizzle cases: $pass passed, $fail failed"
