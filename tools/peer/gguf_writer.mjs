// Minimal GGUF v3 writer: metadata key/values, tensor infos, aligned data.
// Written from the GGUF format description (magic "GGUF", version 3,
// little-endian, u64 counts and string lengths); no code from llama.cpp.
//
// Usage: const w = new GgufWriter(); w.addString(k, v); ...;
//        w.addTensor(name, ne /* innermost first */, ggmlType, nbytes, writeFn);
//        await w.write(path);
// writeFn(fd, offset) writes exactly nbytes at file offset `offset`; tensors
// are streamed one by one so a multi-GB model never sits in memory.

import fs from "node:fs";

export const GGML_TYPE = {
  F32: 0, F16: 1, Q4_0: 2, Q4_1: 3, Q5_0: 6, Q5_1: 7, Q8_0: 8, Q2_K: 10, Q3_K: 11, Q4_K: 12, Q5_K: 13, Q6_K: 14, BF16: 30,
};
export const GGML_TYPE_SIZE = { 0: 4, 1: 2, 30: 2 };
// Block types: elements per block and bytes per block (ggml's definitions).
// Q8_0: fp16 scale + 32 int8; Q4_0: fp16 scale + 16 bytes of nibbles;
// Q4_K and Q6_K: super-blocks of 256 (sdk/include/mi/quant.h states the layouts)
export const GGML_BLOCK = {
  8: [32, 34], 2: [32, 18], 3: [32, 20], 6: [32, 22], 7: [32, 24], 10: [256, 84], 11: [256, 110], 12: [256, 144],
  13: [256, 176], 14: [256, 210],
};

// GGUF metadata value types.
const VT = {
  UINT8: 0, INT8: 1, UINT16: 2, INT16: 3, UINT32: 4, INT32: 5, FLOAT32: 6,
  BOOL: 7, STRING: 8, ARRAY: 9, UINT64: 10, INT64: 11, FLOAT64: 12,
};

export const ALIGNMENT = 32;

/** Growable little-endian byte buffer. */
class ByteSink {
  constructor() { this.buf = Buffer.alloc(1 << 16); this.len = 0; }
  reserve(n) {
    if (this.len + n <= this.buf.length) return;
    let cap = this.buf.length * 2;
    while (cap < this.len + n) cap *= 2;
    const nb = Buffer.alloc(cap);
    this.buf.copy(nb, 0, 0, this.len);
    this.buf = nb;
  }
  u32(v) { this.reserve(4); this.buf.writeUInt32LE(v >>> 0, this.len); this.len += 4; }
  i32(v) { this.reserve(4); this.buf.writeInt32LE(v | 0, this.len); this.len += 4; }
  u64(v) { this.reserve(8); this.buf.writeBigUInt64LE(BigInt(v), this.len); this.len += 8; }
  f32(v) { this.reserve(4); this.buf.writeFloatLE(v, this.len); this.len += 4; }
  u8(v) { this.reserve(1); this.buf.writeUInt8(v, this.len); this.len += 1; }
  str(s) {
    const b = Buffer.from(s, "utf8");
    this.u64(b.length);
    this.reserve(b.length);
    b.copy(this.buf, this.len);
    this.len += b.length;
  }
  bytes() { return this.buf.subarray(0, this.len); }
}

export class GgufWriter {
  constructor() {
    this.kv = [];       // [key, (sink) => void]
    this.keys = new Set();
    this.tensors = [];  // {name, ne, type, nbytes, writeFn}
  }

  _add(key, fn) {
    if (this.keys.has(key)) throw new Error(`duplicate GGUF key ${key}`);
    this.keys.add(key);
    this.kv.push([key, fn]);
  }
  addString(k, v) { this._add(k, (s) => { s.u32(VT.STRING); s.str(v); }); }
  addU32(k, v) {
    if (!Number.isInteger(v) || v < 0 || v > 0xffffffff) throw new Error(`${k}: ${v} is not a u32`);
    this._add(k, (s) => { s.u32(VT.UINT32); s.u32(v); });
  }
  addF32(k, v) {
    if (typeof v !== "number" || !Number.isFinite(v)) throw new Error(`${k}: ${v} is not a number`);
    this._add(k, (s) => { s.u32(VT.FLOAT32); s.f32(v); });
  }
  addBool(k, v) { this._add(k, (s) => { s.u32(VT.BOOL); s.u8(v ? 1 : 0); }); }
  addStringArray(k, arr) {
    this._add(k, (s) => { s.u32(VT.ARRAY); s.u32(VT.STRING); s.u64(arr.length); for (const x of arr) s.str(x); });
  }
  addI32Array(k, arr) {
    this._add(k, (s) => { s.u32(VT.ARRAY); s.u32(VT.INT32); s.u64(arr.length); for (const x of arr) s.i32(x); });
  }
  addF32Array(k, arr) {
    for (const x of arr) if (typeof x !== "number" || !Number.isFinite(x)) throw new Error(`${k}: ${x} is not a number`);
    this._add(k, (s) => { s.u32(VT.ARRAY); s.u32(VT.FLOAT32); s.u64(arr.length); for (const x of arr) s.f32(x); });
  }

  /** ne: dims innermost first (GGUF order = reversed PyTorch/HF shape). */
  addTensor(name, ne, type, writeFn) {
    if (Buffer.byteLength(name) >= 64) throw new Error(`tensor name too long: ${name}`);
    const nel = ne.reduce((a, b) => a * b, 1);
    const blk = GGML_BLOCK[type];
    if (blk && ne[0] % blk[0]) throw new Error(`${name}: ne[0] = ${ne[0]} is not a multiple of the block of ${blk[0]}`);
    const nbytes = blk ? (nel / blk[0]) * blk[1] : nel * GGML_TYPE_SIZE[type];
    this.tensors.push({ name, ne, type, nbytes, writeFn });
  }

  async write(path) {
    const s = new ByteSink();
    s.reserve(4); Buffer.from("GGUF", "ascii").copy(s.buf, 0); s.len = 4;
    s.u32(3);                          // version
    s.u64(this.tensors.length);
    s.u64(this.kv.length);
    for (const [k, fn] of this.kv) { s.str(k); fn(s); }
    let off = 0;
    const offsets = [];
    for (const t of this.tensors) {
      s.str(t.name);
      s.u32(t.ne.length);
      for (const d of t.ne) s.u64(d);
      s.u32(t.type);
      s.u64(off);
      offsets.push(off);
      off += Math.ceil(t.nbytes / ALIGNMENT) * ALIGNMENT;
    }
    const header = s.bytes();
    const dataStart = Math.ceil(header.length / ALIGNMENT) * ALIGNMENT;
    const fd = fs.openSync(path, "w");
    try {
      fs.writeSync(fd, header, 0, header.length, 0);
      if (dataStart > header.length) fs.writeSync(fd, Buffer.alloc(dataStart - header.length), 0, dataStart - header.length, header.length);
      for (let i = 0; i < this.tensors.length; i++) {
        const t = this.tensors[i];
        const at = dataStart + offsets[i];
        const written = await t.writeFn(fd, at);
        if (written !== t.nbytes) throw new Error(`tensor ${t.name}: wrote ${written} bytes, expected ${t.nbytes}`);
        const pad = Math.ceil(t.nbytes / ALIGNMENT) * ALIGNMENT - t.nbytes;
        if (pad) fs.writeSync(fd, Buffer.alloc(pad), 0, pad, at + t.nbytes);
      }
    } finally {
      fs.closeSync(fd);
    }
  }
}
