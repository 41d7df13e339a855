#!/bin/sh
# Truncated and corrupted copies of the real CPU plugin, listed in a
# plugins.conf: each is refused before dlopen with one line and a non-zero
# exit from `mi-run --list-plugins` when required, and listed as 'rejected'
# with its reason (exit 0) when optional. Never a signal (dlopen of a
# truncated file used to die with SIGBUS).
# usage: elf_truncated_test.sh MI_RUN LIBMI_CPU_SO
set -eu
mirun=$1 cpu=$2
tmp=$(mktemp -d /tmp/mi-elf-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fail=0
size=$(wc -c <"$cpu")

# put_u16/put_u64 FILE OFFSET VALUE-BYTES (little-endian octal escapes)
patch() { printf "$3" | dd of="$1" bs=1 seek="$2" conv=notrunc status=none; }

head -c 4096 "$cpu" >"$tmp/libmi-t4k.so"
head -c 65536 "$cpu" >"$tmp/libmi-t64k.so"
head -c $((size / 2)) "$cpu" >"$tmp/libmi-thalf.so"
head -c 40 "$cpu" >"$tmp/libmi-t40.so"
cp "$cpu" "$tmp/libmi-phoff.so"; patch "$tmp/libmi-phoff.so" 32 '\000\000\000\001\000\000\000\000'  # e_phoff = 16 MiB
cp "$cpu" "$tmp/libmi-phoffmax.so"; patch "$tmp/libmi-phoffmax.so" 32 '\377\377\377\377\377\377\377\377'
cp "$cpu" "$tmp/libmi-phnum.so"; patch "$tmp/libmi-phnum.so" 56 '\376\377'                           # e_phnum = 65534
cp "$cpu" "$tmp/libmi-shoff.so"; patch "$tmp/libmi-shoff.so" 40 '\377\377\377\377\377\377\377\177'     # e_shoff huge
cp "$cpu" "$tmp/libmi-class32.so"; patch "$tmp/libmi-class32.so" 4 '\001'                             # ELFCLASS32

check() { # check NAME REASON-PATTERN
  n=$1 pat=$2 f="$tmp/libmi-$1.so"
  echo "platform cpu $f required" >"$tmp/req.conf"
  rc=0
  "$mirun" --plugins-conf "$tmp/req.conf" --list-plugins >"$tmp/out" 2>"$tmp/err" || rc=$?
  if [ "$rc" -eq 0 ] || [ "$rc" -ge 126 ]; then
    echo "FAIL: $n required: exit $rc (want 1, not a signal)"; cat "$tmp/err"; fail=1
  fi
  lines=$(wc -l <"$tmp/err")
  [ "$lines" -eq 1 ] || { echo "FAIL: $n required: $lines lines on stderr (want 1)"; cat "$tmp/err"; fail=1; }
  grep -q "$f: required platform plugin 'cpu' not usable: .*$pat" "$tmp/err" \
    || { echo "FAIL: $n required: no '$pat' in:"; cat "$tmp/err"; fail=1; }
  echo "  $n: $(cat "$tmp/err")"
  echo "platform cpu $f optional" >"$tmp/opt.conf"
  rc=0
  "$mirun" --plugins-conf "$tmp/opt.conf" --list-plugins >"$tmp/out" 2>"$tmp/err" || rc=$?
  [ "$rc" -eq 0 ] || { echo "FAIL: $n optional: exit $rc (want 0)"; cat "$tmp/out" "$tmp/err"; fail=1; }
  grep -q "rejected  $f " "$tmp/out" && grep -q "reason: .*$pat" "$tmp/out" \
    || { echo "FAIL: $n optional: not listed as rejected with '$pat':"; cat "$tmp/out"; fail=1; }
}

check t4k "lies outside the file (4096 bytes)"
check t64k "lies outside the file (65536 bytes)"
check thalf "lies outside the file ($((size / 2)) bytes)"
check t40 "shorter than an ELF header"
check phoff "ELF program header table (offset 16777216, .*) lies outside the file"
check phoffmax "ELF program header table (offset 18446744073709551615, .*) lies outside the file"
# 65534 entries of 56 bytes end 3.67 MB in: past the end of a small plugin
# (the table itself is refused), inside a large one such as a sanitizer
# build (then the first garbage entry typed PT_LOAD or PT_DYNAMIC is, as a
# segment outside the file: which one depends on the plugin's bytes)
check phnum "ELF \(program header table (offset 64, 65534 entries)\|\(PT_LOAD\|PT_DYNAMIC\) segment [0-9]* (file bytes [0-9]* + [0-9]*)\) lies outside the file"
check shoff "ELF section header table (offset 9223372036854775807, .*) lies outside the file"
check class32 "not a 64-bit little-endian file"

# the untouched file still loads
echo "platform cpu $cpu required" >"$tmp/ok.conf"
"$mirun" --plugins-conf "$tmp/ok.conf" --list-plugins >"$tmp/out" 2>"$tmp/err" \
  || { echo "FAIL: the real plugin no longer loads"; cat "$tmp/out" "$tmp/err"; fail=1; }

[ "$fail" -eq 0 ] && echo OK
exit $fail
