#!/usr/bin/env node
// Stage 4's oracle for any checkpoint: llama.cpp's greedy tokens and top-10
// logprobs on the contract's prompt set, for a model folder the verifier was
// given (not one mi-mkmodel remakes), written as a golden.
//
//   node tools/peer/oracle.mjs --model DIR --out FILE [--prompts FILE] [--steps N] [--work DIR]
//
// The checkpoint is converted to an all-F32 GGUF in the work folder (bf16
// values widened exactly, so llama.cpp computes on the very same weights),
// then run as goldens.mjs runs the committed goldens (peer_run.mjs). The
// golden records the FNV-1a 32 of model.safetensors and of config.json: the
// verifier uses it only for a checkpoint with both the same.
//
// Exit: 0 written; 3 llama.cpp (through hf2gguf.mjs) has no conversion for
// this architecture or variant (one line saying which: stage 4 is then N/A);
// 1 anything else (one line).

import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { convert } from "./hf2gguf.mjs";
import { PEER, TOPK, fnv1a32File, formatGolden, parseFlags, runPeer } from "./peer_run.mjs";

const HERE = path.dirname(fileURLToPath(import.meta.url));

function parseArgs(argv) {
  const a = parseFlags(argv, { steps: 32, prompts: path.join(HERE, "prompts.json") }, {
    "--model": ["model", String],
    "--out": ["out", String],
    "--prompts": ["prompts", String],
    "--steps": ["steps", Number],
    "--work": ["work", String],
  });
  if (!a.model || !a.out) throw new Error("--model DIR and --out FILE are required");
  if (!Number.isInteger(a.steps) || a.steps < 1 || a.steps > 4096) throw new Error("--steps must be an integer in 1..4096");
  return a;
}

async function main() {
  let a;
  try { a = parseArgs(process.argv.slice(2)); } catch (e) { console.error(`oracle: ${e.message}`); process.exit(2); }
  const t0 = Date.now();
  const st = path.join(a.model, "model.safetensors"), cfg = path.join(a.model, "config.json");
  if (!fs.existsSync(st)) {
    console.error(`oracle: ${st}: no single model.safetensors (sharded checkpoints have no oracle yet)`);
    process.exit(3);
  }
  const prompts = JSON.parse(fs.readFileSync(a.prompts, "utf8")).prompts;
  const work = fs.mkdtempSync(path.join(a.work ?? os.tmpdir(), "mi-oracle-"));
  try {
    const gguf = path.join(work, "model-f32.gguf");
    try {
      await convert(a.model, gguf, { type: "f32" });
    } catch (e) {
      if (!e.userError) throw e;
      // the converter knows the dense families of hf2gguf.mjs's DENSE table,
      // the Qwen3.5/3.6 hybrid and Gemma 3, and refuses what llama.cpp's own
      // converter would not map for them
      console.error(`oracle: llama.cpp has no conversion for this checkpoint: ${e.message}`);
      process.exit(3);
    }
    const tConv = Date.now();
    const cases = await runPeer(gguf, prompts, a.steps, (c, pi, ms) =>
      console.error(`oracle: case ${pi}: ${c.prompt_ids.length} prompt tokens, ${c.steps.length} steps, ${ms} ms`));
    const golden = {
      model: {
        source: "oracle.mjs (made on demand for this checkpoint)",
        safetensors_fnv1a32: fnv1a32File(st),
        config_fnv1a32: fnv1a32File(cfg),
        seconds: { convert: (tConv - t0) / 1000, llama_cpp: (Date.now() - tConv) / 1000 },
      },
      peer: PEER,
      top_k: TOPK,
      cases,
    };
    const tmp = `${a.out}.tmp.${process.pid}`;
    fs.mkdirSync(path.dirname(path.resolve(a.out)), { recursive: true });
    fs.writeFileSync(tmp, formatGolden(golden));
    fs.renameSync(tmp, a.out);
    console.error(`oracle: wrote ${a.out} in ${((Date.now() - t0) / 1000).toFixed(1)} s`);
  } finally {
    fs.rmSync(work, { recursive: true, force: true });
  }
}

main().catch((e) => { console.error(`oracle: ${e.message}`); process.exit(1); });
