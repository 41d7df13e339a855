#!/usr/bin/env bash
# Runs every test: the Release build's ctest suite, then the tests that run
# CPU kernels once more for each lesser CPU variant this host can run, each
# libFuzzer harness for a short time (MI_FUZZ_SECONDS, default 10, one
# harness per core), then the ASan+UBSan build's ctest suite (MI_TEST_QUICK:
# the suites that say so run fewer repetitions of the same paths there;
# tests/CMakeLists.txt).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh build
ctest --test-dir build --output-on-failure -j2

# The CPU plugin picks its best variant (avx512bf16 > avx512 > avx2 >
# generic) at run time; MI_CPU_ISA_MAX=NAME makes it behave as on a host
# whose best is NAME, so each lesser variant gets the kernel, model (float64
# reference), llama.cpp-golden, TP, verifier-unit and template tests as an
# older host would run them. Left out of these reruns: tests that run no CPU
# kernel (tokenizer, loader, safetensors, CKB, GPU host/plugins/emulator
# conformance and its platform mutants (stage 1 on the emulator, held to
# float64: no CPU kernel runs), the LLM client, the server's HTTP paths,
# the hybrid's float64
# reference, checkpoints and coverage, mi-bench's smoke test: it asserts
# no figure a kernel computes), and the slow ones
# about something else (CLI errors, the verifier's model mutants, the GPU
# emulator end to end and TP, mi-gen end to end: its engines call the same
# kernels the model tests hold to float64 on every variant; the hybrid's
# plugin and engines, whose kernels test_cpu_hybrid runs on every variant).
variants=()
for isa in generic avx2 avx512 avx512bf16; do
  # a variant this host cannot run leaves the CPU plugin unsuited
  if MI_CPU_ISA=$isa build/bin/mi-run --list-plugins 2>/dev/null | grep -q '^platform  *cpu .* loaded '; then
    variants+=("$isa")
  fi
done
unset 'variants[${#variants[@]}-1]' # the best one: the run above
not_cpu='^(test_loader|test_loader_conf|test_files_and_limits|loader_mi_run_list|loader_sdk_template|test_tokenizer'
not_cpu+='|test_safetensors|test_mkmodel|test_ckb|test_gpu_host|test_gpu_plugins|gpu_conformance_emu(32|64)|gpu_platform_mutants'
not_cpu+='|test_cli_errors|test_verify_model|test_gpu_emu_e2e|test_gpu_tp|test_gen|test_gen_tp2|test_llm_client|test_llm_agents|test_llm_openai_mock'
not_cpu+='|test_serve|test_serve_openai|test_serve_features|loader_misbehave|loader_elf_truncated|core_is_model_agnostic|test_fma_peak'
not_cpu+='|test_hybrid_mkmodel|test_hybrid_reference|test_hybrid_coverage|test_hybrid_peer|test_cpu_quant'
not_cpu+='|test_gen_kv|test_gen_hybrid|test_gen_experience|test_hybrid_runtime' # whole engines / the hybrid plugin: their kernels are test_cpu_hybrid's on every variant
not_cpu+='|test_config_fields|test_evolve' # float64 search; its stage-1 units are test_verify_hybrid's
not_cpu+='|third_family|test_compose|test_mkmodel_contract|no_long_functions|test_model_glue' # mi-gen end to end as test_gen; text and files; a fake platform
not_cpu+='|test_interp|test_template|test_serve_tools|test_json_grammar|test_map_form|test_ckb_bind' # float64 / text only: no CPU kernel
not_cpu+='|test_prefix_cache' # the cache's bookkeeping; the state copies it makes are test_seq_state's on every variant
not_cpu+='|test_cpu_q8_0' # runs every variant the host has itself (isa= per case)
not_cpu+='|test_bench_smoke' # mi-bench's bookkeeping: figures present, finite and consistent with each other and config.json, no kernel's value; its kernels are test_cpu_kernels' and test_cpu_prefill's on every variant
not_cpu+='|test_gen_gguf|test_gguf_oracle' # whole engines on GGUF files, llama.cpp's oracle: their block-type kernels are test_cpu_q8_0's and test_cpu_quant's on every variant
not_cpu+='|test_gguf|test_gguf_peer|test_gguf_q8_peer|test_gguf_q4_peer|test_gguf_llama3_tok)$' # file reading and tokenizing; the f32/bf16/block-type kernels they end in are test_cpu_*'s
for isa in "${variants[@]}"; do
  echo "== CPU variant $isa (MI_CPU_ISA_MAX=$isa)"
  MI_CPU_ISA_MAX=$isa ctest --test-dir build --output-on-failure -j2 -E "$not_cpu"
done

# one harness per core: each still fuzzes MI_FUZZ_SECONDS on a core of its own
MI_FUZZ_PARALLEL=${MI_FUZZ_PARALLEL:-$(nproc)} scripts/fuzz.sh "${MI_FUZZ_SECONDS:-10}"
# -O1: ASan's own advice for usable speed (about a sixth less CPU for the
# verifier's suites than -O0); still no inlining that hides a frame.
scripts/build.sh build-asan -DCMAKE_BUILD_TYPE=Debug -DCMAKE_C_FLAGS_DEBUG="-g -O1" -DMI_SANITIZE=ON
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  LSAN_OPTIONS=suppressions="$PWD/tests/lsan.supp" \
  ctest --test-dir build-asan --output-on-failure -j2
