// 2- to 6-bit GGUF files made here (tools/peer/hf2gguf.mjs --type q4_k_m,
// q5_k_m, q3_k_m, q4_0, q4_1, q5_0, q5_1, q2_k, q3_k; ggml's block layouts,
// sdk/include/mi/quant.h; all computed on as stored by the CPU platform,
// and each also widened to f32 at load, MI_GGUF_WIDEN=1) are read alike
// by llama.cpp and by MetaInfer:
//  - the quantizers' error on Gaussian data is what the formats can do
//    (relative RMS error under Q4_0 0.12, Q4_K 0.09, Q5_K 0.05, Q6_K 0.025,
//    Q4_1 0.12, Q5_0 0.07, Q5_1 0.06, Q3_K 0.2, Q2_K 0.4; a
//    quantizer that wrote garbage both sides decode alike would fail here);
//  - each file holds the types it says (read from its header: a converter
//    that silently wrote F32 fails), Q4_K_M, Q5_K_M and Q3_K_M with llama-quantize's mixes;
//  - MetaInfer's loader saw those types (its -v line names each block type
//    as kept as stored, where the platform takes it, or widened to f32);
//  - mi-run and llama.cpp on the same file give the same greedy tokens
//    wherever neither side has a near tie (top-2 margin under 0.5), until
//    the two part at one; logprobs within the bounds below.
// The checkpoint is mi-mkmodel's "small" shape (hidden 256, ffn 768): every
// row a multiple of 256, so no tensor falls back (tiny's rows of 64 would
// all be Q8_0).
//   node tests/gguf/q4_peer.mjs BUILD_DIR     (exit 77: node-llama-cpp missing)
import { execFileSync, spawnSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";

import { src, peerOrSkip } from "./peer_setup.mjs";

const build = path.resolve(process.argv[2] || "build");
const { runPeer, convert, quantizers } = await peerOrSkip();
// chosen-token and top-10 logprob bounds (measured, small shape, seed 1:
// widened 0.33 / 0.67 for Q4_K_M, 0.21 / 0.40 for Q4_0; the CPU kernels at
// first 0.31 / 0.86 and 0.16 / 0.43): what llama.cpp's 8-bit activations
// (Q8_K for K-quants, Q8_0 for Q4_0) move on this random model, which
// magnifies a one-step change of a quantized value (docs/gguf.md)
const BOUND = [0.5, 1.2];
const fail = (msg) => { console.error(`FAIL: ${msg}`); process.exit(1); };

// ---- decoding, written from quant.h's statement of each layout
const f16 = (b, o) => {
  const h = b[o] | (b[o + 1] << 8), s = h >> 15 ? -1 : 1, e = (h >> 10) & 31, m = h & 1023;
  return e === 0 ? s * m * 2 ** -24 : e === 31 ? NaN : s * (1 + m / 1024) * 2 ** (e - 15);
};
// the 5-bit code of value i of a Q5_0 / Q5_1 block: nibbles at qs (Q4_0's order), bit i of the u32 at h
const q5 = (b, h, qs, i) => { const q = b[qs + (i % 16)]; return (i < 16 ? q & 15 : q >> 4) | (((b.readUInt32LE(h) >>> i) & 1) << 4); };
const DECODE = {
  Q8_0: [32, 34, (b, o, i) => f16(b, o) * ((b[o + 2 + i] << 24) >> 24)],
  Q4_0: [32, 18, (b, o, i) => { const q = b[o + 2 + (i % 16)]; return f16(b, o) * ((i < 16 ? q & 15 : q >> 4) - 8); }],
  Q4_K: [256, 144, (b, o, i) => {
    const j = i >> 5, s = (k) => b[o + 4 + k];
    const sc = j < 4 ? s(j) & 63 : (s(j + 4) & 15) | ((s(j - 4) >> 6) << 4);
    const m = j < 4 ? s(j + 4) & 63 : (s(j + 4) >> 4) | ((s(j) >> 6) << 4);
    const by = b[o + 16 + 32 * (i >> 6) + (i % 32)], q = i % 64 < 32 ? by & 15 : by >> 4;
    return f16(b, o) * sc * q - f16(b, o + 2) * m;
  }],
  Q5_K: [256, 176, (b, o, i) => { // Q4_K's scales and nibbles (at 48), bit i/32 of qh[i % 32] (at 16) the fifth bit
    const j = i >> 5, s = (k) => b[o + 4 + k];
    const sc = j < 4 ? s(j) & 63 : (s(j + 4) & 15) | ((s(j - 4) >> 6) << 4);
    const m = j < 4 ? s(j + 4) & 63 : (s(j + 4) >> 4) | ((s(j) >> 6) << 4);
    const by = b[o + 48 + 32 * (i >> 6) + (i % 32)], q = (i % 64 < 32 ? by & 15 : by >> 4) | (((b[o + 16 + (i % 32)] >> j) & 1) << 4);
    return f16(b, o) * sc * q - f16(b, o + 2) * m;
  }],
  Q4_1: [32, 20, (b, o, i) => { const q = b[o + 4 + (i % 16)]; return f16(b, o) * (i < 16 ? q & 15 : q >> 4) + f16(b, o + 2); }],
  Q5_0: [32, 22, (b, o, i) => f16(b, o) * (q5(b, o + 2, o + 6, i) - 16)],
  Q5_1: [32, 24, (b, o, i) => f16(b, o) * q5(b, o + 4, o + 8, i) + f16(b, o + 2)],
  Q2_K: [256, 84, (b, o, i) => { // value 128n+32j+l: bits 2j of qs[32n+l] (at 16), sub-block 8n+2j+l/16
    const n = i >> 7, j = (i >> 5) & 3, l = i % 32, sb = b[o + 8 * n + 2 * j + (l >> 4)];
    return f16(b, o + 80) * (sb & 15) * ((b[o + 16 + 32 * n + l] >> (2 * j)) & 3) - f16(b, o + 82) * (sb >> 4);
  }],
  Q3_K: [256, 110, (b, o, i) => { // low bits as Q2_K's (qs at 32), bit 4n+j of hmask[l] set: no -4; 6-bit scales at 96
    const n = i >> 7, j = (i >> 5) & 3, l = i % 32, s = 8 * n + 2 * j + (l >> 4), sc = (k) => b[o + 96 + k];
    const u = (s < 8 ? sc(s) & 15 : sc(s - 8) >> 4) | (((sc(8 + (s % 4)) >> (2 * (s >> 2))) & 3) << 4);
    const q = ((b[o + 32 + 32 * n + l] >> (2 * j)) & 3) - ((b[o + l] >> (4 * n + j)) & 1 ? 0 : 4);
    return f16(b, o + 108) * (u - 32) * q;
  }],
  Q6_K: [256, 210, (b, o, i) => {
    const h = i >> 7, qu = (i % 128) >> 5, l = i % 32, lo = b[o + 64 * h + l + (qu & 1) * 32];
    const q = ((qu & 2) ? lo >> 4 : lo & 15) | (((b[o + 128 + 32 * h + l] >> (2 * qu)) & 3) << 4);
    return f16(b, o + 208) * ((b[o + 192 + (i >> 4)] << 24) >> 24) * (q - 32);
  }],
};
function quantError(type, x) {
  const [qk, bb, value] = DECODE[type], b = quantizers[type](x);
  if (b.length !== (x.length / qk) * bb) fail(`${type}: ${b.length} bytes for ${x.length} values`);
  let e = 0, r = 0;
  for (let i = 0; i < x.length; i++) {
    const d = value(b, Math.floor(i / qk) * bb, i % qk) - x[i];
    e += d * d; r += x[i] * x[i];
  }
  return Math.sqrt(e / r);
}

// ---- the tensor types a GGUF file holds (its header: metadata skipped)
const GGML_NAME = {
  0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 6: "Q5_0", 7: "Q5_1", 8: "Q8_0", 10: "Q2_K", 11: "Q3_K", 12: "Q4_K", 13: "Q5_K",
  14: "Q6_K", 30: "BF16",
};
// the pure types and their general.file_type (llama_ftype; q3_k says Q3_K_S)
const PURE = { q4_0: ["Q4_0", 2], q4_1: ["Q4_1", 3], q5_0: ["Q5_0", 8], q5_1: ["Q5_1", 9], q2_k: ["Q2_K", 10], q3_k: ["Q3_K", 11] };
function ggufTypes(file) {
  const b = fs.readFileSync(file);
  let p = 0;
  const u32 = () => { p += 4; return b.readUInt32LE(p - 4); };
  const u64 = () => { p += 8; return Number(b.readBigUInt64LE(p - 8)); };
  const str = () => { const n = u64(); p += n; return b.toString("utf8", p - n, p); };
  const SZ = { 0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8 };
  const skip = (t) => { if (t === 8) str(); else p += SZ[t]; };
  if (b.toString("ascii", 0, 4) !== "GGUF") fail(`${file}: no GGUF magic`);
  p = 8;
  const nt = u64(), nkv = u64(), kv = {};
  for (let i = 0; i < nkv; i++) {
    const k = str(), t = u32();
    if (t === 9) { const at = u32(), n = u64(); for (let j = 0; j < n; j++) skip(at); }
    else if (t === 4) kv[k] = u32();
    else skip(t);
  }
  const tensors = new Map();
  for (let i = 0; i < nt; i++) {
    const name = str(), nd = u32();
    p += 8 * nd;
    tensors.set(name, GGML_NAME[u32()] || "other");
    p += 8;
  }
  return { fileType: kv["general.file_type"], tensors };
}

/** llama-quantize's Q4_K_M choice, restated here from src/llama-quant.cpp
 *  apart from the converter's (the "small" shape: 4 layers, untied). */
function expectQ4KM(name, nLayers, base = "Q4_K") {
  const more = (i) => i < Math.trunc(nLayers / 8) || i >= Math.trunc((7 * nLayers) / 8) || (i - Math.trunc(nLayers / 8)) % 3 === 2;
  if (name === "output.weight") return "Q6_K";
  const m = /^blk\.(\d+)\.(attn_v|ffn_down)\.weight$/.exec(name);
  return m && more(Number(m[1])) ? "Q6_K" : base;
}

/** llama-quantize's Q3_K_M choice, restated from src/llama-quant.cpp (a
 *  dense model, not Falcon): the output Q6_K; attn_v Q5_K on the first two
 *  layers, then Q4_K; ffn_down Q5_K below n_layer/16, then Q4_K;
 *  attn_output Q4_K; the rest Q3_K. */
function expectQ3KM(name, nLayers) {
  if (name === "output.weight") return "Q6_K";
  const m = /^blk\.(\d+)\.(attn_v|ffn_down|attn_output)\.weight$/.exec(name);
  if (!m) return "Q3_K";
  if (m[2] === "attn_v") return Number(m[1]) < 2 ? "Q5_K" : "Q4_K";
  if (m[2] === "ffn_down") return Number(m[1]) < Math.trunc(nLayers / 16) ? "Q5_K" : "Q4_K";
  return "Q4_K";
}

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "mi-q4-peer-"));
try {
  // the quantizers on 2^18 Gaussian values with a few outliers
  let seed = 7;
  const rnd = () => { seed = (Math.imul(seed, 1103515245) + 12345) >>> 0; return (seed + 0.5) / 2 ** 32; };
  const x = new Float32Array(1 << 18);
  for (let i = 0; i < x.length; i++) x[i] = 0.02 * Math.sqrt(-2 * Math.log(rnd())) * Math.cos(2 * Math.PI * rnd()) + (i % 997 ? 0 : 0.2);
  const errs = {};
  for (const [t, bound] of [["Q8_0", 0.01], ["Q6_K", 0.025], ["Q5_K", 0.05], ["Q4_K", 0.09], ["Q4_0", 0.12],
    ["Q5_1", 0.06], ["Q5_0", 0.07], ["Q4_1", 0.12], ["Q3_K", 0.2], ["Q2_K", 0.4]]) {
    errs[t] = quantError(t, x);
    if (!(errs[t] < bound)) fail(`${t} quantizer: relative RMS error ${errs[t].toFixed(4)} (bound ${bound})`);
  }

  const model = path.join(tmp, "small-1");
  execFileSync(path.join(build, "bin/mi-mkmodel"), ["--shape", "small", "--seed", "1", "--out", model]);
  const cfg = JSON.parse(fs.readFileSync(path.join(model, "config.json"), "utf8"));
  const prompts = ["Hello there", "The capital of France is", "1, 2, 3,", "Write a poem about the sea", "Once upon a time",
    "def main():", "The weather today", "Question: what is two plus two? Answer:"];
  const steps = 8;
  const lines = [];
  const types = process.env.MI_Q4_PEER_TYPES ? process.env.MI_Q4_PEER_TYPES.split(",") // one or a few, by hand
    : ["q4_k_m", "q5_k_m", "q3_k_m", "q4_0", "q4_1", "q5_0", "q5_1", "q2_k", "q3_k"];
  for (const type of types) {
    const file = path.join(tmp, `${type}.gguf`);
    const r = await convert(model, file, { type });
    if (r.notes.length) fail(`${type}: fallbacks on a shape with whole blocks: ${r.notes.join("; ")}`);
    const { fileType, tensors } = ggufTypes(file);
    const want = PURE[type] ? PURE[type][1] : { q4_k_m: 15, q5_k_m: 17, q3_k_m: 12 }[type];
    if (fileType !== want) fail(`${type}: general.file_type ${fileType}, expected ${want}`);
    const count = {};
    for (const [name, t] of tensors) {
      const norm = /norm\.weight$/.test(name);
      const exp = norm ? "F32" : PURE[type] ? PURE[type][0] : type === "q3_k_m" ? expectQ3KM(name, cfg.num_hidden_layers)
        : expectQ4KM(name, cfg.num_hidden_layers, type === "q5_k_m" ? "Q5_K" : "Q4_K");
      if (t !== exp) fail(`${type}: ${name} is ${t}, expected ${exp}`);
      count[t] = (count[t] || 0) + 1;
    }
    if (type === "q4_k_m" && !(count.Q4_K > 0 && count.Q6_K > 0)) fail(`q4_k_m: types ${JSON.stringify(count)}`);
    if (type === "q5_k_m" && !(count.Q5_K > 0 && count.Q6_K > 0)) fail(`q5_k_m: types ${JSON.stringify(count)}`);
    if (type === "q3_k_m" && !(count.Q3_K > 0 && count.Q4_K > 0 && count.Q5_K > 0 && count.Q6_K > 0))
      fail(`q3_k_m: types ${JSON.stringify(count)}`);

    // what MetaInfer's loader did with each block type (its -v line)
    const loaderLine = (stderr) => {
      const seen = /quantized tensors (.*)/.exec(stderr);
      if (!seen) fail(`${type}: mi-run -v printed no "quantized tensors" line:\n${stderr}`);
      for (const [t, n] of Object.entries(count)) {
        if (t === "F32") continue;
        const got = [...seen[1].matchAll(new RegExp(`${t.toLowerCase()} x(\\d+)`, "g"))].reduce((a, m) => a + Number(m[1]), 0);
        if (got !== n) fail(`${type}: the file has ${n} ${t} tensors, MetaInfer's loader reports ${got}: ${seen[1]}`);
      }
      return seen[1];
    };

    const peer = await runPeer(file, prompts, steps);
    /* token by token until the two part at a near tie (a top-2 margin under
     * 0.5 in either may flip), after which their contexts differ */
    /* one mi-run for the four prompts (--prompts: each a fresh sequence, as
     * stage 4's deployed run uses it): one load of the file and the
     * tokenizer, not four (most of a run under the sanitizers) */
    const promptsFile = path.join(tmp, "prompts.jsonl");
    fs.writeFileSync(promptsFile, prompts.map((p) => JSON.stringify(p)).join("\n") + "\n");
    const compare = (env) => {
      let worst = 0, worst10 = 0, compared = 0, parted = 0;
      const r = spawnSync(path.join(build, "bin/mi-run"), ["-m", file, "--prompts", promptsFile, "-n", String(steps), "--temp", "0",
        "--json", "--top-logprobs", "10", "--ignore-eos", "-t", "2", "-v"], { encoding: "utf8", env: { ...process.env, ...env } });
      if (r.status !== 0) fail(`${type}: mi-run exit ${r.status}: ${r.stderr}`);
      const loaded = loaderLine(r.stderr);
      const byPrompt = prompts.map(() => []);
      let at = -1;
      for (const l of r.stdout.trim().split("\n")) {
        const j = JSON.parse(l);
        if ("prompt_index" in j) at = j.prompt_index;
        else if ("token_id" in j) byPrompt[at].push(j);
      }
      for (let i = 0; i < prompts.length; i++) {
        const ours = byPrompt[i];
        if (ours.length !== steps) fail(`${type}: mi-run --prompts gave ${ours.length} steps for prompt ${i}, expected ${steps}`);
        for (let s = 0; s < steps; s++) {
          const o = ours[s], t = peer[i].steps[s];
          const margin = Math.min(o.top_logprobs[0][1] - o.top_logprobs[1][1], t.top[0][1] - t.top[1][1]);
          if (process.env.VERBOSE) console.log(`${type} p${i} s${s}: ours ${o.token_id} ${o.logprob.toFixed(3)} theirs ${t.token_id} ${t.top[0][1].toFixed(3)} margin ${margin.toFixed(3)}`);
          if (o.token_id !== t.token_id) {
            if (margin >= 0.5) fail(`${type}, prompt ${i} step ${s}: MetaInfer ${o.token_id} vs llama.cpp ${t.token_id} (top-2 margin ${margin.toFixed(3)})`);
            parted++;
            break;
          }
          compared++;
          worst = Math.max(worst, Math.abs(o.logprob - t.top[0][1]));
          const theirs = new Map(t.top);
          for (const [id, lp] of o.top_logprobs) if (theirs.has(id)) worst10 = Math.max(worst10, Math.abs(lp - theirs.get(id)));
        }
      }
      const what = `${type}${env.MI_GGUF_WIDEN ? " widened" : ""}`;
      /* this random model has many near ties: a third of the steps at least */
      if (compared < (prompts.length * steps) / 3) fail(`${what}: only ${compared} steps compared before the two parted at near ties`);
      if (!(worst < BOUND[0])) fail(`${what}: chosen-token logprobs differ by ${worst.toFixed(4)} (bound ${BOUND[0]})`);
      if (!(worst10 < BOUND[1])) fail(`${what}: top-10 logprobs differ by ${worst10.toFixed(4)} (bound ${BOUND[1]})`);
      return `(${loaded}): ${compared} of ${prompts.length * steps} greedy steps identical, ${parted} parting at a near tie; max |logprob diff| ` +
        `${worst.toFixed(4)}, over both top-10s ${worst10.toFixed(4)} (bounds ${BOUND.join(" / ")})`;
    };
    lines.push(`  ${type} (${(fs.statSync(file).size / 1e6).toFixed(1)} MB; ${Object.entries(count).map(([k, n]) => `${n} ${k}`).join(", ")}):`);
    const dflt = compare({});
    lines.push(`    default ${dflt}`);
    /* where the platform keeps them, the widened (exact) path too; under
     * MI_TEST_QUICK (the sanitizer preset, where each mi-run is several
     * times slower) for Q4_K_M alone: the widening is one loader path for
     * every type, which the Release run holds type by type */
    if (/kept/.test(dflt) && (!process.env.MI_TEST_QUICK || type === "q4_k_m"))
      lines.push(`    MI_GGUF_WIDEN=1 ${compare({ MI_GGUF_WIDEN: "1" })}`);
  }
  console.log(`quantizers, relative RMS error on Gaussian data: ${Object.entries(errs).map(([k, e]) => `${k} ${e.toFixed(4)}`).join(", ")}`);
  console.log("against llama.cpp on the same file:");
  for (const l of lines) console.log(l);
  console.log("1 passed, 0 failed");
} finally {
  fs.rmSync(tmp, { recursive: true, force: true });
}
