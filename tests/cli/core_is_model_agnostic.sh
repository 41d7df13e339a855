#!/usr/bin/env bash
# The core stays small and knows no model family (issue 26: a family is an
# entry of the CKB, not code in the core):
#  1. mi-run links neither libffi (the verifier's) nor libcurl (the agents');
#  2. nothing under core/ (the runtime, tokenizer, CKB, verifier, generator,
#     evolution loop, server and every CLI, mi-mkmodel included) names a
#     model family, in code or in comments: no architecture string, no
#     contract id, no family name. What a family is lives in ckb/models/,
#     plugins/models/, tests/ and docs/. Peer tools keep their names
#     (llama.cpp, llama-server, llama-bench are programs, not families).
#  3. the pattern finds a family where there is one (a planted line in a
#     scratch copy), so the check cannot pass by matching nothing.
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

# family names: Hugging Face architecture strings, contract ids and the
# families' own names (case-insensitive), "Llama" followed by a version
family='qwen|mistral|gemma|phi-?[0-9]|deepseek|ForCausalLM|ForConditionalGeneration|llama ?[0-9]|llama-?[0-9]|\bllama\b[^.-]|\bllama$'
# a contract id spelled in code: "model.NAME" where NAME is an entry of ckb/models
ids=$(cd "$src" && for f in ckb/models/*.json; do sed -n 's/.*"id": *"\(model\.[a-z0-9_]*\)".*/\1/p' "$f" | head -1; done | paste -sd'|')
scan() { # dir: the lines that name a family
  grep -rnIiE "$family" "$1" --include='*.c' --include='*.h' --include='*.cu' --include='*.inc' --include='CMakeLists.txt' 2>/dev/null
  [ -n "$ids" ] && grep -rnIE "\"($ids)\"" "$1" --include='*.c' --include='*.h' 2>/dev/null
}
hits=$(cd "$src" && scan core)
[ -n "$hits" ] && echo "$hits"
check "no model family named anywhere under core/" test -z "$hits"

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
mkdir -p "$scratch/core"
printf '/* a plugin for Qwen3 */\nstatic const char *a = "LlamaForCausalLM";\nint gemma2_rows;\n' >"$scratch/core/planted.c"
planted=$(cd "$scratch" && scan core | wc -l)
check "the check finds a planted family name (3 lines)" test "$planted" -eq 3
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
