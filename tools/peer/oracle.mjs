#!/usr/bin/env node
// Stage 4's oracle for any checkpoint: llama.cpp's greedy tokens and top-10
// logprobs on the contract's prompt set, for a model the verifier was given
// (not one mi-mkmodel remakes), written as a golden.
//
//   node tools/peer/oracle.mjs --model DIR|FILE.gguf --out FILE [--prompts FILE] [--steps N] [--work DIR]
//
// A folder: the checkpoint is converted to an all-F32 GGUF in the work
// folder (bf16 values widened exactly, so llama.cpp computes on the very
// same weights). A GGUF file (known by its "GGUF" magic, not its name; F32,
// F16, BF16, Q8_0, Q4_0, Q4_K, Q6_K or a mix of them): widened to an all-F32
// copy in the work folder by gguf_f32.mjs, each value dequantized exactly as
// sdk/include/mi/quant.h defines it and rounded once to f32, which is what
// MetaInfer's exact path computes on; metadata, names and order unchanged
// (general.file_type set to 0, ALL_F32). Either is then run as goldens.mjs
// runs the committed goldens (peer_run.mjs). The golden records the FNV-1a
// 32 of model.safetensors and of config.json, or of the GGUF file as given
// (gguf_fnv1a32): the verifier uses it only for a model with the same.
//
// Exit: 0 written; 3 no oracle for this model (one line saying why: stage 4
// is then N/A): llama.cpp (through hf2gguf.mjs) has no conversion for this
// architecture or variant, or a GGUF tensor has a ggml type gguf_f32.mjs
// does not widen; 1 anything else (one line), a GGUF file that is not
// well formed or that llama.cpp fails to load included.

import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { convert } from "./hf2gguf.mjs";
import { GgufError, widenToF32 } from "./gguf_f32.mjs";
import { PEER, TOPK, fnv1a32File, formatGolden, parseFlags, positionsBound, runPeer } from "./peer_run.mjs";

const HERE = path.dirname(fileURLToPath(import.meta.url));

function parseArgs(argv) {
  const a = parseFlags(argv, { steps: 32, prompts: path.join(HERE, "prompts.json") }, {
    "--model": ["model", String],
    "--out": ["out", String],
    "--prompts": ["prompts", String],
    "--steps": ["steps", Number],
    "--work": ["work", String],
  });
  if (!a.model || !a.out) throw new Error("--model DIR|FILE.gguf and --out FILE are required");
  if (!Number.isInteger(a.steps) || a.steps < 1 || a.steps > 4096) throw new Error("--steps must be an integer in 1..4096");
  return a;
}

/** Whether `p` is a file that starts with the GGUF magic. */
function isGgufFile(p) {
  let fd;
  try {
    if (!fs.statSync(p).isFile()) return false;
    fd = fs.openSync(p, "r");
    const b = Buffer.alloc(4);
    return fs.readSync(fd, b, 0, 4, 0) === 4 && b.toString("latin1") === "GGUF";
  } catch {
    return false;
  } finally {
    if (fd !== undefined) fs.closeSync(fd);
  }
}

/** runPeer, with llama.cpp's last error line kept: node-llama-cpp prints
 * llama.cpp's log through console.warn and throws a generic error when a
 * model does not load; the line llama.cpp gave is what says why. */
async function runPeerSaying(gguf, prompts, steps, onCase) {
  const warn = console.warn;
  let said = "", saidError = "";
  console.warn = (...args) => {
    // eslint-disable-next-line no-control-regex
    const text = args.map(String).join(" ").replace(/\x1b\[[0-9;]*m/g, "");
    for (const l of text.split("\n")) {
      const line = l.replace(/^\[node-llama-cpp\]\s*/, "").trim();
      if (!line) continue;
      said = line;
      if (/error/i.test(line)) saidError = line; // "llama_model_load: error loading model: unknown model architecture: 'x'"
    }
    warn(...args);
  };
  try {
    return await runPeer(gguf, prompts, steps, onCase);
  } catch (e) {
    const msg = String(e && e.message).split("\n")[0];
    const why = saidError || said;
    throw new Error(why && !msg.includes(why) ? `llama.cpp: ${msg}: ${why}` : `llama.cpp: ${msg}`);
  } finally {
    console.warn = warn;
  }
}

/** A refusal with its exit code (3: no oracle for this model, stage 4 N/A). */
class Refusal extends Error {
  constructor(message, exit) {
    super(message);
    this.exit = exit;
  }
}

/** The oracle for a GGUF file: widened to F32 in `work`, then llama.cpp. */
async function oracleGguf(a, prompts, work, t0) {
  const hash = fnv1a32File(a.model); // the file as given: what the verifier looks the golden up by
  const gguf = path.join(work, "model-f32.gguf");
  let w;
  try {
    w = widenToF32(a.model, gguf);
  } catch (e) {
    if (!(e instanceof GgufError)) throw e;
    // exit 3: a type with no exact F32 copy here; 1: a file that is not well formed
    throw new Refusal(e.exit === 3 ? `no F32 copy for llama.cpp: ${e.message}` : e.message, e.exit === 3 ? 3 : 1);
  }
  const counts = Object.entries(w.types).map(([k, v]) => `${v} ${k}`).join(", ");
  console.error(`oracle: ${a.model}: ${w.tensors} tensors (${counts}) widened to F32 in ${((Date.now() - t0) / 1000).toFixed(1)} s`);
  const tConv = Date.now();
  const cases = await runPeerSaying(gguf, prompts, a.steps, logCase);
  return {
    model: {
      source: "oracle.mjs (made on demand for this GGUF file, widened to F32)",
      gguf_fnv1a32: hash,
      gguf_tensor_types: w.types,
      seconds: { convert: (tConv - t0) / 1000, llama_cpp: (Date.now() - tConv) / 1000 },
    },
    cases,
  };
}

/** The oracle for a checkpoint folder: converted to F32 by hf2gguf.mjs, then llama.cpp. */
async function oracleFolder(a, prompts, work, t0) {
  const st = path.join(a.model, "model.safetensors"), cfg = path.join(a.model, "config.json");
  const gguf = path.join(work, "model-f32.gguf");
  try {
    await convert(a.model, gguf, { type: "f32", windowReach: positionsBound(prompts, a.steps) });
  } catch (e) {
    if (!e.userError) throw e;
    // the converter knows the dense families of hf2gguf.mjs's DENSE table,
    // the Qwen3.5/3.6 hybrid and Gemma 3, and refuses what llama.cpp's own
    // converter would not map for them
    throw new Refusal(`llama.cpp has no conversion for this checkpoint: ${e.message}`, 3);
  }
  const tConv = Date.now();
  const cases = await runPeer(gguf, prompts, a.steps, logCase);
  return {
    model: {
      source: "oracle.mjs (made on demand for this checkpoint)",
      safetensors_fnv1a32: fnv1a32File(st),
      config_fnv1a32: fnv1a32File(cfg),
      seconds: { convert: (tConv - t0) / 1000, llama_cpp: (Date.now() - tConv) / 1000 },
    },
    cases,
  };
}

function logCase(c, pi, ms) {
  console.error(`oracle: case ${pi}: ${c.prompt_ids.length} prompt tokens, ${c.steps.length} steps, ${ms} ms`);
}

async function main() {
  let a;
  try { a = parseArgs(process.argv.slice(2)); } catch (e) { console.error(`oracle: ${e.message}`); process.exit(2); }
  const t0 = Date.now();
  const gguf = isGgufFile(a.model);
  if (!gguf) {
    if (fs.existsSync(a.model) && !fs.statSync(a.model).isDirectory())
      throw new Refusal(`${a.model}: neither a checkpoint folder nor a GGUF file (it does not start with "GGUF")`, 1);
    const st = path.join(a.model, "model.safetensors");
    if (!fs.existsSync(st)) throw new Refusal(`${st}: no single model.safetensors (sharded checkpoints have no oracle yet)`, 3);
  }
  const prompts = JSON.parse(fs.readFileSync(a.prompts, "utf8")).prompts;
  const work = fs.mkdtempSync(path.join(a.work ?? os.tmpdir(), "mi-oracle-"));
  try {
    const made = await (gguf ? oracleGguf : oracleFolder)(a, prompts, work, t0);
    const golden = { model: made.model, peer: PEER, top_k: TOPK, cases: made.cases };
    const tmp = `${a.out}.tmp.${process.pid}`;
    fs.mkdirSync(path.dirname(path.resolve(a.out)), { recursive: true });
    fs.writeFileSync(tmp, formatGolden(golden));
    fs.renameSync(tmp, a.out);
    console.error(`oracle: wrote ${a.out} in ${((Date.now() - t0) / 1000).toFixed(1)} s`);
  } finally {
    fs.rmSync(work, { recursive: true, force: true });
  }
}

main().catch((e) => {
  console.error(`oracle: ${String(e && e.message).split("\n")[0]}`);
  process.exit(e instanceof Refusal ? e.exit : 1);
});
