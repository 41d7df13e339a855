#!/usr/bin/env bash
# Builds MetaInfer twice — Release, and ASan+UBSan — and runs the whole test
# suite (Check suites under ctest) on both.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh build
ctest --test-dir build --output-on-failure -j2
scripts/build.sh build-asan -DCMAKE_BUILD_TYPE=Debug -DMI_SANITIZE=ON
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  LSAN_OPTIONS=suppressions="$PWD/tests/lsan.supp" \
  ctest --test-dir build-asan --output-on-failure -j2
