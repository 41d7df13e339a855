#!/usr/bin/env node
// llama.cpp as a second oracle for the SentencePiece-style vocabularies:
// the ids llama.cpp's SPM tokenizer gives for each corpus string.
//
//   node tools/node/spm_llamacpp_goldens.mjs gemma2|llama2 [--corpus A.json,B.json] [--out FILE]
//
// Defaults: --corpus tests/tokenizer/corpus.json,tests/tokenizer/corpus_spm.json
// (the cases of both, in that order, as the transformers.js goldens),
// --out tests/tokenizer/golden_<pkg>_llamacpp.json.
//
// The tokenizer.json of @lenml/tokenizer-<pkg> becomes a vocab-only GGUF
// (spm_gguf.mjs, in a scratch folder); node-llama-cpp loads it with
// vocabOnly and tokenizes every text with special tokens parsed and no BOS
// (model.tokenize(text, true) = common_tokenize(vocab, text, add_special=false,
// parse_special=true)). node-llama-cpp's own resource estimate tries a full
// load of the file, which fails for want of hyper-parameters and tensors and
// falls back to a heuristic; it only logs two lines, hidden here.
//
// Each case where the ids differ from transformers.js's encode(text,
// {add_special_tokens:false}) is marked "differs_from_hf": true and printed
// on stderr with both id lists.

import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { getLlama, LlamaLogLevel } from "node-llama-cpp";
import { writeSpmGguf, describe } from "./spm_gguf.mjs";

const HERE = path.dirname(fileURLToPath(import.meta.url));
const ROOT = path.resolve(HERE, "../..");
const PACKAGES = ["gemma2", "llama2"];

function parseArgs(argv) {
  const pkg = argv[0];
  if (!PACKAGES.includes(pkg)) throw new Error(`first argument: the package, one of ${PACKAGES.join(", ")}`);
  const a = {
    pkg,
    corpus: ["tests/tokenizer/corpus.json", "tests/tokenizer/corpus_spm.json"].map((p) => path.join(ROOT, p)).join(","),
    out: path.join(ROOT, `tests/tokenizer/golden_${pkg}_llamacpp.json`),
  };
  for (let i = 1; i < argv.length; i++) {
    const k = argv[i];
    if (i + 1 >= argv.length) throw new Error(`${k} needs a value`);
    if (k === "--corpus") a.corpus = argv[++i];
    else if (k === "--out") a.out = argv[++i];
    else throw new Error(`unknown argument ${k}`);
  }
  return a;
}

async function main() {
  const a = parseArgs(process.argv.slice(2));
  const corpusPaths = a.corpus.split(",");
  const texts = corpusPaths.flatMap((p) => JSON.parse(fs.readFileSync(p, "utf8")).cases.map((c) => {
    if (typeof c.text !== "string") throw new Error(`${p}: a case has no "text" string`);
    return c.text;
  }));
  const tokFile = path.join(HERE, `node_modules/@lenml/tokenizer-${a.pkg}/models/tokenizer.json`);
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "mi-spm-gguf-"));
  let cases;
  try {
    const gguf = path.join(tmp, `${a.pkg}.gguf`);
    const v = await writeSpmGguf(tokFile, gguf, { name: `@lenml/tokenizer-${a.pkg}` });
    for (const line of describe(v)) console.error(`${a.pkg}: ${line}`);
    // Hide the two lines of the failed resource estimate (see above); a load
    // that really fails throws.
    const expected = /error loading model hyperparameters: key not found in model: llama\.context_length|llama_model_load_from_file_impl: failed to load model/;
    const logger = (level, message) => { if (!expected.test(message)) console.error(`[node-llama-cpp] ${message}`); };
    const llama = await getLlama({ gpu: false, build: "never", logLevel: LlamaLogLevel.error, logger });
    const model = await llama.loadModel({ modelPath: gguf, vocabOnly: true });
    cases = texts.map((text) => ({ text, ids: Array.from(model.tokenize(text, true)) }));
    await model.dispose();
  } finally {
    fs.rmSync(tmp, { recursive: true, force: true });
  }

  const { fromPreTrained } = await import(`@lenml/tokenizer-${a.pkg}`);
  const hf = fromPreTrained();
  let nd = 0;
  for (const c of cases) {
    const h = hf.encode(c.text, { add_special_tokens: false });
    if (JSON.stringify(h) === JSON.stringify(c.ids)) continue;
    c.differs_from_hf = true;
    nd++;
    console.error(`differs: ${JSON.stringify(c.text)}\n  llama.cpp       ${JSON.stringify(c.ids)}\n  transformers.js ${JSON.stringify(h)}`);
  }
  console.error(`${a.pkg}: ${nd} of ${cases.length} case(s) where llama.cpp differs from transformers.js (marked "differs_from_hf": true)`);

  const rel = (p) => path.relative(ROOT, path.resolve(p));
  const source = `llama.cpp v0.4.0 via node-llama-cpp@3.21.1: model.tokenize(text, specialTokens=true), no BOS, on a vocab-only GGUF made by tools/node/spm_gguf.mjs from the @lenml/tokenizer-${a.pkg}@3.7.2 tokenizer.json; corpus ${corpusPaths.map(rel).join(" + ")}`;
  const regenerate = `node tools/node/spm_llamacpp_goldens.mjs ${a.pkg}`;
  const body = cases.map((c) => `    {"text": ${JSON.stringify(c.text)}, "ids": ${JSON.stringify(c.ids)}${c.differs_from_hf ? ', "differs_from_hf": true' : ""}}`).join(",\n");
  fs.mkdirSync(path.dirname(a.out), { recursive: true });
  fs.writeFileSync(a.out, `{\n  "source": ${JSON.stringify(source)},\n  "regenerate": ${JSON.stringify(regenerate)},\n  "cases": [\n${body}\n  ]\n}\n`);
  console.error(`wrote ${a.out}: ${cases.length} cases`);
}

main().catch((e) => { console.error(`spm_llamacpp_goldens: ${e.message}`); process.exit(1); });
