#!/usr/bin/env node
// A vocab-only GGUF that llama.cpp loads as a SentencePiece (SPM) vocabulary,
// made from an HF tokenizer.json of the SentencePiece-style BPE kind (Llama 2,
// Mistral, Gemma: model.byte_fallback, "▁" for spaces).
//
//   node tools/node/spm_gguf.mjs TOKENIZER.json OUT.gguf
//
// tokenizer_config.json beside TOKENIZER.json, when there, gives the
// bos/eos/unk/pad tokens and add_bos_token/add_eos_token. The file has no
// tensors and no hyper-parameters: llama.cpp's loader reads only general.* and
// tokenizer.* when the model is opened vocab-only (llama_model::load_hparams
// returns right after general.name), so it is meant for vocabOnly loads.
//
// Keys: general.architecture "llama", general.name, tokenizer.ggml.model
// "llama", tokens (id order), scores, token_type, bos/eos/unknown/padding ids,
// add_bos_token (add_eos_token when the config says), add_space_prefix.
//
// Scores. llama.cpp's SPM tokenizer starts from the UTF-8 characters and
// repeatedly merges the adjacent pair whose concatenation is a vocabulary
// token with the highest score (ties: the leftmost pair). HF's BPE merges the
// adjacent pair with the lowest merge rank (ties: leftmost). Giving the token
// that merge rank r produces the score -r (the first, i.e. lowest, rank that
// produces it wins) makes "highest score" the same choice as "lowest rank",
// so both run the merges in the same order. A token that no merge produces
// (single characters, byte tokens, added tokens) gets -1e9, below every merge:
// HF never builds it from pieces, so llama.cpp may only do so after all real
// merges are exhausted. The two still differ where llama.cpp merges a pair
// whose concatenation is a token but that HF's merges do not list; the
// converter that makes these tokenizer.json files lists every split of a
// piece into two pieces, and this script counts the exceptions (stderr).
//
// Token types (llama.cpp's): 1 normal, 2 unknown (unk_token), 3 control
// (special added tokens), 4 user-defined (non-special added tokens), 6 byte
// (<0xXX>). Token texts are written exactly as in tokenizer.json.
//
// add_space_prefix: true when the normalizer has Prepend("▁") or the
// pre_tokenizer is a Metaspace that prepends; false otherwise (Gemma).
// Refused (one line "PATH: problem", exit 1): not BPE, no byte_fallback, a
// normalizer or pre_tokenizer that llama.cpp's SPM path does not do (it only
// replaces " " by "▁" and optionally prepends one), ids with holes.

import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { GgufWriter } from "../peer/gguf_writer.mjs";

const SP = "\u2581";
const TYPE = { NORMAL: 1, UNKNOWN: 2, CONTROL: 3, USER_DEFINED: 4, BYTE: 6 };
const NO_MERGE_SCORE = -1e9;

class Refusal extends Error {}

function tokenText(e) {
  if (typeof e === "string") return e;
  if (e && typeof e.content === "string") return e.content;
  return null;
}

// The flattened list of a normalizer/pre_tokenizer (Sequence or single).
function flatten(x, key) {
  if (x === null || x === undefined) return [];
  if (x.type === "Sequence") return x[key].flatMap((y) => flatten(y, key));
  return [x];
}

/** Reads the tokenizer.json (and tokenizer_config.json beside it) and works
 *  out everything the GGUF holds. Throws Refusal with the problem. */
export function spmVocab(tokFile) {
  const tok = JSON.parse(fs.readFileSync(tokFile, "utf8"));
  const cfgFile = path.join(path.dirname(tokFile), "tokenizer_config.json");
  const tc = fs.existsSync(cfgFile) ? JSON.parse(fs.readFileSync(cfgFile, "utf8")) : {};
  const m = tok.model;
  if (!m || m.type !== "BPE" || typeof m.vocab !== "object" || !Array.isArray(m.merges))
    throw new Refusal(`not a BPE tokenizer.json (model.type ${m && m.type})`);
  if (m.byte_fallback !== true) throw new Refusal("model.byte_fallback is not true: not a SentencePiece-style BPE");

  // normalizer: only Replace(" " -> "▁") and Prepend("▁")
  let replaces = false, prepends = false;
  for (const n of flatten(tok.normalizer, "normalizers")) {
    if (n.type === "Replace" && n.pattern && n.pattern.String === " " && n.content === SP) replaces = true;
    else if (n.type === "Prepend" && n.prepend === SP) prepends = true;
    else throw new Refusal(`normalizer ${JSON.stringify(n)} is not one llama.cpp's SPM tokenizer does`);
  }
  // pre_tokenizer: none, a Split on " " (nothing left to split once " " is
  // "▁"), or a Metaspace that does not split
  let notes = [];
  for (const p of flatten(tok.pre_tokenizer, "pretokenizers")) {
    if (p.type === "Split" && p.pattern && p.pattern.String === " " && replaces) continue;
    if (p.type === "Metaspace" && p.replacement === SP && p.split !== true) {
      replaces = true;
      const scheme = p.prepend_scheme ?? (p.add_prefix_space === false ? "never" : "always");
      if (scheme === "first") notes.push("Metaspace prepend_scheme \"first\": llama.cpp prepends \"▁\" after every special token too");
      if (scheme !== "never") prepends = true;
      continue;
    }
    throw new Refusal(`pre_tokenizer ${JSON.stringify(p)} is not one llama.cpp's SPM tokenizer does`);
  }
  if (!replaces) throw new Refusal("neither the normalizer nor the pre_tokenizer replaces \" \" by \"▁\" (llama.cpp always does)");

  // tokens in id order: the model's vocab, then the added tokens
  const byId = new Map();
  const put = (id, text, where) => {
    if (!Number.isInteger(id) || id < 0) throw new Refusal(`${where} token ${JSON.stringify(text)} has bad id ${id}`);
    const had = byId.get(id);
    if (had !== undefined && had !== text) throw new Refusal(`id ${id} is both ${JSON.stringify(had)} and ${JSON.stringify(text)}`);
    byId.set(id, text);
  };
  for (const [text, id] of Object.entries(m.vocab)) put(id, text, "vocab");
  const added = Array.isArray(tok.added_tokens) ? tok.added_tokens : [];
  for (const a of added) put(a.id, a.content, "added");
  const n = byId.size;
  const tokens = new Array(n);
  for (const [id, text] of byId) {
    if (id >= n) throw new Refusal(`ids have holes (id ${id} with ${n} tokens)`);
    tokens[id] = text;
  }
  const idOf = new Map(tokens.map((t, i) => [t, i]));

  // scores from the merges: -(first rank producing the token), else -1e9
  const scores = new Array(n).fill(NO_MERGE_SCORE);
  const pairs = new Set();
  let unknownResults = 0;
  m.merges.forEach((mg, r) => {
    let ab;
    if (Array.isArray(mg) && mg.length === 2) ab = mg;
    else if (typeof mg === "string" && mg.split(" ").length === 2) ab = mg.split(" ");
    else throw new Refusal(`merge ${r} ${JSON.stringify(mg)} is not two tokens`);
    pairs.add(ab[0] + "\u0000" + ab[1]);
    const id = idOf.get(ab[0] + ab[1]);
    if (id === undefined) { unknownResults++; return; }
    if (scores[id] === NO_MERGE_SCORE) scores[id] = -r;
  });

  // types
  const unkText = tokenText(tc.unk_token) ?? m.unk_token ?? null;
  const unkId = unkText === null ? undefined : idOf.get(unkText);
  const types = tokens.map((t) => (/^<0x[0-9A-F]{2}>$/.test(t) ? TYPE.BYTE : TYPE.NORMAL));
  for (const a of added) types[a.id] = a.special ? TYPE.CONTROL : TYPE.USER_DEFINED;
  if (unkId !== undefined) types[unkId] = TYPE.UNKNOWN;

  // special ids: tokenizer_config's "<x>_token", else the post-processor's
  // leading special token (BOS) and model.unk_token
  const pp = tok.post_processor;
  const lead = pp && pp.type === "TemplateProcessing" && Array.isArray(pp.single) && pp.single[0] && pp.single[0].SpecialToken
    ? pp.single[0].SpecialToken.id : null;
  const ids = {};
  for (const typ of ["bos", "eos", "unk", "pad"]) {
    const t = tokenText(tc[`${typ}_token`]);
    if (t !== null && idOf.has(t)) ids[typ] = idOf.get(t);
  }
  if (ids.bos === undefined && lead !== null && idOf.has(lead)) ids.bos = idOf.get(lead);
  if (ids.unk === undefined && unkId !== undefined) ids.unk = unkId;
  const addBos = typeof tc.add_bos_token === "boolean" ? tc.add_bos_token : lead !== null && idOf.get(lead) === ids.bos;
  const addEos = typeof tc.add_eos_token === "boolean" ? tc.add_eos_token : undefined;

  // diagnostics: tokens of two or more characters no merge makes, and splits
  // of a token into two tokens that HF's merges do not list (llama.cpp would
  // merge those, at the token's score)
  let noMerge = 0, unlisted = 0;
  const unlistedExamples = [];
  for (let id = 0; id < n; id++) {
    if (types[id] !== TYPE.NORMAL) continue;
    const cs = Array.from(tokens[id]);
    if (cs.length < 2) continue;
    if (scores[id] === NO_MERGE_SCORE) noMerge++;
    for (let k = 1; k < cs.length; k++) {
      const a = cs.slice(0, k).join(""), b = cs.slice(k).join("");
      if (idOf.has(a) && idOf.has(b) && !pairs.has(a + "\u0000" + b)) {
        unlisted++;
        if (unlistedExamples.length < 5) unlistedExamples.push(`${a} + ${b}`);
      }
    }
  }
  return {
    tokens, scores, types, ids, addBos, addEos, addSpacePrefix: prepends, notes,
    stats: { tokens: n, merges: m.merges.length, unknownResults, noMerge, unlisted, unlistedExamples },
  };
}

/** Writes the vocab-only GGUF; returns spmVocab's result. */
export async function writeSpmGguf(tokFile, outPath, { name } = {}) {
  const v = spmVocab(tokFile);
  const w = new GgufWriter();
  w.addString("general.architecture", "llama");
  w.addString("general.name", name ?? path.basename(path.dirname(path.resolve(tokFile))));
  w.addString("tokenizer.ggml.model", "llama");
  w.addStringArray("tokenizer.ggml.tokens", v.tokens);
  w.addF32Array("tokenizer.ggml.scores", v.scores);
  w.addI32Array("tokenizer.ggml.token_type", v.types);
  const keys = { bos: "bos_token_id", eos: "eos_token_id", unk: "unknown_token_id", pad: "padding_token_id" };
  for (const [typ, id] of Object.entries(v.ids)) w.addU32(`tokenizer.ggml.${keys[typ]}`, id);
  w.addBool("tokenizer.ggml.add_bos_token", v.addBos);
  if (v.addEos !== undefined) w.addBool("tokenizer.ggml.add_eos_token", v.addEos);
  w.addBool("tokenizer.ggml.add_space_prefix", v.addSpacePrefix);
  await w.write(outPath);
  return v;
}

export function describe(v) {
  const s = v.stats;
  return [
    `${s.tokens} tokens, ${s.merges} merges; ids ${JSON.stringify(v.ids)}; add_bos_token ${v.addBos}; add_space_prefix ${v.addSpacePrefix}`,
    `${s.noMerge} normal tokens of 2+ characters that no merge makes (score -1e9)`,
    `${s.unlisted} splits of a token into two tokens missing from the merges (llama.cpp would merge them)${s.unlistedExamples.length ? ", e.g. " + s.unlistedExamples.map((x) => JSON.stringify(x)).join(", ") : ""}`,
    ...(s.unknownResults ? [`${s.unknownResults} merges make a token that is not in the vocabulary (ignored)`] : []),
    ...v.notes.map((x) => `note: ${x}`),
  ];
}

if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const [tokFile, out] = process.argv.slice(2);
  if (!tokFile || !out) {
    console.error("usage: node tools/node/spm_gguf.mjs TOKENIZER.json OUT.gguf");
    process.exit(2);
  }
  try {
    const v = await writeSpmGguf(tokFile, out);
    for (const line of describe(v)) console.error(line);
    console.error(`wrote ${out}`);
  } catch (e) {
    console.error(`${tokFile}: ${e.message}`);
    process.exit(1);
  }
}
