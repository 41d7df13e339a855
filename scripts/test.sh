#!/usr/bin/env bash
# Runs every test: the Release build's ctest suite, each libFuzzer harness
# for a short time (MI_FUZZ_SECONDS, default 15), then the ASan+UBSan build's
# ctest suite.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh build
ctest --test-dir build --output-on-failure -j2
scripts/fuzz.sh "${MI_FUZZ_SECONDS:-15}"
scripts/build.sh build-asan -DCMAKE_BUILD_TYPE=Debug -DMI_SANITIZE=ON
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  LSAN_OPTIONS=suppressions="$PWD/tests/lsan.supp" \
  ctest --test-dir build-asan --output-on-failure -j2
