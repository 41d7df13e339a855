#!/bin/sh
# Plugins that misbehave, through `mi-run --list-plugins`:
#   - probe / init that never return: one line naming the plugin and the
#     step, exit 1 within the limit (MI_PLUGIN_TIMEOUT=1 here);
#   - exit(0) from a constructor (inside dlopen) or from init: one line
#     naming the plugin, exit 1 (not 0 with no output);
#   - a folder of 10,000 junk libmi-*.so files: every one listed as
#     rejected; the time is printed, not asserted (the scan is O(n log n)).
# usage: misbehave_test.sh MI_RUN MISBEHAVE_DIR TEST_PLUGIN_DIR
set -eu
mirun=$1 dir=$2 plugins=$3
tmp=$(mktemp -d /tmp/mi-misbehave-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fail=0
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.2f", b - a }'; }

# run_conf NAME required|optional [env...]: mi-run --list-plugins on one plugin
run_conf() {
  f="$dir/libmi-$1.so"
  echo "platform $1 $f $2" >"$tmp/p.conf"
  rc=0
  shift 2
  env "$@" timeout 60 "$mirun" --plugins-conf "$tmp/p.conf" --list-plugins >"$tmp/out" 2>"$tmp/err" || rc=$?
}
# expect_fail WHAT PATTERN
expect_fail() {
  if [ "$rc" -ne 1 ]; then echo "FAIL: $1: exit $rc (want 1)"; cat "$tmp/out" "$tmp/err"; fail=1; fi
  lines=$(wc -l <"$tmp/err")
  [ "$lines" -eq 1 ] || { echo "FAIL: $1: $lines lines on stderr (want 1)"; cat "$tmp/err"; fail=1; }
  grep -q -- "$2" "$tmp/err" || { echo "FAIL: $1: no '$2' in:"; cat "$tmp/err"; fail=1; }
  if [ -s "$tmp/out" ]; then echo "FAIL: $1: output on stdout"; cat "$tmp/out"; fail=1; fi
  echo "  $1: exit $rc: $(cat "$tmp/err")"
}

for req in required optional; do
  t0=$(now)
  run_conf bad-hanginit $req MI_PLUGIN_TIMEOUT=1
  expect_fail "init hangs ($req)" "^mi-run: plugin $dir/libmi-bad-hanginit.so: init did not return within 1 s"
  run_conf bad-hangprobe $req MI_PLUGIN_TIMEOUT=0.5
  expect_fail "probe hangs ($req)" "^mi-run: plugin $dir/libmi-bad-hangprobe.so: probe did not return within 0.5 s"
  echo "  two hangs stopped in $(since "$t0") s"
  run_conf bad-exitctor $req
  expect_fail "exit(0) in a constructor ($req)" \
    "^mi-run: a plugin called exit() during loading (last plugin being loaded: $dir/libmi-bad-exitctor.so)$"
  run_conf bad-exitinit $req
  expect_fail "exit(0) in init ($req)" \
    "^mi-run: a plugin called exit() during loading (last plugin being loaded: $dir/libmi-bad-exitinit.so)$"
done

# a bad MI_PLUGIN_TIMEOUT is a warning, and the defaults apply
echo "platform good $plugins/libmi-good.so required" >"$tmp/g.conf"
rc=0
MI_PLUGIN_TIMEOUT=soon "$mirun" --plugins-conf "$tmp/g.conf" --list-plugins >"$tmp/out" 2>"$tmp/err" || rc=$?
[ "$rc" -eq 0 ] || { echo "FAIL: good plugin with MI_PLUGIN_TIMEOUT=soon: exit $rc"; cat "$tmp/err"; fail=1; }
grep -q "MI_PLUGIN_TIMEOUT='soon' is not a number of seconds" "$tmp/err" \
  || { echo "FAIL: no warning for MI_PLUGIN_TIMEOUT=soon"; cat "$tmp/err"; fail=1; }

# 10,000 junk files (and 2,500, to print how the time grows)
for n in 2500 10000; do
  junk="$tmp/junk$n"
  mkdir "$junk"
  awk -v d="$junk" -v n=$n 'BEGIN { for (i = 0; i < n; i++) {
    f = sprintf("%s/libmi-junk-%05d.so", d, i); print "junk" > f; close(f) } }'
  cp "$plugins/libmi-good.so" "$junk/libmi-good.so"
  t0=$(now)
  rc=0
  "$mirun" --plugin-dir "$junk" --list-plugins >"$tmp/out" 2>"$tmp/err" || rc=$?
  t=$(since "$t0")
  [ "$rc" -eq 0 ] || { echo "FAIL: $n junk files: exit $rc"; tail -3 "$tmp/err"; fail=1; }
  k=$(grep -c "rejected  $junk/libmi-junk-" "$tmp/out" || true)
  [ "$k" -eq "$n" ] || { echo "FAIL: $k of $n junk files listed as rejected"; fail=1; }
  grep -q "loaded    $junk/libmi-good.so  scan of $junk$" "$tmp/out" \
    || { echo "FAIL: the good plugin among $n junk files did not load"; fail=1; }
  echo "  $n junk files: $k rejected, listed in $t s"
done

[ "$fail" -eq 0 ] && echo OK
exit $fail
