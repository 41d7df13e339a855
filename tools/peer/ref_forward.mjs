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
// Gemma 3 (Gemma3ForCausalLM / model_type gemma3_text, selected by the
// config) is computed from the HF modeling_gemma3.py definition: embeddings
// times sqrt(hidden_size) (as llama.cpp's f32 sqrtf; HF rounds the scale to
// the weight dtype, the same number for the probes' 64/256), every RMSNorm
// x/rms * (1 + w), per-head q/k norms, NeoX rotary with rope_local_base_freq
// on sliding layers and rope_theta (linear scaling: positions / factor) on
// full ones, scale query_pre_attn_scalar^-0.5, a sliding layer's query i
// seeing key j iff i - j < sliding_window, post-attention and post-MLP norms
// before the residual adds, gelu_tanh(gate) * up, tied lm_head by default.
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

// x/rms(x) * (1 + w): Gemma's zero-centred RMSNorm.
function rmsnorm1w(x, off, n, w, eps, out, outOff) {
  let ss = 0;
  for (let i = 0; i < n; i++) ss += x[off + i] * x[off + i];
  const inv = 1 / Math.sqrt(ss / n + eps);
  for (let i = 0; i < n; i++) out[outOff + i] = (1 + w[i]) * (x[off + i] * inv);
}

const GELU_C = Math.sqrt(2 / Math.PI);
const geluTanh = (x) => 0.5 * x * (1 + Math.tanh(GELU_C * (x + 0.044715 * x * x * x)));

/** x rounded to the nearest IEEE half (ties to even; overflow to infinity). */
function f16round(x) {
  const a = Math.abs(x);
  if (!(a > 0) || a === Infinity) return x;
  if (a >= 65520) return Math.sign(x) * Infinity;
  let e = Math.floor(Math.log2(a));
  if (2 ** e > a) e--; else if (2 ** (e + 1) <= a) e++;
  const ulp = 2 ** (Math.max(e, -14) - 10), r = a / ulp;
  let q = Math.floor(r);
  const d = r - q;
  if (d > 0.5 || (d === 0.5 && q % 2 === 1)) q++;
  return Math.sign(x) * q * ulp;
}

/** ggml's CPU GELU (GGML_GELU_FP16): the f32 input rounded to f16, looked up
 *  in a table of f16 results (0 below -10, x above 10). */
function geluGgml(x) {
  const xf = Math.fround(x);
  if (xf <= -10) return 0;
  if (xf >= 10) return xf;
  return f16round(geluTanh(f16round(xf)));
}

export function isGemma3Config(cfg) {
  const archs = cfg.architectures || [];
  return archs.includes("Gemma3ForCausalLM") || (archs.length === 0 && cfg.model_type === "gemma3_text");
}

/** Gemma 2 (HF modeling_gemma2.py): Gemma 3's layer without q/k norms, one
 *  rotary base, every other layer sliding (layer_types by default: layer l
 *  slides iff (l + 1) % 2), the attention scores and the final logits
 *  soft-capped: cap * tanh(x / cap). */
export function isGemma2Config(cfg) {
  const archs = cfg.architectures || [];
  return archs.includes("Gemma2ForCausalLM") || (archs.length === 0 && cfg.model_type === "gemma2");
}

/** Gemma 3's per-layer kinds: layer_types, else full iff (l + 1) % sliding_window_pattern == 0 (default 6). */
function gemma3Sliding(cfg) {
  const L = cfg.num_hidden_layers;
  if (Array.isArray(cfg.layer_types)) {
    if (cfg.layer_types.length !== L) throw new Error("layer_types must list num_hidden_layers entries");
    return cfg.layer_types.map((t) => {
      if (t !== "sliding_attention" && t !== "full_attention") throw new Error(`layer_types: ${t} not supported`);
      return t === "sliding_attention";
    });
  }
  const p = cfg.sliding_window_pattern ?? 6;
  return Array.from({ length: L }, (_, l) => (l + 1) % p !== 0);
}

export class RefQwen3 {
  /** opts (measurements only): gelu "exact" (default) or "ggml" (ggml's f16
   *  GELU table, to size that error); window false ignores sliding windows. */
  constructor(dir, opts = {}) {
    const cfg = JSON.parse(fs.readFileSync(path.join(dir, "config.json"), "utf8"));
    this.cfg = cfg;
    this.gemma2 = isGemma2Config(cfg);
    this.gemma = isGemma3Config(cfg) || this.gemma2;
    this.D = cfg.hidden_size; this.F = cfg.intermediate_size; this.L = cfg.num_hidden_layers;
    this.Hq = cfg.num_attention_heads; this.Hk = cfg.num_key_value_heads;
    this.hd = cfg.head_dim ?? (this.gemma ? 256 : this.D / this.Hq); this.V = cfg.vocab_size;
    this.eps = cfg.rms_norm_eps ?? (this.gemma ? 1e-6 : undefined); this.theta = cfg.rope_theta ?? cfg.rope_parameters?.rope_theta ?? 10000;
    this.scale = 1 / Math.sqrt(this.hd);
    if (this.gemma) this.gemmaSetup(cfg, opts);
    this.w = loadSafetensors(dir);
    const g = (n) => { const x = this.w.get(n); if (!x) throw new Error(`${dir}: missing ${n}`); return x.data; };
    const opt = (n) => this.w.get(n)?.data ?? null; // a tensor this family may not have
    this.emb = g("model.embed_tokens.weight");
    const tied = this.gemma ? cfg.tie_word_embeddings !== false : cfg.tie_word_embeddings === true;
    this.head = tied ? this.emb : g("lm_head.weight");
    this.normF = g("model.norm.weight");
    this.layers = [];
    for (let l = 0; l < this.L; l++) {
      const p = `model.layers.${l}.`;
      this.layers.push({
        ...(this.gemma ? {
          preFF: g(p + "pre_feedforward_layernorm.weight"), postFF: g(p + "post_feedforward_layernorm.weight"),
          sliding: this.sliding[l],
        } : {}),
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

  /** Gemma 3's config fields (Gemma3TextConfig's defaults where absent). */
  gemmaSetup(cfg, opts) {
    if (this.gemma2) { // Gemma2Config's defaults; a null cap is no cap
      cfg = { final_logit_softcapping: 30.0, attn_logit_softcapping: 50.0, sliding_window: 4096, rope_theta: 10000,
        layer_types: Array.from({ length: cfg.num_hidden_layers }, (_, l) => ((l + 1) % 2 ? "sliding_attention" : "full_attention")),
        ...cfg };
      this.attnCap = cfg.attn_logit_softcapping; this.finalCap = cfg.final_logit_softcapping;
      if (cfg.rope_scaling != null) throw new Error("Gemma 2 reference: rope scaling is not computed");
      cfg = { ...cfg, rope_local_base_freq: cfg.rope_theta };
    } else if (cfg.final_logit_softcapping != null || cfg.attn_logit_softcapping != null)
      throw new Error("Gemma 3 reference: logit softcapping is not computed");
    const act = cfg.hidden_activation ?? "gelu_pytorch_tanh";
    if (act !== "gelu_pytorch_tanh") throw new Error(`Gemma 3 reference: hidden_activation ${act} is not computed`);
    this.sliding = gemma3Sliding(cfg);
    this.window = opts.window === false ? Infinity : cfg.sliding_window;
    if (this.sliding.includes(true) && !(this.window >= 1)) throw new Error("Gemma 3 reference: sliding layers need sliding_window");
    const rp = cfg.rope_parameters ?? {}, rpFull = rp.full_attention ?? rp, rpSwa = rp.sliding_attention ?? {};
    this.theta = rpFull.rope_theta ?? cfg.rope_theta ?? 1e6;
    this.thetaSwa = rpSwa.rope_theta ?? cfg.rope_local_base_freq ?? 10000;
    const sc = cfg.rope_scaling ?? ((rpFull.rope_type ?? "default") !== "default" ? rpFull : null);
    const kind = sc ? sc.rope_type ?? sc.type ?? "default" : "default";
    if (kind !== "default" && kind !== "linear") throw new Error(`Gemma 3 reference: rope scaling ${kind} is not computed`);
    this.posScaleFull = kind === "linear" ? 1 / sc.factor : 1; // HF linear: inv_freq / factor, full layers only
    this.scale = 1 / Math.sqrt(cfg.query_pre_attn_scalar ?? 256);
    this.embScale = Math.fround(Math.sqrt(this.D)); // llama.cpp: sqrtf(n_embd) in f32
    this.gelu = opts.gelu === "ggml" ? geluGgml : geluTanh;
  }

  reset() { for (const l of this.layers) { l.K = []; l.Vc = []; } this.pos = 0; }

  rope(v, off, theta = this.theta, posScale = 1) {
    const half = this.hd / 2;
    for (let i = 0; i < half; i++) {
      const a = this.pos * posScale * Math.pow(theta, -(2 * i) / this.hd);
      const c = Math.cos(a), s = Math.sin(a);
      const x1 = v[off + i], x2 = v[off + i + half];
      v[off + i] = x1 * c - x2 * s;
      v[off + i + half] = x2 * c + x1 * s;
    }
  }

  /** Feed one token; returns float64 log-softmax over the vocabulary if wantLogits. */
  step(token, wantLogits) {
    if (this.gemma) return this.stepGemma3(token, wantLogits);
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
    return this.logSoftmax(h);
  }

  /** Gemma 3's layer (HF modeling_gemma3.py), one token. */
  stepGemma3(token, wantLogits) {
    const { D, F, Hq, Hk, hd, eps } = this;
    const x = Float64Array.from(this.emb.subarray(token * D, (token + 1) * D)); // [D] residual stream
    for (let i = 0; i < D; i++) x[i] *= this.embScale;
    const h = new Float64Array(D), q = new Float64Array(Hq * hd), k = new Float64Array(Hk * hd), v = new Float64Array(Hk * hd);
    const att = new Float64Array(Hq * hd), o = new Float64Array(D), g = new Float64Array(F), u = new Float64Array(F);
    for (const L of this.layers) {
      const theta = L.sliding ? this.thetaSwa : this.theta, ps = L.sliding ? 1 : this.posScaleFull;
      rmsnorm1w(x, 0, D, L.inNorm, eps, h, 0);
      matvec(L.q, Hq * hd, D, h, q); matvec(L.k, Hk * hd, D, h, k); matvec(L.v, Hk * hd, D, h, v);
      for (let j = 0; j < Hq; j++) { if (L.qn) rmsnorm1w(q, j * hd, hd, L.qn, eps, q, j * hd); this.rope(q, j * hd, theta, ps); }
      for (let j = 0; j < Hk; j++) { if (L.kn) rmsnorm1w(k, j * hd, hd, L.kn, eps, k, j * hd); this.rope(k, j * hd, theta, ps); }
      L.K.push(Float64Array.from(k)); L.Vc.push(Float64Array.from(v));
      const T = L.K.length, grp = Hq / Hk, scale = this.scale;
      // a sliding layer's query at this.pos sees key t iff this.pos - t < window
      const t0 = L.sliding ? Math.max(0, this.pos - this.window + 1) : 0;
      const sc = new Float64Array(T);
      att.fill(0);
      for (let j = 0; j < Hq; j++) {
        const kvh = Math.floor(j / grp);
        let mx = -Infinity;
        for (let t = t0; t < T; t++) {
          let s = 0;
          for (let i = 0; i < hd; i++) s += q[j * hd + i] * L.K[t][kvh * hd + i];
          sc[t] = s * scale;
          if (this.attnCap != null) sc[t] = this.attnCap * Math.tanh(sc[t] / this.attnCap);
          if (sc[t] > mx) mx = sc[t];
        }
        let z = 0;
        for (let t = t0; t < T; t++) { sc[t] = Math.exp(sc[t] - mx); z += sc[t]; }
        for (let t = t0; t < T; t++) {
          const p = sc[t] / z;
          for (let i = 0; i < hd; i++) att[j * hd + i] += p * L.Vc[t][kvh * hd + i];
        }
      }
      matvec(L.o, D, Hq * hd, att, o);
      rmsnorm1w(o, 0, D, L.postNorm, eps, o, 0);
      for (let i = 0; i < D; i++) x[i] += o[i];
      rmsnorm1w(x, 0, D, L.preFF, eps, h, 0);
      matvec(L.gate, F, D, h, g); matvec(L.up, F, D, h, u);
      for (let i = 0; i < F; i++) g[i] = this.gelu(g[i]) * u[i];
      matvec(L.down, D, F, g, o);
      rmsnorm1w(o, 0, D, L.postFF, eps, o, 0);
      for (let i = 0; i < D; i++) x[i] += o[i];
    }
    this.pos++;
    if (!wantLogits) return null;
    rmsnorm1w(x, 0, D, this.normF, eps, h, 0);
    return this.logSoftmax(h);
  }

  /** float64 log-softmax of head · h over the vocabulary. */
  logSoftmax(h) {
    const D = this.D;
    const logits = new Float64Array(this.V);
    matvec(this.head, this.V, D, h, logits);
    if (this.finalCap != null) for (let i = 0; i < this.V; i++) logits[i] = this.finalCap * Math.tanh(logits[i] / this.finalCap);
    let mx = -Infinity;
    for (let i = 0; i < this.V; i++) if (logits[i] > mx) mx = logits[i];
    let z = 0;
    for (let i = 0; i < this.V; i++) z += Math.exp(logits[i] - mx);
    const lz = mx + Math.log(z);
    for (let i = 0; i < this.V; i++) logits[i] -= lz;
    return logits;
  }
}
