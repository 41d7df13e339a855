// mi-serve's prefix cache and chunked prefill under load (a benchmark that
// prints figures, not a timed test). Two workloads, each run against two
// servers in the same run:
//
// 1. Conversations: CLIENTS clients, each a TURNS-turn chat sharing one
//    system prompt of about SYSTEM tokens (an agent or chat front end
//    resending the whole conversation every turn), greedy, MAX_TOKENS per
//    turn. Prefix cache on vs --cache-mem 0: turns/s, TTFT p50/p99, the
//    cache hit rate (/metrics), the server's RSS after each client wave.
//    Every answer of the cached server must equal the uncached server's
//    answer to the same conversation (nothing lost or mixed).
// 2. Head-of-line: one LONG-token prompt runs while short requests arrive
//    one after another until its first token; their TTFT with
//    --prefill-chunk CHUNK vs 0 (the whole prompt in one step).
//
// The servers run the exact matmul path (MI_CPU_MATMUL_ACT=f32) so that
// answers can be compared; a restored prefix still takes other matmul
// paths than a whole prefill (logits differ by ~1e-6 of their spread), so
// a greedy near-tie may differ: such answers are counted and printed, and
// fail the run only above 1 in 20.
//
// usage: node tools/bench/serve_prefix.mjs --build build [--shape small] [--clients 32]
//          [--turns 3] [--system 1000] [--max-tokens 16] [--parallel 8] [--threads N]
//          [--long 3900] [--chunk 256]   (-c 4096: the long prompt and its answer fit)
import { spawnSync } from "node:child_process";
import { startServer as startServer_, stopServer, metric } from "./serve_proc.mjs";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";

const opt = { build: "build", shape: "small", seed: 7, clients: 32, turns: 3, system: 1000,
  "max-tokens": 16, parallel: 8, threads: 0, long: 3900, chunk: 256 };
for (let i = 2; i < process.argv.length; i += 2) {
  const k = process.argv[i].replace(/^--/, "");
  if (!(k in opt)) { console.error(`unknown option --${k}`); process.exit(2); }
  opt[k] = typeof opt[k] === "number" ? Number(process.argv[i + 1]) : process.argv[i + 1];
}
const build = path.resolve(opt.build);
const model = path.join(build, "models", `${opt.shape}-seed${opt.seed}`);
if (!fs.existsSync(path.join(model, "config.json"))) {
  const r = spawnSync(path.join(build, "bin", "mi-mkmodel"),
    ["--shape", opt.shape, "--seed", String(opt.seed), "--out", model], { stdio: "inherit" });
  if (r.status !== 0) process.exit(1);
}
const alias = path.basename(model);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const pct = (a, q) => { const s = [...a].sort((x, y) => x - y); return s[Math.min(s.length - 1, Math.floor(q * s.length))]; };

async function startServer(extra) {
  const args = ["-m", model, "-c", "4096", "--parallel", String(opt.parallel), "--queue", "256", ...extra];
  if (opt.threads > 0) args.push("-t", String(opt.threads));
  return await startServer_(build, args, { env: { ...process.env, MI_CPU_MATMUL_ACT: "f32" } });
}
const rssMiB = (pid) => Number(/VmRSS:\s+(\d+)/.exec(fs.readFileSync(`/proc/${pid}/status`, "utf8"))[1]) / 1024;
// One streamed request: {text, ttft_ms, usage}
async function stream(base, pathname, body) {
  const t0 = performance.now();
  const r = await fetch(`${base}${pathname}`, { method: "POST", headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ ...body, model: alias, stream: true, stream_options: { include_usage: true } }) });
  if (r.status !== 200) throw new Error(`${pathname}: HTTP ${r.status}: ${await r.text()}`);
  let buf = "", text = "", ttft = null, usage = null;
  const dec = new TextDecoder();
  for await (const chunk of r.body) {
    buf += dec.decode(chunk, { stream: true });
    let i;
    while ((i = buf.indexOf("\n\n")) >= 0) {
      const ev = buf.slice(0, i);
      buf = buf.slice(i + 2);
      if (!ev.startsWith("data: ") || ev === "data: [DONE]") continue;
      const j = JSON.parse(ev.slice(6));
      if (j.error) throw new Error(j.error.message);
      if (j.usage) { usage = j.usage; continue; }
      if (ttft === null) ttft = performance.now() - t0;
      const c = j.choices[0];
      text += c.delta?.content ?? c.text ?? "";
    }
  }
  return { text, ttft_ms: ttft, usage };
}

// ---- workload 1: conversations over a shared system prompt ----
const words = "the of and to in is was for on that with as by at from his her an were are which this be " +
  "has had but not have they one their it its also after first two new more other city year time";
const wl = words.split(" ");
let x = 12345;
const rnd = () => (x = (x * 1103515245 + 12345) % 2147483648) / 2147483648;
const system = Array.from({ length: opt.system }, () => wl[Math.floor(rnd() * wl.length)]).join(" ");

async function conversations(label, extra, reference) {
  const s = await startServer(extra);
  const answers = [], ttfts = [], rss = [];
  let cached = 0, prompt = 0, turns = 0;
  const t0 = performance.now();
  async function client(c) {
    const msgs = [{ role: "system", content: system }];
    const mine = [];
    for (let t = 0; t < opt.turns; t++) {
      msgs.push({ role: "user", content: `Client ${c}, turn ${t}: what about item ${(c * 7 + t * 13) % 97}?` });
      const r = await stream(s.base, "/v1/chat/completions", { messages: msgs,
        max_tokens: opt["max-tokens"], temperature: 0, ignore_eos: true });
      ttfts.push(r.ttft_ms);
      cached += r.usage.prompt_tokens_details?.cached_tokens ?? 0;
      prompt += r.usage.prompt_tokens;
      turns++;
      mine.push(r.text);
      msgs.push({ role: "assistant", content: r.text });
    }
    answers[c] = mine;
  }
  await Promise.all(Array.from({ length: opt.clients }, (_, c) => client(c)));
  const wall = (performance.now() - t0) / 1000;
  rss.push(rssMiB(s.p.pid));
  // a second wave over the same conversations: RSS stays flat (the cache
  // is bounded, nothing leaks)
  await Promise.all(Array.from({ length: opt.clients }, (_, c) => client(c)));
  rss.push(rssMiB(s.p.pid));
  const hit = await metric(s.base, "mi_prefix_cache_hit_rate");
  const code = await stopServer(s);
  let differ = 0;
  if (reference) answers.forEach((a, c) => a.forEach((t, k) => { if (t !== reference[c][k]) differ++; }));
  const r = { label, turns: opt.clients * opt.turns, wall_s: +wall.toFixed(2),
    turns_per_s: +(opt.clients * opt.turns / wall).toFixed(2), ttft_p50_ms: +pct(ttfts, 0.5).toFixed(1),
    ttft_p99_ms: +pct(ttfts, 0.99).toFixed(1), cached_tokens_share: +(cached / prompt).toFixed(3),
    metrics_hit_rate: hit, rss_mib_after_waves: rss.map((v) => v.toFixed(0)).join(" → "),
    answers_differing_from_uncached: reference ? differ : "-", exit: code };
  console.log(JSON.stringify(r));
  return { r, answers };
}

// ---- workload 2: short requests during a long prefill ----
async function headOfLine(label, chunk) {
  const s = await startServer(["--prefill-chunk", String(chunk), "--cache-mem", "0"]);
  const longPrompt = Array.from({ length: opt.long }, () => wl[Math.floor(rnd() * wl.length)]).join(" ");
  const t0 = performance.now();
  let longFirst = null;
  const long = stream(s.base, "/v1/completions", { prompt: longPrompt, max_tokens: 4, temperature: 0 })
    .then((r) => { longFirst = t0 + r.ttft_ms; return r; });
  await sleep(50); // the long prompt is in its prefill
  // short requests one after another while the long prompt runs: those
  // started before its first token are the ones it could hold up
  const ttfts = [];
  for (let i = 0; longFirst === null && i < 1000; i++) {
    const start = performance.now();
    const r = await stream(s.base, "/v1/completions", { prompt: `Short question ${i}?`, max_tokens: 4,
      temperature: 0 });
    if (longFirst === null || start < longFirst) ttfts.push(r.ttft_ms);
  }
  const lr = await long;
  const code = await stopServer(s);
  const r = { label, long_prompt_tokens: lr.usage.prompt_tokens, long_ttft_ms: +lr.ttft_ms.toFixed(0),
    short_requests_during: ttfts.length, short_ttft_p50_ms: +pct(ttfts, 0.5).toFixed(1),
    short_ttft_max_ms: +Math.max(...ttfts).toFixed(1), wall_s: +((performance.now() - t0) / 1000).toFixed(2),
    exit: code };
  console.log(JSON.stringify(r));
  return r;
}

console.log(`host: ${os.cpus()[0].model}, ${os.cpus().length} CPUs; model ${model}; ` +
  `${opt.clients} clients x ${opt.turns} turns over a ~${opt.system}-token system prompt, ` +
  `${opt["max-tokens"]} tokens a turn, --parallel ${opt.parallel}`);
const off = await conversations("prefix cache off", ["--cache-mem", "0"], null);
const on = await conversations("prefix cache on", [], off.answers);
console.log(`conversations: throughput x${(on.r.turns_per_s / off.r.turns_per_s).toFixed(2)} with the cache ` +
  `(${on.r.turns_per_s} vs ${off.r.turns_per_s} turns/s), TTFT p50 ${on.r.ttft_p50_ms} vs ${off.r.ttft_p50_ms} ms ` +
  `(x${(on.r.ttft_p50_ms / off.r.ttft_p50_ms).toFixed(2)}), p99 ${on.r.ttft_p99_ms} vs ${off.r.ttft_p99_ms} ms, ` +
  `hit rate ${on.r.metrics_hit_rate}`);
const whole = await headOfLine("prefill whole", 0);
const chunked = await headOfLine(`prefill chunk ${opt.chunk}`, opt.chunk);
console.log(`short requests during a ${whole.long_prompt_tokens}-token prefill: TTFT p50 ` +
  `${chunked.short_ttft_p50_ms} ms chunked vs ${whole.short_ttft_p50_ms} ms whole ` +
  `(max ${chunked.short_ttft_max_ms} vs ${whole.short_ttft_max_ms} ms); the long one's TTFT ` +
  `${chunked.long_ttft_ms} vs ${whole.long_ttft_ms} ms`);
const differ = on.r.answers_differing_from_uncached;
const bad = off.r.exit + on.r.exit + whole.exit + chunked.exit + (differ * 20 > on.r.turns ? 1 : 0);
process.exit(bad ? 1 : 0);
