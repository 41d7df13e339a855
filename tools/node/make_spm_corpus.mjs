// Writes tests/tokenizer/corpus_spm.json: extra tokenizer test strings for the
// SentencePiece-style BPE vocabularies (Gemma 2, Llama 2 / Mistral:
// byte_fallback, "▁" for spaces, a prefix "▁" per text segment). The SPM
// goldens run over corpus.json followed by this file; strings that are already
// in corpus.json are left out here, so the two lists never repeat a text.
// Deterministic (fixed strings only). Usage, from the repo root:
//   node tools/node/make_spm_corpus.mjs > tests/tokenizer/corpus_spm.json
// Format: {"cases": [{"text": "..."}, ...]}, as corpus.json.
import { readFileSync } from "node:fs";

const cases = [];
const add = (...xs) => { for (const x of xs) cases.push(x); };
const range = (a, b) => Array.from({ length: b - a }, (_, i) => a + i);

// --- spaces: leading, trailing, runs, only spaces (Prepend("▁") goes before
// the first one; Gemma's "▁▁".."▁"x31 are added tokens but spaces only become
// "▁" after the added-token split) ---
add("", " a", "a ", "  a  ", "a  b", "a   b   c", "   ", " ".repeat(5), " ".repeat(31), " ".repeat(32),
    " ".repeat(33), "a" + " ".repeat(40) + "b", " . ", "end. ");
// --- newlines and tabs (Gemma: "\n" runs and "\t\t".. runs are added tokens,
// and there is no <0x09> byte token) ---
add(" \n", "\n ", " \n\n ", "\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n", "\ta", "a\tb", "\t\t\t",
    " \t ", "\t".repeat(40), "x\n\ty\n\t\tz");
// --- special tokens at the start, the end, glued between words (each text
// segment between them is normalised on its own) ---
add("<bos>", "<bos>Hello", "<bos> Hello", "Hello<bos>", "Hello <bos>", "<eos>", "hello<eos>world",
    "<start_of_turn>user\n", "<start_of_turn>user\nHi there<end_of_turn>\n<start_of_turn>model\n",
    "text<end_of_turn>", "<pad><unk><mask>", "<unused0> <unused1>", "[@BOS@]x",
    "<s>", "</s>", "<s>Hello", "<s> Hello", "Hello</s>", "Hello </s>", "hello</s>world", "a<s>b",
    "<s>[INST] Hi [/INST]", "<s><s></s>", "<unk>", "a<unk>b", "<table><tr><td>x</td></tr></table>",
    "<b>bold</b> and <s>struck</s>");
// --- characters absent from the vocabularies: byte fallback ---
add("\u0000", "a\u0000b", String.fromCodePoint(...range(0, 32)), "\u001b[31mred\u001b[0m", "\u007f\u0080\u009f",
    "\uE000", "\uE000\uF8FF private use", "\u{10FFFF}", "\u{F0000}\u{10FFFD}", "𪚥 rare CJK 𰻞", "𪚥".repeat(20),
    "🦜🪿🫎", "🦜".repeat(30), "🀄 mahjong", "𝕏𝕐𝕫 math letters", "\uFFFD replacement char");
// --- "▁" itself, and texts that look like byte tokens ---
add("▁", "▁hello", "a▁b", "▁▁▁", " ▁ ", "▁<s>", "▁".repeat(100), "<0x41>", "<0xE4><0xBD><0xA0>");
// --- long words, mixed scripts ---
add("Donaudampfschifffahrtselektrizitätenhauptbetriebswerkbauunterbeamtengesellschaft",
    "supercalifragilisticexpialidocious".repeat(6),
    "Hello мир 世界 مرحبا 🌍", "日本語とEnglishの mixed テキスト", "Ελληνικά and ქართული and ᚠᚢᚦ",
    "naïve café 北京 😀 ▁ <s> </s> <bos>", "a\u00a0b\u3000c", "  indented\n    code();\n");

let known = new Set();
try {
  const url = new URL("../../tests/tokenizer/corpus.json", import.meta.url);
  known = new Set(JSON.parse(readFileSync(url, "utf8")).cases.map((c) => c.text));
} catch (e) {
  throw new Error(`make_spm_corpus: cannot read tests/tokenizer/corpus.json (${e.message})`);
}
const seen = new Set();
const out = [];
for (const t of cases) { if (!seen.has(t) && !known.has(t)) { seen.add(t); out.push({ text: t }); } }
process.stdout.write(JSON.stringify({ cases: out }, null, 1) + "\n");
