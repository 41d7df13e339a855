#!/bin/sh
# Builds sdk/templates/platform OUT OF TREE against an SDK installed into a
# temporary prefix (the CMake package, then the pkg-config file), and loads
# each result with the core's loader to run kernels (loader_sdk_check).
# Given MI_RUN and MKMODEL, it also asks the template (its kernels partly
# NULL) to run the qwen3 model: one line naming the missing platform members
# and exit 1 (it used to be SIGSEGV), and --list-plugins says the same.
# usage: sdk_template_test.sh SOURCE_DIR BUILD_DIR CHECK_EXE CC CMAKE [MI_RUN MKMODEL]
set -eu
src=$1 build=$2 check=$3 cc=$4 cmake=$5 mirun=${6:-} mkmodel=${7:-}
tmp=$(mktemp -d /tmp/mi-sdk-test-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
. "$(dirname "$0")/sdk_template_lib.sh"

# The vendor's copy of the template, built: only the descriptor entry point
# is exported, and it is.
sdk_build_template platform my_platform libmi-myplatform.so
nm -D --defined-only "$tmp/build/libmi-myplatform.so" | grep -q ' T mi_plugin_get_descriptor$'
"$check" "$tmp/build/libmi-myplatform.so"

if [ -n "$mirun" ]; then
  echo "== mi-run --platform myplatform on a qwen3 model"
  "$mkmodel" --shape tiny --out "$tmp/model" >/dev/null
  want="mi-run: platform 'myplatform' cannot serve model 'qwen3': lacks rmsnorm, rope, attention, embed"
  # only the two plugins (no warnings about other, optional ones)
  lib=$(dirname "$mirun")/../lib/metainfer
  { echo "platform myplatform $tmp/build/libmi-myplatform.so required"
    echo "model qwen3 $lib/libmi-qwen3.so required"; } >"$tmp/run.conf"
  rc=0
  "$mirun" --plugins-conf "$tmp/run.conf" --platform myplatform -m "$tmp/model" -p hi -n 4 \
    >"$tmp/out" 2>"$tmp/err" || rc=$?
  [ "$rc" -eq 1 ] || { echo "FAIL: exit $rc (want 1)"; cat "$tmp/err"; exit 1; }
  [ "$(cat "$tmp/err")" = "$want" ] || { echo "FAIL: stderr is not the one line '$want':"; cat "$tmp/err"; exit 1; }
  [ ! -s "$tmp/out" ] || { echo "FAIL: output on stdout"; cat "$tmp/out"; exit 1; }
  "$mirun" --plugin-dir "$tmp/build" --list-plugins >"$tmp/list"
  grep -A1 "^platform  myplatform .* loaded " "$tmp/list" | grep -q "^          cannot serve: qwen3: lacks rmsnorm, rope, attention, embed\(;.*\)\?$" \
    || { echo "FAIL: --list-plugins does not say what myplatform lacks:"; cat "$tmp/list"; exit 1; }
  grep -A1 "^platform  cpu .* loaded " "$tmp/list" | grep -q "^          serves: qwen3" \
    || { echo "FAIL: --list-plugins does not say that cpu serves qwen3:"; cat "$tmp/list"; exit 1; }
fi

if [ -n "$mirun" ]; then
  # The vendor's contract beside the code: mi-verify holds the plugin to it.
  verify=$(dirname "$mirun")/mi-verify
  echo "== mi-verify --platform-contract: the template against its own contract"
  "$verify" --platform-plugin "$tmp/build/libmi-myplatform.so" --platform-contract "$tmp/my_platform/my_platform.json" \
    --ckb "$src/ckb" --stage 1 --seed 1 >"$tmp/v.out" 2>"$tmp/v.err" || { echo "FAIL: mi-verify"; cat "$tmp/v.err"; exit 1; }
  grep -q "^mi-verify: PASS: 4 passed, 0 failed" "$tmp/v.err" || { echo "FAIL: not 4 PASS units"; cat "$tmp/v.err"; exit 1; }

  echo "== a kernel listed before it is written: one MISSING line, exit 1"
  sed 's/{"operator": "operator.scale", "dtypes": \["f32"\]}/&, {"operator": "operator.rmsnorm", "dtypes": ["f32"]}, {"operator": "operator.rope", "dtypes": ["f32"]}/' \
    "$tmp/my_platform/my_platform.json" >"$tmp/more.json"
  grep -q operator.rmsnorm "$tmp/more.json"
  rc=0
  "$verify" --platform-plugin "$tmp/build/libmi-myplatform.so" --platform-contract "$tmp/more.json" \
    --ckb "$src/ckb" --stage 1 --seed 1 >"$tmp/v.out" 2>"$tmp/v.err" || rc=$?
  [ "$rc" -eq 1 ] || { echo "FAIL: exit $rc (want 1)"; cat "$tmp/v.err"; exit 1; }
  for m in rmsnorm rope; do
    [ "$(grep -c "^  MISSING  operator.$m .*not provided: myplatform's mi_platform_iface has no '$m'" "$tmp/v.err")" -eq 1 ] \
      || { echo "FAIL: no one MISSING line for $m"; cat "$tmp/v.err"; exit 1; }
  done
  grep -q "^mi-verify: FAIL: 4 passed, 2 failed" "$tmp/v.err" || { echo "FAIL: the provided kernels did not still pass"; cat "$tmp/v.err"; exit 1; }
  ! grep -q CRASH "$tmp/v.err" || { echo "FAIL: a missing member crashed"; cat "$tmp/v.err"; exit 1; }

  echo "== a contract that is not one: one line naming the file, exit 2"
  printf '{"id": "platform.myplatform", "kind": "platform", "version": "0.1.0"}' >"$tmp/bad.json"
  rc=0
  "$verify" --platform-plugin "$tmp/build/libmi-myplatform.so" --platform-contract "$tmp/bad.json" \
    --ckb "$src/ckb" --stage 1 --seed 1 >"$tmp/v.out" 2>"$tmp/v.err" || rc=$?
  [ "$rc" -eq 2 ] || { echo "FAIL: exit $rc (want 2)"; cat "$tmp/v.err"; exit 1; }
  grep -q "bad.json: the platform contract has the problems above" "$tmp/v.err" || { echo "FAIL: the file is not named"; cat "$tmp/v.err"; exit 1; }
  printf '{"id": ' >"$tmp/trunc.json"
  rc=0
  "$verify" --platform-plugin "$tmp/build/libmi-myplatform.so" --platform-contract "$tmp/trunc.json" \
    --ckb "$src/ckb" --stage 1 >"$tmp/v.out" 2>"$tmp/v.err" || rc=$?
  [ "$rc" -eq 2 ] && grep -q "trunc.json: invalid JSON" "$tmp/v.err" || { echo "FAIL: truncated contract (exit $rc)"; cat "$tmp/v.err"; exit 1; }
fi

echo "== pkg-config route"
pc=$(find "$tmp/prefix" -name metainfer-sdk.pc | head -n1)
test -n "$pc"
export PKG_CONFIG_PATH="$(dirname "$pc")"
cflags=$(pkg-config --cflags metainfer-sdk)
case "$cflags" in *"$tmp/prefix"*) ;; *) echo "FAIL: pkg-config cflags '$cflags' not in the prefix"; exit 1;; esac
pkg-config --variable=plugindir metainfer-sdk
mkdir "$tmp/pc"
"$cc" -std=c11 -O2 -fPIC -shared -fvisibility=hidden -Wall -Wextra -Wno-unused-parameter -Werror \
  -Wl,--no-undefined $cflags "$tmp/my_platform/my_platform.c" -lm -o "$tmp/pc/libmi-myplatform.so"
"$check" "$tmp/pc/libmi-myplatform.so"
echo "OK"
