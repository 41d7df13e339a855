// Writes tests/tokenizer/corpus.json: the tokenizer test strings.
// Deterministic (fixed strings plus a seeded PRNG). Usage, from the repo root:
//   node tools/node/make_tokenizer_corpus.mjs > tests/tokenizer/corpus.json
// Format: {"cases": [{"text": "..."}, ...]} — the goldens add "ids".

const cases = [];
const add = (...xs) => { for (const x of xs) cases.push(x); };

// xorshift32, fixed seed: the corpus must not change between runs.
let seed = 0x2545f491;
const rnd = (n) => { seed ^= seed << 13; seed >>>= 0; seed ^= seed >>> 17; seed ^= seed << 5; seed >>>= 0; return seed % n; };
const pick = (a) => a[rnd(a.length)];

// --- ASCII prose ---
add("Hello, world!",
    "The quick brown fox jumps over the lazy dog.",
    "Hello, my dog is cute",
    "It was the best of times, it was the worst of times, it was the age of wisdom, it was the age of foolishness.",
    "a", "A", "ab", " ", "  ", "hello", " hello", "  hello", "hello ", "hello  ",
    "Mr. O'Neil's cat—named \"Whiskers\"—wasn't impressed.",
    "e.g. i.e. etc. vs. U.S.A. Ph.D.",
    "HTTP/1.1 200 OK; Content-Type: text/html",
    "user@example.com https://example.org/path?q=1&r=2#frag",
    "ALL CAPS SENTENCE WITH SHOUTING!!!",
    "MiXeD cAsE wOrDs",
    "snake_case_identifier and camelCaseIdentifier and PascalCase",
    "!!!???...,,,;;;:::",
    "(parentheses) [brackets] {braces} <angles>",
    "~`!@#$%^&*()-_=+[]{}|;:'\",.<>/?\\",
);
// --- contractions, all cases ---
for (const w of ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d"]) {
  add(`it${w}`, `IT${w.toUpperCase()}`, `x${w[0]}${w.slice(1).toUpperCase()} y`);
}
add("I'm sure you'll see they've said she'd go, isn't it? We're done.",
    "I'M SURE YOU'LL SEE THEY'VE SAID SHE'D GO, ISN'T IT? WE'RE DONE.",
    "don't DON'T Don'T dOn't", "'s at start", "trailing '", "rock 'n' roll", "''double''",
    "l'homme l'été aujourd'hui", "it’s a curly apostrophe’s case");
// --- numbers (Qwen splits digits one by one) ---
add("0", "7", "42", "123456789", "3.14159265358979", "-273.15", "1,000,000", "1e-10", "0x7FFFFFFF",
    "2026-11-29T23:59:59Z", "Call 555-0123 or +1 (800) 555-0199", "v1.2.3-rc.4", "IPv4 192.168.0.1",
    "١٢٣٤٥ Arabic-Indic digits", "१२३ Devanagari digits", "１２３ fullwidth digits", "Ⅻ roman numeral ½ ¾ ²³",
    "abc123def456", "x = 10**9 + 7");
// --- code with indentation ---
add("def f(x):\n    return x * 2\n",
    "int main(void) {\n\tprintf(\"hi\\n\");\n\treturn 0;\n}\n",
    "    if (a && b) {\n        c();\n    }\n",
    "for i in range(10):\n\tif i % 2 == 0:\n\t\tprint(i)\n",
    "<div class=\"x\">\n  <span>text</span>\n</div>",
    "SELECT id, name FROM users WHERE age >= 18 ORDER BY name;",
    "const f = async (a, b) => { await g(a ?? b); };",
    "#include <stdio.h>\n#define MAX(a,b) ((a)>(b)?(a):(b))\n",
    "fn main() -> Result<(), Box<dyn Error>> {\n    Ok(())\n}",
    "```python\nprint('hi')\n```",
    "{\"key\": [1, 2, 3], \"nested\": {\"a\": null, \"b\": true}}",
    "$ ls -la | grep '^d' && echo done 2>&1 >/dev/null",
    "        deeply indented line with 8 spaces",
    "\t\t\ttabs then text",
    "x=1;y=2;z=x+y",
    "a->b::c.d",
    "// comment\n/* block */\n# hash\n-- sql",
);
// --- whitespace runs, newlines, tabs, CRLF ---
add("\n", "\n\n", "\n\n\n\n", "\r\n", "\r\n\r\n", "\r", "\t", "\t\t", " \t \t ", "   \n   ", "a\nb", "a\n\nb",
    "a\r\nb\r\nc", "line1\r\n\r\nline3", "word   word", "word\t\tword", "trailing spaces   ", "   leading spaces",
    " \n \n ", "a \n b", "x\n    y", "end\n", "mixed \t\n\r\n whitespace", "a\u00a0b non-breaking space",
    "ideographic\u3000space", "thin\u2009space and en\u2002space", "\f form feed \v vertical tab",
    // Unicode whitespace where regex engines disagree (JS \s has U+FEFF but
    // not U+0085; Oniguruma/HF has U+0085; PCRE2 UCP: Z category + ASCII)
    "a\u0085b", "a \u0085 b", "x\uFEFFy", "x \uFEFF y", "\u180E", "a\u2028b", "a \u2028\u2029 b",
    "a\u1680b", "a \u205F b", "a\u00a0\u00a0b", "a\u00a0 b", "\u00a0\u00a0x", "x \u0085\u0085 \ny",
    "\uFEFF\uFEFF  z", "a\u3000\u3000 b", "a\u0085\u0085b", "a\uFEFF\uFEFFb", "a\u180E\u180Eb",
    " ".repeat(50), "\n".repeat(20), "a" + " ".repeat(17) + "b", "tab\tsep\tvalues\n1\t2\t3\n");
// --- special tokens (parsed as single tokens) ---
add("<|im_start|>", "<|im_end|>", "<|endoftext|>",
    "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n",
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n",
    "text<|endoftext|>more text",
    "<|im_start|><|im_end|><|endoftext|>",
    "<think>\nreasoning\n</think>\n\nanswer",
    "<tool_call>\n{\"name\": \"f\"}\n</tool_call>",
    "<|fim_prefix|>def f():<|fim_suffix|>\n<|fim_middle|>",
    "<|vision_start|><|image_pad|><|vision_end|>",
    "<|im_start", "<|im_end", "im_end|>", "< |im_end| >", "<|IM_END|>", "<|im_end|><|im_end|>",
    " <|im_end|> ", "\n<|im_end|>\n", "a<|im_end|>b");
// --- CJK ---
add("你好，世界！", "我爱北京天安门。", "人工智能正在改变世界。", "中文和English混合的句子",
    "日本語のテキストです。", "ひらがな カタカナ 漢字", "東京都渋谷区", "한국어 텍스트입니다.", "안녕하세요 세계",
    "繁體中文：臺灣", "「引号」『书名号』【括号】", "全角文字ＡＢＣ", "一二三四五六七八九十", "𠀀𠀁 extension B chars",
    "龍龘靐齉", "漢字かな交じり文", "中文，标点。符号！问号？");
// --- emoji: ZWJ sequences, skin tones, flags, keycaps ---
add("😀", "👍", "👍🏽", "👋🏿👋🏻", "👨‍👩‍👧‍👦", "👩‍💻", "🏳️‍🌈", "🇺🇸🇯🇵🇨🇳", "1️⃣ #️⃣", "❤️", "🫠🥲",
    "I love 🍕 and 🍣!", "🙂🙂🙂🙂🙂", "emoji at end 🎉", "🧑🏾‍🤝‍🧑🏼", "☃ ☀ ★ ♥", "😀😃😄😁😆😅😂🤣");
// --- Arabic, Hebrew, Hindi, other scripts ---
add("مرحبا بالعالم", "اللغة العربية جميلة", "שלום עולם", "नमस्ते दुनिया", "हिन्दी भाषा में लिखा गया पाठ",
    "Привет, мир!", "Ελληνικά γράμματα", "ภาษาไทย", "Tiếng Việt có dấu", "ქართული", "Հայերեն", "বাংলা ভাষা",
    "தமிழ்", "ᚠᚢᚦᚨᚱᚲ runes", "ꯃꯤꯇꯩ", "Ａ mix of Ελληνικά, Русский, 中文, العربية and English",
    "RTL \u202Eoverride\u202C text", "zero\u200Bwidth\u200Bspace", "soft\u00ADhyphen", "word\u200Djoiner");
// --- accents: precomposed (NFC) and decomposed (NFD; normalised to NFC by the tokenizer) ---
add("café", "naïve résumé", "Ångström", "Crème brûlée", "Ñandú", "Zürich Köln Düsseldorf", "Łódź Kraków",
    "e\u0301", "cafe\u0301", "A\u030a", "n\u0303", "o\u0308\u0304", "a\u0323\u0302", "a\u0302\u0323",
    "\u1100\u1161\u11a8", "\u1112\u1161\u11ab\u1100\u1173\u11af", "\u212b Angstrom sign", "\u2126 Ohm sign",
    "Å precomposed", "ǅ ǆ Ǆ digraphs", "ﬁ ﬂ ligatures", "x\u0301\u0301\u0301 stacked", "\u0301 leading combining mark");
// --- very long words and repetitions ---
add("a".repeat(300), "ab".repeat(200), "Supercalifragilisticexpialidocious",
    "Pneumonoultramicroscopicsilicovolcanoconiosis", "antidisestablishmentarianism".repeat(8),
    "x".repeat(1000), "1".repeat(100), "!".repeat(64), "ha".repeat(50) + "!", "-".repeat(80),
    "=".repeat(40) + "\n" + "=".repeat(40), "abcdefghijklmnopqrstuvwxyz".repeat(10),
    "你".repeat(120), "😀".repeat(40), "\u00e9".repeat(60));
// --- JSON-ish, markdown ---
add("# Title\n\n## Subtitle\n\n- item 1\n- item 2\n\n**bold** _italic_ `code`",
    "| a | b |\n|---|---|\n| 1 | 2 |", "> quote\n>> nested", "1. first\n2. second\n3. third",
    "[link](https://example.com) ![img](a.png)", "Footnote[^1]\n\n[^1]: note.");
// --- seeded random mixtures of the pieces above ---
const pieces = ["hello", " world", "你好", "😀", "'s", "123", "\n", "  ", "\t", "<|im_end|>", "é", "e\u0301",
                "مرحبا", "नमस्ते", "def", "(", ")", "{", "}", ";", "'ll", "  \n", "\r\n", "👍🏽", "ABC", "x9",
                "—", "…", "“quoted”", "<think>", " ", ".", ",", "!", "?"];
for (let i = 0; i < 40; i++) {
  const k = 3 + rnd(12);
  let s = "";
  for (let j = 0; j < k; j++) s += pick(pieces);
  add(s);
}

const seen = new Set();
const out = [];
for (const t of cases) { if (!seen.has(t)) { seen.add(t); out.push({ text: t }); } }
process.stdout.write(JSON.stringify({ cases: out }, null, 1) + "\n");
