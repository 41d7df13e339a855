#!/usr/bin/env node
// HF checkpoint directory -> GGUF v3 file for llama.cpp: the dense families
// of DENSE below (Qwen3 -> arch "qwen3", Qwen2 -> "qwen2", Llama and Mistral
// -> "llama", q/k permuted, Granite -> "granite", llama's plus four scales,
// Phi-3 -> "phi3", q/k/v and gate/up fused, StableLM -> "stablelm",
// SmolLM3 -> "smollm3", OLMo 2 -> "olmo2"), a Qwen3.5/3.6-style hybrid
// (Qwen3_5ForCausalLM) -> arch "qwen35", Gemma 3 text
// (Gemma3ForCausalLM / gemma3_text) -> arch "gemma3" (convertGemma3), or
// Gemma 2 (Gemma2ForCausalLM) -> arch "gemma2" (convertGemma2).
//
//   node tools/peer/hf2gguf.mjs MODEL_DIR OUT.gguf [--type f32|bf16|q8_0|q4_0|...|q3_k_m|q4_k_m|q5_k_m]
//
// --type f32 (default): every tensor F32. bf16/f16 source values are widened
//   exactly, so llama.cpp computes on the very same weights as MetaInfer and
//   does not round activations to bf16 (it does with BF16 weights).
// --type bf16: 2-D weights BF16 (round-to-nearest-even from f32 sources),
//   1-D norm weights F32, as llama.cpp's own converter does; for speed runs.
// --type q8_0: 2-D weights Q8_0 (blocks of 32 along a row: an f16 scale
//   amax/127 and 32 int8, as ggml defines it), 1-D weights F32: a quantized
//   file made here, for MetaInfer and llama.cpp to read alike (every family
//   converted here: a tensor the conversion rewrites, llama's permuted q/k or
//   qwen35's reordered value heads, is rewritten in f32, then quantized;
//   qwen35's conv1d stays F32 as llama-quantize keeps it).
// --type q4_0 | q4_1 | q5_0 | q5_1 | q2_k | q3_k | q4_k | q5_k | q6_k: every
//   2-D weight in that ggml block type
//   (as llama-quantize --pure would), 1-D F32 (the same families). --type
//   q4_k_m | q5_k_m: llama-quantize's mixes (Q6_K for the output and for
//   attn_v/ffn_down on some layers, a fused attn_qkv one step up (Q5_K /
//   Q6_K), Q4_K / Q5_K elsewhere: pickType). --type q3_k_m: llama-quantize's
//   Q3_K_M mix (Q6_K output; attn_v Q5_K on the first two attention
//   layers, then Q4_K; ffn_down Q5_K on the first n_layer/16 layers, then
//   Q4_K; attn_output and a fused attn_qkv Q4_K; Q3_K elsewhere). How each type's scales and
//   codes are chosen: the quantize* functions and docs/gguf.md. A row that
//   is not whole blocks falls back (pickType), and the tool says so.
//
// Follows llama.cpp's convert_hf_to_gguf.py (Qwen3Model -> Qwen2Model ->
// TextModel, _set_vocab_gpt2, gguf-py SpecialVocab) as read in its source;
// nothing is copied. Qwen3 q_proj/k_proj are NOT permuted (only the llama
// architecture does that); shapes are reversed (GGUF ne[0] is innermost).

import fs from "node:fs";
import path from "node:path";
import { pathToFileURL } from "node:url";
import { GgufWriter, GGML_TYPE, GGML_BLOCK } from "./gguf_writer.mjs";
import { spmVocab } from "../node/spm_gguf.mjs";

function die(msg) {
  const e = new Error(msg);
  e.userError = true;
  throw e;
}

function readJson(file) {
  let text;
  try { text = fs.readFileSync(file, "utf8"); } catch (e) { die(`${file}: cannot read (${e.code || e.message})`); }
  try { return JSON.parse(text); } catch (e) { die(`${file}: invalid JSON (${e.message})`); }
}

// ---------------------------------------------------------------- safetensors

const ST_DTYPE_SIZE = { BF16: 2, F16: 2, F32: 4 };

/** Returns Map name -> {file, dtype, shape, start, end} (absolute file offsets). */
function readSafetensorsIndex(dir) {
  const single = path.join(dir, "model.safetensors");
  const indexFile = path.join(dir, "model.safetensors.index.json");
  let files;
  if (fs.existsSync(single)) files = [single];
  else if (fs.existsSync(indexFile)) {
    const idx = readJson(indexFile);
    if (!idx.weight_map || typeof idx.weight_map !== "object") die(`${indexFile}: no weight_map`);
    files = [...new Set(Object.values(idx.weight_map))].map((f) => path.join(dir, f));
  } else die(`${dir}: neither model.safetensors nor model.safetensors.index.json`);

  const out = new Map();
  for (const file of files) {
    let fd;
    try { fd = fs.openSync(file, "r"); } catch (e) { die(`${file}: cannot open (${e.code})`); }
    try {
      const size = fs.fstatSync(fd).size;
      const lenBuf = Buffer.alloc(8);
      if (size < 8 || fs.readSync(fd, lenBuf, 0, 8, 0) !== 8) die(`${file}: too short for a safetensors header`);
      const hlen = Number(lenBuf.readBigUInt64LE(0));
      if (hlen <= 0 || 8 + hlen > size || hlen > 1 << 30) die(`${file}: bad header length ${hlen}`);
      const hbuf = Buffer.alloc(hlen);
      fs.readSync(fd, hbuf, 0, hlen, 8);
      let header;
      try { header = JSON.parse(hbuf.toString("utf8")); } catch (e) { die(`${file}: header is not JSON (${e.message})`); }
      const base = 8 + hlen;
      for (const [name, info] of Object.entries(header)) {
        if (name === "__metadata__") continue;
        const { dtype, shape, data_offsets: off } = info;
        if (!(dtype in ST_DTYPE_SIZE)) die(`${file}: tensor ${name} has unsupported dtype ${dtype}`);
        const nel = shape.reduce((a, b) => a * b, 1);
        if (!Array.isArray(off) || off[1] - off[0] !== nel * ST_DTYPE_SIZE[dtype] || base + off[1] > size)
          die(`${file}: tensor ${name} has inconsistent data_offsets`);
        if (out.has(name)) die(`${file}: tensor ${name} appears in two files`);
        out.set(name, { file, dtype, shape, start: base + off[0], end: base + off[1] });
      }
    } finally {
      fs.closeSync(fd);
    }
  }
  return out;
}

// f16 bits -> f32 bits (exact; handles subnormals, inf, nan).
function f16BitsToF32Bits(h) {
  const sign = (h & 0x8000) << 16;
  let exp = (h >> 10) & 0x1f;
  let mant = h & 0x3ff;
  if (exp === 0x1f) return (sign | 0x7f800000 | (mant << 13)) >>> 0;
  if (exp === 0) {
    if (mant === 0) return sign >>> 0;
    exp = 1;
    while ((mant & 0x400) === 0) { mant <<= 1; exp--; }
    mant &= 0x3ff;
  }
  return (sign | ((exp + 112) << 23) | (mant << 13)) >>> 0;
}

// f32 bits -> bf16 bits, round to nearest even; NaN stays a quiet NaN.
function f32BitsToBf16Bits(u) {
  if ((u & 0x7fffffff) > 0x7f800000) return ((u >>> 16) | 0x40) & 0xffff;
  return ((u + 0x7fff + ((u >>> 16) & 1)) >>> 16) & 0xffff;
}

// f32 value -> f16 bits, round to nearest even (subnormals, overflow to inf).
const F32V = new Float32Array(1), U32V = new Uint32Array(F32V.buffer);
function f32ToF16Bits(x) {
  F32V[0] = x;
  const u = U32V[0], sign = (u >>> 16) & 0x8000, exp = (u >>> 23) & 0xff, man = u & 0x7fffff;
  if (exp === 0xff) return sign | 0x7c00 | (man ? 0x200 : 0);
  let e = exp - 127 + 15;
  if (e >= 0x1f) return sign | 0x7c00;
  if (e <= 0) {
    if (e < -10) return sign;
    const m = man | 0x800000, shift = 14 - e, half = 1 << (shift - 1);
    let r = m >>> shift;
    const rest = m & ((1 << shift) - 1);
    if (rest > half || (rest === half && (r & 1))) r++;
    return sign | r;
  }
  let r = (e << 10) | (man >>> 13);
  const rest = man & 0x1fff;
  if (rest > 0x1000 || (rest === 0x1000 && (r & 1))) r++;
  return sign | r;
}

/** Q8_0 (ggml's definition): per block of 32, d = amax / 127 stored as f16,
 *  q = round(x / d) (half away from zero, in f32 as ggml computes it). */
function quantizeQ8_0(vals) {
  const nb = vals.length / 32, out = Buffer.alloc(nb * 34);
  for (let b = 0; b < nb; b++) {
    let amax = 0;
    for (let j = 0; j < 32; j++) amax = Math.max(amax, Math.abs(vals[b * 32 + j]));
    const d = Math.fround(amax / 127), id = d ? Math.fround(1 / d) : 0;
    out.writeUInt16LE(f32ToF16Bits(d), b * 34);
    for (let j = 0; j < 32; j++) {
      const v = Math.fround(vals[b * 32 + j] * id);
      out.writeInt8(Math.sign(v) * Math.round(Math.abs(v)), b * 34 + 2 + j);
    }
  }
  return out;
}

const TYPE_NAME = {
  0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 6: "Q5_0", 7: "Q5_1", 8: "Q8_0", 10: "Q2_K", 11: "Q3_K", 12: "Q4_K", 13: "Q5_K",
  14: "Q6_K", 30: "BF16",
};

/** The value an f16 holds (for quantizing against a stored, rounded scale). */
function f16Value(bits) {
  U32V[0] = f16BitsToF32Bits(bits);
  return F32V[0];
}

/** Q4_0, llama.cpp's reference choice: per block of 32, d = m / -8 where m
 *  is the value of largest magnitude (sign kept), so m itself is code 0;
 *  q = clamp(floor(x/d + 8.5), 0, 15). The codes are taken against the f16
 *  d as stored (llama.cpp divides by the unrounded one), so each value is
 *  the nearest the stored block can give within the code range. */
function quantizeQ4_0(vals) {
  const nb = vals.length / 32, out = Buffer.alloc(nb * 18);
  for (let b = 0; b < nb; b++) {
    const x = b * 32, o = b * 18;
    let amax = 0, max = 0;
    for (let j = 0; j < 32; j++) {
      const v = vals[x + j], a = Math.abs(v);
      if (a > amax) { amax = a; max = v; }
    }
    const hb = f32ToF16Bits(max / -8), d = f16Value(hb), id = d ? 1 / d : 0;
    out[o] = hb & 255; out[o + 1] = hb >> 8;
    for (let j = 0; j < 16; j++) {
      const lo = Math.min(15, Math.max(0, Math.floor(vals[x + j] * id + 8.5)));
      const hi = Math.min(15, Math.max(0, Math.floor(vals[x + 16 + j] * id + 8.5)));
      out[o + 2 + j] = lo | (hi << 4);
    }
  }
  return out;
}

/** One sub-block's affine fit x ~ a*q + b, q in 0..qmax, a >= 0, b <= 0 (Q4_K
 *  stores -b as an unsigned min). Start from the range [min(0, lo), hi],
 *  then twice: codes to the nearest, then (a, b) by least squares on those
 *  codes (b clamped to 0 if the fit wants it positive). Each step cannot
 *  raise the squared error: nearest-in-range codes are optimal for a given
 *  (a, b), and the least-squares (a, b) optimal for given codes. fit[0] = a,
 *  fit[1] = -b. */
function fitAffine(vals, x, n, qmax, fit) {
  let lo = 0, hi = -Infinity;
  for (let j = 0; j < n; j++) { const v = vals[x + j]; if (v < lo) lo = v; if (v > hi) hi = v; }
  let a = (hi - lo) / qmax, b = lo;
  for (let it = 0; it < 2 && a > 0; it++) {
    const ia = 1 / a;
    let sq = 0, sqq = 0, sx = 0, sxq = 0;
    for (let j = 0; j < n; j++) {
      const v = vals[x + j];
      const q = Math.min(qmax, Math.max(0, Math.round((v - b) * ia)));
      sq += q; sqq += q * q; sx += v; sxq += v * q;
    }
    const det = n * sqq - sq * sq;
    if (det <= 0) break; // every code equal: the range fit stands
    let na = (n * sxq - sq * sx) / det, nb = (sx - na * sq) / n;
    if (nb > 0) { nb = 0; na = sxq / sqq; }
    if (!(na > 0)) break;
    a = na; b = nb;
  }
  fit[0] = a > 0 ? a : 0;
  fit[1] = -b;
}

/** Q4_K (qmax 15) and Q5_K (qmax 31): per sub-block of 32 an affine fit
 *  (fitAffine); the 8 scales and 8 mins then quantized to 6 bits against
 *  the super-block's d = max scale/63 and dmin = max min/63 (f16, rounded to
 *  nearest); the codes taken against those stored values:
 *  q = clamp(round((x + dmin*m)/(d*sc)), 0, qmax). Q4_K's nibbles at byte
 *  16; Q5_K's at 48, bit j of qh[l] (bytes 16..47) the fifth bit of value
 *  32j + l (quant.h's mi_q4_k_code / mi_q5_k_code). */
function quantizeK(vals, qmax) {
  const five = qmax > 15, bb = five ? 176 : 144, qs = five ? 48 : 16;
  const nb = vals.length / 256, out = Buffer.alloc(nb * bb);
  const A = new Float64Array(8), M = new Float64Array(8), fit = new Float64Array(2);
  const sc = new Uint8Array(8), mn = new Uint8Array(8), L = new Uint8Array(256);
  for (let b = 0; b < nb; b++) {
    const x = b * 256, o = b * bb;
    let amax = 0, mmax = 0;
    for (let j = 0; j < 8; j++) {
      fitAffine(vals, x + 32 * j, 32, qmax, fit);
      A[j] = fit[0]; M[j] = fit[1];
      if (fit[0] > amax) amax = fit[0];
      if (fit[1] > mmax) mmax = fit[1];
    }
    const hd = f32ToF16Bits(amax / 63), hm = f32ToF16Bits(mmax / 63);
    const d = f16Value(hd), dmin = f16Value(hm);
    for (let j = 0; j < 8; j++) {
      sc[j] = d ? Math.min(63, Math.round(A[j] / d)) : 0;
      mn[j] = dmin ? Math.min(63, Math.round(M[j] / dmin)) : 0;
      const ds = d * sc[j], dm = dmin * mn[j], id = ds ? 1 / ds : 0;
      for (let l = 0; l < 32; l++)
        L[32 * j + l] = Math.min(qmax, Math.max(0, Math.round((vals[x + 32 * j + l] + dm) * id)));
    }
    out[o] = hd & 255; out[o + 1] = hd >> 8; out[o + 2] = hm & 255; out[o + 3] = hm >> 8;
    for (let j = 0; j < 4; j++) { // the 12 scale bytes, as quant.h's mi_q4_k_scale_min reads them
      out[o + 4 + j] = sc[j] | ((sc[j + 4] >> 4) << 6);
      out[o + 8 + j] = mn[j] | ((mn[j + 4] >> 4) << 6);
      out[o + 12 + j] = (sc[j + 4] & 15) | ((mn[j + 4] & 15) << 4);
    }
    if (five)
      for (let l = 0; l < 32; l++) {
        let h = 0;
        for (let j = 0; j < 8; j++) h |= (L[32 * j + l] >> 4) << j;
        out[o + 16 + l] = h;
      }
    for (let c = 0; c < 4; c++)
      for (let l = 0; l < 32; l++) out[o + qs + 32 * c + l] = (L[64 * c + l] & 15) | ((L[64 * c + 32 + l] & 15) << 4);
  }
  return out;
}
const quantizeQ4_K = (vals) => quantizeK(vals, 15);
const quantizeQ5_K = (vals) => quantizeK(vals, 31);

/** The 16 sub-blocks of 16 values at x, each a symmetric scale for codes
 *  -half..half-1 (Q6_K: 32, Q3_K: 4): s = M / -half (M the value of
 *  largest magnitude, sign kept: it becomes code -half), refitted once by
 *  least squares on its codes (which cannot raise the error), into S[16].
 *  Returns the scale of largest magnitude (sign kept). */
function subScales(vals, x, half, S) {
  let smax = 0, sabs = 0;
  for (let s = 0; s < 16; s++) {
    const y = x + 16 * s;
    let amax = 0, max = 0;
    for (let j = 0; j < 16; j++) { const v = vals[y + j], a = Math.abs(v); if (a > amax) { amax = a; max = v; } }
    let sc = max / -half;
    if (sc) {
      const is = 1 / sc;
      let sxc = 0, scc = 0;
      for (let j = 0; j < 16; j++) {
        const c = Math.min(half - 1, Math.max(-half, Math.round(vals[y + j] * is)));
        sxc += vals[y + j] * c; scc += c * c;
      }
      if (scc > 0 && sxc / scc) sc = sxc / scc;
    }
    S[s] = sc;
    if (Math.abs(sc) > sabs) { sabs = Math.abs(sc); smax = sc; }
  }
  return smax;
}

/** Q6_K: per sub-block of 16 a scale s = m / -32 (m the value of largest
 *  magnitude, sign kept: it becomes code 0), refitted once by least squares
 *  on its codes (which cannot raise the error); the 16 scales quantized to
 *  int8 against d = S / -128 (S the scale of largest magnitude; f16), and
 *  the codes taken against d*scale as stored: q = clamp(round(x/(d*sc)) + 32, 0, 63). */
function quantizeQ6_K(vals) {
  const nb = vals.length / 256, out = Buffer.alloc(nb * 210);
  const S = new Float64Array(16), L = new Uint8Array(256);
  for (let b = 0; b < nb; b++) {
    const x = b * 256, o = b * 210;
    const smax = subScales(vals, x, 32, S);
    const hd = f32ToF16Bits(smax / -128), d = f16Value(hd);
    for (let s = 0; s < 16; s++) {
      const ls = d ? Math.min(127, Math.max(-128, Math.round(S[s] / d))) : 0;
      out[o + 192 + s] = ls & 255;
      const ds = d * ls, id = ds ? 1 / ds : 0;
      for (let j = 0; j < 16; j++)
        L[16 * s + j] = Math.min(63, Math.max(0, Math.round(vals[x + 16 * s + j] * id) + 32));
    }
    for (let h = 0; h < 2; h++) // quant.h's mi_q6_k_code, inverted
      for (let l = 0; l < 32; l++) {
        const q1 = L[128 * h + l], q2 = L[128 * h + l + 32], q3 = L[128 * h + l + 64], q4 = L[128 * h + l + 96];
        out[o + 64 * h + l] = (q1 & 15) | ((q3 & 15) << 4);
        out[o + 64 * h + l + 32] = (q2 & 15) | ((q4 & 15) << 4);
        out[o + 128 + 32 * h + l] = (q1 >> 4) | ((q2 >> 4) << 2) | ((q3 >> 4) << 4) | ((q4 >> 4) << 6);
      }
    out[o + 208] = hd & 255; out[o + 209] = hd >> 8;
  }
  return out;
}

/** Q4_1 (qmax 15) and Q5_1 (qmax 31), llama.cpp's reference choice: per
 *  block of 32, m = the minimum, d = (max - m) / qmax, both stored as f16;
 *  the codes taken against the stored values: q = clamp(round((x - m)/d)).
 *  Q5_0: d = M / -16 (M the value of largest magnitude, sign kept: code 0),
 *  q = clamp(round(x/d) + 16, 0, 31). Layouts: quant.h (nibbles as Q4_0's,
 *  the fifth bits in a little-endian u32 before them). */
function quantizeLegacy(vals, five, affine) {
  const bb = 2 + (affine ? 2 : 0) + (five ? 4 : 0) + 16, qmax = five ? 31 : 15;
  const nb = vals.length / 32, out = Buffer.alloc(nb * bb), L = new Uint8Array(32);
  for (let b = 0; b < nb; b++) {
    const x = b * 32, o = b * bb;
    let lo = Infinity, hi = -Infinity, amax = 0, max = 0;
    for (let j = 0; j < 32; j++) {
      const v = vals[x + j];
      if (v < lo) lo = v;
      if (v > hi) hi = v;
      if (Math.abs(v) > amax) { amax = Math.abs(v); max = v; }
    }
    const hd = f32ToF16Bits(affine ? (hi - lo) / qmax : max / -16), d = f16Value(hd), id = d ? 1 / d : 0;
    const hm = affine ? f32ToF16Bits(lo) : 0, m = affine ? f16Value(hm) : 0;
    for (let j = 0; j < 32; j++)
      L[j] = Math.min(qmax, Math.max(0, Math.round((vals[x + j] - m) * id) + (affine ? 0 : 16)));
    out.writeUInt16LE(hd, o);
    if (affine) out.writeUInt16LE(hm, o + 2);
    let p = o + (affine ? 4 : 2);
    if (five) {
      let qh = 0;
      for (let j = 0; j < 32; j++) qh |= (L[j] >> 4) << j;
      out.writeUInt32LE(qh >>> 0, p);
      p += 4;
    }
    for (let j = 0; j < 16; j++) out[p + j] = (L[j] & 15) | ((L[j + 16] & 15) << 4);
  }
  return out;
}

/** Q2_K: per sub-block of 16 an affine fit with codes 0..3 (fitAffine); the
 *  16 scales and mins quantized to 4 bits against d = max scale/15 and
 *  dmin = max min/15 (f16); the codes against those stored values:
 *  q = clamp(round((x + dmin*m)/(d*sc)), 0, 3). Layout: quant.h. */
function quantizeQ2_K(vals) {
  const nb = vals.length / 256, out = Buffer.alloc(nb * 84);
  const A = new Float64Array(16), M = new Float64Array(16), fit = new Float64Array(2), L = new Uint8Array(256);
  for (let b = 0; b < nb; b++) {
    const x = b * 256, o = b * 84;
    let amax = 0, mmax = 0;
    for (let s = 0; s < 16; s++) {
      fitAffine(vals, x + 16 * s, 16, 3, fit);
      A[s] = fit[0]; M[s] = fit[1];
      amax = Math.max(amax, fit[0]); mmax = Math.max(mmax, fit[1]);
    }
    const hd = f32ToF16Bits(amax / 15), hm = f32ToF16Bits(mmax / 15), d = f16Value(hd), dmin = f16Value(hm);
    for (let s = 0; s < 16; s++) {
      const sc = d ? Math.min(15, Math.round(A[s] / d)) : 0, mn = dmin ? Math.min(15, Math.round(M[s] / dmin)) : 0;
      out[o + s] = sc | (mn << 4);
      const ds = d * sc, dm = dmin * mn, id = ds ? 1 / ds : 0;
      for (let l = 0; l < 16; l++) L[16 * s + l] = Math.min(3, Math.max(0, Math.round((vals[x + 16 * s + l] + dm) * id)));
    }
    for (let n = 0; n < 2; n++)
      for (let l = 0; l < 32; l++) {
        let q = 0;
        for (let j = 0; j < 4; j++) q |= L[128 * n + 32 * j + l] << (2 * j);
        out[o + 16 + 32 * n + l] = q;
      }
    out.writeUInt16LE(hd, o + 80); out.writeUInt16LE(hm, o + 82);
  }
  return out;
}

/** Q3_K: per sub-block of 16 a scale s = M / -4 (M the value of largest
 *  magnitude, sign kept: code -4), refitted once by least squares on its
 *  codes; the 16 scales quantized to 6-bit signed (-32..31) against
 *  d = S / -32 (S the scale of largest magnitude; f16), the codes against
 *  d*scale as stored: q = clamp(round(x/(d*sc)), -4, 3). Layout: quant.h
 *  (mi_q3_k_scale's packing inverted). */
function quantizeQ3_K(vals) {
  const nb = vals.length / 256, out = Buffer.alloc(nb * 110);
  const S = new Float64Array(16), L = new Uint8Array(256), U = new Uint8Array(16);
  for (let b = 0; b < nb; b++) {
    const x = b * 256, o = b * 110;
    const smax = subScales(vals, x, 4, S);
    const hd = f32ToF16Bits(smax / -32), d = f16Value(hd);
    for (let s = 0; s < 16; s++) {
      const ls = d ? Math.min(31, Math.max(-32, Math.round(S[s] / d))) : 0;
      U[s] = ls + 32;
      const ds = d * ls, id = ds ? 1 / ds : 0;
      for (let l = 0; l < 16; l++) L[16 * s + l] = Math.min(3, Math.max(-4, Math.round(vals[x + 16 * s + l] * id))) + 4;
    }
    for (let l = 0; l < 32; l++) { // hmask: bit 4n+j of byte l, the code's bit 2 (set: q >= 0)
      let h = 0;
      for (let n = 0; n < 2; n++) for (let j = 0; j < 4; j++) h |= (L[128 * n + 32 * j + l] >> 2) << (4 * n + j);
      out[o + l] = h;
    }
    for (let n = 0; n < 2; n++)
      for (let l = 0; l < 32; l++) {
        let q = 0;
        for (let j = 0; j < 4; j++) q |= (L[128 * n + 32 * j + l] & 3) << (2 * j);
        out[o + 32 + 32 * n + l] = q;
      }
    for (let k = 0; k < 8; k++) out[o + 96 + k] = (U[k] & 15) | ((U[k + 8] & 15) << 4);
    for (let k = 0; k < 4; k++)
      out[o + 104 + k] = (U[k] >> 4) | ((U[k + 4] >> 4) << 2) | ((U[k + 8] >> 4) << 4) | ((U[k + 12] >> 4) << 6);
    out.writeUInt16LE(hd, o + 108);
  }
  return out;
}

function quantizeF16(vals) {
  const o = new Uint16Array(vals.length);
  for (let i = 0; i < vals.length; i++) o[i] = f32ToF16Bits(vals[i]);
  return Buffer.from(o.buffer);
}

const quantizeQ4_1 = (vals) => quantizeLegacy(vals, false, true);
const quantizeQ5_0 = (vals) => quantizeLegacy(vals, true, false);
const quantizeQ5_1 = (vals) => quantizeLegacy(vals, true, true);
const QUANTIZE = {
  1: quantizeF16, 2: quantizeQ4_0, 3: quantizeQ4_1, 6: quantizeQ5_0, 7: quantizeQ5_1, 8: quantizeQ8_0, 10: quantizeQ2_K,
  11: quantizeQ3_K, 12: quantizeQ4_K, 13: quantizeQ5_K, 14: quantizeQ6_K,
};

/** count source values in buf (F32, F16 or BF16) as a Float32Array of their own. */
function sourceF32(buf, n, dtype) {
  const count = n / ST_DTYPE_SIZE[dtype];
  if (dtype === "F32") return new Float32Array(buf.buffer.slice(buf.byteOffset, buf.byteOffset + n));
  const o = new Uint32Array(count);
  const inp = new Uint16Array(buf.buffer, buf.byteOffset, count);
  if (dtype === "BF16") for (let i = 0; i < count; i++) o[i] = inp[i] << 16;
  else for (let i = 0; i < count; i++) o[i] = f16BitsToF32Bits(inp[i]);
  return new Float32Array(o.buffer);
}

const CHUNK = 1 << 24; // bytes of source read at a time

/** Stream one source tensor into fd at `at`, converted to ggml type `dst`. Returns bytes written. */
function copyConverted(src, dst, fd, at) {
  const sfd = fs.openSync(src.file, "r");
  let written = 0;
  try {
    const esz = ST_DTYPE_SIZE[src.dtype];
    const total = src.end - src.start;
    const buf = Buffer.alloc(Math.min(CHUNK, total));
    for (let pos = 0; pos < total; pos += buf.length) {
      const n = Math.min(buf.length, total - pos);
      const got = fs.readSync(sfd, buf, 0, n, src.start + pos);
      if (got !== n) die(`${src.file}: short read`);
      const count = n / esz;
      let out;
      if (dst === GGML_TYPE.F32) {
        if (src.dtype === "F32") out = buf.subarray(0, n);
        else out = Buffer.from(sourceF32(buf, n, src.dtype).buffer);
      } else if (dst === GGML_TYPE.BF16) {
        if (src.dtype === "BF16") out = buf.subarray(0, n);
        else {
          const o = new Uint16Array(count);
          if (src.dtype === "F32") {
            const inp = new Uint32Array(buf.buffer, buf.byteOffset, count);
            for (let i = 0; i < count; i++) o[i] = f32BitsToBf16Bits(inp[i]);
          } else {
            const inp = new Uint16Array(buf.buffer, buf.byteOffset, count);
            for (let i = 0; i < count; i++) o[i] = f32BitsToBf16Bits(f16BitsToF32Bits(inp[i]));
          }
          out = Buffer.from(o.buffer);
        }
      } else if (QUANTIZE[dst]) {
        // a chunk holds whole blocks: CHUNK / 4 is a multiple of 256, as ne[0]
        // is of the block (pickType), so no block straddles two chunks
        out = QUANTIZE[dst](sourceF32(buf, n, src.dtype));
      } else die(`internal: unsupported destination type ${dst}`);
      fs.writeSync(fd, out, 0, out.length, at + written);
      written += out.length;
    }
  } finally {
    fs.closeSync(sfd);
  }
  return written;
}

// ---------------------------------------------------------------- types per tensor

// --type -> [general.file_type (llama_ftype), the 2-D weights' ggml type].
// q4_0, q4_k, q6_k and q8_0 are "pure" (every 2-D weight in that type, as
// llama-quantize --pure and convert_hf_to_gguf.py --outtype q8_0 write);
// q4_k_m is llama-quantize's Q4_K_M mix (pickType). q4_k says Q4_K_S (14),
// the ftype llama-quantize --pure Q4_K_S would write.
const FTYPE = {
  f32: [0, 0], bf16: [32, 30], q8_0: [7, 8], q4_0: [2, 2], q4_k: [14, 12], q6_k: [18, 14], q4_k_m: [15, 12],
  q5_k: [16, 13], q5_k_m: [17, 13], q4_1: [3, 3], q5_0: [8, 6], q5_1: [9, 7], q2_k: [10, 10], q3_k: [11, 11],
  q3_k_m: [12, 11],
};

/** llama.cpp's use_more_bits (src/llama-quant.cpp): the first and last
 *  eighth of the layers and every third one between get more bits. */
function useMoreBits(i, n) {
  const e = Math.trunc(n / 8);
  return i < e || i >= Math.trunc((7 * n) / 8) || (i - e) % 3 === 2;
}

/** The ggml type of the 2-D weight `gname` (row length ne0) under --type
 *  `type`, as llama-quantize picks it (read in src/llama-quant.cpp,
 *  llama_tensor_get_type; written from that reading):
 *   - Q4_K_M: output.weight, or token_embd.weight when there is no output
 *     tensor (tied), Q6_K; attn_v and ffn_down Q6_K on the layers
 *     useMoreBits picks, else Q4_K; every other 2-D weight Q4_K;
 *   - Q3_K_M: output (or a tied token_embd) Q6_K; attn_v Q5_K for the
 *     first two attention layers, else Q4_K; ffn_down Q5_K below
 *     n_layer/16, else Q4_K (the non-Falcon rule); attn_output and
 *     attn_qkv Q4_K; every other 2-D weight Q3_K;
 *   - a row that is not whole blocks falls back: Q6_K (and the output) to
 *     Q8_0 as llama.cpp does; Q4_K to Q8_0 where llama.cpp picks Q5_0,
 *     which this tool does not write (noted in `notes`); and to F16 if not
 *     even whole blocks of 32, as llama.cpp does (q8_0 keeps F32 there). */
function pickType(type, gname, ne0, nLayers, tied, notes, attnV = null) {
  let t = FTYPE[type][1];
  if (type === "q4_k_m" || type === "q5_k_m") {
    const layer = /^blk\.(\d+)\.(attn_v|ffn_down)\.weight$/.exec(gname);
    const isOutput = gname === "output.weight" || (tied && gname === "token_embd.weight");
    // attn_v counts among the tensors of its kind (a hybrid's attention
    // layers: attnV = {i, n}), ffn_down by its layer
    const more = layer && (layer[2] === "attn_v" && attnV ? useMoreBits(attnV.i, attnV.n) : useMoreBits(Number(layer[1]), nLayers));
    if (isOutput) t = ne0 % 256 ? GGML_TYPE.Q8_0 : GGML_TYPE.Q6_K;
    else if (more) t = GGML_TYPE.Q6_K;
    else if (/\.attn_qkv\.weight$/.test(gname)) t = type === "q4_k_m" ? GGML_TYPE.Q5_K : GGML_TYPE.Q6_K; // a fused qkv: one step up
  } else if (type === "q3_k_m") {
    const layer = /^blk\.(\d+)\.(attn_v|ffn_down|attn_output|attn_qkv)\.weight$/.exec(gname);
    const isOutput = gname === "output.weight" || (tied && gname === "token_embd.weight");
    if (isOutput) t = ne0 % 256 ? GGML_TYPE.Q8_0 : GGML_TYPE.Q6_K;
    else if (layer && layer[2] === "attn_v") t = (attnV ? attnV.i : Number(layer[1])) < 2 ? GGML_TYPE.Q5_K : GGML_TYPE.Q4_K;
    else if (layer && layer[2] === "ffn_down") t = Number(layer[1]) < Math.trunc(nLayers / 16) ? GGML_TYPE.Q5_K : GGML_TYPE.Q4_K;
    else if (layer) t = GGML_TYPE.Q4_K; // attn_output, a fused attn_qkv
  }
  const blk = GGML_BLOCK[t];
  if (!blk || ne0 % blk[0] === 0) return t;
  if (t === GGML_TYPE.Q8_0) return GGML_TYPE.F32; // (q8_0 as before: the rare odd row stays exact)
  const fb = ne0 % 32 ? GGML_TYPE.F16 : GGML_TYPE.Q8_0;
  notes.push(`${gname}: rows of ${ne0} are not whole blocks of ${blk[0]}: ${TYPE_NAME[fb]} instead of ${TYPE_NAME[t]}` +
    (t === GGML_TYPE.Q4_K && fb === GGML_TYPE.Q8_0 ? " (llama.cpp would write Q5_0, which this tool does not)" : ""));
  return fb;
}

// ---------------------------------------------------------------- tensor names

// The attention block's and the MLP's per-layer tensors, named alike by
// every family converted here.
const ATTN_MAP = {
  "self_attn.q_proj.weight": "attn_q.weight",
  "self_attn.k_proj.weight": "attn_k.weight",
  "self_attn.v_proj.weight": "attn_v.weight",
  "self_attn.o_proj.weight": "attn_output.weight",
  "self_attn.q_norm.weight": "attn_q_norm.weight",
  "self_attn.k_norm.weight": "attn_k_norm.weight",
};
const MLP_MAP = {
  "mlp.gate_proj.weight": "ffn_gate.weight",
  "mlp.up_proj.weight": "ffn_up.weight",
  "mlp.down_proj.weight": "ffn_down.weight",
};

const LAYER_MAP = {
  "input_layernorm.weight": "attn_norm.weight",
  ...ATTN_MAP,
  "self_attn.q_proj.bias": "attn_q.bias",
  "self_attn.k_proj.bias": "attn_k.bias",
  "self_attn.v_proj.bias": "attn_v.bias",
  "post_attention_layernorm.weight": "ffn_norm.weight",
  ...MLP_MAP,
  // LayerNorm biases (StableLM)
  "input_layernorm.bias": "attn_norm.bias",
  "post_attention_layernorm.bias": "ffn_norm.bias",
  // Phi-3's fused projections, stored fused by llama.cpp (its phi3 views them)
  "self_attn.qkv_proj.weight": "attn_qkv.weight",
  "mlp.gate_up_proj.weight": "ffn_up.weight",
  // StarCoder2's non-gated MLP and its biases, the output projection's bias
  "mlp.c_fc.weight": "ffn_up.weight",
  "mlp.c_fc.bias": "ffn_up.bias",
  "mlp.c_proj.weight": "ffn_down.weight",
  "mlp.c_proj.bias": "ffn_down.bias",
  "self_attn.o_proj.bias": "attn_output.bias",
  // Phi-1/2's names: the output projection, the fc1/fc2 MLP
  "self_attn.dense.weight": "attn_output.weight",
  "self_attn.dense.bias": "attn_output.bias",
  "mlp.fc1.weight": "ffn_up.weight",
  "mlp.fc1.bias": "ffn_up.bias",
  "mlp.fc2.weight": "ffn_down.weight",
  "mlp.fc2.bias": "ffn_down.bias",
};

/** Expected HF shapes for every tensor, from config. */
function expectedShapes(h, fam) {
  const D = h.hidden_size, F = h.intermediate_size, V = h.vocab_size, hd = h.head_dim;
  const Hq = h.num_attention_heads, Hk = h.num_key_value_heads;
  const m = new Map();
  m.set("model.embed_tokens.weight", [V, D]);
  const fin = fam.finalNorm ?? "model.norm";
  m.set(fin + ".weight", [D]);
  if (fam.layerNorm) m.set(fin + ".bias", [D]);
  if (!h.tie_word_embeddings) m.set("lm_head.weight", [V, D]);
  if (fam.headBias) m.set("lm_head.bias", [V]);
  const [up, down] = fam.mlpNames ?? ["c_fc", "c_proj"], oName = fam.oName ?? "o_proj";
  for (let l = 0; l < h.num_hidden_layers; l++) {
    const p = `model.layers.${l}.`;
    if (!fam.postNorm) m.set(p + "input_layernorm.weight", [D]);
    if (fam.layerNorm) m.set(p + "input_layernorm.bias", [D]);
    if (fam.fused) m.set(p + "self_attn.qkv_proj.weight", [(Hq + 2 * Hk) * hd, D]);
    else {
      m.set(p + "self_attn.q_proj.weight", [Hq * hd, D]);
      m.set(p + "self_attn.k_proj.weight", [Hk * hd, D]);
      m.set(p + "self_attn.v_proj.weight", [Hk * hd, D]);
    }
    m.set(p + `self_attn.${oName}.weight`, [D, Hq * hd]);
    if (fam.qkNorm) {
      m.set(p + "self_attn.q_norm.weight", [hd]);
      m.set(p + "self_attn.k_norm.weight", [hd]);
    }
    if (fam.postNorm) { // OLMo 2: q/k norms over the whole projection, the MLP's output normed
      m.set(p + "self_attn.q_norm.weight", [Hq * hd]);
      m.set(p + "self_attn.k_norm.weight", [Hk * hd]);
      m.set(p + "post_feedforward_layernorm.weight", [D]);
    }
    if (fam.qkvBias) {
      m.set(p + "self_attn.q_proj.bias", [Hq * hd]);
      m.set(p + "self_attn.k_proj.bias", [Hk * hd]);
      m.set(p + "self_attn.v_proj.bias", [Hk * hd]);
    }
    if (!fam.sharedNorm) m.set(p + "post_attention_layernorm.weight", [D]);
    if (fam.layerNorm && !fam.sharedNorm) m.set(p + "post_attention_layernorm.bias", [D]);
    if (fam.sandwich) m.set(p + "pre_feedforward_layernorm.weight", [D]);
    if (fam.fused) m.set(p + "mlp.gate_up_proj.weight", [2 * F, D]);
    else if (fam.plainMlp) m.set(p + `mlp.${up}.weight`, [F, D]);
    else {
      m.set(p + "mlp.gate_proj.weight", [F, D]);
      m.set(p + "mlp.up_proj.weight", [F, D]);
    }
    if (fam.plainMlp) m.set(p + `mlp.${down}.weight`, [D, F]);
    else m.set(p + "mlp.down_proj.weight", [D, F]);
    if (fam.allBias) { // StarCoder2's use_bias, Phi's: the output projection and the MLP's too
      m.set(p + `self_attn.${oName}.bias`, [D]);
      m.set(p + `mlp.${up}.bias`, [F]);
      m.set(p + `mlp.${down}.bias`, [D]);
    }
    if (fam.sandwich) m.set(p + "post_feedforward_layernorm.weight", [D]);
  }
  return m;
}

/** The GGUF name of an HF tensor, a layer's through layerMap (null: none). */
function ggufName(layerMap, hfName) {
  if (hfName === "model.embed_tokens.weight") return "token_embd.weight";
  if (hfName === "model.norm.weight" || hfName === "model.final_layernorm.weight") return "output_norm.weight";
  if (hfName === "model.norm.bias" || hfName === "model.final_layernorm.bias") return "output_norm.bias";
  if (hfName === "lm_head.weight") return "output.weight";
  if (hfName === "lm_head.bias") return "output.bias";
  const m = /^model\.layers\.(\d+)\.(.+)$/.exec(hfName);
  if (m && layerMap[m[2]]) return `blk.${m[1]}.${layerMap[m[2]]}`;
  return null;
}

/** Every tensor expect lists is in st with that shape, and st holds no other
 * (but those `allowed` lets through). */
function checkTensors(modelDir, st, expect, allowed = () => false) {
  for (const [name, shape] of expect) {
    const t = st.get(name);
    if (!t) die(`${modelDir}: safetensors lacks tensor ${name}`);
    if (t.shape.length !== shape.length || t.shape.some((d, i) => d !== shape[i]))
      die(`${modelDir}: tensor ${name} has shape [${t.shape}], config says [${shape}]`);
  }
  for (const name of st.keys()) if (!expect.has(name) && !allowed(name)) die(`${modelDir}: unexpected tensor ${name}`);
}

/** The general.* keys every file starts with. */
function addGeneral(w, A, modelDir, fileType) {
  w.addString("general.architecture", A);
  w.addString("general.name", path.basename(path.resolve(modelDir)));
  w.addU32("general.file_type", fileType);
}

/** The decoder's sizes, RoPE base and norm epsilon, as llama.cpp's A reads them. */
function addDecoderKeys(w, A, h, contextDefault, theta, layerNorm = false) {
  w.addU32(`${A}.block_count`, h.num_hidden_layers);
  w.addU32(`${A}.context_length`, h.max_position_embeddings ?? contextDefault);
  w.addU32(`${A}.embedding_length`, h.hidden_size);
  w.addU32(`${A}.feed_forward_length`, h.intermediate_size);
  w.addU32(`${A}.attention.head_count`, h.num_attention_heads);
  w.addU32(`${A}.attention.head_count_kv`, h.num_key_value_heads);
  w.addF32(`${A}.rope.freq_base`, theta);
  if (layerNorm) w.addF32(`${A}.attention.layer_norm_epsilon`, h.layer_norm_eps);
  else w.addF32(`${A}.attention.layer_norm_rms_epsilon`, h.rms_norm_eps);
  w.addU32(`${A}.attention.key_length`, h.head_dim);
  w.addU32(`${A}.attention.value_length`, h.head_dim);
}

// ---------------------------------------------------------------- qwen35

// llama.cpp's qwen35 conversion, as read in its convert_hf_to_gguf.py /
// conversion/qwen.py (Qwen3NextModel, _LinearAttentionVReorderBase) and
// src/models/qwen35.cpp; written from that reading, nothing copied:
//  - zero-centred norms (every *norm.weight but linear_attn.norm) stored as 1 + w;
//  - A_log stored as ssm_a = -exp(A_log); dt_bias as ssm_dt.bias;
//  - conv1d [C, 1, K] squeezed to [C, K] (always F32);
//  - value heads reordered from grouped by key head [kh][r][d] to tiled
//    [r][kh][d] (rows of in_proj_z, in_proj_a/b, the v rows of in_proj_qkv
//    and of conv1d, A_log, dt_bias; columns of out_proj);
//  - which layers are recurrent: attention.recurrent_layers (0/1 per layer),
//    so any layer_types pattern converts, not only full_attention_interval.
const Q35_LAYER_MAP = {
  "input_layernorm.weight": "attn_norm.weight",
  "post_attention_layernorm.weight": "post_attention_norm.weight",
  ...ATTN_MAP,
  "linear_attn.in_proj_qkv.weight": "attn_qkv.weight",
  "linear_attn.in_proj_z.weight": "attn_gate.weight",
  "linear_attn.in_proj_b.weight": "ssm_beta.weight",
  "linear_attn.in_proj_a.weight": "ssm_alpha.weight",
  "linear_attn.conv1d.weight": "ssm_conv1d.weight",
  "linear_attn.dt_bias": "ssm_dt.bias",
  "linear_attn.A_log": "ssm_a",
  "linear_attn.norm.weight": "ssm_norm.weight",
  "linear_attn.out_proj.weight": "ssm_out.weight",
  ...MLP_MAP,
};

function q35LayerTypes(h, cfgFile) {
  let lt = h.layer_types;
  if (lt === undefined) {
    const iv = h.full_attention_interval ?? 4;
    lt = Array.from({ length: h.num_hidden_layers }, (_, i) => ((i + 1) % iv ? "linear_attention" : "full_attention"));
  }
  if (!Array.isArray(lt) || lt.length !== h.num_hidden_layers) die(`${cfgFile}: layer_types must list num_hidden_layers entries`);
  for (const [i, t] of lt.entries())
    if (t !== "linear_attention" && t !== "full_attention") die(`${cfgFile}: layer_types[${i}] ${JSON.stringify(t)} is not supported`);
  return lt;
}

function q35Shapes(h, lt) {
  const D = h.hidden_size, F = h.intermediate_size, V = h.vocab_size, hd = h.head_dim;
  const Hq = h.num_attention_heads, Hk = h.num_key_value_heads;
  const KD = h.linear_num_key_heads * h.linear_key_head_dim, VD = h.linear_num_value_heads * h.linear_value_head_dim;
  const NV = h.linear_num_value_heads, C = 2 * KD + VD, K = h.linear_conv_kernel_dim;
  const m = new Map();
  m.set("model.embed_tokens.weight", [V, D]);
  for (let l = 0; l < h.num_hidden_layers; l++) {
    const p = `model.layers.${l}.`;
    m.set(p + "input_layernorm.weight", [D]);
    if (lt[l] === "full_attention") {
      m.set(p + "self_attn.q_proj.weight", [2 * Hq * hd, D]);
      m.set(p + "self_attn.k_proj.weight", [Hk * hd, D]);
      m.set(p + "self_attn.v_proj.weight", [Hk * hd, D]);
      m.set(p + "self_attn.o_proj.weight", [D, Hq * hd]);
      m.set(p + "self_attn.q_norm.weight", [hd]);
      m.set(p + "self_attn.k_norm.weight", [hd]);
    } else {
      m.set(p + "linear_attn.in_proj_qkv.weight", [C, D]);
      m.set(p + "linear_attn.in_proj_z.weight", [VD, D]);
      m.set(p + "linear_attn.in_proj_b.weight", [NV, D]);
      m.set(p + "linear_attn.in_proj_a.weight", [NV, D]);
      m.set(p + "linear_attn.conv1d.weight", [C, 1, K]);
      m.set(p + "linear_attn.dt_bias", [NV]);
      m.set(p + "linear_attn.A_log", [NV]);
      m.set(p + "linear_attn.norm.weight", [h.linear_value_head_dim]);
      m.set(p + "linear_attn.out_proj.weight", [D, VD]);
    }
    m.set(p + "post_attention_layernorm.weight", [D]);
    m.set(p + "mlp.gate_proj.weight", [F, D]);
    m.set(p + "mlp.up_proj.weight", [F, D]);
    m.set(p + "mlp.down_proj.weight", [D, F]);
  }
  m.set("model.norm.weight", [D]);
  if (!h.tie_word_embeddings) m.set("lm_head.weight", [V, D]);
  return m;
}

/** Whole tensor as Float32Array (for the value transforms; fine up to a few hundred MB). */
function readF32(src) {
  const total = src.end - src.start;
  const buf = Buffer.alloc(total);
  const fd = fs.openSync(src.file, "r");
  try { if (fs.readSync(fd, buf, 0, total, src.start) !== total) die(`${src.file}: short read`); } finally { fs.closeSync(fd); }
  const n = total / ST_DTYPE_SIZE[src.dtype];
  if (src.dtype === "F32") return new Float32Array(buf.buffer, buf.byteOffset, n).slice();
  const inp = new Uint16Array(buf.buffer, buf.byteOffset, n);
  const o = new Uint32Array(n);
  if (src.dtype === "BF16") for (let i = 0; i < n; i++) o[i] = inp[i] << 16;
  else for (let i = 0; i < n; i++) o[i] = f16BitsToF32Bits(inp[i]);
  return new Float32Array(o.buffer);
}

/** Rows [row0, row0 + kh*r*d) of a [rows, cols] matrix from grouped [kh][r][d] to tiled [r][kh][d]. */
function reorderRows(a, cols, row0, kh, r, d) {
  const blk = a.slice(row0 * cols, (row0 + kh * r * d) * cols);
  for (let g = 0; g < kh; g++)
    for (let j = 0; j < r; j++)
      for (let x = 0; x < d; x++) {
        const from = (g * r + j) * d + x, to = (j * kh + g) * d + x;
        a.set(blk.subarray(from * cols, (from + 1) * cols), (row0 + to) * cols);
      }
}

/** Columns of a [rows, kh*r*d] matrix, grouped -> tiled. */
function reorderCols(a, rows, kh, r, d) {
  const cols = kh * r * d;
  const row = new Float32Array(cols);
  for (let i = 0; i < rows; i++) {
    row.set(a.subarray(i * cols, (i + 1) * cols));
    for (let g = 0; g < kh; g++)
      for (let j = 0; j < r; j++)
        for (let x = 0; x < d; x++) a[i * cols + (j * kh + g) * d + x] = row[(g * r + j) * d + x];
  }
}

/** The value transform llama.cpp's qwen35 expects, or null when the tensor is copied as is. */
function q35Transform(name, h) {
  const kh = h.linear_num_key_heads, r = h.linear_num_value_heads / kh, dv = h.linear_value_head_dim;
  const KD = kh * h.linear_key_head_dim, D = h.hidden_size;
  const zeroCentred = name.endsWith("norm.weight") && !name.endsWith("linear_attn.norm.weight");
  const reorder = r > 1;
  if (zeroCentred) return (a) => { for (let i = 0; i < a.length; i++) a[i] = Math.fround(a[i] + 1); };
  if (name.endsWith(".A_log"))
    return (a) => { if (reorder) reorderRows(a, 1, 0, kh, r, 1); for (let i = 0; i < a.length; i++) a[i] = Math.fround(-Math.exp(a[i])); };
  if (!reorder) return null;
  if (name.endsWith(".dt_bias") || name.endsWith(".in_proj_a.weight") || name.endsWith(".in_proj_b.weight"))
    return (a) => reorderRows(a, a.length / (kh * r), 0, kh, r, 1);
  if (name.endsWith(".in_proj_z.weight")) return (a) => reorderRows(a, D, 0, kh, r, dv);
  if (name.endsWith(".in_proj_qkv.weight")) return (a) => reorderRows(a, D, 2 * KD, kh, r, dv);
  if (name.endsWith(".conv1d.weight"))
    return (a) => reorderRows(a, h.linear_conv_kernel_dim, 2 * KD, kh, r, dv);
  if (name.endsWith(".out_proj.weight")) return (a) => reorderCols(a, D, kh, r, dv);
  return null;
}

function writeF32As(a, dst, fd, at) {
  let out;
  if (dst === GGML_TYPE.F32) out = Buffer.from(a.buffer, a.byteOffset, a.byteLength);
  else if (QUANTIZE[dst]) out = QUANTIZE[dst](a); // rows are whole blocks (pickType)
  else {
    const u = new Uint32Array(a.buffer, a.byteOffset, a.length);
    const o = new Uint16Array(a.length);
    for (let i = 0; i < a.length; i++) o[i] = f32BitsToBf16Bits(u[i]);
    out = Buffer.from(o.buffer);
  }
  fs.writeSync(fd, out, 0, out.length, at);
  return out.length;
}

async function convertQwen35(modelDir, outPath, cfg, cfgFile, type, textPrefix = null, opts = {}) {
  const need = ["hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
    "vocab_size", "rms_norm_eps", "head_dim", "linear_conv_kernel_dim", "linear_key_head_dim", "linear_value_head_dim",
    "linear_num_key_heads", "linear_num_value_heads"];
  for (const k of need) if (typeof cfg[k] !== "number") die(`${cfgFile}: missing or non-numeric ${k}`);
  const h = { ...cfg, tie_word_embeddings: cfg.tie_word_embeddings === true };
  if (h.linear_key_head_dim !== h.linear_value_head_dim)
    die(`${cfgFile}: llama.cpp's qwen35 needs linear_key_head_dim == linear_value_head_dim`);
  if (h.linear_num_value_heads % h.linear_num_key_heads) die(`${cfgFile}: linear value heads not a multiple of key heads`);
  const rp = cfg.rope_parameters || {};
  const theta = rp.rope_theta ?? cfg.rope_theta;
  const prf = rp.partial_rotary_factor ?? cfg.partial_rotary_factor ?? 0.25;
  if (typeof theta !== "number") die(`${cfgFile}: no rope_theta`);
  const rot = Math.trunc(h.head_dim * prf);
  const sec = Array.isArray(rp.mrope_section) ? [...rp.mrope_section] : [11, 11, 10];
  while (sec.length < 4) sec.push(0);
  const lt = q35LayerTypes(h, cfgFile);
  // what llama.cpp's qwen35 graph computes: SiLU MLPs, no biases, no
  // sliding window, unscaled rotary, the output gate
  if (cfg.hidden_act !== undefined && cfg.hidden_act !== "silu")
    die(`${cfgFile}: hidden_act ${JSON.stringify(cfg.hidden_act)}: llama.cpp's qwen35 computes silu`);
  if (cfg.attention_bias === true) die(`${cfgFile}: attention_bias=true is not supported`);
  if (cfg.use_sliding_window === true) die(`${cfgFile}: use_sliding_window=true: llama.cpp's qwen35 has no sliding window`);
  if (cfg.rope_scaling || (rp.rope_type && rp.rope_type !== "default"))
    die(`${cfgFile}: rope scaling ${JSON.stringify(cfg.rope_scaling || rp)} is not supported by this converter`);
  if (cfg.attn_output_gate === false) die(`${cfgFile}: attn_output_gate=false: llama.cpp's qwen35 always gates`);

  let st = readSafetensorsIndex(modelDir);
  // the multi-token-prediction head (mtp.*), as llama.cpp's converter
  // exports it by default (_QwenMtpMixin): layers appended after the text
  // model's, block_count and nextn_predict_layers counting them
  const L = h.num_hidden_layers, mtp = q35MtpTensors(st, L, opts.noMtp);
  if (textPrefix) { // model.language_model.X -> model.X; vision tensors dropped
    const renamed = new Map();
    for (const [name, t] of st) {
      if (name.startsWith(textPrefix)) renamed.set("model." + name.slice(textPrefix.length), t);
      else if (name === "lm_head.weight") renamed.set(name, t);
    }
    st = renamed;
  } else for (const name of [...st.keys()]) if (name.startsWith("mtp.")) st.delete(name);
  const expect = q35Shapes(h, lt);
  checkTensors(modelDir, st, expect);

  const w = new GgufWriter();
  const A = "qwen35";
  addGeneral(w, A, modelDir, FTYPE[type][0]);
  if (type !== "f32" && type !== "bf16") w.addU32("general.quantization_version", 2); // ggml's GGML_QNT_VERSION
  addDecoderKeys(w, A, { ...h, num_hidden_layers: L + mtp.layers }, 262144, theta);
  if (mtp.layers) w.addU32(`${A}.nextn_predict_layers`, mtp.layers);
  w.addU32(`${A}.rope.dimension_count`, rot);
  w.addI32Array(`${A}.rope.dimension_sections`, sec.slice(0, 4));
  w.addU32(`${A}.ssm.conv_kernel`, h.linear_conv_kernel_dim);
  w.addU32(`${A}.ssm.state_size`, h.linear_key_head_dim);
  w.addU32(`${A}.ssm.group_count`, h.linear_num_key_heads);
  w.addU32(`${A}.ssm.time_step_rank`, h.linear_num_value_heads);
  w.addU32(`${A}.ssm.inner_size`, h.linear_num_value_heads * h.linear_value_head_dim);
  w.addU32(`${A}.full_attention_interval`, h.full_attention_interval ?? 4);
  // one entry per block, the appended multi-token-prediction ones not recurrent (llama-model-saver's form)
  w.addI32Array(`${A}.attention.recurrent_layers`,
    [...lt.map((t) => (t === "linear_attention" ? 1 : 0)), ...Array(mtp.layers).fill(0)]);
  const vocab = buildVocab(modelDir, h, w);

  // llama-quantize's picks: 2-D weights but the conv (kept F32); attn_v's
  // "more bits" counted among the attention layers' attn_v
  const notes = [], types = {}, nWv = lt.filter((t) => t === "full_attention").length;
  let iWv = 0;
  for (const name of expect.keys()) {
    const src = st.get(name);
    const conv = name.endsWith(".conv1d.weight");
    const shape = conv ? [src.shape[0], src.shape[2]] : src.shape;
    const gname = ggufName(Q35_LAYER_MAP, name);
    if (!gname) die(`internal: no GGUF name for ${name}`);
    const attnV = gname.endsWith(".attn_v.weight") ? { i: iWv++, n: nWv } : null;
    const dst = shape.length === 1 || conv ? GGML_TYPE.F32
      : type === "f32" || type === "bf16" ? FTYPE[type][1]
      : pickType(type, gname, shape[shape.length - 1], h.num_hidden_layers, h.tie_word_embeddings, notes, attnV);
    types[TYPE_NAME[dst]] = (types[TYPE_NAME[dst]] || 0) + 1;
    const ne = [...shape].reverse();
    const tf = q35Transform(name, h);
    if (tf) w.addTensor(gname, ne, dst, (fd, at) => { const a = readF32(src); tf(a); return writeF32As(a, dst, fd, at); });
    else w.addTensor(gname, ne, dst, (fd, at) => copyConverted(src, dst, fd, at));
  }
  for (const [gname, src] of mtp.tensors) { // as the converter writes them: 1-D F32, norms as 1 + w
    const dst = src.shape.length === 1 ? GGML_TYPE.F32
      : type === "f32" || type === "bf16" ? FTYPE[type][1]
      : pickType(type, gname, src.shape[src.shape.length - 1], h.num_hidden_layers, h.tie_word_embeddings, notes);
    types[TYPE_NAME[dst]] = (types[TYPE_NAME[dst]] || 0) + 1;
    const ne = [...src.shape].reverse();
    if (src.name.endsWith("norm.weight"))
      w.addTensor(gname, ne, dst, (fd, at) => { const a = readF32(src); for (let i = 0; i < a.length; i++) a[i] = Math.fround(a[i] + 1); return writeF32As(a, dst, fd, at); });
    else w.addTensor(gname, ne, dst, (fd, at) => copyConverted(src, dst, fd, at));
  }
  if (mtp.layers) notes.push(`${mtp.tensors.length} multi-token-prediction tensors as layer ${L}` + (mtp.layers > 1 ? ` .. ${L + mtp.layers - 1}` : ""));
  if (mtp.partial) notes.push(mtp.partial);
  await w.write(outPath);
  return { config: h, vocab, types, notes };
}

/** The checkpoint's mtp.* tensors under llama.cpp's names (layer L + j for
 *  mtp.layers.j.*, its nextn.* tensors on layer L), and how many layers;
 *  none with noMtp (the converter's --no-mtp). */
function q35MtpTensors(st, L, noMtp) {
  const NEXTN = { fc: "nextn.eh_proj", pre_fc_norm_embedding: "nextn.enorm", pre_fc_norm_hidden: "nextn.hnorm", norm: "nextn.shared_head_norm" };
  const tensors = [];
  let layers = 0;
  for (const [name, t] of st) {
    if (noMtp || !name.startsWith("mtp.")) continue;
    const parts = name.split(".");
    let gname = null;
    const m = /^mtp\.layers\.(\d+)\.(.+)$/.exec(name);
    if (m) {
      const g = Q35_LAYER_MAP[m[2]];
      if (g) gname = `blk.${L + Number(m[1])}.${g}`;
      layers = Math.max(layers, Number(m[1]) + 1);
    } else if (parts.length === 3 && NEXTN[parts[1]]) gname = `blk.${L}.${NEXTN[parts[1]]}.${parts[2]}`;
    if (!gname) die(`${name}: a multi-token-prediction tensor llama.cpp's converter has no name for`);
    tensors.push([gname, { ...t, name }]);
    if (!m) layers = Math.max(layers, 1);
  }
  // a whole head or none: llama.cpp loads every tensor of an MTP block it
  // is told of (a synthetic checkpoint may carry a few mtp.* tensors only)
  const have = new Set(tensors.map(([g]) => g));
  const need = ["attn_norm.weight", "attn_q.weight", "attn_k.weight", "attn_v.weight", "attn_output.weight", "attn_q_norm.weight",
    "attn_k_norm.weight", "post_attention_norm.weight", "ffn_gate.weight", "ffn_up.weight", "ffn_down.weight",
    "nextn.eh_proj.weight", "nextn.enorm.weight", "nextn.hnorm.weight"];
  for (let j = 0; j < layers; j++) {
    const miss = need.filter((n) => !have.has(`blk.${L + j}.${n}`));
    if (miss.length) return { layers: 0, tensors: [], partial: `mtp.*: not a whole multi-token-prediction head (no ${miss.join(", ")} for layer ${L + j}): left out, as with --no-mtp (llama.cpp would not load it)` };
  }
  return { layers, tensors };
}

// ---------------------------------------------------------------- gemma3

// llama.cpp's gemma3, as read in its conversion/gemma.py (Gemma3Model) and
// src/models/gemma3.cpp, src/llama-hparams.{h,cpp} (v0.4.0 bundle); written
// from that reading, nothing copied:
//  - every *norm.weight (the four per layer, q/k norms, the final norm) is
//    stored as 1 + w: llama.cpp multiplies by the stored vector, HF's
//    Gemma3RMSNorm by (1 + w);
//  - embeddings scaled by sqrtf(n_embd) in f32 inside the graph; GELU (tanh
//    form) MLP; post-attention and post-MLP norms before the residual adds;
//  - NeoX rotary, base rope.freq_base on full layers and rope.freq_base_swa
//    (default 10000) on sliding ones; linear rope scaling only on full layers;
//  - which layers slide: attention.sliding_window_pattern, ONE scalar period
//    P read by get_key_or_arr (an array is ignored, P stays 6): layer l is
//    full iff l % P == P - 1 (P = 0: every layer slides); no
//    attention.sliding_window key: no layer slides. So only periodic
//    layer_types convert: gemma3LayerPlan finds a P or refuses;
//  - a sliding layer's query i sees key j iff i - j < sliding_window
//    (LLAMA_SWA_TYPE_STANDARD masks p1 - p0 >= n_swa), as HF's overlay;
//  - attention scale 1/sqrt(head_dim), except for 62 layers (its "27B"
//    type): 1/sqrt(hidden_size / heads), integer division; the config's
//    query_pre_attn_scalar must be that number;
//  - no attention logit softcap in the graph; final_logit_softcapping is
//    read (not written here: refused, Gemma 3 has none).
const GEMMA3_LAYER_MAP = {
  "input_layernorm.weight": "attn_norm.weight",
  ...ATTN_MAP,
  "post_attention_layernorm.weight": "post_attention_norm.weight",
  "pre_feedforward_layernorm.weight": "ffn_norm.weight",
  "post_feedforward_layernorm.weight": "post_ffw_norm.weight",
  ...MLP_MAP,
};

function isGemma3(archs, modelType) {
  return archs.includes("Gemma3ForCausalLM") || (archs.length === 0 && modelType === "gemma3_text");
}

/** HF Gemma3TextConfig's layer kinds (layer_types, else full iff (l + 1) %
 *  sliding_window_pattern == 0, pattern 6), and the llama.cpp period that
 *  gives the same kinds: null when no layer slides, else P in 2..L+1 (the
 *  config's sliding_window_pattern first, when it fits). */
function gemma3LayerPlan(h, cfgFile) {
  const L = h.num_hidden_layers;
  let lt = h.layer_types;
  if (lt === undefined || lt === null) {
    const p = h.sliding_window_pattern ?? 6;
    if (!Number.isInteger(p) || p < 1) die(`${cfgFile}: sliding_window_pattern ${JSON.stringify(p)} is not a positive integer`);
    lt = Array.from({ length: L }, (_, l) => ((l + 1) % p ? "sliding_attention" : "full_attention"));
  }
  if (!Array.isArray(lt) || lt.length !== L) die(`${cfgFile}: layer_types must list num_hidden_layers (${L}) entries`);
  for (const [i, t] of lt.entries())
    if (t !== "sliding_attention" && t !== "full_attention") die(`${cfgFile}: layer_types[${i}] ${JSON.stringify(t)} is not supported`);
  if (!lt.includes("sliding_attention")) return { lt, period: null };
  const fits = (P) => lt.every((t, l) => (t === "sliding_attention") === (l % P < P - 1));
  const pref = h.sliding_window_pattern;
  if (Number.isInteger(pref) && pref >= 2 && fits(pref)) return { lt, period: pref };
  for (let P = 2; P <= L + 1; P++) if (fits(P)) return { lt, period: P };
  die(`${cfgFile}: layer_types ${JSON.stringify(lt.map((t) => (t === "full_attention" ? "F" : "S")).join(""))}: ` +
    `llama.cpp's gemma3 makes layer l full iff l % P == P - 1 for one period P, and no P gives this list`);
}

/** Gemma 3's tensors: the dense ones with q/k norms and sandwich norms. */
function gemma3Shapes(h) {
  return expectedShapes(h, { qkNorm: true, sandwich: true });
}

/** transformers' Gemma3TextConfig defaults: the released 4B-27B checkpoints'
 *  text_config lists only the fields that differ from them. */
const GEMMA3_TEXT_DEFAULTS = {
  vocab_size: 262208, hidden_size: 2304, intermediate_size: 9216, num_hidden_layers: 26,
  num_attention_heads: 8, num_key_value_heads: 4, head_dim: 256, rms_norm_eps: 1e-6,
  max_position_embeddings: 131072, sliding_window: 4096, query_pre_attn_scalar: 256,
  rope_theta: 1e6, rope_local_base_freq: 10000, hidden_activation: "gelu_pytorch_tanh",
};

/** What both Gemma conversions check, else refused by name: the config
 *  over its class's defaults with every shape field a number,
 *  the GELU (tanh) MLP llama.cpp's arch graph computes, no biases, and
 *  query_pre_attn_scalar equal to what llama.cpp scales attention by:
 *  head_dim, or hidden_size / heads for the one layer count llama.cpp calls
 *  the largest size (bigLayers). The merged config, the tied-head config,
 *  the layer count and the field namer. */
function gemmaConfig(cfg0, defaults, cfgFile, type, arch, label, bigLayers) {
  const cfg = { ...defaults, ...cfg0 };
  const need = ["hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "vocab_size"];
  for (const k of need) if (typeof cfg[k] !== "number") die(`${cfgFile}: missing or non-numeric ${k}`);
  const h = { ...cfg, tie_word_embeddings: cfg.tie_word_embeddings !== false };
  const L = h.num_hidden_layers, cf = (k) => `${cfgFile}: ${k}`;
  const act = cfg.hidden_activation ?? "gelu_pytorch_tanh";
  if (act !== "gelu_pytorch_tanh") die(`${cf("hidden_activation")} ${JSON.stringify(act)}: llama.cpp's ${arch} computes gelu_pytorch_tanh`);
  if (cfg.hidden_act != null && cfg.hidden_act !== act)
    die(`${cf("hidden_act")} ${JSON.stringify(cfg.hidden_act)} differs from hidden_activation ${JSON.stringify(act)} (transformers' ${label} reads hidden_activation)`);
  if (cfg.attention_bias === true) die(`${cf("attention_bias")}=true is not supported`);
  if (cfg.mlp_bias === true) die(`${cf("mlp_bias")}=true is not supported`);
  const qpas = cfg.query_pre_attn_scalar ?? 256;
  const llamaScale = L === bigLayers ? Math.trunc(h.hidden_size / h.num_attention_heads) : h.head_dim;
  if (qpas !== llamaScale)
    die(`${cf("query_pre_attn_scalar")} ${qpas}: llama.cpp's ${arch} scales attention by 1/sqrt(${llamaScale}) ` +
      `(${L === bigLayers ? `hidden_size / num_attention_heads for ${bigLayers} layers` : "head_dim"})`);
  return { cfg, h, L, cf };
}

/** A Gemma checkpoint's tensors (expect: HF name -> shape) added to w under
 *  llama.cpp's names: vectors F32, matrices in --type (a quantized type as
 *  llama-quantize picks it per tensor: pickType, the tied embedding being
 *  the output); every *norm.weight stored as HF's (1 + w), rounded once to
 *  f32. The tensor types, counted; what fell back, in notes. */
function addGemmaTensors(w, expect, st, type, h, notes) {
  const types = {};
  if (type !== "f32" && type !== "bf16") w.addU32("general.quantization_version", 2); // ggml's GGML_QNT_VERSION
  for (const name of expect.keys()) {
    const src = st.get(name);
    const gname = ggufName(GEMMA3_LAYER_MAP, name);
    if (!gname) die(`internal: no GGUF name for ${name}`);
    const dst = src.shape.length === 1 ? GGML_TYPE.F32
      : type === "f32" || type === "bf16" ? FTYPE[type][1]
      : pickType(type, gname, src.shape[src.shape.length - 1], h.num_hidden_layers, h.tie_word_embeddings, notes);
    types[TYPE_NAME[dst]] = (types[TYPE_NAME[dst]] || 0) + 1;
    const ne = [...src.shape].reverse();
    if (name.endsWith("norm.weight"))
      w.addTensor(gname, ne, dst, (fd, at) => { const a = readF32(src); for (let i = 0; i < a.length; i++) a[i] += 1; return writeF32As(a, dst, fd, at); });
    else w.addTensor(gname, ne, dst, (fd, at) => copyConverted(src, dst, fd, at));
  }
  return types;
}

async function convertGemma3(modelDir, outPath, cfg0, cfgFile, type, textPrefix = null) {
  const { cfg, h, L, cf } = gemmaConfig(cfg0, GEMMA3_TEXT_DEFAULTS, cfgFile, type, "gemma3", "Gemma 3", 62);
  if (cfg.final_logit_softcapping != null) die(`${cf("final_logit_softcapping")} ${cfg.final_logit_softcapping}: not supported (Gemma 3 has none)`);
  if (cfg.attn_logit_softcapping != null) die(`${cf("attn_logit_softcapping")} ${cfg.attn_logit_softcapping}: llama.cpp's gemma3 has no attention softcap`);
  if (cfg.use_bidirectional_attention === true) die(`${cf("use_bidirectional_attention")}=true: llama.cpp's gemma3 is causal`);
  // rotary: the flat fields, or transformers v5's per-kind rope_parameters
  const rp = cfg.rope_parameters && typeof cfg.rope_parameters === "object" ? cfg.rope_parameters : {};
  const rpFull = rp.full_attention ?? rp, rpSwa = rp.sliding_attention ?? {};
  const thetaFull = rpFull.rope_theta ?? cfg.rope_theta ?? 1e6;
  const thetaSwa = rpSwa.rope_theta ?? cfg.rope_local_base_freq ?? 10000;
  if (typeof thetaFull !== "number" || typeof thetaSwa !== "number") die(`${cf("rope_theta")}: not a number`);
  const kindOf = (s) => (s && typeof s === "object" ? s.rope_type ?? s.type ?? "default" : "default");
  const scaling = cfg.rope_scaling ?? (kindOf(rpFull) !== "default" ? rpFull : null);
  let linear = null;
  if (scaling && kindOf(scaling) !== "default") {
    if (kindOf(scaling) !== "linear" || typeof scaling.factor !== "number" || !(scaling.factor > 0))
      die(`${cf("rope_scaling")} ${JSON.stringify(scaling)}: only linear (with a factor) is supported for gemma3`);
    linear = scaling.factor;
  }
  if (kindOf(rpSwa) !== "default") die(`${cf("rope_parameters.sliding_attention")} ${JSON.stringify(rpSwa)}: llama.cpp scales no sliding layer's rotary`);
  const { lt, period } = gemma3LayerPlan(h, cfgFile);
  if (period !== null && !(Number.isInteger(cfg.sliding_window) && cfg.sliding_window >= 1))
    die(`${cf("sliding_window")} ${JSON.stringify(cfg.sliding_window)}: sliding layers need a positive window`);

  let st = readSafetensorsIndex(modelDir);
  if (textPrefix) { // language_model.model.X -> model.X, language_model.lm_head. -> lm_head.; the vision tower and projector dropped
    const renamed = new Map();
    for (const [name, t] of st)
      if (name.startsWith(textPrefix + "model.") || name.startsWith(textPrefix + "lm_head.")) renamed.set(name.slice(textPrefix.length), t);
    st = renamed;
  }
  const expect = gemma3Shapes(h);
  checkTensors(modelDir, st, expect, (name) => name === "lm_head.weight" && h.tie_word_embeddings);

  const w = new GgufWriter();
  const A = "gemma3";
  addGeneral(w, A, modelDir, FTYPE[type][0]);
  addDecoderKeys(w, A, h, 131072, thetaFull);
  if (period !== null) {
    w.addU32(`${A}.attention.sliding_window`, cfg.sliding_window);
    w.addU32(`${A}.attention.sliding_window_pattern`, period);
    w.addF32(`${A}.rope.freq_base_swa`, thetaSwa);
  }
  if (linear !== null) {
    w.addString(`${A}.rope.scaling.type`, "linear");
    w.addF32(`${A}.rope.scaling.factor`, linear);
  }
  const vocab = buildVocab(modelDir, h, w);

  const notes = [], types = addGemmaTensors(w, expect, st, type, h, notes);
  await w.write(outPath);
  return { config: h, vocab, types, notes, layerTypes: lt, swaPeriod: period };
}

// ---------------------------------------------------------------- gemma2

// llama.cpp's gemma2, as read in its conversion/gemma.py (Gemma2Model) and
// src/models/gemma2.cpp, src/llama-graph.cpp (build_attn_mha); written from
// that reading, nothing copied. What differs from gemma3 above:
//  - no q/k norms; one rotary base (rope.freq_base) on every layer, no
//    scaling;
//  - attention soft-capping always on (hparams.attn_soft_cap): each score
//    kq (q already scaled) becomes cap * tanh(kq / cap) before the mask and
//    soft_max, cap = attn_logit_softcapping (default 50); the final logits
//    likewise with final_logit_softcapping (default 30): both written, and a
//    null in the config (transformers then caps nothing) refused;
//  - which layers slide: attention.sliding_window_pattern, default 2, so
//    layer l slides iff l % 2 == 0, as transformers' Gemma2Config makes
//    layer_types by default ("sliding_attention" iff (l + 1) % 2): only
//    that alternation converts;
//  - attention scale 1/sqrt(head_dim), except for 46 layers (its "27B"):
//    1/sqrt(hidden_size / heads); query_pre_attn_scalar must be that number.
function isGemma2(archs, modelType) {
  return archs.includes("Gemma2ForCausalLM") || (archs.length === 0 && modelType === "gemma2");
}

/** transformers' Gemma2Config defaults (a field the config.json leaves out). */
const GEMMA2_DEFAULTS = {
  vocab_size: 256000, hidden_size: 2304, intermediate_size: 9216, num_hidden_layers: 26,
  num_attention_heads: 8, num_key_value_heads: 4, head_dim: 256, rms_norm_eps: 1e-6,
  max_position_embeddings: 8192, sliding_window: 4096, query_pre_attn_scalar: 256,
  rope_theta: 10000, hidden_activation: "gelu_pytorch_tanh",
  final_logit_softcapping: 30.0, attn_logit_softcapping: 50.0,
};

async function convertGemma2(modelDir, outPath, cfg0, cfgFile, type) {
  const { cfg, h, L, cf } = gemmaConfig(cfg0, GEMMA2_DEFAULTS, cfgFile, type, "gemma2", "Gemma 2", 46);
  for (const k of ["final_logit_softcapping", "attn_logit_softcapping"])
    if (typeof cfg[k] !== "number" || !(cfg[k] > 0))
      die(`${cf(k)} ${JSON.stringify(cfg[k])}: llama.cpp's gemma2 always caps (a positive number, or left out for the default)`);
  if (cfg.rope_scaling != null) die(`${cf("rope_scaling")} ${JSON.stringify(cfg.rope_scaling)}: llama.cpp's gemma2 has no rope scaling`);
  if (typeof cfg.rope_theta !== "number") die(`${cf("rope_theta")}: not a number`);
  if (!(Number.isInteger(cfg.sliding_window) && cfg.sliding_window >= 1))
    die(`${cf("sliding_window")} ${JSON.stringify(cfg.sliding_window)}: gemma2's sliding layers need a positive window`);
  const lt = cfg.layer_types ?? Array.from({ length: L }, (_, l) => ((l + 1) % 2 ? "sliding_attention" : "full_attention"));
  if (!Array.isArray(lt) || lt.length !== L) die(`${cf("layer_types")}: must list num_hidden_layers (${L}) entries`);
  lt.forEach((t, l) => {
    if (t !== (l % 2 === 0 ? "sliding_attention" : "full_attention"))
      die(`${cf("layer_types")}[${l}] ${JSON.stringify(t)}: llama.cpp's gemma2 slides exactly the even layers`);
  });

  const st = readSafetensorsIndex(modelDir);
  const expect = expectedShapes(h, { qkNorm: false, sandwich: true });
  checkTensors(modelDir, st, expect, (name) => name === "lm_head.weight" && h.tie_word_embeddings);

  const w = new GgufWriter();
  const A = "gemma2";
  addGeneral(w, A, modelDir, FTYPE[type][0]);
  addDecoderKeys(w, A, h, 8192, cfg.rope_theta);
  w.addU32(`${A}.attention.sliding_window`, cfg.sliding_window);
  w.addF32(`${A}.attn_logit_softcapping`, cfg.attn_logit_softcapping);
  w.addF32(`${A}.final_logit_softcapping`, cfg.final_logit_softcapping);
  const vocab = buildVocab(modelDir, h, w);

  const notes = [], types = addGemmaTensors(w, expect, st, type, h, notes);
  await w.write(outPath);
  return { config: h, vocab, types, notes, layerTypes: lt, swaPeriod: 2 };
}

// ---------------------------------------------------------------- tokenizer

// Mirrors TextModel.does_token_look_special for the forms Qwen uses.
function looksSpecial(t) {
  return (t.startsWith("<|") && t.endsWith("|>")) || (t.startsWith("<\uff5c") && t.endsWith("\uff5c>")) ||
    t === "<pad>" || t === "<mask>" || t === "<2mass>" || t === "[@BOS@]" ||
    (t.startsWith("<unused") && t.endsWith(">"));
}

const QWEN2_REGEX = String.raw`(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`;

// Llama 3's (tokenizer.json Split regex; llama.cpp's "llama-bpe"): digits in
// runs of up to three, no normalizer.
const LLAMA3_REGEX = String.raw`(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`;
const PRE_BY_REGEX = { [QWEN2_REGEX]: "qwen2", [LLAMA3_REGEX]: "llama-bpe" };

// The token a TemplateProcessing post-processor puts before the text (alone
// or in a Sequence), as gguf-py's SpecialVocab reads it; null when none.
function postProcessorPrefix(pp) {
  if (!pp) return null;
  if (pp.type === "Sequence") {
    for (const x of pp.processors || []) { const t = postProcessorPrefix(x); if (t !== null) return t; }
    return null;
  }
  if (pp.type !== "TemplateProcessing" || !Array.isArray(pp.single) || pp.single.length < 2) return null;
  const first = pp.single[0];
  return first && first.SpecialToken && typeof first.SpecialToken.id === "string" ? first.SpecialToken.id : null;
}

const TOKTYPE = { NORMAL: 1, CONTROL: 3, USER_DEFINED: 4, UNUSED: 5 };

// A SentencePiece-style tokenizer.json (byte_fallback: Llama 2, Mistral,
// Gemma) as llama.cpp's converter writes it from the tokenizer.model: model
// "llama", tokens with scores (the merge order, tools/node/spm_gguf.mjs) and
// types, no merges; rows past the tokenizer up to vocab_size are [PAD<id>],
// unused.
function buildSpmVocab(dir, tokFile, cfg, w) {
  let v;
  try {
    v = spmVocab(tokFile);
  } catch (e) {
    die(`${tokFile}: ${e.message}`);
  }
  const V = cfg.vocab_size;
  if (v.tokens.length > V) die(`${tokFile}: ${v.tokens.length} tokens, over config vocab_size ${V}`);
  const tokens = v.tokens.slice(), scores = v.scores.slice(), types = v.types.slice();
  for (let i = tokens.length; i < V; i++) { tokens.push(`[PAD${i}]`); scores.push(-1e9); types.push(TOKTYPE.UNUSED); }
  w.addString("tokenizer.ggml.model", "llama");
  w.addStringArray("tokenizer.ggml.tokens", tokens);
  w.addF32Array("tokenizer.ggml.scores", scores);
  w.addI32Array("tokenizer.ggml.token_type", types);
  const keys = { bos: "bos_token_id", eos: "eos_token_id", unk: "unknown_token_id", pad: "padding_token_id" };
  for (const [typ, id] of Object.entries(v.ids)) w.addU32(`tokenizer.ggml.${keys[typ]}`, id);
  w.addBool("tokenizer.ggml.add_bos_token", v.addBos);
  if (v.addEos !== undefined) w.addBool("tokenizer.ggml.add_eos_token", v.addEos);
  w.addBool("tokenizer.ggml.add_space_prefix", v.addSpacePrefix);
  const tcFile = path.join(dir, "tokenizer_config.json");
  const tc = fs.existsSync(tcFile) ? readJson(tcFile) : {};
  if (typeof tc.chat_template === "string") w.addString("tokenizer.chat_template", tc.chat_template);
  return { nTokens: V, ids: v.ids };
}

function buildVocab(dir, cfg, w) {
  const tokFile = path.join(dir, "tokenizer.json");
  const tok = readJson(tokFile);
  if (!tok.model || tok.model.type !== "BPE" || typeof tok.model.vocab !== "object")
    die(`${tokFile}: not a BPE tokenizer.json (model.type ${tok.model && tok.model.type})`);
  if (tok.model.byte_fallback === true) return buildSpmVocab(dir, tokFile, cfg, w);
  const tcFile = path.join(dir, "tokenizer_config.json");
  const tc = fs.existsSync(tcFile) ? readJson(tcFile) : {};

  const V = cfg.vocab_size;
  const tokens = new Array(V).fill(null);
  const types = new Array(V).fill(0);
  const place = (id, text, type, where) => {
    if (!Number.isInteger(id) || id < 0) die(`${tokFile}: ${where} token ${JSON.stringify(text)} has bad id ${id}`);
    if (id >= V) die(`${tokFile}: ${where} token ${JSON.stringify(text)} id ${id} >= config vocab_size ${V}`);
    if (tokens[id] !== null && tokens[id] !== text)
      die(`${tokFile}: id ${id} is both ${JSON.stringify(tokens[id])} and ${JSON.stringify(text)}`);
    tokens[id] = text;
    types[id] = type;
  };
  for (const [text, id] of Object.entries(tok.model.vocab)) place(id, text, TOKTYPE.NORMAL, "vocab");
  const added = Array.isArray(tok.added_tokens) ? tok.added_tokens : [];
  for (const a of added) {
    let text = a.content;
    let type;
    if (a.special || looksSpecial(text)) type = TOKTYPE.CONTROL;
    else { type = TOKTYPE.USER_DEFINED; text = text.replaceAll("\u2581", " "); }
    // An added token replaces a base-vocab entry with the same id.
    tokens[a.id] = null;
    place(a.id, text, type, "added");
  }
  // Ids with no token (config vocab_size > tokenizer size): llama.cpp's
  // converter names them [PAD<id>] and marks them UNUSED.
  for (let i = 0; i < V; i++) if (tokens[i] === null) { tokens[i] = `[PAD${i}]`; types[i] = TOKTYPE.UNUSED; }

  const merges = tok.model.merges;
  if (!Array.isArray(merges) || merges.length === 0) die(`${tokFile}: no merges`);
  let mergeStrs;
  if (typeof merges[0] === "string") mergeStrs = merges;
  else if (Array.isArray(merges[0]) && merges[0].length === 2)
    // Pair form (transformers >= 4.45): spaces inside a part are written as U+0120, then joined with one space.
    mergeStrs = merges.map((p) => p.map((s) => s.replaceAll(" ", "\u0120")).join(" "));
  else die(`${tokFile}: unknown merges format`);

  w.addString("tokenizer.ggml.model", "gpt2");
  // Qwen2 pre-tokenizer regex; llama.cpp's converter detects it by hashing a test
  // string's tokens. Qwen3's tokenizer.json uses exactly that regex (checked below).
  const pres = tok.pre_tokenizer && tok.pre_tokenizer.type === "Sequence" ? tok.pre_tokenizer.pretokenizers : [tok.pre_tokenizer];
  const split = (pres || []).find((p) => p && p.type === "Split");
  const pre = split && split.pattern ? PRE_BY_REGEX[split.pattern.Regex] : undefined;
  if (!pre) die(`${tokFile}: pre_tokenizer is not the Qwen2 or the Llama 3 split regex; only "qwen2" and "llama-bpe" are supported`);
  w.addString("tokenizer.ggml.pre", pre);
  w.addStringArray("tokenizer.ggml.tokens", tokens);
  w.addI32Array("tokenizer.ggml.token_type", types);
  w.addStringArray("tokenizer.ggml.merges", mergeStrs);

  // Special ids like gguf-py SpecialVocab: tokenizer_config "<typ>_token" text
  // looked up among added tokens first, then config.json "<typ>_token_id".
  const keys = { bos: "bos_token_id", eos: "eos_token_id", unk: "unknown_token_id", sep: "seperator_token_id", pad: "padding_token_id", mask: "mask_token_id" };
  const ids = {};
  for (const typ of Object.keys(keys)) {
    const e = tc[`${typ}_token`];
    const content = typeof e === "string" ? e : e && typeof e.content === "string" ? e.content : null;
    if (content === null) continue;
    const hit = added.find((a) => a.content === content);
    if (hit) ids[typ] = hit.id;
  }
  const prefix = postProcessorPrefix(tok.post_processor);
  const prefixHit = prefix === null ? null : added.find((a) => a.content === prefix);
  if (ids.bos === undefined && prefixHit) ids.bos = prefixHit.id;
  for (const typ of Object.keys(keys)) {
    const v = cfg[`${typ}_token_id`];
    if (ids[typ] === undefined && Number.isInteger(v) && v >= 0 && v < V) ids[typ] = v;
  }
  for (const [typ, id] of Object.entries(ids)) w.addU32(`tokenizer.ggml.${keys[typ]}`, id);
  // tokenizer_config's add_bos_token, else the post-processor's leading
  // token being the BOS (Llama 3); Qwen adds none. Written explicitly so
  // llama.cpp never guesses.
  const addBos = typeof tc.add_bos_token === "boolean" ? tc.add_bos_token : prefixHit !== null && prefixHit !== undefined && prefixHit.id === ids.bos;
  w.addBool("tokenizer.ggml.add_bos_token", addBos);
  if (typeof tc.add_eos_token === "boolean") w.addBool("tokenizer.ggml.add_eos_token", tc.add_eos_token);

  let tmpl = typeof tc.chat_template === "string" ? tc.chat_template : null;
  const jinja = path.join(dir, "chat_template.jinja");
  if (tmpl === null && fs.existsSync(jinja)) tmpl = fs.readFileSync(jinja, "utf8");
  if (tmpl !== null) w.addString("tokenizer.chat_template", tmpl);
  return { nTokens: V, ids };
}

// ---------------------------------------------------------------- dense families

// The dense decoder families this converter maps, each as llama.cpp's
// convert_hf_to_gguf.py registers it (read there; nothing copied):
//  - qwen3: per-head q/k RMSNorm, NeoX rotary, no permutation;
//  - qwen2: q/k/v biases, no q/k norm, NeoX rotary;
//  - llama (and Mistral, which llama.cpp converts as llama): no q/k norm;
//    llama.cpp's llama graph rotates adjacent pairs (GPT-J), so q_proj and
//    k_proj rows are permuted per head from Hugging Face's rotate-half
//    layout (permuteRope), which makes the two computations the same.
const DENSE = {
  // ropeThetaDefault: transformers' config class's rope_theta when config.json leaves it out
  qwen3: { archs: ["Qwen3ForCausalLM"], modelType: "qwen3", gguf: "qwen3", qkNorm: true, ropeThetaDefault: 10000 },
  qwen2: { archs: ["Qwen2ForCausalLM"], modelType: "qwen2", gguf: "qwen2", qkvBias: true, slidingWindowField: false,
    ropeThetaDefault: 10000 },
  llama: { archs: ["LlamaForCausalLM", "MistralForCausalLM"], modelType: "llama", gguf: "llama", permuteQK: true,
    ropeThetaDefault: 10000, slidingWindowField: true },
  // granite: llama's layout and rotation plus four muP-style scales (graniteKeys)
  granite: { archs: ["GraniteForCausalLM"], modelType: "granite", gguf: "granite", permuteQK: true,
    ropeThetaDefault: 10000, multipliers: true },
  // phi3: q/k/v fused in one qkv_proj, gate and up in one gate_up_proj,
  // both stored fused (llama.cpp's phi3 views them); NeoX rotation over
  // partial_rotary_factor * head_dim; llama.cpp ignores its sliding window
  // (so a set one, which transformers applies, is refused: slidingWindowField)
  phi3: { archs: ["Phi3ForCausalLM"], modelType: "phi3", gguf: "phi3", fused: true, ropeThetaDefault: 10000,
    slidingWindowField: true, contextDefault: 4096, rmsEpsDefault: 1e-5, ropeDims: 1.0 },
  // smollm3: llama's layout and rotation; every 4th layer without RoPE
  // (llama.cpp fixes its n_no_rope_layer_step at 4 and reads no key for it,
  // so another interval or a no_rope_layers list of another pattern is refused)
  smollm3: { archs: ["SmolLM3ForCausalLM"], modelType: "smollm3", gguf: "smollm3", permuteQK: true,
    ropeThetaDefault: 2000000, contextDefault: 32768, noRopeStep: 4 },
  // olmo2: no norm before attention or the MLP, each block's output normed
  // (post_attention_norm, post_ffw_norm); q/k RMSNorm over the whole
  // projection; NeoX rotation; llama.cpp's olmo2 requires output.weight
  olmo2: { archs: ["Olmo2ForCausalLM"], modelType: "olmo2", gguf: "olmo2", postNorm: true, ropeThetaDefault: 10000,
    contextDefault: 2048, rmsEpsDefault: 1e-5, outputRequired: true,
    layerMap: { "post_attention_layernorm.weight": "post_attention_norm.weight", "post_feedforward_layernorm.weight": "post_ffw_norm.weight",
      "self_attn.q_norm.weight": "attn_q_norm.weight", "self_attn.k_norm.weight": "attn_k_norm.weight" } },
  // stablelm: LayerNorm with biases (layer_norm_eps), q/k/v biases when
  // use_qkv_bias, NeoX rotation over partial_rotary_factor (0.25 in its
  // class) of each head; llama.cpp's stablelm needs output.weight, so a
  // tied checkpoint's embedding is written again as the output
  stablelm: { archs: ["StableLmForCausalLM"], modelType: "stablelm", gguf: "stablelm", layerNorm: true,
    qkvBiasField: "use_qkv_bias", ropeThetaDefault: 10000, contextDefault: 4096, ropeDims: 0.25, outputRequired: true },
  // starcoder2: LayerNorm with biases (eps from norm_epsilon), every
  // projection biased when use_bias (its class's default true), a non-gated
  // MLP (c_fc, GELU with the tanh approximation, c_proj) stored as ffn_up and
  // ffn_down, NeoX rotation, tied by default; llama.cpp's starcoder2 ignores
  // the sliding window, which transformers applies (a set one is refused:
  // slidingWindowField); the embedding is written again as output.weight
  starcoder2: { archs: ["Starcoder2ForCausalLM"], modelType: "starcoder2", gguf: "starcoder2", layerNorm: true,
    layerNormEpsField: "norm_epsilon", biasField: "use_bias", plainMlp: true, act: "gelu_pytorch_tanh", tieDefault: true,
    ropeThetaDefault: 10000, contextDefault: 4096, slidingWindowField: true, outputRequired: true, headsSpanHidden: true },
  // phi2 (Phi-1/2): parallel residual from one shared LayerNorm (no
  // post_attention_layernorm), every projection biased, the output
  // projection stored as self_attn.dense, a non-gated fc1/fc2 GELU MLP,
  // model.final_layernorm, a bias on the head; NeoX rotation over
  // partial_rotary_factor (0.5 in its class); num_key_value_heads null
  // means one KV head per query head
  phi2: { archs: ["PhiForCausalLM"], modelType: "phi", gguf: "phi2", layerNorm: true, plainMlp: true,
    mlpNames: ["fc1", "fc2"], oName: "dense", finalNorm: "model.final_layernorm", sharedNorm: true, headBias: true,
    alwaysBias: true, act: "gelu_new", ropeThetaDefault: 10000, contextDefault: 2048, ropeDims: 0.5, outputRequired: true,
    headsSpanHidden: true, kvDefaultHeads: true },
};

/** SmolLM3's NoPE layers as llama.cpp computes them: every `fixed`-th
 *  layer (its n_no_rope_layer_step, no key); no_rope_layer_interval (the
 *  class's default 4 when absent) must be that, and a no_rope_layers list
 *  that period's pattern (layer l rotated iff (l + 1) % interval != 0). */
function noRopeStep(cfg, h, fixed, cfgFile) {
  const step = cfg.no_rope_layer_interval ?? 4;
  if (step !== fixed) die(`${cfgFile}: no_rope_layer_interval ${JSON.stringify(step)}: llama.cpp's smollm3 computes only ${fixed}`);
  const list = cfg.no_rope_layers;
  if (list != null) {
    if (!Array.isArray(list) || list.length !== h.num_hidden_layers) die(`${cfgFile}: no_rope_layers must list one 0/1 per layer`);
    list.forEach((v, l) => {
      if (Number(v) !== ((l + 1) % step !== 0 ? 1 : 0))
        die(`${cfgFile}: no_rope_layers[${l}] = ${v}: llama.cpp's smollm3 computes only every ${step}-th layer without RoPE`);
    });
  }
}

/** Granite's four multipliers as llama.cpp's granite graph reads them. Each
 *  is 1.0 in transformers' GraniteConfig when config.json leaves it out, so
 *  each is written whatever the config says: llama.cpp would read a missing
 *  attention.scale as 1/sqrt(head_dim), where transformers scales by 1.0. */
function graniteKeys(w, A, cfg, cfgFile) {
  const keys = { embedding_multiplier: "embedding_scale", attention_multiplier: "attention.scale",
    residual_multiplier: "residual_scale", logits_scaling: "logit_scale" };
  for (const [field, key] of Object.entries(keys)) {
    const v = cfg[field] ?? 1.0;
    if (typeof v !== "number" || !Number.isFinite(v)) die(`${cfgFile}: ${field} ${JSON.stringify(v)} is not a number`);
    if (field === "logits_scaling" && v === 0) die(`${cfgFile}: logits_scaling 0: the logits are divided by it`);
    w.addF32(`${A}.${key}`, v);
  }
}

function denseFamily(archs, modelType) {
  for (const f of Object.values(DENSE)) if (archs.some((a) => f.archs.includes(a))) return f;
  for (const f of Object.values(DENSE)) if (archs.length === 0 && modelType === f.modelType) return f;
  return null;
}

/** Rows of a [heads*hd, cols] q/k projection from rotate-half order (pair
 *  (j, j + hd/2)) to adjacent pairs (2j, 2j+1), per head: llama.cpp's
 *  permutation for the llama architecture. */
function permuteRope(a, heads, hd, cols) {
  const half = hd / 2;
  const head = new Float32Array(hd * cols);
  for (let g = 0; g < heads; g++) {
    const base = g * hd * cols;
    head.set(a.subarray(base, base + hd * cols));
    for (let j = 0; j < half; j++)
      for (let p = 0; p < 2; p++)
        a.set(head.subarray((p * half + j) * cols, (p * half + j + 1) * cols), base + (2 * j + p) * cols);
  }
}

// ---------------------------------------------------------------- main

// windowReach: the most positions the caller's llama.cpp run will reach (the
// oracle's, from its prompts and steps): a sliding window at least that wide
// never bites there, so a graph without one is the windowed model's oracle
// for that run; without it, the window must cover the whole context
export async function convert(modelDir, outPath, { type = "f32", noMtp = false, windowReach } = {}) {
  if (!Object.hasOwn(FTYPE, type)) die(`--type must be one of ${Object.keys(FTYPE).join(", ")}, not ${type}`);
  const cfgFile = path.join(modelDir, "config.json");
  let cfg = readJson(cfgFile);
  const archs = cfg.architectures || [];
  const q35 = archs.includes("Qwen3_5ForCausalLM") || archs.includes("Qwen3_5ForConditionalGeneration") || cfg.model_type === "qwen3_5_text";
  if (archs.includes("Qwen3_5ForConditionalGeneration") && cfg.text_config && typeof cfg.text_config === "object") {
    // the released layout: the text model's config under text_config, its
    // weights under model.language_model. (a vision tower, if any, is not converted)
    const tc = { ...cfg.text_config };
    if (tc.tie_word_embeddings === undefined) tc.tie_word_embeddings = cfg.tie_word_embeddings;
    return convertQwen35(modelDir, outPath, tc, cfgFile, type, "model.language_model.", { noMtp });
  }
  if (archs.includes("Qwen3_5ForCausalLM") || cfg.model_type === "qwen3_5_text")
    return convertQwen35(modelDir, outPath, cfg, cfgFile, type, null, { noMtp });
  if (archs.includes("Gemma3ForConditionalGeneration") && cfg.text_config && typeof cfg.text_config === "object")
    // Gemma 3 4B-27B as released: the text model's config under text_config
    // (only the fields that differ from Gemma3TextConfig's defaults), its
    // weights under language_model.; the vision tower is not converted
    return convertGemma3(modelDir, outPath, cfg.text_config, cfgFile, type, "language_model.");
  if (isGemma3(archs, cfg.model_type)) return convertGemma3(modelDir, outPath, cfg, cfgFile, type);
  if (isGemma2(archs, cfg.model_type)) return convertGemma2(modelDir, outPath, cfg, cfgFile, type);
  let fam = denseFamily(archs, cfg.model_type);
  if (!fam)
    die(`${cfgFile}: no conversion for architectures ${JSON.stringify(archs)} (model_type ${cfg.model_type}): ` +
      `this converter knows ${Object.values(DENSE).flatMap((f) => f.archs).concat(["Qwen3_5ForCausalLM", "Gemma3ForCausalLM", "Gemma2ForCausalLM"]).join(", ")}`);
  if (fam.qkvBiasField && cfg[fam.qkvBiasField] === true) fam = { ...fam, qkvBias: true };
  if (fam.alwaysBias || (fam.biasField && (cfg[fam.biasField] ?? true) === true)) fam = { ...fam, qkvBias: true, allBias: true };
  // PhiConfig: num_key_value_heads null (or absent) is num_attention_heads
  if (fam.kvDefaultHeads && cfg.num_key_value_heads == null) cfg = { ...cfg, num_key_value_heads: cfg.num_attention_heads };
  if (fam.layerNorm && (cfg.use_parallel_residual === true || cfg.qk_layernorm === true))
    die(`${cfgFile}: use_parallel_residual / qk_layernorm true: not converted here`);
  const need = ["hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "vocab_size"];
  for (const k of need) if (typeof cfg[k] !== "number") die(`${cfgFile}: missing or non-numeric ${k}`);
  // rms_norm_eps when absent: 1e-6 in the config classes of these families (Phi3Config: 1e-5)
  const h = { rms_norm_eps: fam.rmsEpsDefault ?? 1e-6, layer_norm_eps: 1e-5, ...cfg };
  if (fam.layerNormEpsField) h.layer_norm_eps = cfg[fam.layerNormEpsField] ?? 1e-5;
  const epsField = fam.layerNorm ? "layer_norm_eps" : "rms_norm_eps";
  if (typeof h[epsField] !== "number") die(`${cfgFile}: non-numeric ${epsField}`);
  if (typeof h.head_dim !== "number") h.head_dim = h.hidden_size / h.num_attention_heads;
  // llama.cpp's starcoder2 shapes q and the output projection [n_embd, n_embd]
  if (fam.headsSpanHidden && h.head_dim * h.num_attention_heads !== h.hidden_size)
    die(`${cfgFile}: head_dim ${h.head_dim} x ${h.num_attention_heads} heads is not hidden_size ${h.hidden_size}: llama.cpp's ${fam.gguf} needs them equal`);
  // transformers' configs of these families default tie_word_embeddings to false.
  h.tie_word_embeddings = (cfg.tie_word_embeddings ?? fam.tieDefault ?? false) === true;
  const ropeParams = cfg.rope_parameters || {};
  const theta = cfg.rope_theta ?? ropeParams.rope_theta ?? fam.ropeThetaDefault;
  if (typeof theta !== "number") die(`${cfgFile}: no rope_theta`);
  const scaling = cfg.rope_scaling || (ropeParams.rope_type && ropeParams.rope_type !== "default" ? ropeParams : null);
  // llama3 scaling (Llama 3.1+): llama.cpp's llama graph divides each pair's
  // frequency by a factor read from a rope_freqs tensor (ggml_rope_ext's
  // freq_factors), made here from the config (ropeFreqFactors)
  const llama3 = scaling && fam.permuteQK && (scaling.rope_type ?? scaling.type) === "llama3";
  // YaRN (Qwen2.5 / Qwen3 long context): llama.cpp reads the type, the
  // factor and the original context from keys and computes the ramp and the
  // attention factor 0.1 ln(factor) + 1 itself, with beta_fast 32 and
  // beta_slow 1; what it would compute otherwise is refused here
  const yarn = scaling && (scaling.rope_type ?? scaling.type) === "yarn" ? yarnKeys(scaling, cfgFile) : null;
  if (scaling && !llama3 && !yarn && scaling.rope_type !== "default" && scaling.type !== "default")
    die(`${cfgFile}: rope scaling ${JSON.stringify(scaling)} is not supported by this converter`);
  if (cfg.attention_bias === true && !fam.qkvBias) die(`${cfgFile}: attention_bias=true is not supported`);
  if (cfg.mlp_bias === true) die(`${cfgFile}: mlp_bias=true is not supported`);
  // llama.cpp's graphs for these architectures are SiLU-gated and attend to
  // every position: a config that says otherwise would get an oracle for
  // another model
  // (starcoder2: GELU, whose tanh approximation llama.cpp computes)
  const act = fam.act ?? "silu";
  if (cfg.hidden_act !== undefined && cfg.hidden_act !== act)
    die(`${cfgFile}: hidden_act ${JSON.stringify(cfg.hidden_act)}: llama.cpp's ${fam.gguf} computes ${act}`);
  if (cfg.use_sliding_window === true) die(`${cfgFile}: use_sliding_window=true: llama.cpp's ${fam.gguf} has no sliding window`);
  // MistralConfig's sliding_window is 4096 when config.json leaves it out
  const window = cfg.sliding_window === undefined && archs.includes("MistralForCausalLM") ? 4096 : cfg.sliding_window;
  const reach = Math.min(windowReach ?? Infinity, h.max_position_embeddings ?? Infinity);
  if (fam.slidingWindowField && window != null && window < reach)
    die(`${cfgFile}: sliding_window ${window}${cfg.sliding_window === undefined ? " (MistralConfig's default: the key is absent)" : ""}: ` +
      `llama.cpp's ${fam.gguf} graph attends to every position` +
      (windowReach !== undefined ? ` (this run reaches up to ${windowReach} positions)` : ""));

  const st = readSafetensorsIndex(modelDir);
  const expect = expectedShapes(h, fam);
  // tied: llama.cpp reuses token_embd
  checkTensors(modelDir, st, expect, (name) => name === "lm_head.weight" && h.tie_word_embeddings);

  const w = new GgufWriter();
  const A = fam.gguf;
  // llama_ftype: ALL_F32 0, MOSTLY_Q4_0 2, Q8_0 7, Q4_K_S 14, Q4_K_M 15, Q6_K 18, BF16 32
  addGeneral(w, A, modelDir, FTYPE[type][0]);
  if (type !== "f32" && type !== "bf16") w.addU32("general.quantization_version", 2); // ggml's GGML_QNT_VERSION
  // the context when max_position_embeddings is absent: the config class's default
  const context = archs.includes("MistralForCausalLM") ? 131072 : fam.contextDefault ?? (fam.permuteQK ? 2048 : 32768);
  addDecoderKeys(w, A, h, context, theta, fam.layerNorm);
  if (fam.permuteQK) w.addU32(`${A}.rope.dimension_count`, h.head_dim);
  if (fam.multipliers) graniteKeys(w, A, cfg, cfgFile);
  if (fam.noRopeStep) noRopeStep(cfg, h, fam.noRopeStep, cfgFile);
  if (fam.ropeDims !== undefined) {
    // the rotated width: the class's partial_rotary_factor when absent
    const prf = cfg.partial_rotary_factor ?? fam.ropeDims;
    const rot = Math.floor(prf * h.head_dim);
    if (typeof prf !== "number" || rot < 2 || rot % 2) die(`${cfgFile}: partial_rotary_factor ${prf} gives a rotated width of ${rot}`);
    w.addU32(`${A}.rope.dimension_count`, rot);
    if (typeof cfg.original_max_position_embeddings === "number")
      w.addU32(`${A}.rope.scaling.original_context_length`, cfg.original_max_position_embeddings);
  }
  if (yarn) {
    w.addString(`${A}.rope.scaling.type`, "yarn");
    w.addF32(`${A}.rope.scaling.factor`, yarn.factor);
    w.addU32(`${A}.rope.scaling.original_context_length`, yarn.orig);
  }
  const vocab = buildVocab(modelDir, h, w);

  const notes = [], types = {};
  const layerMap = fam.layerMap ? { ...LAYER_MAP, ...fam.layerMap } : LAYER_MAP;
  // the type a tensor is written in (1-D ones F32), counted into types
  const dstOf = (gname, src, tied) => {
    const dst = src.shape.length === 1 ? GGML_TYPE.F32
      : type === "f32" || type === "bf16" ? FTYPE[type][1]
      : pickType(type, gname, src.shape[src.shape.length - 1], h.num_hidden_layers, tied, notes);
    types[TYPE_NAME[dst]] = (types[TYPE_NAME[dst]] || 0) + 1;
    return dst;
  };
  for (const name of expect.keys()) {
    const src = st.get(name);
    const gname = ggufName(layerMap, name);
    const dst = dstOf(gname, src, h.tie_word_embeddings);
    const ne = [...src.shape].reverse();
    const heads = !fam.permuteQK ? 0 : name.endsWith(".q_proj.weight") ? h.num_attention_heads
      : name.endsWith(".k_proj.weight") ? h.num_key_value_heads : 0;
    if (heads) // permuted, then quantized (rows are whole blocks: pickType)
      w.addTensor(gname, ne, dst, (fd, at) => { const a = readF32(src); permuteRope(a, heads, h.head_dim, h.hidden_size); return writeF32As(a, dst, fd, at); });
    else w.addTensor(gname, ne, dst, (fd, at) => copyConverted(src, dst, fd, at));
  }
  if (h.tie_word_embeddings && fam.outputRequired) {
    // the architecture has no tied form in llama.cpp: the embedding again, as the output
    const src = st.get("model.embed_tokens.weight"), dst = dstOf("output.weight", src, false);
    w.addTensor("output.weight", [...src.shape].reverse(), dst, (fd, at) => copyConverted(src, dst, fd, at));
  }
  if (llama3) {
    const f = ropeFreqFactors(scaling, theta, h.head_dim, cfgFile);
    w.addTensor("rope_freqs.weight", [f.length], GGML_TYPE.F32, (fd, at) => writeF32As(f, GGML_TYPE.F32, fd, at));
  }
  await w.write(outPath);
  return { config: h, vocab, types, notes };
}

/** YaRN's members as llama.cpp reads them (rope.scaling.* keys); dies on
 *  what its graph would compute differently (an explicit attention_factor
 *  or mscale, betas other than its defaults 32 and 1). */
function yarnKeys(sc, cfgFile) {
  if (typeof sc.factor !== "number" || !(sc.factor > 0)) die(`${cfgFile}: rope_scaling yarn needs a positive factor`);
  const orig = sc.original_max_position_embeddings;
  if (!Number.isInteger(orig) || orig < 1) die(`${cfgFile}: rope_scaling yarn needs original_max_position_embeddings`);
  for (const k of ["attention_factor", "mscale", "mscale_all_dim"])
    if (sc[k] != null) die(`${cfgFile}: rope_scaling yarn with ${k}: not converted (llama.cpp's attention factor is 0.1 ln(factor) + 1)`);
  if ((sc.beta_fast ?? 32) !== 32 || (sc.beta_slow ?? 1) !== 1)
    die(`${cfgFile}: rope_scaling yarn with beta_fast/beta_slow other than 32/1: not converted`);
  return { factor: sc.factor, orig };
}

/** llama3 rope scaling as llama.cpp reads it: per pair i of a head of hd
 *  channels, the divisor of its frequency inv = theta^(-2i/hd). With
 *  s = clamp((orig / wavelength - low) / (high - low), 0, 1), the scaled
 *  frequency is inv * ((1 - s) / factor + s): kept for short wavelengths
 *  (s = 1), divided by factor for long ones (s = 0), interpolated between
 *  (the rope scaling of Hugging Face's Llama 3.1 configs, written here from
 *  that definition). */
function ropeFreqFactors(sc, theta, hd, cfgFile) {
  const factor = sc.factor, low = sc.low_freq_factor, high = sc.high_freq_factor, orig = sc.original_max_position_embeddings;
  if (![factor, low, high, orig].every((v) => typeof v === "number" && v > 0) || high <= low)
    die(`${cfgFile}: rope_scaling llama3 needs positive factor, low_freq_factor < high_freq_factor, original_max_position_embeddings`);
  const out = new Float32Array(hd / 2);
  for (let i = 0; i < hd / 2; i++) {
    const inv = Math.pow(theta, (-2 * i) / hd), wavelen = (2 * Math.PI) / inv;
    const s = Math.min(Math.max((orig / wavelen - low) / (high - low), 0), 1);
    out[i] = 1 / ((1 - s) / factor + s);
  }
  return out;
}

// the block quantizers, for tests (tests/gguf/q4_peer.mjs)
export const quantizers = {
  Q4_0: quantizeQ4_0, Q4_1: quantizeQ4_1, Q5_0: quantizeQ5_0, Q5_1: quantizeQ5_1, Q2_K: quantizeQ2_K, Q3_K: quantizeQ3_K,
  Q4_K: quantizeQ4_K, Q5_K: quantizeQ5_K, Q6_K: quantizeQ6_K, Q8_0: quantizeQ8_0,
};

async function main(argv) {
  const pos = [];
  let type = "f32", noMtp = false;
  for (let i = 0; i < argv.length; i++) {
    if (argv[i] === "--type") type = argv[++i];
    else if (argv[i] === "--no-mtp") noMtp = true;
    else if (argv[i] === "-h" || argv[i] === "--help") pos.length = 99;
    else pos.push(argv[i]);
  }
  if (pos.length !== 2) {
    console.error("usage: node hf2gguf.mjs MODEL_DIR OUT.gguf [--type f32|bf16|q8_0|q4_0|q4_1|q5_0|q5_1|q2_k|q3_k|q4_k|q5_k|q6_k|q3_k_m|q4_k_m|q5_k_m] [--no-mtp]");
    process.exit(2);
  }
  try {
    const t0 = Date.now();
    const r = await convert(pos[0], pos[1], { type, noMtp });
    for (const n of r.notes || []) console.error(`hf2gguf: ${n}`);
    if (r.types) {
      const counts = Object.entries(r.types).map(([k, v]) => `${v} ${k}`).join(", ");
      console.error(`hf2gguf: ${pos[1]}: --type ${type}: tensors ${counts}; ${fs.statSync(pos[1]).size} bytes in ${((Date.now() - t0) / 1000).toFixed(1)} s`);
    }
  } catch (e) {
    console.error(`hf2gguf: ${e.userError ? e.message : e.stack}`);
    try { fs.unlinkSync(pos[1]); } catch { /* nothing written */ }
    process.exit(1);
  }
}

if (process.argv[1] && import.meta.url === pathToFileURL(fs.realpathSync(process.argv[1])).href) main(process.argv.slice(2));
