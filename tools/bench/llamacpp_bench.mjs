// One mi-bench cell on llama.cpp (node-llama-cpp's prebuilt CPU build), with
// llama.cpp's defaults as a user gets them (F16 KV cache, flash attention
// auto), the same thread count and the same prompt token ids as mi-bench.
// Prints one JSON line: {"ttft_ms","prefill_tps","decode_tps","peak_rss_mib"}.
//
//   node tools/bench/llamacpp_bench.mjs --gguf M.gguf --prompt-len P --gen G --threads T [--seed S] [--warmup N]
//
// --warmup N (default 0 here; mi-bench passes its own, 1 by default): N
// untimed evaluations of the same prompt, two tokens each, on the same
// context, its history cleared after each, as llama-bench warms up.
import { importDep } from "../peer/deps.mjs";

function parseArgs(argv) {
  const a = { seed: 1n, warmup: 0 };
  for (let i = 0; i < argv.length; i += 2) {
    const k = argv[i], v = argv[i + 1];
    if (v === undefined) throw new Error(`${k} needs a value`);
    if (k === "--gguf") a.gguf = v;
    else if (k === "--prompt-len") a.p = Number(v);
    else if (k === "--gen") a.g = Number(v);
    else if (k === "--threads") a.threads = Number(v);
    else if (k === "--seed") a.seed = BigInt(v);
    else if (k === "--warmup") a.warmup = Number(v);
    else throw new Error(`unknown option ${k}`);
  }
  if (!Number.isInteger(a.warmup) || a.warmup < 0) throw new Error("--warmup needs a count >= 0");
  if (!a.gguf || !(a.p > 0) || !(a.g > 0) || !(a.threads > 0)) throw new Error("need --gguf, --prompt-len, --gen, --threads");
  return a;
}

// Same generator as mi-bench's make_prompt (xorshift64, ids < 151000).
function makePrompt(n, seed) {
  const M = (1n << 64n) - 1n;
  let x = (seed * 0x9e3779b97f4a7c15n + 1n) & M;
  const ids = [];
  for (let i = 0; i < n; i++) {
    x ^= (x << 13n) & M;
    x ^= x >> 7n;
    x ^= (x << 17n) & M;
    ids.push(Number(x % 151000n));
  }
  return ids;
}

async function main() {
  const a = parseArgs(process.argv.slice(2));
  const { getLlama, LlamaLogLevel } = await importDep("node-llama-cpp");
  const llama = await getLlama({ gpu: false, build: "never", logLevel: LlamaLogLevel.error });
  const model = await llama.loadModel({ modelPath: a.gguf });
  const ctxSize = a.p + a.g + 16;
  const ctx = await model.createContext({ contextSize: ctxSize, batchSize: Math.max(512, a.p), threads: a.threads });
  const seq = ctx.getSequence();
  const ids = makePrompt(a.p, a.seed);
  for (let w = 0; w < a.warmup; w++) {
    let k = 0;
    for await (const tok of seq.evaluate(ids, { temperature: 0 })) {
      void tok;
      if (++k >= Math.min(2, a.g)) break;
    }
    await seq.clearHistory();
  }
  const t0 = performance.now();
  let tFirst = 0, n = 0;
  for await (const tok of seq.evaluate(ids, { temperature: 0 })) {
    void tok;
    n++;
    if (n === 1) tFirst = performance.now();
    if (n >= a.g) break;
  }
  const tEnd = performance.now();
  const ttft = tFirst - t0;
  const out = {
    ttft_ms: ttft,
    prefill_tps: a.p / (ttft / 1000),
    decode_tps: n > 1 ? (n - 1) / ((tEnd - tFirst) / 1000) : 0,
    peak_rss_mib: process.resourceUsage().maxRSS / 1024,
    generated: n,
  };
  console.log(JSON.stringify(out));
  await ctx.dispose();
  await model.dispose();
}

main().catch((e) => { console.error(`llamacpp_bench: ${e.message}`); process.exit(1); });
