#!/bin/sh
# Platform mutants on the GPU emulator (tests/gpu/CMakeLists.txt): the
# warp-32 emulator built with MI_GPU_MUTANTS, held by mi-verify stage 1 to
# platform.nvidia's matmul. With no mutant it passes; each defect must fail
# stage 1 with operator.matmul named, in one line, never as a crash.
# usage: gpu_mutants_test.sh MI_VERIFY MUTANT_PLUGIN CKB_DIR
set -eu
verify=$1 plugin=$2 ckb=$3
tmp=$(mktemp -d /tmp/mi-gpu-mutants-XXXXXX)
trap 'rm -rf "$tmp"' EXIT

run() { # run MUTANT: sets rc; mi-verify's stderr in $tmp/err
  rc=0
  MI_GPU_MUTANT=$1 "$verify" --platform-plugin "$plugin" --platform nvidia --ckb "$ckb" --stage 1 \
    --only operator.matmul --seed 7 >"$tmp/out" 2>"$tmp/err" || rc=$?
}

echo "== control: the same plugin, no mutant"
run none
[ "$rc" -eq 0 ] && grep -q "^  PASS     operator.matmul" "$tmp/err" \
  || { echo "FAIL: the unmutated plugin did not pass (exit $rc)"; cat "$tmp/err"; exit 1; }

for m in skip_tail half_acc; do
  echo "== mutant $m"
  run "$m"
  [ "$rc" -eq 1 ] || { echo "FAIL: mutant $m: exit $rc (want 1: rejected)"; cat "$tmp/err"; exit 1; }
  line=$(grep "^  FAIL     operator.matmul " "$tmp/err" || true)
  [ -n "$line" ] || { echo "FAIL: mutant $m: no FAIL line naming operator.matmul"; cat "$tmp/err"; exit 1; }
  echo "rejected at stage 1: $line"
  ! grep -q "CRASH\|TIMEOUT" "$tmp/err" || { echo "FAIL: mutant $m crashed or hung instead"; cat "$tmp/err"; exit 1; }
done
echo OK
