#!/usr/bin/env bash
# A model family added by a CKB entry alone (issue 26): tests/families/llama.json
# (LlamaForCausalLM: no q/k norms, rotate-half RoPE, untied head, no
# biases) is copied into a scratch copy of the CKB, and with no C written
# for it and no plugin of its own:
#  1. the CKB validates with it and covers a checkpoint of it on the CPU;
#  2. mi-mkmodel builds that checkpoint from the contract (weight map,
#     shapes, init hints, config presets) and the weights check against it;
#  3. mi-gen generates an engine and verifies it at every stage: stage 4
#     against llama.cpp on this very checkpoint (the oracle makes the golden
#     on demand; its converter maps LlamaForCausalLM to llama.cpp's llama
#     architecture, permuting q/k to its pairing), stage 4d run as deployed
#     with no reference plugin to compare with, stage 5 against the contract
#     in float64;
#  4. mi-run runs the engine and its greedy tokens are llama.cpp's.
# Needs node and tools/node (scripts/setup.sh); exit 77 (skipped) without them.
set -u
src=${MI_SOURCE_DIR:?}
build=${MI_BUILD_DIR:?}
B=$build/bin
node=${MI_NODE:-$(command -v node || true)}
if [ -z "$node" ] || [ ! -d "$src/tools/node/node_modules/node-llama-cpp" ]; then
  echo "SKIP: node or tools/node/node_modules missing (scripts/setup.sh installs them): no oracle"
  exit 77
fi
pass=0 fail=0
check() { # name, then a command that must succeed
  local name=$1; shift
  if "$@"; then pass=$((pass + 1)); echo "ok   $name"; else fail=$((fail + 1)); echo "FAIL $name"; fi
}
jqe() { jq -e "$@" >/dev/null; } # a jq test: its exit status only
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cp -r "$src/ckb" "$tmp/ckb"
cp "$src/tests/families/llama.json" "$tmp/ckb/models/llama.json"
export MI_CKB_LEARN=0 MI_PEER_DIR=$src/tools/peer MI_ORACLE_CACHE=$tmp/oracle MI_NODE=$node
# MI_TEST_QUICK (the sanitizer tree, tests/cli/CMakeLists.txt): the real
# oracle on the first 2 of its 8 prompts (mi-verify hands it the
# prompts.json beside the script): llama.cpp's steps cost node the same
# outside the sanitizers; the Release run makes the golden of all 8.
if [ -n "${MI_TEST_QUICK:-}" ]; then
  mkdir "$tmp/peer" && ln -s "$src/tools/peer/oracle.mjs" "$tmp/peer/oracle.mjs" &&
    jq '.prompts |= .[:2]' "$src/tools/peer/prompts.json" >"$tmp/peer/prompts.json" || exit 1
  MI_PEER_DIR=$tmp/peer
  echo "third_family: MI_TEST_QUICK: the oracle on 2 of its 8 prompts (all 8: the Release run)" >&2
fi

check "the CKB validates with the new entry" "$B/mi-ckb" --ckb "$tmp/ckb" validate
check "mi-mkmodel builds the family's checkpoint from its contract" \
  "$B/mi-mkmodel" --ckb "$tmp/ckb" --family llama --shape tiny --seed 7 --out "$tmp/model"
check "its config names the family's architecture" grep -q '"LlamaForCausalLM"' "$tmp/model/config.json"
check "its weights are the contract's weight map" "$B/mi-ckb" --ckb "$tmp/ckb" weights --model "$tmp/model"
check "the CKB covers it on the CPU" bash -c "'$B/mi-ckb' --ckb '$tmp/ckb' coverage --model '$tmp/model' --platform cpu | tail -1 | grep -qx covered"

"$B/mi-gen" --ckb "$tmp/ckb" --model "$tmp/model" --platform cpu --dtype bf16 --tp 1 --out "$tmp/engine" \
  --seed 1 >"$tmp/gen.log" 2>&1
rc=$?
tail -25 "$tmp/gen.log"
check "mi-gen generates and verifies an engine (exit 0)" test "$rc" -eq 0
man=$tmp/engine/manifest.json
jq -r '.stages[]? | "stage \(.stage): \(.verdict) \(.message // "")"' "$man" 2>/dev/null | cut -c1-200
for s in build 1 2 3 4 5 6 4d; do
  check "stage $s passed" jqe --arg s "$s" '[.stages[] | select(.stage == $s) | .verdict] == ["PASS"]' "$man"
done
check "stage 4 compared with llama.cpp" jqe '.stages[] | select(.stage == "4") | .message | test("llama.cpp")' "$man"
golden=$(ls "$tmp"/oracle/*.json 2>/dev/null | head -1)
check "the oracle made a golden for this checkpoint" test -n "$golden"

# the engine's greedy tokens on the golden's first prompts are llama.cpp's
if [ -n "$golden" ]; then
  for i in 0 1; do
    prompt=$(jq -r ".cases[$i].prompt" "$golden")
    want=$(jq -c "[.cases[$i].steps[:12][].token_id]" "$golden")
    got=$("$B/mi-run" --plugin-dir "$tmp/engine" -m "$tmp/model" -p "$prompt" -n 12 --temp 0 --ignore-eos --json 2>/dev/null |
          jq -sc '[.[] | select(.token_id? != null) | .token_id]')
    echo "case $i: llama.cpp $want"
    echo "case $i: engine    $got"
    check "case $i: the engine's 12 greedy tokens are llama.cpp's" test "$want" = "$got"
  done
fi
check "stage 4d: run as deployed, no reference plugin (tokens are stage 4's)" \
  jqe '.reference_plugin == null and (.stages[] | select(.stage == "4d") | .verdict == "PASS" and (.message | test("no reference plugin")))' "$man"
check "no plugin was written for the family" bash -c "! ls '$build'/lib/metainfer/ | grep -qi llama"
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
