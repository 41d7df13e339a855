// A Llama 3 tokenizer, as its tokenizer.json states it and as llama.cpp's
// GGUF names it, read alike by MetaInfer and llama.cpp. The vocabulary is
// Qwen3's (nothing is downloaded); what makes it Llama 3's is what differs
// between the two tokenizers, rewritten into a mi-mkmodel checkpoint's
// tokenizer.json:
//  - the pre-tokenizer's Split regex (digits in runs of up to three: the
//    GGUF's tokenizer.ggml.pre "llama-bpe");
//  - no normalizer (Qwen's is NFC: "e" + U+0301 stays two code points);
//  - a TemplateProcessing post-processor putting a BOS before every text
//    (HF's tokenizer(text); the GGUF's tokenizer.ggml.add_bos_token).
// Checked, on prompts with digits, combining marks, contractions in capitals,
// whitespace runs, CJK and an emoji:
//  1. the folder (tokenizer.json) through mi-run: the same prompt ids as
//     llama.cpp on the file hf2gguf.mjs converts it to (pre llama-bpe,
//     add_bos_token true; F32), and the same greedy tokens and logprobs
//     (MetaInfer's exact f32 path: within 1e-3);
//  2. the file through mi-run: refused in one line while the model contract
//     knows no "llama-bpe" (the shipped model.qwen3); with the entry the
//     shipped model.llama carries copied into a scratch CKB, the same prompt
//     ids as llama.cpp and the same output as the folder, byte for byte;
//  3. a chat template that writes the BOS gets it once (--chat);
//  4. the normalizer matters: the combining-mark prompt's ids differ from
//     those of the same checkpoint with Qwen's own tokenizer (NFC).
//   node tests/gguf/llama3_tok_peer.mjs BUILD_DIR   (exit 77: node-llama-cpp missing)
import { execFileSync, spawnSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";

import { src, peerOrSkip } from "./peer_setup.mjs";

const build = path.resolve(process.argv[2] || "build");
const { runPeer, convert } = await peerOrSkip();
const fail = (msg) => { console.error(`FAIL: ${msg}`); process.exit(1); };
const LLAMA3_REGEX = String.raw`(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`;
const BOS = "<|endoftext|>";
const prompts = ["Hello world", "Numbers 1234567 and 3.14159, year 2024", "Cafe\u0301 na\u0308ive re\u0301sume\u0301",
  "I'LL SAY it's fine, WE'VE done", "  spaces\n\n\tand tabs  ", "\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8 \ud83d\ude00",
  "<|im_start|>user 42<|im_end|>"];
const steps = 6;
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "mi-l3tok-"));
const bin = (t) => path.join(build, "bin", t);
try {
  const qwen = path.join(tmp, "qwen"), l3 = path.join(tmp, "l3tok");
  for (const d of [qwen, l3]) execFileSync(bin("mi-mkmodel"), ["--shape", "tiny", "--seed", "7", "--out", d]);
  const tjPath = path.join(l3, "tokenizer.json"), tcPath = path.join(l3, "tokenizer_config.json");
  const tj = JSON.parse(fs.readFileSync(tjPath, "utf8"));
  const split = tj.pre_tokenizer.pretokenizers.find((p) => p.type === "Split");
  split.pattern.Regex = LLAMA3_REGEX;
  tj.normalizer = null;
  const bosId = tj.added_tokens.find((a) => a.content === BOS).id;
  tj.post_processor = { type: "Sequence", processors: [
    { type: "ByteLevel", add_prefix_space: true, trim_offsets: false, use_regex: true },
    { type: "TemplateProcessing", single: [{ SpecialToken: { id: BOS, type_id: 0 } }, { Sequence: { id: "A", type_id: 0 } }],
      pair: [{ SpecialToken: { id: BOS, type_id: 0 } }, { Sequence: { id: "A", type_id: 0 } }, { SpecialToken: { id: BOS, type_id: 1 } }, { Sequence: { id: "B", type_id: 1 } }],
      special_tokens: { [BOS]: { id: BOS, ids: [bosId], tokens: [BOS] } } }] };
  fs.writeFileSync(tjPath, JSON.stringify(tj));
  const tc = JSON.parse(fs.readFileSync(tcPath, "utf8"));
  tc.bos_token = BOS;
  delete tc.add_bos_token;
  /* a template that writes the BOS itself, as Llama 3's does */
  tc.chat_template = "{{ bos_token }}{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}" +
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";
  fs.writeFileSync(tcPath, JSON.stringify(tc));

  /* llama.cpp on the F32 file (its bf16 dot products round the activations
   * to bf16), MetaInfer's file the bf16 weights as the folder stores them */
  const gguf = path.join(tmp, "l3tok.gguf"), gguf32 = path.join(tmp, "l3tok-f32.gguf");
  await convert(l3, gguf, { type: "bf16" });
  await convert(l3, gguf32, { type: "f32" });
  const peer = await runPeer(gguf32, prompts, steps);

  const promptsFile = path.join(tmp, "prompts.jsonl");
  fs.writeFileSync(promptsFile, prompts.map((p) => JSON.stringify(p)).join("\n") + "\n");
  const run = (model, env = {}) => spawnSync(bin("mi-run"), ["-m", model, "--prompts", promptsFile, "-n", String(steps), "--temp", "0",
    "--json", "--top-logprobs", "10", "--ignore-eos", "-t", "2"], { encoding: "utf8", env: { ...process.env, MI_CPU_MATMUL_ACT: "f32", ...env } });
  const parse = (out) => {
    const by = prompts.map(() => ({ ids: null, steps: [] }));
    let at = -1;
    for (const l of out.trim().split("\n")) {
      const j = JSON.parse(l);
      if ("prompt_index" in j) { at = j.prompt_index; by[at].ids = j.prompt_ids; } else if ("token_id" in j) by[at].steps.push(j);
    }
    return by;
  };
  const ok = (r, what) => { if (r.status !== 0) fail(`${what}: mi-run exit ${r.status}: ${r.stderr.trim().split("\n").pop()}`); return r.stdout; };

  /* 1. the folder against llama.cpp on the converted file */
  const folderOut = ok(run(l3), "the Llama 3-style folder");
  const folder = parse(folderOut);
  let compared = 0, worst = 0;
  for (let i = 0; i < prompts.length; i++) {
    const want = peer[i].prompt_ids, got = folder[i].ids;
    if (JSON.stringify(got) !== JSON.stringify(want))
      fail(`prompt ${i} ${JSON.stringify(prompts[i])}: folder ids ${JSON.stringify(got)}, llama.cpp ${JSON.stringify(want)}`);
    if (got[0] !== bosId) fail(`prompt ${i}: the first id is ${got[0]}, not the BOS ${bosId}`);
    for (let s = 0; s < steps; s++) {
      const o = folder[i].steps[s], t = peer[i].steps[s];
      const margin = Math.min(o.top_logprobs[0][1] - o.top_logprobs[1][1], t.top[0][1] - t.top[1][1]);
      if (o.token_id !== t.token_id) {
        if (margin >= 0.01) fail(`prompt ${i} step ${s}: MetaInfer ${o.token_id} vs llama.cpp ${t.token_id} (top-2 margin ${margin.toFixed(4)})`);
        break;
      }
      compared++;
      worst = Math.max(worst, Math.abs(o.logprob - t.top[0][1]));
    }
  }
  if (compared < (prompts.length * steps) / 2) fail(`only ${compared} steps compared before near ties`);
  if (!(worst < 1e-3)) fail(`chosen-token logprobs differ from llama.cpp's by ${worst} (bound 1e-3)`);

  /* 2. the file: refused while the contract lacks the pre-tokenizer ... */
  const refused = run(gguf);
  const line = refused.stderr.trim();
  if (refused.status === 0 || !line.includes("llama-bpe") || !line.includes(gguf) || line.split("\n").length !== 1)
    fail(`the file under a contract without llama-bpe: exit ${refused.status}, stderr ${JSON.stringify(line)}`);
  /* ... and read through the entry model.llama ships, in a scratch CKB */
  const ckb = path.join(tmp, "ckb");
  fs.cpSync(path.join(src, "ckb"), ckb, { recursive: true });
  const llamaTok = JSON.parse(fs.readFileSync(path.join(src, "ckb/models/llama.json"), "utf8")).gguf.tokenizer;
  if (!llamaTok.pre["llama-bpe"]) fail("ckb/models/llama.json has no llama-bpe pre-tokenizer");
  const q3Path = path.join(ckb, "models/qwen3.json"), q3 = JSON.parse(fs.readFileSync(q3Path, "utf8"));
  q3.gguf.tokenizer.pre["llama-bpe"] = llamaTok.pre["llama-bpe"];
  fs.writeFileSync(q3Path, JSON.stringify(q3, null, 2));
  const fileOut = ok(run(gguf, { MI_CKB_DIR: ckb }), "the file through the scratch CKB");
  const file = parse(fileOut);
  for (let i = 0; i < prompts.length; i++)
    if (JSON.stringify(file[i].ids) !== JSON.stringify(peer[i].prompt_ids))
      fail(`prompt ${i}: file ids ${JSON.stringify(file[i].ids)}, llama.cpp ${JSON.stringify(peer[i].prompt_ids)}`);
  if (fileOut !== folderOut) fail("the file's mi-run output differs from the folder's (the same bf16 weights)");

  /* 2b. a file without tokenizer.ggml.add_bos_token (llama.cpp's converter
   * writes none when tokenizer_config.json and the post-processor say
   * nothing: Llama 3's first tokenizer.json): llama.cpp then puts the BOS
   * first for llama-bpe, and so does the reader, from the contract's
   * "add_bos" of that pre-tokenizer. The key is renamed in place (same
   * length), which both readers ignore. */
  const dropKey = (from, to) => {
    const b = fs.readFileSync(from), k = Buffer.from("tokenizer.ggml.add_bos_token");
    const at = b.indexOf(k);
    if (at < 0 || b.indexOf(k, at + 1) >= 0) fail(`${from}: tokenizer.ggml.add_bos_token not there once`);
    Buffer.from("tokenizer.ggml.xdd_bos_token").copy(b, at);
    fs.writeFileSync(to, b);
  };
  const noKey = path.join(tmp, "l3tok-nokey.gguf"), noKey32 = path.join(tmp, "l3tok-nokey-f32.gguf");
  dropKey(gguf, noKey);
  dropKey(gguf32, noKey32);
  const peerNoKey = await runPeer(noKey32, prompts.slice(0, 1), 1);
  if (peerNoKey[0].prompt_ids[0] !== bosId) fail(`llama.cpp without the key: ids ${JSON.stringify(peerNoKey[0].prompt_ids)}, no BOS first`);
  const noKeyIds = parse(ok(run(noKey, { MI_CKB_DIR: ckb }), "the file without add_bos_token"))[0].ids;
  if (JSON.stringify(noKeyIds) !== JSON.stringify(peerNoKey[0].prompt_ids))
    fail(`without add_bos_token: ids ${JSON.stringify(noKeyIds)}, llama.cpp ${JSON.stringify(peerNoKey[0].prompt_ids)}`);

  /* the chat path: the template writes the BOS, and it is not added again
   * (transformers' apply_chat_template encodes without special tokens) */
  const chat = spawnSync(bin("mi-run"), ["-m", l3, "--chat", "-p", "hi", "-n", "1", "--temp", "0", "--json", "-t", "2"],
    { encoding: "utf8" });
  const chatIds = JSON.parse(ok(chat, "the folder with --chat").trim().split("\n")[0]).prompt_ids;
  if (chatIds[0] !== bosId || chatIds.filter((t) => t === bosId).length !== 1)
    fail(`--chat: prompt ids ${JSON.stringify(chatIds.slice(0, 4))}... should hold the template's one BOS ${bosId}`);

  /* 4. the normalizer: Qwen's NFC tokenizer reads the combining marks otherwise */
  const qwenIds = parse(ok(run(qwen), "the Qwen-tokenizer folder"));
  const ci = 2;
  if (JSON.stringify(qwenIds[ci].ids) === JSON.stringify(folder[ci].ids.slice(1)))
    fail("the combining-mark prompt tokenizes alike with and without NFC: the test proves nothing");
  console.log(`Llama 3-style tokenizer (pre llama-bpe, no normalizer, BOS ${bosId}) on ${prompts.length} prompts: folder and file ` +
    `ids identical to llama.cpp's; ${compared} greedy steps identical, max |logprob diff| ${worst.toExponential(2)}; ` +
    `the file refused without the contract's entry, byte-identical to the folder with it; combining marks: ` +
    `${folder[ci].ids.length - 1} ids without NFC vs ${qwenIds[ci].ids.length} with`);
  console.log("1 passed, 0 failed");
} finally {
  fs.rmSync(tmp, { recursive: true, force: true });
}
