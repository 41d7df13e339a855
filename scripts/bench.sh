#!/usr/bin/env bash
# The speed comparison of README/docs: Qwen3-0.6B shape, bf16 weights, made by
# mi-mkmodel; MetaInfer and llama.cpp (node-llama-cpp, same threads, same
# prompt token ids) cell by cell in one run, with the bandwidth roofline.
#
#   scripts/bench.sh [mi-bench options...]     e.g. -p 11,256,1021 -g 256 -r 3
#
# Defaults to the full matrix (prompts 11/256/1021 x gens 256/1024/2048, 3
# repeats): about an hour on 2 cores. Needs a quiet machine: llama.cpp's
# spinning threads collapse when a core is busy with something else.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh build >/dev/null
model=models/qwen3-0.6b
gguf=models/qwen3-0.6b-bf16.gguf
[ -f "$model/config.json" ] || build/bin/mi-mkmodel --shape 0.6b --seed 1 --out "$model"
[ -f "$gguf" ] || node tools/peer/hf2gguf.mjs "$model" "$gguf" --type bf16
threads=${MI_BENCH_THREADS:-$(nproc)}
# The KV cache type of the peer's defaults (F16), so both read the same bytes;
# a later --kv-type in "$@" wins. The JSON (with decode tokens/s by position)
# and its plot go to bench-out/.
mkdir -p bench-out
build/bin/mi-bench -m "$model" -t "$threads" --peer "$gguf" --kv-type f16 \
  --json-file bench-out/bench.json "$@"
node tools/bench/plot_decode.mjs bench-out/bench.json >bench-out/decode_by_position.svg &&
  echo "bench.sh: bench-out/bench.json, bench-out/decode_by_position.svg" >&2
