#!/usr/bin/env node
// A GGUF file widened to an all-F32 copy: every tensor's values exactly as
// MetaInfer computes on them, so that llama.cpp (stage 4's oracle,
// oracle.mjs) runs on the very same numbers.
//
//   node tools/peer/gguf_f32.mjs IN.gguf OUT.gguf
//
// Each element is the source's value, computed in float64 as
// sdk/include/mi/quant.h defines it (mi_quant_value64), then rounded once to
// f32 (mi_quant_row_f32): F32 copied, F16 and BF16 widened bit for bit,
// Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K and Q6_K dequantized.
// The metadata key/values are copied
// byte for byte and in order, except general.file_type, which is set to 0
// (ALL_F32) in its own integer type; the version, tensor names, order and
// dims are unchanged; the data section is aligned to general.alignment
// (default 32), each tensor written in turn, a chunk at a time (the model is
// never held in memory, not even one whole tensor of it).
//
// The reader (GGUF v2/v3, little-endian) is bounded, as core/runtime/gguf.c
// is (docs/gguf.md, "What is refused"): a file that ends early, counts or
// string lengths over the limits, offsets out of range, misaligned or
// overlapping, a quantized row that is not whole blocks are one line naming
// the file and the problem, never a crash or a huge allocation.
//
// Exit: 0 written; 2 usage; 1 a bad file (one line); 3 a tensor of a ggml
// type this tool does not widen (one line naming the tensor and its type).
// Written from the GGUF format description and quant.h; no code from
// llama.cpp.

import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { pathToFileURL } from "node:url";

// ---------------------------------------------------------------- types

/** The ggml types by number (ggml.h's enum ggml_type), for messages. */
export const GGML_TYPE_NAME = {
  0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 6: "Q5_0", 7: "Q5_1", 8: "Q8_0", 9: "Q8_1",
  10: "Q2_K", 11: "Q3_K", 12: "Q4_K", 13: "Q5_K", 14: "Q6_K", 15: "Q8_K",
  16: "IQ2_XXS", 17: "IQ2_XS", 18: "IQ3_XXS", 19: "IQ1_S", 20: "IQ4_NL", 21: "IQ3_S", 22: "IQ2_S", 23: "IQ4_XS",
  24: "I8", 25: "I16", 26: "I32", 27: "I64", 28: "F64", 29: "IQ1_M", 30: "BF16",
  34: "TQ1_0", 35: "TQ2_0", 39: "MXFP4",
};

/** The types widened here: [elements per block, bytes per block]. */
export const WIDENED = {
  0: [1, 4], 1: [1, 2], 30: [1, 2],          // F32, F16, BF16
  8: [32, 34], 2: [32, 18],                  // Q8_0, Q4_0
  12: [256, 144], 13: [256, 176], 14: [256, 210], // Q4_K, Q5_K, Q6_K
  3: [32, 20], 6: [32, 22], 7: [32, 24],     // Q4_1, Q5_0, Q5_1
  10: [256, 84], 11: [256, 110],             // Q2_K, Q3_K
};

/** Limits, as gguf.h's (docs/gguf.md). */
export const LIMITS = {
  kv: 65536, tensors: 1000000, keyBytes: 65535, nameBytes: 256,
  stringBytes: 64 * 1024 * 1024, arrayElements: 64 * 1024 * 1024, dims: 4, alignment: 1024 * 1024,
};

// GGUF metadata value types: id -> [name, fixed size in bytes or 0 (string/array)]
const VT = {
  0: ["u8", 1], 1: ["i8", 1], 2: ["u16", 2], 3: ["i16", 2], 4: ["u32", 4], 5: ["i32", 4], 6: ["f32", 4],
  7: ["bool", 1], 8: ["string", 0], 9: ["array", 0], 10: ["u64", 8], 11: ["i64", 8], 12: ["f64", 8],
};
const VT_INTEGER = new Set([0, 1, 2, 3, 4, 5, 10, 11]);

/** A file this tool refuses: `exit` 1 (a bad file) or 3 (a type it does not widen). */
export class GgufError extends Error {
  constructor(message, exit = 1) {
    super(message);
    this.exit = exit;
  }
}

// ---------------------------------------------------------------- f16 / bf16

// f16 bits -> f32 bits, exactly (subnormals normalised, inf and NaN kept
// with their payload): mi_f16_to_f32's definition
function f16ToF32Bits(h) {
  const sign = (h & 0x8000) << 16;
  let exp = (h >> 10) & 31, man = h & 1023;
  if (exp === 31) return (sign | 0x7f800000 | (man << 13)) >>> 0;
  if (exp === 0) {
    if (man === 0) return sign >>> 0;
    exp = 1;
    while (!(man & 1024)) { man <<= 1; exp--; }
    man &= 1023;
  }
  return (sign | ((exp + 112) << 23) | (man << 13)) >>> 0;
}

let F16_BITS = null, F16_VALUE = null; // 65536-entry tables, made on first use
function f16Tables() {
  if (!F16_BITS) {
    F16_BITS = new Uint32Array(65536);
    for (let h = 0; h < 65536; h++) F16_BITS[h] = f16ToF32Bits(h);
    F16_VALUE = new Float64Array(new Float32Array(F16_BITS.buffer.slice(0))); // each exactly
  }
}

// ---------------------------------------------------------------- dequantizers
//
// dequantX(src, n, out): the n values held at the start of src (a
// Uint8Array; for block types n is whole blocks) into out (a Float32Array of
// at least n, made when not given), which is returned. Block types: each
// value in float64 with quant.h's expression and order of operations, then
// rounded once to f32 (the store into a Float32Array rounds to nearest
// even, as C's (float) does).

function need(src, n, bytes, what) {
  if (!Number.isInteger(n) || n < 0) throw new RangeError(`${what}: ${n} is not a count of values`);
  if (src.length < bytes) throw new RangeError(`${what}: ${n} values need ${bytes} bytes, the source holds ${src.length}`);
}

export function dequantF32(src, n, out = new Float32Array(n)) {
  need(src, n, n * 4, "F32");
  new Uint8Array(out.buffer, out.byteOffset, n * 4).set(src.subarray(0, n * 4));
  return out;
}

export function dequantF16(src, n, out = new Float32Array(n)) {
  need(src, n, n * 2, "F16");
  f16Tables();
  const o = new Uint32Array(out.buffer, out.byteOffset, n);
  for (let i = 0; i < n; i++) o[i] = F16_BITS[src[2 * i] | (src[2 * i + 1] << 8)];
  return out;
}

export function dequantBF16(src, n, out = new Float32Array(n)) {
  need(src, n, n * 2, "BF16");
  const o = new Uint32Array(out.buffer, out.byteOffset, n);
  for (let i = 0; i < n; i++) o[i] = ((src[2 * i] | (src[2 * i + 1] << 8)) << 16) >>> 0;
  return out;
}

function blocks(src, n, qk, bb, what) {
  if (n % qk) throw new RangeError(`${what}: ${n} values are not whole blocks of ${qk}`);
  need(src, n, (n / qk) * bb, what);
  f16Tables();
  return n / qk;
}

/** Q8_0: d (f16) | q[32] int8; x = d*q. */
export function dequantQ8_0(src, n, out = new Float32Array(n)) {
  const nb = blocks(src, n, 32, 34, "Q8_0");
  for (let b = 0, o = 0, k = 0; b < nb; b++, o += 34) {
    const d = F16_VALUE[src[o] | (src[o + 1] << 8)];
    for (let j = 0; j < 32; j++) out[k++] = d * ((src[o + 2 + j] << 24) >> 24);
  }
  return out;
}

/** Q4_0: d (f16) | qs[16]; value j < 16 the low nibble of qs[j], j + 16 its high one; x = d*(q-8). */
export function dequantQ4_0(src, n, out = new Float32Array(n)) {
  const nb = blocks(src, n, 32, 18, "Q4_0");
  for (let b = 0, o = 0; b < nb; b++, o += 18) {
    const d = F16_VALUE[src[o] | (src[o + 1] << 8)], k = b * 32;
    for (let j = 0; j < 16; j++) {
      const q = src[o + 2 + j];
      out[k + j] = d * ((q & 15) - 8);
      out[k + j + 16] = d * ((q >> 4) - 8);
    }
  }
  return out;
}

/** Sub-block j's 6-bit scale and min from the 12 bytes at src[s] (Q4_K's
 *  and Q5_K's packing: quant.h's mi_q4_k_scale_min). */
function kScaleMin(src, s, j) {
  if (j < 4) return [src[s + j] & 63, src[s + j + 4] & 63];
  return [(src[s + j + 4] & 15) | ((src[s + j - 4] >> 6) << 4), (src[s + j + 4] >> 4) | ((src[s + j] >> 6) << 4)];
}

/** Q4_K: d | dmin (f16) | scales[12] | qs[128]; sub-block j of 32 values:
 *  x = d*sc_j*q - dmin*m_j (quant.h's mi_q4_k_scale_min, mi_q4_k_code). */
export function dequantQ4_K(src, n, out = new Float32Array(n)) {
  const nb = blocks(src, n, 256, 144, "Q4_K");
  for (let b = 0, o = 0; b < nb; b++, o += 144) {
    const d = F16_VALUE[src[o] | (src[o + 1] << 8)], dmin = F16_VALUE[src[o + 2] | (src[o + 3] << 8)];
    const s = o + 4, k0 = b * 256;
    for (let j = 0; j < 8; j++) {
      const [sc, m] = kScaleMin(src, s, j);
      // quant.h: (double)d * sc * q - (double)dmin * m, in that order
      const dsc = d * sc, dm = dmin * m, q0 = o + 16 + 32 * (j >> 1), k = k0 + 32 * j;
      if (j & 1) for (let l = 0; l < 32; l++) out[k + l] = dsc * (src[q0 + l] >> 4) - dm;
      else for (let l = 0; l < 32; l++) out[k + l] = dsc * (src[q0 + l] & 15) - dm;
    }
  }
  return out;
}

/** Q5_K: d | dmin (f16) | scales[12] | qh[32] | qs[128]: Q4_K's scales,
 *  mins and nibbles, plus bit j of qh[l] as the fifth bit of value 32j + l
 *  (quant.h's mi_q5_k_code): x = d*sc_j*q - dmin*m_j, q in 0..31. */
export function dequantQ5_K(src, n, out = new Float32Array(n)) {
  const nb = blocks(src, n, 256, 176, "Q5_K");
  for (let b = 0, o = 0; b < nb; b++, o += 176) {
    const d = F16_VALUE[src[o] | (src[o + 1] << 8)], dmin = F16_VALUE[src[o + 2] | (src[o + 3] << 8)];
    const s = o + 4, qh = o + 16, k0 = b * 256;
    for (let j = 0; j < 8; j++) {
      const [sc, m] = kScaleMin(src, s, j);
      const dsc = d * sc, dm = dmin * m, q0 = o + 48 + 32 * (j >> 1), k = k0 + 32 * j, sh = j & 1 ? 4 : 0;
      for (let l = 0; l < 32; l++) out[k + l] = dsc * (((src[q0 + l] >> sh) & 15) | (((src[qh + l] >> j) & 1) << 4)) - dm;
    }
  }
  return out;
}

/** Q6_K: ql[128] | qh[64] | scales[16] int8 | d (f16); x = d*scales[i/16]*(q-32). */
export function dequantQ6_K(src, n, out = new Float32Array(n)) {
  const nb = blocks(src, n, 256, 210, "Q6_K");
  for (let b = 0, o = 0; b < nb; b++, o += 210) {
    const d = F16_VALUE[src[o + 208] | (src[o + 209] << 8)], k0 = b * 256;
    for (let h = 0; h < 2; h++) {
      const ql = o + 64 * h, qh = o + 128 + 32 * h;
      for (let quarter = 0; quarter < 4; quarter++) {
        const lo0 = ql + (quarter & 1) * 32, shift = quarter & 2 ? 4 : 0, hs = 2 * quarter;
        const i0 = 128 * h + 32 * quarter;
        // value i0 + l: sub-block (i0 + l) / 16, i.e. two scales per quarter
        for (let l = 0; l < 32; l++) {
          const i = i0 + l;
          const q = ((src[lo0 + l] >> shift) & 15) | (((src[qh + l] >> hs) & 3) << 4);
          const sc = (src[o + 192 + (i >> 4)] << 24) >> 24;
          out[k0 + i] = d * sc * (q - 32);
        }
      }
    }
  }
  return out;
}

/** Q4_1, Q5_0, Q5_1: d (f16) | m (f16; Q4_1, Q5_1) | qh (u32; Q5_0, Q5_1) | qs[16];
 *  value j < 16 the low nibble of qs[j], j + 16 its high one, bit j of qh
 *  its fifth bit; x = d*q + m (Q4_1, Q5_1) or d*(q-16) (Q5_0). */
function dequantLegacy(what, bb, hasMin, hasHigh) {
  return (src, n, out = new Float32Array(n)) => {
    const nb = blocks(src, n, 32, bb, what);
    for (let b = 0, o = 0; b < nb; b++, o += bb) {
      const d = F16_VALUE[src[o] | (src[o + 1] << 8)];
      const m = hasMin ? F16_VALUE[src[o + 2] | (src[o + 3] << 8)] : 0;
      const h = o + 2 + (hasMin ? 2 : 0), qs = h + (hasHigh ? 4 : 0), k = b * 32;
      const qh = hasHigh ? (src[h] | (src[h + 1] << 8) | (src[h + 2] << 16) | (src[h + 3] << 24)) >>> 0 : 0;
      for (let j = 0; j < 16; j++) {
        const q0 = (src[qs + j] & 15) | (((qh >>> j) & 1) << 4), q1 = (src[qs + j] >> 4) | (((qh >>> (j + 16)) & 1) << 4);
        // quant.h: (double)d * q + (double)m, or (double)d * (q - 16)
        out[k + j] = hasMin ? d * q0 + m : d * (q0 - 16);
        out[k + j + 16] = hasMin ? d * q1 + m : d * (q1 - 16);
      }
    }
    return out;
  };
}
export const dequantQ4_1 = dequantLegacy("Q4_1", 20, true, false);
export const dequantQ5_0 = dequantLegacy("Q5_0", 22, false, true);
export const dequantQ5_1 = dequantLegacy("Q5_1", 24, true, true);

/** Q2_K: scales[16] | qs[64] | d | dmin (f16); value 128n+32j+l (n < 2,
 *  j < 4, l < 32) is bits 2j, 2j+1 of qs[32n+l], sub-block s = 8n+2j+l/16
 *  with sc = scales[s] & 15, m = scales[s] >> 4: x = d*sc*q - dmin*m. */
export function dequantQ2_K(src, n, out = new Float32Array(n)) {
  const nb = blocks(src, n, 256, 84, "Q2_K");
  for (let b = 0, o = 0; b < nb; b++, o += 84) {
    const d = F16_VALUE[src[o + 80] | (src[o + 81] << 8)], dmin = F16_VALUE[src[o + 82] | (src[o + 83] << 8)];
    for (let i = 0; i < 256; i++) {
      const nn = i >> 7, j = (i & 127) >> 5, l = i & 31, s = 8 * nn + 2 * j + (l >> 4);
      const q = (src[o + 16 + 32 * nn + l] >> (2 * j)) & 3;
      out[b * 256 + i] = d * (src[o + s] & 15) * q - dmin * (src[o + s] >> 4);
    }
  }
  return out;
}

/** Q3_K: hmask[32] | qs[64] | scales[12] | d (f16); value 128n+32j+l takes
 *  the low bits as Q2_K's (qs at 32) and q = that - 4 unless bit 4n+j of
 *  hmask[l] is set; sub-block s's 6-bit scale u: low four bits the low
 *  (s < 8) or high nibble of scales[s % 8], high two bits 2(s/4) of
 *  scales[8 + s % 4]; x = d*(u-32)*q. */
export function dequantQ3_K(src, n, out = new Float32Array(n)) {
  const nb = blocks(src, n, 256, 110, "Q3_K");
  for (let b = 0, o = 0; b < nb; b++, o += 110) {
    const d = F16_VALUE[src[o + 108] | (src[o + 109] << 8)], sc = o + 96;
    for (let i = 0; i < 256; i++) {
      const nn = i >> 7, j = (i & 127) >> 5, l = i & 31, s = 8 * nn + 2 * j + (l >> 4);
      const u = (s < 8 ? src[sc + s] & 15 : src[sc + s - 8] >> 4) | (((src[sc + 8 + (s & 3)] >> (2 * (s >> 2))) & 3) << 4);
      const q = ((src[o + 32 + 32 * nn + l] >> (2 * j)) & 3) - ((src[o + l] >> (4 * nn + j)) & 1 ? 0 : 4);
      out[b * 256 + i] = d * (u - 32) * q;
    }
  }
  return out;
}

/** The dequantizer of each widened type, by ggml type number. */
export const DEQUANT = {
  0: dequantF32, 1: dequantF16, 30: dequantBF16, 8: dequantQ8_0, 2: dequantQ4_0, 12: dequantQ4_K, 13: dequantQ5_K, 14: dequantQ6_K,
  3: dequantQ4_1, 6: dequantQ5_0, 7: dequantQ5_1, 10: dequantQ2_K, 11: dequantQ3_K,
};

/** n values of ggml type `type` at the start of src, as a Float32Array. */
export function dequantize(type, src, n, out) {
  const f = DEQUANT[type];
  if (!f) throw new RangeError(`ggml type ${typeName(type)} is not widened here`);
  return f(src, n, out);
}

export function typeName(t) {
  return GGML_TYPE_NAME[t] ?? `unknown (${t})`;
}

// ---------------------------------------------------------------- the reader

const WINDOW = 1 << 20;

/** Little-endian reads at a position, through a window; every read checked
 *  against the file's size first (no allocation larger than what is read). */
class Cursor {
  constructor(fd, size, file) {
    this.fd = fd; this.size = size; this.file = file;
    this.pos = 0; this.buf = Buffer.alloc(Math.min(WINDOW, Math.max(size, 1))); this.bufAt = 0; this.bufLen = 0;
  }
  fail(msg) { throw new GgufError(`${this.file}: ${msg}`); }
  /** Makes n bytes at pos readable (n <= the window), or fails naming `what`. */
  need(n, what) {
    if (this.pos + n > this.size) this.fail(`truncated: ${what} needs ${n} bytes at offset ${this.pos} (the file has ${this.size})`);
    if (this.pos >= this.bufAt && this.pos + n <= this.bufAt + this.bufLen) return this.pos - this.bufAt;
    const len = Math.min(this.buf.length, this.size - this.pos);
    let got = 0;
    while (got < len) {
      const r = fs.readSync(this.fd, this.buf, got, len - got, this.pos + got);
      if (r === 0) this.fail(`short read at offset ${this.pos + got}`);
      got += r;
    }
    this.bufAt = this.pos; this.bufLen = len;
    return 0;
  }
  u8(what) { const o = this.need(1, what); this.pos += 1; return this.buf[o]; }
  u32(what) { const o = this.need(4, what); this.pos += 4; return this.buf.readUInt32LE(o); }
  u64(what) { const o = this.need(8, what); this.pos += 8; return this.buf.readBigUInt64LE(o); }
  /** A u64 that must be at most max (a Number is returned). */
  count(what, max, unit = "") {
    const at = this.pos, v = this.u64(what);
    if (v > BigInt(max)) this.fail(`${what} at offset ${at} is ${v}${unit}, over the limit of ${max}`);
    return Number(v);
  }
  skip(n, what) {
    if (this.pos + n > this.size) this.fail(`truncated: ${what} needs ${n} bytes at offset ${this.pos} (the file has ${this.size})`);
    this.pos += n;
  }
  /** The raw bytes of a GGUF string (u64 length + bytes) of at most max bytes. */
  strBytes(what, max) {
    const n = this.count(`the length of ${what}`, max, " bytes");
    if (n > this.size - this.pos) this.fail(`${what} at offset ${this.pos - 8} is ${n} bytes long, past the end of the file (${this.size - this.pos} bytes left)`);
    if (n <= this.buf.length) {
      const o = this.need(n, what);
      this.pos += n;
      return Buffer.from(this.buf.subarray(o, o + n));
    }
    const b = Buffer.alloc(n);
    const got = fs.readSync(this.fd, b, 0, n, this.pos);
    if (got !== n) this.fail(`short read at offset ${this.pos}`);
    this.pos += n;
    return b;
  }
  /** Skips a GGUF string value (checked, not read). */
  skipStr(what, max) {
    const n = this.count(`the length of ${what}`, max, " bytes");
    if (n > this.size - this.pos) this.fail(`${what} at offset ${this.pos - 8} is ${n} bytes long, past the end of the file (${this.size - this.pos} bytes left)`);
    this.pos += n;
  }
}

function printable(bytes) {
  for (const c of bytes) if (c < 0x20 || c === 0x7f) return false;
  return true;
}

function showName(bytes) {
  const s = bytes.toString("utf8");
  return JSON.stringify(s.length > 80 ? s.slice(0, 80) + "..." : s);
}

/** Reads a value of type vt (not an array) at the cursor, checked; returns
 *  its number for integers and f32/f64 (else undefined). */
function readScalar(c, vt, what) {
  switch (vt) {
    case 8: c.skipStr(what, LIMITS.stringBytes); return undefined;
    case 7: {
      const at = c.pos, v = c.u8(what);
      if (v > 1) c.fail(`${what} at offset ${at} is a bool of ${v} (not 0 or 1)`);
      return v;
    }
    default: {
      const size = VT[vt][1], o = c.need(size, what);
      c.pos += size;
      const b = c.buf;
      switch (vt) {
        case 0: return b[o];
        case 1: return b.readInt8(o);
        case 2: return b.readUInt16LE(o);
        case 3: return b.readInt16LE(o);
        case 4: return b.readUInt32LE(o);
        case 5: return b.readInt32LE(o);
        case 6: return b.readFloatLE(o);
        case 10: return b.readBigUInt64LE(o);
        case 11: return b.readBigInt64LE(o);
        case 12: return b.readDoubleLE(o);
      }
    }
  }
  return undefined;
}

/**
 * The header of a GGUF file, checked. Returns {file, size, version,
 * alignment, kvEnd (the metadata is bytes 24..kvEnd), kvs: [{key, type,
 * at (the value's offset), value (scalars)}], tensors: [{name, nameBytes,
 * ne, dimsRaw (the n_dims and ne bytes as stored), type, offset, nel,
 * nbytes (widened types)}], dataStart}. Throws GgufError: exit 1 for a bad
 * file, exit 3 for a tensor whose type is not widened here (after every
 * check of the file's structure).
 */
export function readGguf(file) {
  let fd;
  try {
    fd = fs.openSync(file, "r");
  } catch (e) {
    throw new GgufError(`${file}: cannot open it: ${e.code ?? e.message}`);
  }
  try {
    const st = fs.fstatSync(fd);
    if (!st.isFile()) throw new GgufError(`${file}: not a regular file`);
    return parse(new Cursor(fd, st.size, file));
  } finally {
    fs.closeSync(fd);
  }
}

function parse(c) {
  const file = c.file;
  const mo = c.need(4, "the magic");
  const magic = c.buf.subarray(mo, mo + 4);
  if (magic.toString("latin1") !== "GGUF") c.fail(`not a GGUF file (it starts with ${JSON.stringify(magic.toString("latin1"))}, not "GGUF")`);
  c.pos = 4;
  const version = c.u32("the version");
  if (version !== 2 && version !== 3) {
    if ((version & 0xffff) === 0 && ((version >>> 24) === 2 || (version >>> 24) === 3))
      c.fail(`a big-endian GGUF file (version ${version >>> 24} stored big-endian); only little-endian files are read`);
    c.fail(`GGUF version ${version} (only versions 2 and 3 are read)`);
  }
  const nTensors = c.count("the tensor count", LIMITS.tensors);
  const nKv = c.count("the metadata count", LIMITS.kv);
  // each pair needs at least 8 + 1 + 4 + 1 bytes, each tensor info 8 + 1 + 4 + 8 + 4 + 8
  if (nKv * 14 + nTensors * 33 > c.size - c.pos)
    c.fail(`${nKv} metadata pairs and ${nTensors} tensors cannot fit in the ${c.size - c.pos} bytes left after the header`);

  const kvs = [], keys = new Set();
  let alignment = 32;
  for (let i = 0; i < nKv; i++) {
    const kb = c.strBytes(`metadata key ${i}`, LIMITS.keyBytes);
    if (kb.length === 0) c.fail(`metadata key ${i} is empty`);
    if (!printable(kb)) c.fail(`metadata key ${i} (${showName(kb)}) holds control characters`);
    const key = kb.toString("utf8");
    if (keys.has(key)) c.fail(`metadata key ${showName(kb)} appears twice`);
    keys.add(key);
    const vtAt = c.pos, vt = c.u32(`the value type of ${key}`);
    if (!VT[vt]) c.fail(`metadata key ${key}: unknown value type ${vt} at offset ${vtAt}`);
    const at = c.pos;
    let value;
    if (vt === 9) {
      const etAt = c.pos, et = c.u32(`the element type of ${key}`);
      if (!VT[et]) c.fail(`metadata key ${key}: array of unknown value type ${et} at offset ${etAt}`);
      if (et === 9) c.fail(`metadata key ${key}: an array of arrays (at offset ${etAt})`);
      const n = c.count(`the array length of ${key}`, LIMITS.arrayElements, " elements");
      const esz = VT[et][1];
      if (esz) {
        if (n * esz > c.size - c.pos) c.fail(`metadata key ${key}: an array of ${n} ${VT[et][0]} (${n * esz} bytes) at offset ${c.pos} runs past the end of the file`);
        if (et === 7) for (let j = 0; j < n; j++) readScalar(c, 7, `${key}[${j}]`);
        else c.skip(n * esz, key);
      } else {
        if (n * 8 > c.size - c.pos) c.fail(`metadata key ${key}: an array of ${n} strings cannot fit in the ${c.size - c.pos} bytes left`);
        for (let j = 0; j < n; j++) c.skipStr(`${key}[${j}]`, LIMITS.stringBytes);
      }
    } else {
      value = readScalar(c, vt, key);
    }
    if (key === "general.alignment") {
      if (vt !== 4) c.fail(`general.alignment is a ${VT[vt][0]}, not a u32`);
      if (!(value > 0 && (value & (value - 1)) === 0 && value <= LIMITS.alignment))
        c.fail(`general.alignment ${value} is not a power of two in 1..${LIMITS.alignment}`);
      alignment = value;
    }
    kvs.push({ key, type: vt, at, value });
  }
  const kvEnd = c.pos;

  const tensors = [], names = new Set();
  for (let i = 0; i < nTensors; i++) {
    const nb = c.strBytes(`the name of tensor ${i}`, LIMITS.nameBytes);
    if (nb.length === 0) c.fail(`tensor ${i} has an empty name`);
    if (!printable(nb)) c.fail(`tensor ${i} (${showName(nb)}) has control characters in its name`);
    const name = nb.toString("utf8");
    if (names.has(name)) c.fail(`tensor name ${showName(nb)} appears twice`);
    names.add(name);
    const dimsAt = c.pos, nd = c.u32(`the n_dims of tensor '${name}'`);
    if (nd < 1 || nd > LIMITS.dims) c.fail(`tensor '${name}': n_dims ${nd} at offset ${dimsAt} is not in 1..${LIMITS.dims}`);
    const ne = [];
    let nel = 1n;
    for (let d = 0; d < nd; d++) {
      const v = c.u64(`ne[${d}] of tensor '${name}'`);
      nel *= v;
      if (v > 2n ** 53n || nel > 2n ** 53n) c.fail(`tensor '${name}': dimensions [${[...ne, v].join(", ")}${d + 1 < nd ? ", ..." : ""}] hold more than 2^53 elements`);
      ne.push(Number(v));
    }
    const dimsRaw = { at: dimsAt, len: c.pos - dimsAt };
    const type = c.u32(`the type of tensor '${name}'`);
    const offAt = c.pos, off = c.u64(`the offset of tensor '${name}'`);
    if (off > 2n ** 53n) c.fail(`tensor '${name}': offset ${off} at offset ${offAt} is out of range (the file has ${c.size} bytes)`);
    tensors.push({ name, nameBytes: nb, ne, dimsRaw, type, offset: Number(off), nel: Number(nel), nbytes: null });
  }
  const dataStart = Math.ceil(c.pos / alignment) * alignment;
  if (nTensors > 0 && dataStart > c.size)
    c.fail(`truncated: the data section would start at offset ${dataStart}, past the end of the file (${c.size} bytes)`);

  // the extents of the tensors this tool widens (any other type: exit 3, below)
  const dataBytes = c.size - dataStart, placed = [];
  for (const t of tensors) {
    if (t.offset % alignment) c.fail(`tensor '${t.name}': offset ${t.offset} is not a multiple of the alignment ${alignment}`);
    const w = WIDENED[t.type];
    if (!w) continue;
    if (t.ne[0] % w[0]) c.fail(`tensor '${t.name}': ne[0] = ${t.ne[0]} is not a multiple of the ${typeName(t.type)} block of ${w[0]}`);
    t.nbytes = (t.nel / w[0]) * w[1];
    if (t.offset > dataBytes || t.nbytes > dataBytes - t.offset)
      c.fail(`tensor '${t.name}' (${typeName(t.type)}, ${t.nbytes} bytes at data offset ${t.offset}) lies past the end of the file (the data section holds ${dataBytes} bytes from offset ${dataStart})`);
    placed.push(t);
  }
  placed.sort((a, b) => a.offset - b.offset);
  for (let i = 1; i < placed.length; i++) {
    const p = placed[i - 1], t = placed[i];
    if (t.offset < p.offset + p.nbytes) c.fail(`tensor '${t.name}' (data offset ${t.offset}) overlaps tensor '${p.name}' (${p.offset}..${p.offset + p.nbytes})`);
  }
  for (const t of tensors)
    if (!WIDENED[t.type])
      throw new GgufError(`${file}: tensor '${t.name}' has ggml type ${typeName(t.type)}, which gguf_f32.mjs does not widen (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K and Q6_K are)`, 3);
  return { file, size: c.size, version, alignment, kvEnd, kvs, tensors, dataStart };
}

// ---------------------------------------------------------------- the writer

const CHUNK_OUT = 1 << 24; // bytes of f32 written at a time (at most)

function readFully(fd, buf, len, pos, file) {
  let got = 0;
  while (got < len) {
    const r = fs.readSync(fd, buf, got, len - got, pos + got);
    if (r === 0) throw new GgufError(`${file}: short read at offset ${pos + got} (was the file changed while it was read?)`);
    got += r;
  }
}

function writeFully(fd, buf, len, pos) {
  let put = 0;
  while (put < len) put += fs.writeSync(fd, buf, put, len - put, pos + put);
}

/**
 * Writes the all-F32 copy of `inFile` to `outFile` (through a temporary
 * file beside it, renamed at the end). Options: fileTypeF32 (default true):
 * general.file_type set to 0 (ALL_F32), in its own integer type; false
 * keeps it as stored. Returns {tensors, types: {name: count}, bytesIn,
 * bytesOut, fileType: the stored general.file_type or null}.
 */
export function widenToF32(inFile, outFile, { fileTypeF32 = true } = {}) {
  if (os.endianness() !== "LE") throw new GgufError("gguf_f32.mjs runs on little-endian hosts only");
  const g = readGguf(inFile);
  const A = g.alignment;
  const fin = fs.openSync(inFile, "r");
  const tmp = `${outFile}.tmp.${process.pid}`;
  let fout;
  const types = {};
  let ok = false;
  try {
    fout = fs.openSync(tmp, "w");
    // the fixed header and the metadata, as stored
    const head = Buffer.alloc(24);
    head.write("GGUF", 0, "latin1");
    head.writeUInt32LE(g.version, 4);
    head.writeBigUInt64LE(BigInt(g.tensors.length), 8);
    head.writeBigUInt64LE(BigInt(g.kvs.length), 16);
    writeFully(fout, head, 24, 0);
    const cbuf = Buffer.alloc(Math.min(CHUNK_OUT, Math.max(g.kvEnd - 24, 1)));
    for (let at = 24; at < g.kvEnd; at += cbuf.length) {
      const n = Math.min(cbuf.length, g.kvEnd - at);
      readFully(fin, cbuf, n, at, inFile);
      writeFully(fout, cbuf, n, at);
    }
    const ft = g.kvs.find((kv) => kv.key === "general.file_type");
    if (ft && fileTypeF32 && VT_INTEGER.has(ft.type)) {
      const z = Buffer.alloc(VT[ft.type][1]);
      writeFully(fout, z, z.length, ft.at); // the metadata sits at the same offsets in both files
    }
    // the tensor infos: name and dims as stored, type F32, offsets anew
    const infos = [];
    let off = 0;
    const outOff = [];
    for (const t of g.tensors) {
      const dims = Buffer.alloc(t.dimsRaw.len);
      readFully(fin, dims, dims.length, t.dimsRaw.at, inFile);
      const len = Buffer.alloc(8);
      len.writeBigUInt64LE(BigInt(t.nameBytes.length));
      const tail = Buffer.alloc(12);
      tail.writeUInt32LE(0, 0); // GGML_TYPE_F32
      tail.writeBigUInt64LE(BigInt(off), 4);
      infos.push(len, t.nameBytes, dims, tail);
      outOff.push(off);
      off += Math.ceil((t.nel * 4) / A) * A;
      types[typeName(t.type)] = (types[typeName(t.type)] || 0) + 1;
    }
    const info = Buffer.concat(infos);
    writeFully(fout, info, info.length, g.kvEnd);
    const headerEnd = g.kvEnd + info.length, dataStart = Math.ceil(headerEnd / A) * A;
    if (dataStart > headerEnd) writeFully(fout, Buffer.alloc(dataStart - headerEnd), dataStart - headerEnd, headerEnd);
    // the data: each tensor a chunk of whole blocks at a time
    let src = Buffer.alloc(0), dst = new Float32Array(0);
    for (let i = 0; i < g.tensors.length; i++) {
      const t = g.tensors[i], [qk, bb] = WIDENED[t.type];
      const perChunk = Math.max(1, Math.floor(CHUNK_OUT / (4 * qk))); // blocks
      const nBlocks = t.nel / qk;
      const at = dataStart + outOff[i];
      for (let b0 = 0; b0 < nBlocks; b0 += perChunk) {
        const nb = Math.min(perChunk, nBlocks - b0), inBytes = nb * bb, n = nb * qk;
        if (src.length < inBytes) src = Buffer.alloc(Math.min(perChunk, nBlocks) * bb);
        if (dst.length < n) dst = new Float32Array(Math.min(perChunk, nBlocks) * qk);
        readFully(fin, src, inBytes, g.dataStart + t.offset + b0 * bb, inFile);
        DEQUANT[t.type](src, n, dst);
        writeFully(fout, Buffer.from(dst.buffer, 0, n * 4), n * 4, at + b0 * qk * 4);
      }
      const pad = Math.ceil((t.nel * 4) / A) * A - t.nel * 4;
      if (pad) writeFully(fout, Buffer.alloc(pad), pad, at + t.nel * 4);
    }
    fs.closeSync(fout);
    fout = undefined;
    fs.renameSync(tmp, outFile);
    ok = true;
    return {
      tensors: g.tensors.length, types, bytesIn: g.size, bytesOut: dataStart + off,
      fileType: ft ? ft.value ?? null : null, version: g.version, alignment: A,
    };
  } catch (e) {
    if (e instanceof GgufError) throw e;
    // a failure to read or write (a full disk, permissions): one line too
    throw new GgufError(`${outFile}: cannot write it: ${String(e.message).split("\n")[0]}`);
  } finally {
    if (fout !== undefined) fs.closeSync(fout);
    fs.closeSync(fin);
    if (!ok) fs.rmSync(tmp, { force: true });
  }
}

// ---------------------------------------------------------------- CLI

function main(argv) {
  if (argv.length !== 2 || argv.some((a) => a === "-h" || a === "--help")) {
    console.error("usage: node tools/peer/gguf_f32.mjs IN.gguf OUT.gguf   (every tensor widened to F32, exactly)");
    process.exit(2);
  }
  const [inFile, outFile] = argv;
  const t0 = Date.now();
  try {
    if (path.resolve(inFile) === path.resolve(outFile)) throw new GgufError(`${outFile}: the output would replace the input`, 2);
    const r = widenToF32(inFile, outFile);
    const counts = Object.entries(r.types).map(([k, v]) => `${v} ${k}`).join(", ");
    console.error(`gguf_f32: ${outFile}: ${r.tensors} tensors (${counts}) widened to F32, general.file_type ` +
      `${r.fileType === null ? "absent" : `${r.fileType} -> 0`}; ${r.bytesOut} bytes in ${((Date.now() - t0) / 1000).toFixed(1)} s`);
  } catch (e) {
    if (e instanceof GgufError) {
      console.error(`gguf_f32: ${e.message}`);
      process.exit(e.exit);
    }
    console.error(`gguf_f32: ${inFile}: ${String(e && e.message).split("\n")[0]}`);
    process.exit(1);
  }
}

if (process.argv[1] && import.meta.url === pathToFileURL(fs.realpathSync(process.argv[1])).href) main(process.argv.slice(2));
