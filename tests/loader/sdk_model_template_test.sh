#!/bin/sh
# Builds sdk/templates/model OUT OF TREE against an SDK installed into a
# temporary prefix, lists it with `mi-run --plugin-dir`, runs `mi-run` on a
# tiny checkpoint of the template's architecture, and holds the plugin's
# logits (engine API) and mi-run's log-probabilities against a float64
# implementation (loader_sdk_model_check).
# usage: sdk_model_template_test.sh SOURCE_DIR BUILD_DIR CHECK_EXE CC CMAKE MI_RUN MI_MKMODEL
set -eu
src=$1 build=$2 check=$3 cc=$4 cmake=$5 mirun=$6 mkmodel=$7
tmp=$(mktemp -d /tmp/mi-sdk-model-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
. "$(dirname "$0")/sdk_template_lib.sh"

# The researcher's copy of the template, built.
sdk_build_template model my_model libmi-mymodel.so
so="$tmp/build/libmi-mymodel.so"

echo "== pkg-config route"
pc=$(find "$tmp/prefix" -name metainfer-sdk.pc | head -n1)
mkdir "$tmp/pc"
PKG_CONFIG_PATH="$(dirname "$pc")" "$cc" -std=c11 -O2 -fPIC -shared -fvisibility=hidden -Wall \
  -Wextra -Werror -Wl,--no-undefined $(PKG_CONFIG_PATH="$(dirname "$pc")" pkg-config --cflags metainfer-sdk) \
  "$tmp/my_model/my_model.c" -lm -o "$tmp/pc/libmi-mymodel.so"

echo "== mi-run --plugin-dir lists it loaded"
"$mirun" --plugin-dir "$tmp/build" --list-plugins >"$tmp/list" 2>&1 || { cat "$tmp/list"; exit 1; }
cat "$tmp/list"
grep -q "^model  *mymodel  *0\.1\.0 .* loaded  *$so" "$tmp/list" \
  || { echo "FAIL: no 'model mymodel ... loaded $so' line"; exit 1; }

echo "== a tiny checkpoint of MyModelForCausalLM"
"$mkmodel" --shape tiny-untied --seed 5 --out "$tmp/m" >/dev/null
sed -i 's/"Qwen3ForCausalLM"/"MyModelForCausalLM"/' "$tmp/m/config.json"
grep -q '"MyModelForCausalLM"' "$tmp/m/config.json"

echo "== mi-run on it (greedy, top-5 logprobs)"
"$mirun" --plugin-dir "$tmp/build" -m "$tmp/m" -p "Once upon a time" -n 12 --temp 0 \
  --ignore-eos --json --top-logprobs 5 -t 2 >"$tmp/run.json" 2>"$tmp/run.err" \
  || { cat "$tmp/run.err"; exit 1; }

echo "== logits and mi-run's logprobs against float64"
"$check" "$tmp/build" "$tmp/m" "$tmp/run.json"
"$check" "$tmp/pc" "$tmp/m"
echo "OK"
