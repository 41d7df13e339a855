// mi-serve driven by the official `openai` npm client (pinned in
// tools/node/package.json): chat, completions, streaming with usage,
// logprobs, models, errors. Greedy answers are compared with mi-run's.
//
// usage: node tests/serve/openai_client.mjs BUILD_DIR
// Exit 77 (ctest: skipped) when the openai package is not installed.
import { spawnSync } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import assert from "node:assert/strict";
import { startServer, stopServer } from "../../tools/bench/serve_proc.mjs";
import { importPinned, openaiOrSkip } from "../util/node_packages.mjs";
import { check, fail, finish } from "../util/node_checks.mjs";

const build = path.resolve(process.argv[2] || "build");
const OpenAI = await openaiOrSkip();

const model = path.join(build, "models", "tiny-seed5");
if (!fs.existsSync(path.join(model, "config.json"))) {
  const r = spawnSync(path.join(build, "bin", "mi-mkmodel"),
    ["--shape", "tiny", "--seed", "5", "--out", model], { stdio: "inherit" });
  assert.equal(r.status, 0, "mi-mkmodel failed");
}

function miRun(prompt, chat, n) {
  const args = ["-m", model, "-t", "1", "-p", prompt, "-n", String(n), "--temp", "0"];
  if (chat) args.push("--chat");
  const text = spawnSync(path.join(build, "bin", "mi-run"), args, { encoding: "utf8" });
  assert.equal(text.status, 0, text.stderr);
  const json = spawnSync(path.join(build, "bin", "mi-run"), [...args, "--json"], { encoding: "utf8" });
  assert.equal(json.status, 0, json.stderr);
  const toks = json.stdout.trim().split("\n").map((l) => JSON.parse(l)).filter((o) => "token_id" in o);
  return { text: text.stdout.replace(/\n$/, ""), logprobs: toks.map((t) => t.logprob) };
}

// start the server on a free port
const KEY = "sk-test-0123456789";
const srv = await startServer(build,
  ["-m", model, "-t", "1", "-c", "256", "--api-key", KEY, "--parallel", "4"]);
const base = srv.base;

const client = new OpenAI({ baseURL: `${base}/v1`, apiKey: KEY, maxRetries: 0 });

await check("models.list", async () => {
  const page = await client.models.list();
  assert.deepEqual(page.data.map((m) => m.id), ["tiny-seed5"]);
});

const prompts = ["The capital of France is", "Write a haiku about the sea."];
for (const p of prompts) {
  await check(`chat greedy = mi-run --chat (${p})`, async () => {
    const ref = miRun(p, true, 20);
    const r = await client.chat.completions.create({
      model: "tiny-seed5", messages: [{ role: "user", content: p }],
      max_tokens: 20, temperature: 0, logprobs: true, top_logprobs: 2,
    });
    const c = r.choices[0];
    assert.equal(c.message.role, "assistant");
    assert.equal(c.message.content, ref.text);
    assert.equal(r.usage.completion_tokens, ref.logprobs.length);
    assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens);
    assert.equal(c.logprobs.content.length, ref.logprobs.length);
    c.logprobs.content.forEach((e, i) => {
      assert.ok(Math.abs(e.logprob - ref.logprobs[i]) < 1e-6, `logprob ${i}`);
      assert.equal(e.top_logprobs.length, 2);
      // greedy: the chosen token is the best one
      assert.equal(e.top_logprobs[0].token, e.token);
      assert.ok(e.top_logprobs[0].logprob >= e.top_logprobs[1].logprob);
    });
    assert.equal(c.finish_reason, ref.logprobs.length === 20 ? "length" : "stop");
  });

  await check(`completion greedy = mi-run (${p})`, async () => {
    const ref = miRun(p, false, 16);
    const r = await client.completions.create({
      model: "tiny-seed5", prompt: p, max_tokens: 16, temperature: 0, logprobs: 1,
    });
    assert.equal(r.choices[0].text, ref.text);
    assert.equal(r.choices[0].logprobs.token_logprobs.length, ref.logprobs.length);
    r.choices[0].logprobs.token_logprobs.forEach((lp, i) =>
      assert.ok(Math.abs(lp - ref.logprobs[i]) < 1e-6));
  });
}

await check("chat stream with include_usage = non-streamed answer", async () => {
  const body = { model: "tiny-seed5", messages: [{ role: "user", content: "Count to five." }],
    max_tokens: 24, temperature: 0 };
  const plain = await client.chat.completions.create(body);
  const stream = await client.chat.completions.create({ ...body, stream: true,
    stream_options: { include_usage: true } });
  let text = "", usage = null, finish = null, chunks = 0;
  for await (const ch of stream) {
    chunks++;
    if (ch.usage) { usage = ch.usage; assert.equal(ch.choices.length, 0); continue; }
    text += ch.choices[0].delta.content ?? "";
    if (ch.choices[0].finish_reason) finish = ch.choices[0].finish_reason;
  }
  assert.ok(chunks > 2);
  assert.equal(text, plain.choices[0].message.content);
  assert.equal(finish, plain.choices[0].finish_reason);
  assert.deepEqual(usage, plain.usage);
});

await check("completion stream", async () => {
  const plain = await client.completions.create({ model: "tiny-seed5", prompt: "Once upon",
    max_tokens: 12, temperature: 0 });
  const stream = await client.completions.create({ model: "tiny-seed5", prompt: "Once upon",
    max_tokens: 12, temperature: 0, stream: true });
  let text = "";
  for await (const ch of stream) text += ch.choices[0]?.text ?? "";
  assert.equal(text, plain.choices[0].text);
});

await check("seeded sampling is reproducible", async () => {
  const body = { model: "tiny-seed5", messages: [{ role: "user", content: "Hi" }], max_tokens: 12,
    temperature: 1.0, top_p: 0.9, top_k: 50, min_p: 0.01, seed: 1234 };
  const a = await client.chat.completions.create(body);
  const b = await client.chat.completions.create(body);
  assert.equal(a.choices[0].message.content, b.choices[0].message.content);
});

await check("unknown model → 404 model_not_found", async () => {
  await assert.rejects(client.chat.completions.create({ model: "gpt-4o",
    messages: [{ role: "user", content: "x" }] }),
    (e) => e instanceof OpenAI.NotFoundError && e.code === "model_not_found");
});

await check("wrong-typed field → 400 with param", async () => {
  await assert.rejects(client.chat.completions.create({ model: "tiny-seed5",
    messages: [{ role: "user", content: "x" }], max_tokens: "many" }),
    (e) => e instanceof OpenAI.BadRequestError && e.param === "max_tokens");
});

await check("prompt over the context → 400 context_length_exceeded", async () => {
  await assert.rejects(client.completions.create({ model: "tiny-seed5",
    prompt: "word ".repeat(400), max_tokens: 4 }),
    (e) => e instanceof OpenAI.BadRequestError && e.code === "context_length_exceeded");
});

await check("wrong API key → 401", async () => {
  const bad = new OpenAI({ baseURL: `${base}/v1`, apiKey: "sk-wrong", maxRetries: 0 });
  await assert.rejects(bad.models.list(), (e) => e instanceof OpenAI.AuthenticationError);
});

// tools and a tool-call history, rendered by the server's Jinja engine: the
// prompt must be what @huggingface/jinja renders from the real Qwen3
// template (the model's own) for the same conversation, as transformers
// passes it (a call's arguments parsed into a mapping, null content as "").
let Template = null;
try {
  ({ Template } = await importPinned("@huggingface/jinja"));
} catch {
  console.log("skip tools = @huggingface/jinja rendering: the package is not installed");
}
if (Template) await check("tools + tool-call history: prompt = @huggingface/jinja's Qwen3 rendering", async () => {
  const tools = [{ type: "function", function: { name: "get_weather", description: "Weather now",
    parameters: { type: "object", properties: { city: { type: "string", description: "Ville \u00e9" } },
      required: ["city"] } } }];
  const messages = [
    { role: "user", content: "Weather in Paris?" },
    { role: "assistant", content: null, tool_calls: [{ id: "call_1", type: "function",
      function: { name: "get_weather", arguments: JSON.stringify({ city: "Paris", days: 2 }) } }] },
    { role: "tool", tool_call_id: "call_1", content: "18 C, sunny" },
    { role: "user", content: "And tomorrow?" },
  ];
  const r = await client.chat.completions.create({ model: "tiny-seed5", messages, tools,
    tool_choice: "auto", max_tokens: 4, temperature: 0 });
  assert.equal(r.choices[0].message.role, "assistant");
  const cfg = JSON.parse(fs.readFileSync(path.join(model, "tokenizer_config.json"), "utf8"));
  assert.ok(cfg.chat_template.includes("<tool_call>"), "the test model's template is not Qwen3's");
  const refMsgs = messages.map((m) => m.tool_calls
    ? { ...m, content: m.content ?? "", tool_calls: m.tool_calls.map((tc) =>
        ({ ...tc, function: { ...tc.function, arguments: JSON.parse(tc.function.arguments) } })) }
    : m);
  const text = new Template(cfg.chat_template).render({ messages: refMsgs, tools,
    add_generation_prompt: true });
  assert.ok(text.includes('<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}'), text);
  const tok = await fetch(`${base}/tokenize`, { method: "POST",
    headers: { "Content-Type": "application/json", Authorization: `Bearer ${KEY}` },
    body: JSON.stringify({ content: text }) }).then((x) => x.json());
  assert.equal(r.usage.prompt_tokens, tok.tokens.length);
});

await check("tool_choice naming a function not in tools → 400 naming tool_choice", async () => {
  await assert.rejects(client.chat.completions.create({ model: "tiny-seed5",
    messages: [{ role: "user", content: "x" }],
    tool_choice: { type: "function", function: { name: "g" } },
    tools: [{ type: "function", function: { name: "f" } }] }),
    (e) => e instanceof OpenAI.BadRequestError && e.param === "tool_choice");
});

const code = await stopServer(srv);
if (code !== 0) fail(`mi-serve exited ${code} on SIGTERM`);
finish();
