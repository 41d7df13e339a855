// llama.cpp (node-llama-cpp) on an F32 GGUF: greedy tokens and top-K
// logprobs for a prompt set, and the golden file format. Shared by
// goldens.mjs (the committed goldens of mi-mkmodel checkpoints) and
// oracle.mjs (stage 4's goldens for any checkpoint, made on demand).
//
// Logprobs: node-llama-cpp exposes no raw logits, but with temperature 0 its
// sampler chain is greedy only, and `probabilities` is a float32 softmax of
// the full raw logit vector. We take log(p) in float64 and renormalise by the
// float64 sum of p: that cancels its float32 normaliser (~4e-4 off over a 152k
// vocabulary) and leaves only expf/rounding error (~1e-7).

import fs from "node:fs";
import { importDep } from "./deps.mjs";

export const TOPK = 10;
export const PKG = "node-llama-cpp@3.21.1";
export const PEER = {
  package: PKG,
  llama_cpp: "v0.4.0 (node-llama-cpp prebuilt CPU)",
  kv: "F32",
  weights: "F32",
  flash_attention: false,
  logprobs: "float64 log-softmax of full-vocabulary probabilities, renormalised",
};

/** Command-line flags into `a` (its defaults): spec maps each flag to [key,
 * parse], parse turning the flag's value into a[key], or null for a switch
 * (a[key] = true). Throws on an unknown flag or a missing value. */
export function parseFlags(argv, a, spec) {
  for (let i = 0; i < argv.length; i++) {
    const k = argv[i];
    if (!Object.hasOwn(spec, k)) throw new Error(`unknown argument ${k}`);
    const [key, parse] = spec[k];
    if (!parse) {
      a[key] = true;
      continue;
    }
    if (i + 1 >= argv.length) throw new Error(`${k} needs a value`);
    a[key] = parse(argv[++i]);
  }
  return a;
}

/** FNV-1a 32-bit of a file, as hex: lets the C side notice a golden made from other weights or config. */
export function fnv1a32File(file) {
  // in 16 MiB reads: a GGUF file may be past Node's 2 GiB readFileSync limit
  const fd = fs.openSync(file, "r");
  const buf = Buffer.allocUnsafe(16 << 20);
  let h = 0x811c9dc5;
  try {
    for (let n; (n = fs.readSync(fd, buf, 0, buf.length, null)) > 0; )
      for (let i = 0; i < n; i++) h = Math.imul(h ^ buf[i], 0x01000193);
  } finally {
    fs.closeSync(fd);
  }
  return (h >>> 0).toString(16).padStart(8, "0");
}

/** Top-K [id, logprob] pairs (float64, renormalised) from node-llama-cpp's probability map. */
function topLogprobs(probMap, k) {
  let z = 0;
  for (const p of probMap.values()) z += p;
  const lz = Math.log(z);
  const out = [];
  for (const [id, p] of probMap) { // sorted by logit, highest first
    if (out.length === k) break;
    out.push([id, Math.log(p) - lz]);
  }
  return out;
}

/**
 * Runs llama.cpp on `gguf` for each prompt: tokenized by llama.cpp (special
 * tokens parsed; the BOS first where the file adds one), then `steps` greedy steps, EOS ignored. F32 KV cache, flash
 * attention off, the whole prompt in one batch. `onCase(case, index, ms)` is
 * called after each prompt (for --check-ref and logging). Returns the cases.
 */
/**
 * At most how many positions a runPeer of these prompts reaches: each
 * prompt token covers at least one UTF-8 byte, plus a BOS and the steps.
 * A sliding window at least this wide never bites in that run, so llama.cpp
 * attending to every position computes the windowed model there
 * (hf2gguf.mjs's windowReach).
 */
export function positionsBound(prompts, steps) {
  return Math.max(...prompts.map((p) => Buffer.byteLength(p, "utf8"))) + 1 + steps;
}

export async function runPeer(gguf, prompts, steps, onCase) {
  const { getLlama, LlamaLogLevel } = await importDep("node-llama-cpp");
  const llama = await getLlama({ gpu: false, build: "never", logLevel: LlamaLogLevel.error });
  const model = await llama.loadModel({ modelPath: gguf });
  // a prompt as llama.cpp's tools take it: the file's BOS first where it
  // says so (tokenizer.ggml.add_bos_token: Llama 3), none for Qwen
  const bos = model.tokens.shouldPrependBosToken ? [model.tokens.bos] : [];
  const tokenized = prompts.map((p) => [...bos, ...Array.from(model.tokenize(p, true))]);
  const maxLen = Math.max(...tokenized.map((t) => t.length)) + steps + 8;
  const ctxSize = Math.ceil(maxLen / 256) * 256;
  const ctx = await model.createContext({
    contextSize: ctxSize,
    batchSize: ctxSize, // whole prompt in one batch
    threads: llama.cpuMathCores, // the default oversubscribes small machines
    flashAttention: false,
    experimentalKvCacheKeyType: "F32", // the default F16 cache adds ~5e-3 logprob error
    experimentalKvCacheValueType: "F32",
  });
  const cases = [];
  for (let pi = 0; pi < prompts.length; pi++) {
    const seq = ctx.getSequence();
    const ids = tokenized[pi];
    const out = [];
    const t0 = Date.now();
    for await (const o of seq.evaluateWithMetadata(ids, { probabilities: true }, { temperature: 0, yieldEogToken: true })) {
      out.push({ token_id: o.token, top: topLogprobs(o.probabilities, TOPK) });
      if (out.length >= steps) break;
    }
    seq.dispose();
    if (out.length !== steps) throw new Error(`prompt ${pi}: only ${out.length} steps generated`);
    const c = { prompt: prompts[pi], prompt_ids: ids, completion: model.detokenize(out.map((s) => s.token_id), true), steps: out };
    if (onCase) onCase(c, pi, Date.now() - t0);
    cases.push(c);
  }
  await ctx.dispose();
  await model.dispose();
  return cases;
}

// One step per line keeps diffs of regenerated goldens readable.
export function formatGolden(g) {
  const lines = [];
  lines.push("{");
  lines.push(`  "model": ${JSON.stringify(g.model)},`);
  lines.push(`  "peer": ${JSON.stringify(g.peer)},`);
  lines.push(`  "top_k": ${g.top_k},`);
  lines.push(`  "cases": [`);
  g.cases.forEach((c, ci) => {
    lines.push("    {");
    lines.push(`      "prompt": ${JSON.stringify(c.prompt)},`);
    lines.push(`      "prompt_ids": ${JSON.stringify(c.prompt_ids)},`);
    if (c.completion !== undefined) lines.push(`      "completion": ${JSON.stringify(c.completion)},`);
    if (c.ref_max_abs_err !== undefined) lines.push(`      "ref_max_abs_err": ${c.ref_max_abs_err.toExponential(3)},`);
    lines.push(`      "steps": [`);
    c.steps.forEach((s, si) => {
      const top = "[" + s.top.map(([id, lp]) => `[${id},${lp.toPrecision(10)}]`).join(",") + "]";
      lines.push(`        {"token_id":${s.token_id},"top":${top}}${si + 1 < c.steps.length ? "," : ""}`);
    });
    lines.push("      ]");
    lines.push(`    }${ci + 1 < g.cases.length ? "," : ""}`);
  });
  lines.push("  ]");
  lines.push("}");
  return lines.join("\n") + "\n";
}
