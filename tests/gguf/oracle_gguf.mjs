// Stage 4's oracle for a GGUF file (tools/peer/gguf_f32.mjs, oracle.mjs
// --model FILE.gguf): the all-F32 copy llama.cpp runs on holds the very
// values MetaInfer's exact path computes on (each element dequantized in
// float64 as sdk/include/mi/quant.h defines it, rounded once to f32).
//  (a) a mi-mkmodel checkpoint converted by hf2gguf.mjs to F32 and to BF16,
//      then widened: every tensor equals the F32 conversion bit for bit
//      (the checkpoint is bf16, so both hold its values exactly);
//  (b) its Q8_0 and Q4_K_M conversions, and a file made here with F16,
//      BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K and Q6_K
//      tensors (random blocks: every code
//      and scale pattern; blocks from hf2gguf's quantizers; alignment 64,
//      version 2, data stored out of order), widened: every element equals
//      this file's own decoding of quant.h's layouts, bit for bit; metadata
//      copied byte for byte (general.file_type set to 0), names, order and
//      dims unchanged, the data aligned;
//  (c) hostile files (cut short, an offset past the end, unknown or
//      unsupported types, absurd lengths and counts, ...): exit 1 or 3, one
//      line naming the file, no stack trace, no output left behind;
//  (d) oracle.mjs on the Q8_0 file writes a golden recording the file's
//      FNV-1a 32 (gguf_fnv1a32) and llama.cpp's cases, which mi-run's exact
//      path (MI_GGUF_WIDEN=1) on the same file matches (same tokens, top-10
//      logprobs within 1e-4); on a file with an unsupported type the oracle
//      says so with exit 3, on a broken one exit 1.
// (a)-(c) need only node; (d) needs node-llama-cpp (exit 77 after (a)-(c)
// without it). The tiny shape's rows (64) are not whole blocks of 256, so
// its Q4_K_M conversion falls back to Q8_0 throughout (docs/gguf.md): Q4_K
// and Q6_K are held on the file made here.
//   node tests/gguf/oracle_gguf.mjs BUILD_DIR
import { execFileSync, spawnSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";

const build = path.resolve(process.argv[2] || "build");
const src = path.resolve(path.dirname(new URL(import.meta.url).pathname), "../..");
const TOOL = path.join(src, "tools/peer/gguf_f32.mjs"), ORACLE = path.join(src, "tools/peer/oracle.mjs");
const t0 = Date.now();
let failures = 0;
const el = () => `[${((Date.now() - t0) / 1000).toFixed(1)} s]`;
const fail = (msg) => { console.error(`FAIL: ${msg}`); failures++; };
const check = (cond, msg) => { if (!cond) fail(msg); return cond; };
const { convert, quantizers } = await import(path.join(src, "tools/peer/hf2gguf.mjs"));
const f32tool = await import(TOOL);

// ------------------------------------------------------------ an independent reader

const VSIZE = { 0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8 };
/** GGUF header: kvs [{key, type, raw (the value's bytes)}], tensors [{name, ne, type, offset}]. */
function parseGguf(b) {
  let p = 0;
  const u32 = () => { p += 4; return b.readUInt32LE(p - 4); };
  const u64 = () => { p += 8; return Number(b.readBigUInt64LE(p - 8)); };
  const str = () => { const n = u64(); p += n; return b.toString("utf8", p - n, p); };
  const skipValue = (t) => {
    if (t === 8) { p += 8 + Number(b.readBigUInt64LE(p)); return; }
    if (t === 9) { const et = u32(), n = u64(); for (let i = 0; i < n; i++) skipValue(et); return; }
    p += VSIZE[t];
  };
  if (b.toString("latin1", 0, 4) !== "GGUF") throw new Error("no GGUF magic");
  p = 4;
  const version = u32(), nt = u64(), nkv = u64(), kvs = [];
  let alignment = 32;
  for (let i = 0; i < nkv; i++) {
    const key = str(), type = u32(), at = p;
    skipValue(type);
    kvs.push({ key, type, raw: b.subarray(at, p) });
    if (key === "general.alignment") alignment = b.readUInt32LE(at);
  }
  const tensors = [];
  for (let i = 0; i < nt; i++) {
    const name = str(), nd = u32(), ne = [];
    for (let d = 0; d < nd; d++) ne.push(u64());
    tensors.push({ name, ne, type: u32(), offset: u64() });
  }
  const dataStart = Math.ceil(p / alignment) * alignment;
  return { version, kvs, tensors, alignment, dataStart, headerEnd: p };
}

// ------------------------------------------------------------ an independent decoder (quant.h's layouts)

const BLOCK = { 0: [1, 4], 1: [1, 2], 30: [1, 2], 8: [32, 34], 2: [32, 18], 12: [256, 144], 13: [256, 176], 14: [256, 210],
  3: [32, 20], 6: [32, 22], 7: [32, 24], 10: [256, 84], 11: [256, 110] };
const NAME = { 0: "F32", 1: "F16", 30: "BF16", 8: "Q8_0", 2: "Q4_0", 12: "Q4_K", 13: "Q5_K", 14: "Q6_K",
  3: "Q4_1", 6: "Q5_0", 7: "Q5_1", 10: "Q2_K", 11: "Q3_K" };
function halfValue(h) {
  const sign = h & 0x8000 ? -1 : 1, e = (h >> 10) & 31, m = h & 1023;
  if (e === 31) return m ? NaN : sign * Infinity;
  return e === 0 ? sign * m * 2 ** -24 : sign * (1024 + m) * 2 ** (e - 25);
}
const HALF = Float64Array.from({ length: 65536 }, (_, h) => halfValue(h));
const f16At = (b, o) => HALF[b[o] + 256 * b[o + 1]];
const i8 = (v) => (v > 127 ? v - 256 : v);
/** Q4_K's / Q5_K's sub-block j scale and min, from the 12 bytes at b[o + 4..]. */
function scaleMin(b, o, j) {
  const s = (k) => b[o + 4 + k];
  if (j < 4) return [s(j) % 64, s(j + 4) % 64];
  return [(s(j + 4) % 16) + Math.floor(s(j - 4) / 64) * 16, Math.floor(s(j + 4) / 16) + Math.floor(s(j) / 64) * 16];
}
/** Value i of the block at b[o..], in float64, as quant.h states it. */
const VALUE = {
  8: (b, o, i) => f16At(b, o) * i8(b[o + 2 + i]),
  2: (b, o, i) => {
    const byte = b[o + 2 + (i % 16)];
    return f16At(b, o) * ((i < 16 ? byte % 16 : Math.floor(byte / 16)) - 8);
  },
  12: (b, o, i) => {
    const j = Math.floor(i / 32), [sc, m] = scaleMin(b, o, j);
    const byte = b[o + 16 + 32 * Math.floor(i / 64) + (i % 32)];
    const q = i % 64 < 32 ? byte % 16 : Math.floor(byte / 16);
    return f16At(b, o) * sc * q - f16At(b, o + 2) * m;
  },
  13: (b, o, i) => { // Q4_K's scales and mins; nibbles at 48; bit floor(i/32) of qh[i % 32] (at 16) the fifth bit
    const j = Math.floor(i / 32), [sc, m] = scaleMin(b, o, j);
    const byte = b[o + 48 + 32 * Math.floor(i / 64) + (i % 32)];
    const q = (i % 64 < 32 ? byte % 16 : Math.floor(byte / 16)) + 16 * (Math.floor(b[o + 16 + (i % 32)] / 2 ** j) % 2);
    return f16At(b, o) * sc * q - f16At(b, o + 2) * m;
  },
  14: (b, o, i) => {
    const half = Math.floor(i / 128), r = i % 128, quarter = Math.floor(r / 32), l = r % 32;
    const lo = b[o + 64 * half + l + (quarter % 2) * 32];
    const low = quarter >= 2 ? Math.floor(lo / 16) : lo % 16;
    const high = Math.floor(b[o + 128 + 32 * half + l] / 4 ** quarter) % 4;
    return f16At(b, o + 208) * i8(b[o + 192 + Math.floor(i / 16)]) * (low + 16 * high - 32);
  },
  3: (b, o, i) => f16At(b, o) * nibble(b, o + 4, i) + f16At(b, o + 2), // Q4_1: d | m | qs
  6: (b, o, i) => f16At(b, o) * (nibble(b, o + 6, i) + 16 * bitOf(b, o + 2, i) - 16), // Q5_0: d | qh | qs
  7: (b, o, i) => f16At(b, o) * (nibble(b, o + 8, i) + 16 * bitOf(b, o + 4, i)) + f16At(b, o + 2), // Q5_1: d | m | qh | qs
  10: (b, o, i) => { // Q2_K: scales[16] | qs[64] | d | dmin
    const n = Math.floor(i / 128), j = Math.floor((i % 128) / 32), l = i % 32, s = 8 * n + 2 * j + Math.floor(l / 16);
    const q = Math.floor(b[o + 16 + 32 * n + l] / 4 ** j) % 4;
    return f16At(b, o + 80) * (b[o + s] % 16) * q - f16At(b, o + 82) * Math.floor(b[o + s] / 16);
  },
  11: (b, o, i) => { // Q3_K: hmask[32] | qs[64] | scales[12] | d
    const n = Math.floor(i / 128), j = Math.floor((i % 128) / 32), l = i % 32, s = 8 * n + 2 * j + Math.floor(l / 16);
    const q = (Math.floor(b[o + 32 + 32 * n + l] / 4 ** j) % 4) - (Math.floor(b[o + l] / 2 ** (4 * n + j)) % 2 ? 0 : 4);
    const low = s < 8 ? b[o + 96 + s] % 16 : Math.floor(b[o + 96 + s - 8] / 16);
    const u = low + 16 * (Math.floor(b[o + 104 + (s % 4)] / 4 ** Math.floor(s / 4)) % 4);
    return f16At(b, o + 108) * (u - 32) * q;
  },
};
/** Value i's 4-bit code of a 32-value block whose 16 nibble bytes are at b[o..]. */
function nibble(b, o, i) { const byte = b[o + (i % 16)]; return i < 16 ? byte % 16 : Math.floor(byte / 16); }
/** Bit i of the little-endian 32-bit word at b[o..]. */
function bitOf(b, o, i) { return Math.floor(b[o + Math.floor(i / 8)] / 2 ** (i % 8)) % 2; }
/** The f32 bits of every element of a tensor of type t held in `data`. */
function expectedBits(t, data, nel) {
  const out = new Float32Array(nel), bits = new Uint32Array(out.buffer);
  if (t === 0) { for (let i = 0; i < nel; i++) bits[i] = data.readUInt32LE(4 * i); return bits; }
  if (t === 30) { for (let i = 0; i < nel; i++) bits[i] = data.readUInt16LE(2 * i) * 65536; return bits; }
  if (t === 1) {
    for (let i = 0; i < nel; i++) {
      const h = data.readUInt16LE(2 * i);
      if ((h & 0x7c00) === 0x7c00 && (h & 1023)) bits[i] = (((h & 0x8000) << 16) | 0x7f800000 | ((h & 1023) << 13)) >>> 0; // NaN, payload kept
      else out[i] = halfValue(h);
    }
    return bits;
  }
  const [qk, bb] = BLOCK[t];
  for (let i = 0; i < nel; i++) out[i] = VALUE[t](data, Math.floor(i / qk) * bb, i % qk);
  return bits;
}

// ------------------------------------------------------------ a GGUF builder (for the file made here and the hostile ones)

/** kvs: [key, vt, value] (vt 9: value {et, values}); tensors: {name, ne, type, data}; the data
 *  is laid out in `order` (indices), each at a multiple of the alignment. Returns {buf, at}:
 *  at holds the byte positions of fields, for breaking copies. */
function buildGguf({ version = 3, kvs, tensors, alignment = 32, order }) {
  const parts = [], at = { kv: {}, type: [], offset: [], ne0: [], ndims: [] };
  let len = 0;
  const put = (b) => { parts.push(b); len += b.length; };
  const u32 = (v) => { const b = Buffer.alloc(4); b.writeUInt32LE(v); put(b); };
  const u64 = (v) => { const b = Buffer.alloc(8); b.writeBigUInt64LE(BigInt(v)); put(b); };
  const str = (s) => { const b = Buffer.from(s, "utf8"); u64(b.length); put(b); };
  const scalar = (vt, v) => {
    const b = Buffer.alloc(VSIZE[vt] ?? 0);
    switch (vt) {
      case 0: case 7: b.writeUInt8(v); break;
      case 1: b.writeInt8(v); break;
      case 2: b.writeUInt16LE(v); break;
      case 3: b.writeInt16LE(v); break;
      case 4: b.writeUInt32LE(v); break;
      case 5: b.writeInt32LE(v); break;
      case 6: b.writeFloatLE(v); break;
      case 10: b.writeBigUInt64LE(BigInt(v)); break;
      case 11: b.writeBigInt64LE(BigInt(v)); break;
      case 12: b.writeDoubleLE(v); break;
      case 8: str(v); return;
    }
    put(b);
  };
  put(Buffer.from("GGUF"));
  u32(version); u64(tensors.length); u64(kvs.length);
  for (const [k, vt, v] of kvs) {
    at.kv[k] = len;
    str(k); u32(vt);
    if (vt === 9) { u32(v.et); u64(v.values.length); for (const x of v.values) scalar(v.et, x); }
    else scalar(vt, v);
  }
  const offs = new Array(tensors.length);
  let off = 0;
  for (const i of order ?? tensors.map((_, i) => i)) {
    offs[i] = off;
    off += Math.ceil(tensors[i].data.length / alignment) * alignment + alignment; // a gap after each
  }
  tensors.forEach((t, i) => {
    str(t.name);
    at.ndims.push(len); u32(t.ne.length);
    at.ne0.push(len); for (const d of t.ne) u64(d);
    at.type.push(len); u32(t.type);
    at.offset.push(len); u64(offs[i]);
  });
  const dataStart = Math.ceil(len / alignment) * alignment;
  const buf = Buffer.alloc(dataStart + off);
  Buffer.concat(parts).copy(buf, 0);
  tensors.forEach((t, i) => t.data.copy(buf, dataStart + offs[i]));
  at.dataStart = dataStart;
  return { buf, at };
}

let seed = 0x9e3779b9;
const rnd = () => { seed ^= seed << 13; seed ^= seed >>> 17; seed ^= seed << 5; return (seed >>> 0) / 4294967296; };
const gauss = () => Math.sqrt(-2 * Math.log(1 - rnd())) * Math.cos(2 * Math.PI * rnd());
/** A finite f16 scale, any sign and exponent (subnormals and zeros included). */
const randHalf = () => {
  const r = rnd();
  if (r < 0.03) return r < 0.015 ? 0 : 0x8000;
  const h = Math.floor(rnd() * 65536);
  return ((h >> 10) & 31) === 31 ? h & ~0x0400 : h; // no inf or NaN
};
/** n values' random blocks of type t, scale fields finite f16 values. */
function randomBlocks(t, n) {
  const [qk, bb] = BLOCK[t], nb = n / qk, b = Buffer.alloc(nb * bb);
  for (let i = 0; i < b.length; i++) b[i] = Math.floor(rnd() * 256);
  const halves = { 8: [0], 2: [0], 12: [0, 2], 13: [0, 2], 14: [208], 3: [0, 2], 6: [0], 7: [0, 2], 10: [80, 82], 11: [108] }[t];
  for (let k = 0; k < nb; k++) for (const h of halves) b.writeUInt16LE(randHalf(), k * bb + h);
  return b;
}
function gaussF32(n) { const a = new Float32Array(n); for (let i = 0; i < n; i++) a[i] = gauss() * (i % 97 === 0 ? 8 : 1) * 0.02; return a; }

// ------------------------------------------------------------ helpers

function runTool(args, prog = TOOL) {
  const r = spawnSync(process.execPath, [prog, ...args], { encoding: "utf8" });
  return { rc: r.status, err: r.stderr.trim(), out: r.stdout };
}
function oneLine(what, err, file) {
  check(err.length > 0 && !err.includes("\n"), `${what}: expected one line on stderr, got ${JSON.stringify(err.slice(0, 600))}`);
  check(!/\n\s+at |\bat .*\.mjs:\d+/.test(err), `${what}: a stack trace: ${err.slice(0, 300)}`);
  if (file) check(err.includes(file), `${what}: the line does not name ${file}: ${err}`);
}
const tensorData = (buf, h, t, nbytes) => buf.subarray(h.dataStart + t.offset, h.dataStart + t.offset + nbytes);
const nelOf = (t) => t.ne.reduce((a, b) => a * b, 1);
const bytesOf = (t) => (nelOf(t) / BLOCK[t.type][0]) * BLOCK[t.type][1];

/** The widened file `outFile` against its source: header, metadata, and every
 *  tensor's bits against `expect(name, srcTensor, srcData)` (a Uint32Array). */
function compareWidened(label, inFile, outFile, expect) {
  const ib = fs.readFileSync(inFile), ob = fs.readFileSync(outFile);
  const ih = parseGguf(ib), oh = parseGguf(ob);
  check(oh.version === ih.version, `${label}: version ${oh.version}, the source's ${ih.version}`);
  check(oh.kvs.length === ih.kvs.length, `${label}: ${oh.kvs.length} metadata pairs, the source has ${ih.kvs.length}`);
  ih.kvs.forEach((kv, i) => {
    const o = oh.kvs[i];
    if (!check(o && o.key === kv.key && o.type === kv.type, `${label}: metadata pair ${i} is ${o?.key} (type ${o?.type}), the source's ${kv.key} (type ${kv.type})`)) return;
    if (kv.key === "general.file_type") check(o.raw.length === kv.raw.length && o.raw.every((x) => x === 0), `${label}: general.file_type is not 0 (ALL_F32) in its own type`);
    else check(o.raw.equals(kv.raw), `${label}: the value of ${kv.key} changed`);
  });
  check(oh.tensors.length === ih.tensors.length, `${label}: ${oh.tensors.length} tensors, the source has ${ih.tensors.length}`);
  check(oh.dataStart % oh.alignment === 0 && oh.tensors.every((t) => t.offset % oh.alignment === 0), `${label}: data not aligned to ${oh.alignment}`);
  const types = {};
  let end = 0, elements = 0;
  ih.tensors.forEach((t, i) => {
    const o = oh.tensors[i];
    if (!check(o.name === t.name && JSON.stringify(o.ne) === JSON.stringify(t.ne) && o.type === 0,
      `${label}: tensor ${i} is ${o.name} ${JSON.stringify(o.ne)} type ${o.type}, the source's ${t.name} ${JSON.stringify(t.ne)} to F32`)) return;
    const nel = nelOf(t);
    check(o.offset >= end, `${label}: ${o.name} overlaps the tensor before it`);
    end = o.offset + nel * 4;
    if (!check(oh.dataStart + end <= ob.length, `${label}: ${o.name} lies past the end of the file`)) return;
    const got = new Uint32Array(Uint8Array.from(tensorData(ob, oh, o, nel * 4)).buffer);
    const want = expect(t, tensorData(ib, ih, t, bytesOf(t)));
    for (let k = 0; k < nel; k++) {
      if (got[k] !== want[k]) {
        const f = (u) => new Float32Array(new Uint32Array([u]).buffer)[0];
        fail(`${label}: ${t.name} (${NAME[t.type]}) element ${k}: ${f(got[k])} (0x${got[k].toString(16)}), expected ${f(want[k])} (0x${want[k].toString(16)})`);
        break;
      }
    }
    types[NAME[t.type]] = (types[NAME[t.type]] || 0) + 1;
    elements += nel;
  });
  return { types, elements };
}

// ------------------------------------------------------------ (a), (b): the converted checkpoint

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "mi-oracle-gguf-"));
let exitCode = 0;
try {
  const model = path.join(tmp, "tiny-3");
  execFileSync(path.join(build, "bin/mi-mkmodel"), ["--shape", "tiny", "--seed", "3", "--out", model]);
  const files = {};
  for (const type of ["f32", "bf16", "q8_0", "q4_k_m"]) {
    files[type] = path.join(tmp, `${type}.gguf`);
    await convert(model, files[type], { type });
    const w = path.join(tmp, `${type}-f32.gguf`);
    const r = runTool([files[type], w]);
    check(r.rc === 0, `gguf_f32 ${type}: exit ${r.rc}: ${r.err}`);
    oneLine(`gguf_f32 ${type}`, r.err);
  }
  console.log(`${el()} tiny seed 3 converted to f32, bf16, q8_0, q4_k_m and widened`);
  const f32b = fs.readFileSync(files.f32), f32h = parseGguf(f32b), byName = new Map(f32h.tensors.map((t) => [t.name, t]));
  const asSource = (t) => { const s = byName.get(t.name); return expectedBits(0, tensorData(f32b, f32h, s, nelOf(s) * 4), nelOf(s)); };
  for (const type of ["f32", "bf16"]) {
    const s = compareWidened(`(a) ${type}`, files[type], path.join(tmp, `${type}-f32.gguf`), asSource);
    console.log(`${el()} (a) ${type}: ${JSON.stringify(s.types)} widened, ${s.elements} elements equal the F32 conversion bit for bit`);
  }
  for (const type of ["q8_0", "q4_k_m"]) {
    const s = compareWidened(`(b) ${type}`, files[type], path.join(tmp, `${type}-f32.gguf`), (t, d) => expectedBits(t.type, d, nelOf(t)));
    check((s.types.Q8_0 || 0) + (s.types.Q4_K || 0) + (s.types.Q6_K || 0) > 0, `(b) ${type}: no quantized tensor in the file`);
    console.log(`${el()} (b) ${type}: ${JSON.stringify(s.types)} widened, ${s.elements} elements equal this test's decoding bit for bit`);
  }

  // ---------------------------------------------------------- (b): every type, made here
  const tensors = [];
  const add = (name, ne, type, data) => tensors.push({ name, ne, type, data });
  const f16bits = Buffer.alloc(2 * 64 * 3);
  for (let i = 0; i < 64 * 3; i++) f16bits.writeUInt16LE(i < 6 ? [0x7c00, 0xfc00, 0x7e01, 0xfd55, 0x8000, 0x0001][i] : Math.floor(rnd() * 65536), 2 * i);
  add("t.f16", [64, 3], 1, f16bits);
  const bf = Buffer.alloc(2 * 32 * 2);
  for (let i = 0; i < 64; i++) bf.writeUInt16LE(i === 0 ? 0x7fc1 : Math.floor(rnd() * 65536), 2 * i);
  add("t.bf16", [32, 2], 30, bf);
  const f32 = Buffer.alloc(4 * 7);
  for (let i = 0; i < 7; i++) f32.writeFloatLE(gauss(), 4 * i);
  add("t.f32", [7], 0, f32);
  add("t.q8_0", [64, 3], 8, randomBlocks(8, 192));
  add("t.q4_0", [96, 2], 2, randomBlocks(2, 192));
  add("t.q4_k", [512, 3], 12, randomBlocks(12, 1536));
  add("t.q6_k", [256, 2, 2], 14, randomBlocks(14, 1024));
  add("t.q4_k.1d", [256], 12, randomBlocks(12, 256));
  add("t.q5_k", [256, 3], 13, randomBlocks(13, 768));
  add("t.q4_1", [64, 3], 3, randomBlocks(3, 192));
  add("t.q5_0", [96, 2], 6, randomBlocks(6, 192));
  add("t.q5_1", [32, 4], 7, randomBlocks(7, 128));
  add("t.q2_k", [256, 3], 10, randomBlocks(10, 768));
  add("t.q3_k", [512, 2], 11, randomBlocks(11, 1024));
  const ID = { Q8_0: 8, Q4_0: 2, Q4_K: 12, Q5_K: 13, Q6_K: 14, Q4_1: 3, Q5_0: 6, Q5_1: 7, Q2_K: 10, Q3_K: 11 };
  for (const q of Object.keys(ID)) // blocks as hf2gguf's quantizers choose them
    add(`t.quantized.${q.toLowerCase()}`, [512, 2], ID[q], quantizers[q](gaussF32(1024)));
  const kvs = [
    ["general.architecture", 8, "qwen3"],
    ["general.alignment", 4, 64],
    ["general.file_type", 4, 15],
    ["general.name", 8, "made by oracle_gguf.mjs \u00e9\u4e2d"],
    ["t.u8", 0, 200], ["t.i8", 1, -5], ["t.u16", 2, 60000], ["t.i16", 3, -300], ["t.i32", 5, -7], ["t.f32", 6, 0.1],
    ["t.bool", 7, 1], ["t.u64", 10, 2n ** 40n], ["t.i64", 11, -(2n ** 40n)], ["t.f64", 12, Math.PI],
    ["t.strings", 9, { et: 8, values: ["a", "", "\u00fc", "<|im_end|>"] }], ["t.i32s", 9, { et: 5, values: [1, -2, 3] }],
    ["t.bools", 9, { et: 7, values: [0, 1, 1] }],
  ];
  const made = buildGguf({ version: 2, kvs, tensors, alignment: 64, order: tensors.map((_, i) => tensors.length - 1 - i) });
  const madeFile = path.join(tmp, "made.gguf"), madeOut = path.join(tmp, "made-f32.gguf");
  fs.writeFileSync(madeFile, made.buf);
  const r = runTool([madeFile, madeOut]);
  if (check(r.rc === 0, `gguf_f32 on the file made here: exit ${r.rc}: ${r.err}`)) {
    const s = compareWidened("(b) made here", madeFile, madeOut, (t, d) => expectedBits(t.type, d, nelOf(t)));
    check(Object.keys(s.types).length === 13, `(b) made here: types ${JSON.stringify(s.types)}`);
    console.log(`${el()} (b) made here (v2, alignment 64): ${JSON.stringify(s.types)}, ${s.elements} elements equal this test's decoding bit for bit`);
  }
  // the exported dequantizers (what oracle.mjs widens with), directly
  for (const t of tensors) {
    const nel = nelOf(t), got = new Uint32Array(f32tool.dequantize(t.type, t.data, nel).buffer), want = expectedBits(t.type, t.data, nel);
    check(got.every((v, i) => v === want[i]), `dequantize(${NAME[t.type]}) on ${t.name} differs from this test's decoding`);
  }

  // ---------------------------------------------------------- (c): hostile files
  const hostile = [];
  const broken = (name, exits, mutate) => hostile.push({ name, exits, mutate });
  const setU64 = (b, at, v) => b.writeBigUInt64LE(BigInt(v), at);
  // where a pair's value starts (after its key and its u32 value type)
  const valueAt = (key) => made.at.kv[key] + 8 + Buffer.byteLength(key) + 4;
  for (const cut of [3, 10, 30, made.at.kv["general.name"] + 12, made.at.type[3], made.at.dataStart - 1, made.at.dataStart + 100, made.buf.length - 70])
    broken(`cut at ${cut} of ${made.buf.length} bytes`, [1], (b) => b.subarray(0, cut));
  broken("an empty file", [1], () => Buffer.alloc(0));
  broken("not a GGUF file", [1], (b) => { b.write("GGML", 0); return b; });
  broken("version 4", [1], (b) => { b.writeUInt32LE(4, 4); return b; });
  broken("a big-endian version", [1], (b) => { b.writeUInt32BE(3, 4); return b; });
  broken("2^40 tensors", [1], (b) => { setU64(b, 8, 2 ** 40); return b; });
  broken("2^40 metadata pairs", [1], (b) => { setU64(b, 16, 2 ** 40); return b; });
  broken("a key length of 2^62", [1], (b) => { setU64(b, made.at.kv["t.u8"], 2n ** 62n); return b; });
  broken("a string value 2^62 bytes long", [1], (b) => { setU64(b, valueAt("general.name"), 2n ** 62n); return b; });
  broken("a string value just past the end", [1], (b) => { setU64(b, valueAt("general.name"), b.length); return b; });
  broken("an array of 2^50 strings", [1], (b) => { setU64(b, valueAt("t.strings") + 4, 2n ** 50n); return b; });
  broken("an unknown value type", [1], (b) => { b.writeUInt32LE(99, valueAt("t.u8") - 4); return b; });
  broken("an array of arrays", [1], (b) => { b.writeUInt32LE(9, valueAt("t.i32s")); return b; });
  broken("a bool of 7", [1], (b) => { b[valueAt("t.bool")] = 7; return b; });
  broken("general.alignment 48", [1], (b) => { b.writeUInt32LE(48, valueAt("general.alignment")); return b; });
  broken("n_dims 5", [1], (b) => { b.writeUInt32LE(5, made.at.ndims[4]); return b; });
  broken("dimensions of 2^40 x 2^40", [1], (b) => { setU64(b, made.at.ne0[3], 2 ** 40); setU64(b, made.at.ne0[3] + 8, 2 ** 40); return b; });
  broken("a tensor offset past the end", [1], (b) => { setU64(b, made.at.offset[5], 2 ** 40); return b; });
  broken("a tensor offset 64 bytes short of the end", [1], (b) => { setU64(b, made.at.offset[5], b.length - made.at.dataStart - 64); return b; });
  broken("a misaligned tensor offset", [1], (b) => { setU64(b, made.at.offset[5], Number(b.readBigUInt64LE(made.at.offset[5])) + 32); return b; });
  broken("overlapping tensors", [1], (b) => { b.copy(b, made.at.offset[5], made.at.offset[6], made.at.offset[6] + 8); return b; });
  broken("a Q4_K row of 128", [1], (b) => { setU64(b, made.at.ne0[5], 128); setU64(b, made.at.ne0[5] + 8, 6); return b; });
  broken("an unknown type id 77", [1, 3], (b) => { b.writeUInt32LE(77, made.at.type[4]); return b; });
  broken("an IQ4_NL tensor", [3], (b) => { b.writeUInt32LE(20, made.at.type[5]); return b; });
  broken("an IQ4_XS tensor", [3], (b) => { b.writeUInt32LE(23, made.at.type[6]); return b; });
  const bad = {};
  for (const h of hostile) {
    const file = path.join(tmp, `bad-${h.name.replace(/[^a-z0-9]+/gi, "_")}.gguf`), out = path.join(tmp, "bad-out.gguf");
    fs.writeFileSync(file, h.mutate(Buffer.from(made.buf)));
    const rr = runTool([file, out]);
    check(h.exits.includes(rr.rc), `(c) ${h.name}: exit ${rr.rc} (expected ${h.exits.join(" or ")}): ${rr.err.slice(0, 300)}`);
    oneLine(`(c) ${h.name}`, rr.err, file);
    check(!fs.existsSync(out) && !fs.readdirSync(tmp).some((f) => f.startsWith("bad-out.gguf")), `(c) ${h.name}: output left behind`);
    if (h.name === "an IQ4_NL tensor") check(/'t\.q4_k'.*IQ4_NL/.test(rr.err), `(c) ${h.name}: the line does not name the tensor and its type: ${rr.err}`);
    bad[h.name] = file;
    if (process.env.VERBOSE) console.log(`  ${h.name}: exit ${rr.rc}: ${rr.err}`);
  }
  const usage = runTool([]);
  check(usage.rc === 2, `no arguments: exit ${usage.rc}, expected 2`);
  const missing = runTool([path.join(tmp, "absent.gguf"), path.join(tmp, "x.gguf")]);
  check(missing.rc === 1, `a missing file: exit ${missing.rc}`);
  oneLine("a missing file", missing.err, "absent.gguf");
  console.log(`${el()} (c) ${hostile.length} hostile files: each refused in one line (exit 1, or 3 for a type not widened), nothing written`);
  if (failures) throw new Error("stop");

  // ---------------------------------------------------------- (d): the oracle on the Q8_0 file
  try {
    const { importDep } = await import(path.join(src, "tools/peer/deps.mjs"));
    await importDep("node-llama-cpp");
  } catch (e) {
    console.log(`SKIP: (d) oracle.mjs: ${e.message.split("\n")[0]} ((a)-(c) passed)`);
    exitCode = 77;
    throw new Error("skip");
  }
  // refusals come before llama.cpp: a type not widened (3), a broken file (1)
  for (const [name, want] of [["an IQ4_NL tensor", 3], ["a tensor offset past the end", 1]]) {
    const o = runTool(["--model", bad[name], "--out", path.join(tmp, "never.json"), "--work", tmp], ORACLE);
    check(o.rc === want, `(d) oracle.mjs on ${name}: exit ${o.rc}, expected ${want}: ${o.err}`);
    oneLine(`(d) oracle.mjs on ${name}`, o.err, bad[name]);
    check(!fs.existsSync(path.join(tmp, "never.json")), `(d) oracle.mjs on ${name}: a golden was written`);
  }
  const golden = path.join(tmp, "golden.json"), prompts = path.join(src, "tools/peer/prompts_short.json");
  const tO = Date.now();
  const o = runTool(["--model", files.q8_0, "--out", golden, "--prompts", prompts, "--steps", "4", "--work", tmp], ORACLE);
  if (check(o.rc === 0, `(d) oracle.mjs on the Q8_0 file: exit ${o.rc}: ${o.err.split("\n").pop()}`)) {
    const g = JSON.parse(fs.readFileSync(golden, "utf8"));
    const fb = fs.readFileSync(files.q8_0);
    let h = 0x811c9dc5;
    for (let i = 0; i < fb.length; i++) h = Math.imul(h ^ fb[i], 0x01000193);
    const fnv = (h >>> 0).toString(16).padStart(8, "0");
    check(g.model.gguf_fnv1a32 === fnv, `(d) gguf_fnv1a32 ${g.model.gguf_fnv1a32}, the file's FNV-1a 32 is ${fnv}`);
    check(g.model.source === "oracle.mjs (made on demand for this GGUF file, widened to F32)", `(d) model.source ${JSON.stringify(g.model.source)}`);
    check(!("safetensors_fnv1a32" in g.model) && !("config_fnv1a32" in g.model), "(d) the golden records safetensors/config hashes for a GGUF file");
    const want = JSON.parse(fs.readFileSync(prompts, "utf8")).prompts;
    check(g.cases.length === want.length, `(d) ${g.cases.length} cases, ${want.length} prompts`);
    g.cases.forEach((c, i) => {
      check(c.prompt === want[i] && c.prompt_ids.length > 0, `(d) case ${i}: prompt or its ids missing`);
      check(c.steps.length === 4 && c.steps.every((s) => Number.isInteger(s.token_id) && s.top.length === 10 && s.top[0][0] === s.token_id && s.top.every(([, lp]) => lp <= 0)),
        `(d) case ${i}: steps malformed`);
    });
    check(!fs.readdirSync(tmp).some((f) => f.startsWith("mi-oracle-")), "(d) oracle.mjs left its work folder behind");
    // MetaInfer's exact path (every block type widened at load, f32
    // activations) on the Q8_0 file computes what the golden holds: the same
    // tokens, logprobs within f32 noise (measured 9.0e-6; llama.cpp on the
    // Q8_0 file itself is 0.27 away, its 8-bit activations)
    const pf = path.join(tmp, "prompts.jsonl");
    fs.writeFileSync(pf, want.map((p) => JSON.stringify(p)).join("\n") + "\n");
    const mi = execFileSync(path.join(build, "bin/mi-run"), ["-m", files.q8_0, "--prompts", pf, "-n", "4", "--temp", "0", "--json",
      "--top-logprobs", "10", "--ignore-eos", "-t", "2"], { encoding: "utf8", stdio: ["ignore", "pipe", "pipe"], env: { ...process.env, MI_GGUF_WIDEN: "1", MI_CKB_DIR: path.join(src, "ckb") } });
    const ours = want.map(() => []);
    let at = -1, worst = 0;
    for (const l of mi.trim().split("\n")) {
      const j = JSON.parse(l);
      if ("prompt_index" in j) at = j.prompt_index;
      else if ("token_id" in j) ours[at].push(j);
    }
    g.cases.forEach((c, i) => c.steps.forEach((s, k) => {
      const m = ours[i][k];
      if (!check(m && m.token_id === s.token_id, `(d) case ${i} step ${k}: mi-run (exact) ${m?.token_id}, the golden ${s.token_id}`)) return;
      const theirs = new Map(s.top);
      for (const [id, lp] of m.top_logprobs) if (theirs.has(id)) worst = Math.max(worst, Math.abs(lp - theirs.get(id)));
    }));
    check(worst < 1e-4, `(d) mi-run (exact) and the golden differ by ${worst} in a top-10 logprob (bound 1e-4)`);
    console.log(`${el()} (d) oracle.mjs --model q8_0.gguf: gguf_fnv1a32 ${fnv}, ${g.cases.length} cases x 4 steps in ${((Date.now() - tO) / 1000).toFixed(1)} s; ` +
      `mi-run's exact path (MI_GGUF_WIDEN=1) on the file: the same tokens, top-10 logprobs within ${worst.toExponential(1)}`);
  }
} catch (e) {
  if (e.message !== "stop" && e.message !== "skip") fail(e.stack);
} finally {
  fs.rmSync(tmp, { recursive: true, force: true });
}
if (failures) {
  console.log(`${failures} failed (${((Date.now() - t0) / 1000).toFixed(1)} s)`);
  process.exit(1);
}
if (exitCode === 77) process.exit(77);
console.log(`all passed in ${((Date.now() - t0) / 1000).toFixed(1)} s`);
