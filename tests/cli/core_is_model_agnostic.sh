#!/usr/bin/env bash
# The core stays small and model-agnostic (issue: a new architecture adds
# files and edits no core file):
#  1. mi-run links neither libffi (the verifier's) nor libcurl (the agents');
#  2. the runtime, tokenizer and CKB libraries and the verifier's generic
#     code name no model family: architecture strings, model contract ids and
#     model plugin names live in the model's files, the CKB, plugins/ and
#     core/verify/models/ (one file per model contract).
# Prints "N passed, M failed".
set -u
src=${MI_SOURCE_DIR:?}
build=${MI_BUILD_DIR:?}
pass=0 fail=0
check() { # name, then a command that must succeed
  local name=$1; shift
  if "$@"; then pass=$((pass + 1)); echo "ok   $name"; else fail=$((fail + 1)); echo "FAIL $name"; fi
}
needed=$(readelf -d "$build/bin/mi-run" | awk '/NEEDED/ {print $NF}')
echo "mi-run NEEDED: $(echo $needed)"
check "mi-run does not link libffi" bash -c "! grep -q libffi <<<'$needed'"
check "mi-run does not link libcurl" bash -c "! grep -q libcurl <<<'$needed'"
hits=$(cd "$src" && grep -rnIE 'ForCausalLM|model\.qwen|"qwen|libmi-qwen|Qwen3Model' \
         core/runtime core/tokenizer core/ckb core/verify/*.c core/verify/*.h core/verify/ref 2>/dev/null)
[ -n "$hits" ] && echo "$hits"
check "no model family named in the core libraries" test -z "$hits"
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
