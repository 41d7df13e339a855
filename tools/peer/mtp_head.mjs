// Completes a Qwen3.5-style checkpoint's multi-token-prediction head.
//
//   node tools/peer/mtp_head.mjs MODEL_DIR [--seed N]
//
// mi-mkmodel's released layout (`--layout conditional`) carries a few mtp.*
// tensors, enough for a loader to name and skip them; a released checkpoint
// carries a whole head: one decoder layer with full attention under
// mtp.layers.0. and mtp.fc, mtp.pre_fc_norm_embedding, mtp.pre_fc_norm_hidden,
// mtp.norm. llama.cpp's converter exports such a head by default and its
// loader reads every tensor of it, so hf2gguf.mjs writes the head only when it
// is whole. This adds the missing tensors (normal, std 0.02, seeded; in the
// dtype of the checkpoint's mtp.fc.weight) to MODEL_DIR/model.safetensors in
// place. Test tooling: nothing here is shipped.
import fs from "node:fs";
import path from "node:path";

function die(msg) {
  console.error(`mtp_head: ${msg}`);
  process.exit(1);
}

const args = process.argv.slice(2);
const dir = args[0];
const seedAt = args.indexOf("--seed");
let state = BigInt(seedAt > 0 ? Number(args[seedAt + 1]) : 1) || 1n;
if (!dir) die("usage: node mtp_head.mjs MODEL_DIR [--seed N]");
const file = path.join(dir, "model.safetensors");
const cfgAll = JSON.parse(fs.readFileSync(path.join(dir, "config.json"), "utf8"));
const cfg = cfgAll.text_config || cfgAll;
const buf = fs.readFileSync(file);
const hlen = Number(buf.readBigUInt64LE(0));
const header = JSON.parse(buf.subarray(8, 8 + hlen).toString("utf8"));
const data = buf.subarray(8 + hlen);
const fc = header["mtp.fc.weight"];
if (!fc) die(`${file}: no mtp.fc.weight: not a checkpoint with a multi-token-prediction head`);
const D = cfg.hidden_size, H = cfg.num_attention_heads, K = cfg.num_key_value_heads, hd = cfg.head_dim, F = cfg.intermediate_size;
const want = {
  "mtp.layers.0.input_layernorm.weight": [D],
  "mtp.layers.0.self_attn.q_proj.weight": [2 * H * hd, D],
  "mtp.layers.0.self_attn.k_proj.weight": [K * hd, D],
  "mtp.layers.0.self_attn.v_proj.weight": [K * hd, D],
  "mtp.layers.0.self_attn.o_proj.weight": [D, H * hd],
  "mtp.layers.0.self_attn.q_norm.weight": [hd],
  "mtp.layers.0.self_attn.k_norm.weight": [hd],
  "mtp.layers.0.post_attention_layernorm.weight": [D],
  "mtp.layers.0.mlp.gate_proj.weight": [F, D],
  "mtp.layers.0.mlp.up_proj.weight": [F, D],
  "mtp.layers.0.mlp.down_proj.weight": [D, F],
  "mtp.fc.weight": [D, 2 * D],
  "mtp.pre_fc_norm_embedding.weight": [D],
  "mtp.pre_fc_norm_hidden.weight": [D],
  "mtp.norm.weight": [D],
};
const size = { F32: 4, BF16: 2, F16: 2 }[fc.dtype];
if (!size) die(`${file}: mtp.fc.weight is ${fc.dtype}; F32, BF16 or F16 expected`);

// xorshift64* and Box-Muller: deterministic for a seed
function next() {
  state ^= state >> 12n; state ^= (state << 25n) & 0xffffffffffffffffn; state ^= state >> 27n;
  return Number(((state * 0x2545f4914f6cdd1dn) & 0xffffffffffffffffn) >> 11n) / 2 ** 53;
}
function normal() {
  const u = Math.max(next(), 1e-300), v = next();
  return Math.sqrt(-2 * Math.log(u)) * Math.cos(2 * Math.PI * v);
}

const parts = [data];
let end = data.length;
for (const [name, shape] of Object.entries(want)) {
  if (header[name]) {
    if (JSON.stringify(header[name].shape) !== JSON.stringify(shape)) die(`${file}: ${name} has shape ${JSON.stringify(header[name].shape)}, not ${JSON.stringify(shape)}`);
    continue;
  }
  const n = shape.reduce((a, b) => a * b, 1), out = Buffer.alloc(n * size), f = new Float32Array(1), u = new Uint32Array(f.buffer);
  for (let i = 0; i < n; i++) {
    f[0] = 0.02 * normal();
    if (size === 4) out.writeFloatLE(f[0], 4 * i);
    else if (fc.dtype === "BF16") out.writeUInt16LE(u[0] >>> 16, 2 * i);
    else die("F16 checkpoints are not handled");
  }
  header[name] = { dtype: fc.dtype, shape, data_offsets: [end, end + out.length] };
  parts.push(out);
  end += out.length;
}
let h = Buffer.from(JSON.stringify(header), "utf8");
h = Buffer.concat([h, Buffer.alloc((8 - (h.length % 8)) % 8, 0x20)]);
const len = Buffer.alloc(8);
len.writeBigUInt64LE(BigInt(h.length));
fs.writeFileSync(file, Buffer.concat([len, h, ...parts]));
console.error(`mtp_head: ${file}: ${parts.length - 1} tensors added`);
