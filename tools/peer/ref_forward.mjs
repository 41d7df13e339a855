// Float64 forward pass of a dense decoder straight from an HF directory
// (safetensors), written from the HF modeling_qwen3.py definition (see
// KNOWLEDGE.md); the per-head q/k norms and the q/k/v biases apply where the
// checkpoint has them, so it is also the HF math of Llama/Mistral (no norms,
// no biases) and Qwen2 (biases): every family tools/peer/hf2gguf.mjs maps
// as dense.
// It exists to check the peer, not MetaInfer: it reads the HF files without
// going through hf2gguf, so agreement with llama.cpp on the converted GGUF
// shows the converter (names, shapes, no q/k permutation, tokens) is right,
// and measures how far llama.cpp's F32 arithmetic is from exact.
// Slow (plain JS loops): meant for the tiny/small test shapes only.

import fs from "node:fs";
import path from "node:path";

function loadSafetensors(dir) {
  const file = path.join(dir, "model.safetensors");
  const buf = fs.readFileSync(file);
  const hlen = Number(buf.readBigUInt64LE(0));
  const header = JSON.parse(buf.subarray(8, 8 + hlen).toString("utf8"));
  const base = 8 + hlen;
  const t = new Map();
  for (const [name, info] of Object.entries(header)) {
    if (name === "__metadata__") continue;
    const [a, b] = info.data_offsets;
    const n = info.shape.reduce((x, y) => x * y, 1);
    const out = new Float64Array(n);
    const dv = new DataView(buf.buffer, buf.byteOffset + base + a, b - a);
    if (info.dtype === "BF16") {
      const f = new Float32Array(1), u = new Uint32Array(f.buffer);
      for (let i = 0; i < n; i++) { u[0] = dv.getUint16(2 * i, true) << 16; out[i] = f[0]; }
    } else if (info.dtype === "F32") {
      for (let i = 0; i < n; i++) out[i] = dv.getFloat32(4 * i, true);
    } else throw new Error(`${file}: ${name}: dtype ${info.dtype} not supported by the reference`);
    t.set(name, { shape: info.shape, data: out });
  }
  return t;
}

// y[r] = sum_c W[r, c] x[c]; W row-major [rows, cols] (HF Linear layout).
function matvec(W, rows, cols, x, y) {
  for (let r = 0; r < rows; r++) {
    let s = 0;
    const o = r * cols;
    for (let c = 0; c < cols; c++) s += W[o + c] * x[c];
    y[r] = s;
  }
}

function rmsnorm(x, off, n, w, eps, out, outOff) {
  let ss = 0;
  for (let i = 0; i < n; i++) ss += x[off + i] * x[off + i];
  const inv = 1 / Math.sqrt(ss / n + eps);
  for (let i = 0; i < n; i++) out[outOff + i] = w[i] * (x[off + i] * inv);
}

function addBias(y, b) {
  if (b) for (let i = 0; i < y.length; i++) y[i] += b[i];
}

export class RefQwen3 {
  constructor(dir) {
    const cfg = JSON.parse(fs.readFileSync(path.join(dir, "config.json"), "utf8"));
    this.cfg = cfg;
    this.D = cfg.hidden_size; this.F = cfg.intermediate_size; this.L = cfg.num_hidden_layers;
    this.Hq = cfg.num_attention_heads; this.Hk = cfg.num_key_value_heads;
    this.hd = cfg.head_dim ?? this.D / this.Hq; this.V = cfg.vocab_size;
    this.eps = cfg.rms_norm_eps; this.theta = cfg.rope_theta ?? cfg.rope_parameters?.rope_theta ?? 10000;
    this.w = loadSafetensors(dir);
    const g = (n) => { const x = this.w.get(n); if (!x) throw new Error(`${dir}: missing ${n}`); return x.data; };
    const opt = (n) => this.w.get(n)?.data ?? null; // a tensor this family may not have
    this.emb = g("model.embed_tokens.weight");
    this.head = cfg.tie_word_embeddings === true ? this.emb : g("lm_head.weight");
    this.normF = g("model.norm.weight");
    this.layers = [];
    for (let l = 0; l < this.L; l++) {
      const p = `model.layers.${l}.`;
      this.layers.push({
        inNorm: g(p + "input_layernorm.weight"), q: g(p + "self_attn.q_proj.weight"), k: g(p + "self_attn.k_proj.weight"),
        v: g(p + "self_attn.v_proj.weight"), o: g(p + "self_attn.o_proj.weight"), qn: opt(p + "self_attn.q_norm.weight"),
        kn: opt(p + "self_attn.k_norm.weight"), qb: opt(p + "self_attn.q_proj.bias"), kb: opt(p + "self_attn.k_proj.bias"),
        vb: opt(p + "self_attn.v_proj.bias"), postNorm: g(p + "post_attention_layernorm.weight"),
        gate: g(p + "mlp.gate_proj.weight"), up: g(p + "mlp.up_proj.weight"), down: g(p + "mlp.down_proj.weight"),
        K: [], Vc: [], // per position: Float64Array [Hk*hd]
      });
    }
    this.pos = 0;
  }

  reset() { for (const l of this.layers) { l.K = []; l.Vc = []; } this.pos = 0; }

  rope(v, off) {
    const half = this.hd / 2;
    for (let i = 0; i < half; i++) {
      const a = this.pos * Math.pow(this.theta, -(2 * i) / this.hd);
      const c = Math.cos(a), s = Math.sin(a);
      const x1 = v[off + i], x2 = v[off + i + half];
      v[off + i] = x1 * c - x2 * s;
      v[off + i + half] = x2 * c + x1 * s;
    }
  }

  /** Feed one token; returns float64 log-softmax over the vocabulary if wantLogits. */
  step(token, wantLogits) {
    const { D, F, Hq, Hk, hd, eps } = this;
    const x = Float64Array.from(this.emb.subarray(token * D, (token + 1) * D)); // [D] residual stream
    const h = new Float64Array(D), q = new Float64Array(Hq * hd), k = new Float64Array(Hk * hd), v = new Float64Array(Hk * hd);
    const att = new Float64Array(Hq * hd), o = new Float64Array(D), g = new Float64Array(F), u = new Float64Array(F);
    for (const L of this.layers) {
      rmsnorm(x, 0, D, L.inNorm, eps, h, 0);
      matvec(L.q, Hq * hd, D, h, q); matvec(L.k, Hk * hd, D, h, k); matvec(L.v, Hk * hd, D, h, v);
      addBias(q, L.qb); addBias(k, L.kb); addBias(v, L.vb);
      for (let j = 0; j < Hq; j++) { if (L.qn) rmsnorm(q, j * hd, hd, L.qn, eps, q, j * hd); this.rope(q, j * hd); }
      for (let j = 0; j < Hk; j++) { if (L.kn) rmsnorm(k, j * hd, hd, L.kn, eps, k, j * hd); this.rope(k, j * hd); }
      L.K.push(Float64Array.from(k)); L.Vc.push(Float64Array.from(v));
      const T = L.K.length, grp = Hq / Hk, scale = 1 / Math.sqrt(hd);
      const sc = new Float64Array(T);
      att.fill(0);
      for (let j = 0; j < Hq; j++) {
        const kvh = Math.floor(j / grp);
        let mx = -Infinity;
        for (let t = 0; t < T; t++) {
          let s = 0;
          for (let i = 0; i < hd; i++) s += q[j * hd + i] * L.K[t][kvh * hd + i];
          sc[t] = s * scale; if (sc[t] > mx) mx = sc[t];
        }
        let z = 0;
        for (let t = 0; t < T; t++) { sc[t] = Math.exp(sc[t] - mx); z += sc[t]; }
        for (let t = 0; t < T; t++) {
          const p = sc[t] / z;
          for (let i = 0; i < hd; i++) att[j * hd + i] += p * L.Vc[t][kvh * hd + i];
        }
      }
      matvec(L.o, D, Hq * hd, att, o);
      for (let i = 0; i < D; i++) x[i] += o[i];
      rmsnorm(x, 0, D, L.postNorm, eps, h, 0);
      matvec(L.gate, F, D, h, g); matvec(L.up, F, D, h, u);
      for (let i = 0; i < F; i++) g[i] = (g[i] / (1 + Math.exp(-g[i]))) * u[i];
      matvec(L.down, D, F, g, o);
      for (let i = 0; i < D; i++) x[i] += o[i];
    }
    this.pos++;
    if (!wantLogits) return null;
    rmsnorm(x, 0, D, this.normF, eps, h, 0);
    const logits = new Float64Array(this.V);
    matvec(this.head, this.V, D, h, logits);
    let mx = -Infinity;
    for (let i = 0; i < this.V; i++) if (logits[i] > mx) mx = logits[i];
    let z = 0;
    for (let i = 0; i < this.V; i++) z += Math.exp(logits[i] - mx);
    const lz = mx + Math.log(z);
    for (let i = 0; i < this.V; i++) logits[i] -= lz;
    return logits;
  }
}
