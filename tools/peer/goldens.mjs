#!/usr/bin/env node
// Golden greedy tokens and top-10 logprobs from llama.cpp (node-llama-cpp) for
// a random-weight Qwen3 checkpoint made by mi-mkmodel.
//
//   node tools/peer/goldens.mjs --mkmodel BUILD/bin/mi-mkmodel --shape tiny --seed 1 \
//        [--steps 32] [--out tests/goldens/tiny-seed1.json] [--check-ref] [--keep DIR]
//        [--family qwen35] [--mkmodel-extra JSON-ARRAY] [--role probe|e2e]
//
// --family qwen35 makes a Qwen3.5/3.6-style hybrid (mi-mkmodel --family
// qwen35), converted to llama.cpp's `qwen35`; its goldens go to
// tests/goldens/hybrid/ (test_hybrid_peer holds the float64 reference to
// them; test_e2e_peer's glob does not see that folder).
//
// Steps: mi-mkmodel writes the HF checkpoint (bf16) into a temp dir; hf2gguf
// converts it to an all-F32 GGUF (bf16 values widened exactly, so llama.cpp
// computes on the same weights and does not round activations to bf16);
// llama.cpp runs on the CPU with an F32 KV cache; each prompt is tokenized by
// llama.cpp (special tokens parsed) and decoded greedily for --steps steps,
// EOS ignored.
//
// Logprobs: node-llama-cpp exposes no raw logits, but with temperature 0 its
// sampler chain is greedy only, and `probabilities` is a float32 softmax of
// the full raw logit vector. We take log(p) in float64 and renormalise by the
// float64 sum of p: that cancels its float32 normaliser (~4e-4 off over a 152k
// vocabulary) and leaves only expf/rounding error (~1e-7).
//
// --check-ref also runs a float64 Qwen3 forward pass (ref_forward.mjs; Gemma
// 2's or 3's for a Gemma probe made with --mkmodel-extra) from
// the HF files, teacher-forced on llama.cpp's tokens, and records the largest
// |logprob difference| on the top-10 per case: evidence that the converter is
// right and a measure of llama.cpp's own F32 error.

import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { execFileSync } from "node:child_process";
import { fileURLToPath } from "node:url";
import { convert } from "./hf2gguf.mjs";
import { PEER, TOPK, fnv1a32File, formatGolden, parseFlags, positionsBound, runPeer } from "./peer_run.mjs";
import { RefQwen3, isGemma2Config, isGemma3Config } from "./ref_forward.mjs";

const HERE = path.dirname(fileURLToPath(import.meta.url));
const ROOT = path.resolve(HERE, "../..");

function parseArgs(argv) {
  const a = parseFlags(argv, { steps: 32, checkRef: false, dtype: "bf16", mkmodel: path.join(ROOT, "build/bin/mi-mkmodel") }, {
    "--mkmodel": ["mkmodel", String],
    "--family": ["family", String],
    "--shape": ["shape", String],
    "--seed": ["seed", Number],
    "--dtype": ["dtype", String],
    "--steps": ["steps", Number],
    "--out": ["out", String],
    "--prompts": ["prompts", String],
    "--keep": ["keep", String],
    "--check-ref": ["checkRef", null],
    "--mkmodel-extra": ["mkmodelExtra", String],
    "--role": ["role", String],
  });
  // what mi-gen --evolve reads the golden as: "probe" (the variant search's
  // oracle) or "e2e" (a candidate bundle's end-to-end check); default: by
  // the shape's name (probe-attn*)
  if (a.role !== undefined && a.role !== "probe" && a.role !== "e2e") throw new Error("--role must be probe or e2e");
  // more mi-mkmodel arguments, a JSON array of strings: a checkpoint in
  // another family's layout made by CKB variants, e.g.
  // ["--variants", "qk_norm_none,bias_qkv", "--config", "architectures=[\"Qwen2ForCausalLM\"]"]
  if (a.mkmodelExtra !== undefined) {
    const x = JSON.parse(a.mkmodelExtra);
    if (!Array.isArray(x) || !x.every((v) => typeof v === "string")) throw new Error("--mkmodel-extra must be a JSON array of strings");
    a.mkmodelExtra = x;
    // --check-ref with --mkmodel-extra: only for a Gemma 3 probe (checked
    // once the config exists, in main), the other family the reference computes
  }
  if (!a.shape || !Number.isInteger(a.seed)) throw new Error("--shape and --seed N are required");
  if (!Number.isInteger(a.steps) || a.steps < 1) throw new Error("--steps must be a positive integer");
  if (a.family !== undefined && a.family !== "qwen3" && a.family !== "qwen35") throw new Error("--family must be qwen3 or qwen35");
  if (a.family === "qwen35" && a.checkRef) throw new Error("--check-ref has no JS reference for qwen35 (test_hybrid_peer is the check)");
  a.out ??= path.join(ROOT, a.family === "qwen35" ? "tests/goldens/hybrid" : "tests/goldens", `${a.shape}-seed${a.seed}.json`);
  a.prompts ??= path.join(HERE, "prompts.json");
  return a;
}

async function main() {
  const args = parseArgs(process.argv.slice(2));
  const prompts = JSON.parse(fs.readFileSync(args.prompts, "utf8")).prompts;
  const tmp = args.keep ?? fs.mkdtempSync(path.join(os.tmpdir(), "mi-peer-"));
  const modelDir = path.join(tmp, `${args.shape}-seed${args.seed}`);
  const mkArgs = [...(args.family ? ["--family", args.family] : []), "--shape", args.shape, "--seed", String(args.seed), "--dtype", args.dtype,
    ...(args.mkmodelExtra ?? [])];
  execFileSync(args.mkmodel, [...mkArgs, "--out", modelDir], { stdio: "inherit" });
  const gguf = path.join(tmp, `${args.shape}-seed${args.seed}-f32.gguf`);
  await convert(modelDir, gguf, { type: "f32", windowReach: positionsBound(prompts, args.steps) });

  const madeCfg = JSON.parse(fs.readFileSync(path.join(modelDir, "config.json"), "utf8"));
  if (args.checkRef && args.mkmodelExtra && !isGemma3Config(madeCfg) && !isGemma2Config(madeCfg))
    throw new Error("--check-ref: the JS reference is Qwen3's (or Gemma 2's or 3's); --mkmodel-extra makes another model");
  const ref = args.checkRef ? new RefQwen3(modelDir) : null;
  const cases = await runPeer(gguf, prompts, args.steps, (c, pi, ms) => {
    const ids = c.prompt_ids, steps = c.steps;
    let msg = `case ${pi}: ${ids.length} prompt tokens, ${steps.length} steps, ${ms} ms`;
    if (ref) {
      // Teacher-forced on llama.cpp's tokens: compare the top-10 of every step.
      ref.reset();
      let err = 0, greedyMismatch = 0;
      const feed = [...ids, ...steps.map((s) => s.token_id)];
      for (let t = 0; t < ids.length + steps.length - 1; t++) {
        const lp = ref.step(feed[t], t >= ids.length - 1);
        if (!lp) continue;
        const s = steps[t - (ids.length - 1)];
        for (const [id, l] of s.top) err = Math.max(err, Math.abs(lp[id] - l));
        let best = 0;
        for (let i = 1; i < lp.length; i++) if (lp[i] > lp[best]) best = i;
        if (best !== s.token_id) greedyMismatch++;
      }
      c.ref_max_abs_err = err;
      msg += `; float64 reference: max |dlogprob| ${err.toExponential(2)}, greedy mismatches ${greedyMismatch}`;
    }
    console.error(msg);
  });

  const golden = {
    model: { shape: args.shape, seed: args.seed, ...(args.role ? { role: args.role } : {}), mkmodel_args: mkArgs, safetensors_fnv1a32: fnv1a32File(path.join(modelDir, "model.safetensors")), config_fnv1a32: fnv1a32File(path.join(modelDir, "config.json")) },
    peer: PEER,
    top_k: TOPK,
    cases,
  };
  fs.mkdirSync(path.dirname(args.out), { recursive: true });
  fs.writeFileSync(args.out, formatGolden(golden));
  console.error(`wrote ${args.out}`);
  if (!args.keep) fs.rmSync(tmp, { recursive: true, force: true });
}

main().catch((e) => { console.error(`goldens: ${e.message}`); process.exit(1); });
