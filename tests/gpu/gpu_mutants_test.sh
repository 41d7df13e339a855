#!/bin/sh
# Platform mutants on the GPU emulator (tests/gpu/CMakeLists.txt): the
# warp-32 emulator built with MI_GPU_MUTANTS, held by mi-verify stage 1 to
# platform.nvidia's matmul. With no mutant it passes; each defect must fail
# stage 1 with operator.matmul named, in one line, never as a crash.
# no_allreduce (the all-reduce returns without reducing) shows only across
# ranks: mi-verify --tp 2 runs stage 1's collective unit under mpirun, the
# all-reduce by FAKE_NCCL (tests/gpu/fake_nccl.c, as NCCL would be loaded).
# usage: gpu_mutants_test.sh MI_VERIFY MUTANT_PLUGIN CKB_DIR FAKE_NCCL
# (FAKE_NCCL "": built without MPI, which the collectives need; said)
set -eu
verify=$1 plugin=$2 ckb=$3 nccl=${4:-}
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
run_tp() { # run_tp MUTANT: stage 1's collective unit at --tp 2; sets rc
  rc=0
  MI_GPU_MUTANT=$1 MI_CCL_PATH="$nccl" "$verify" --platform-plugin "$plugin" --platform nvidia --ckb "$ckb" \
    --stage 1 --tp 2 --only collectives --seed 7 >"$tmp/out" 2>"$tmp/err" || rc=$?
}
if [ -z "$nccl" ]; then
  echo "no_allreduce: not run: this build has no MPI (no fake_nccl, no mpirun)"
  echo OK
  exit 0
fi
echo "== control at --tp 2: collectives, no mutant"
run_tp none
[ "$rc" -eq 0 ] && grep -q "^  PASS     test.stage1_collectives" "$tmp/err" \
  || { echo "FAIL: the unmutated plugin's collectives did not pass (exit $rc)"; cat "$tmp/err"; exit 1; }
echo "== mutant no_allreduce"
run_tp no_allreduce
[ "$rc" -eq 1 ] || { echo "FAIL: mutant no_allreduce: exit $rc (want 1: rejected)"; cat "$tmp/err"; exit 1; }
line=$(grep "^  FAIL     test.stage1_collectives .*allreduce_sum_f32" "$tmp/err" || true)
[ -n "$line" ] || { echo "FAIL: mutant no_allreduce: no FAIL line naming the collective unit"; cat "$tmp/err"; exit 1; }
echo "rejected at stage 1: $line"
! grep -q "CRASH\|TIMEOUT" "$tmp/err" || { echo "FAIL: mutant no_allreduce crashed or hung instead"; cat "$tmp/err"; exit 1; }
echo OK
