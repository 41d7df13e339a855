#!/usr/bin/env bash
# The main job on the embedded default: build, generate a random-weight
# Qwen3 checkpoint in the real Hugging Face layout (with the real Qwen3
# tokenizer), list the plugins, and run it end to end on the CPU platform.
set -euo pipefail
cd "$(dirname "$0")/.."
shape=${MI_DEMO_SHAPE:-small}
scripts/build.sh build
model=models/qwen3-$shape
[ -f "$model/config.json" ] || build/bin/mi-mkmodel --shape "$shape" --seed 1 --out "$model"
build/bin/mi-run --list-plugins
# Generate a verified single-path engine for this model from the CKB
# (implementer -> reviewer -> verifier, stages 1-6 and a deployment run),
# then run it exactly as a deployment does.
engine=engines/qwen3-$shape-cpu-bf16-tp1
build/bin/mi-gen --model "$model" --platform cpu --dtype bf16 --tp 1 --out "$engine"
build/bin/mi-run --plugin-dir "$engine" -m "$model" -p "The capital of France is" -n 48 --temp 0 --stats
build/bin/mi-run -m "$model" -p "The capital of France is" -n 48 --temp 0 --stats
build/bin/mi-run -m "$model" --chat -p "Write a haiku about memory bandwidth." -n 48 --seed 7 --stats
