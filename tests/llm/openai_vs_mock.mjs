// The scripted OpenAI-compatible server (tests/llm/mock_llm_server.c),
// driven by the official `openai` npm client (pinned in
// tools/node/package.json): if the official client reads its answers,
// streams, tool calls, Retry-After and errors as the wire format says, the
// canned answers the LLM agents' tests replay are faithful to what a real
// endpoint sends. What the official client sent is checked too: the same
// fields the project's client sends (model, messages, seed, max_tokens,
// stream_options.include_usage, the Bearer key).
//
// usage: node tests/llm/openai_vs_mock.mjs BUILD_DIR
// Exit 77 (ctest: skipped) when the openai package is not installed.
import { spawn } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import readline from "node:readline";
import assert from "node:assert/strict";
import { openaiOrSkip } from "../util/node_packages.mjs";

const build = path.resolve(process.argv[2] || "build");
const OpenAI = await openaiOrSkip();

const answer = (content) => JSON.stringify({
  id: "chatcmpl-1", object: "chat.completion", created: 0, model: "tiny-coder",
  choices: [{ index: 0, message: { role: "assistant", content }, finish_reason: "stop" }],
  usage: { prompt_tokens: 12, completion_tokens: 3, total_tokens: 15 },
});
const chunk = (choices, extra = {}) =>
  `data: ${JSON.stringify({ id: "c", object: "chat.completion.chunk", created: 0, model: "tiny-coder", choices, ...extra })}\n\n`;
const stream =
  chunk([{ index: 0, delta: { role: "assistant", content: "" } }]) +
  chunk([{ index: 0, delta: { content: "```c\nint " } }]) +
  chunk([{ index: 0, delta: { content: "x;\n```" } }]) +
  chunk([{ index: 0, delta: {}, finish_reason: "stop" }]) +
  chunk([], { usage: { prompt_tokens: 7, completion_tokens: 2, total_tokens: 9 } }) +
  "data: [DONE]\n\n";
const toolStream =
  chunk([{ index: 0, delta: { tool_calls: [{ index: 0, id: "call_1", type: "function", function: { name: "read_file", arguments: "" } }] } }]) +
  chunk([{ index: 0, delta: { tool_calls: [{ index: 0, function: { arguments: "{\"path\":" } }] } }]) +
  chunk([{ index: 0, delta: { tool_calls: [{ index: 0, function: { arguments: "\"ckb/models/qwen3.json\"}" } }] }, finish_reason: "tool_calls" }]) +
  "data: [DONE]\n\n";
const err = (status, message, code) => JSON.stringify({ error: { message, type: "x", code } });

const script = [
  { status: 200, body: answer("Hello there") },
  { status: 200, content_type: "text/event-stream", body: stream },
  { status: 200, content_type: "text/event-stream", body: toolStream },
  { status: 429, retry_after: "0", body: err(429, "slow down", "rate_limit") },
  { status: 200, body: answer("after the retry") },
  { status: 400, body: err(400, "bad request here", "invalid") },
];
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "mi-openai-mock-"));
const scriptFile = path.join(tmp, "script.json"), reqFile = path.join(tmp, "requests.jsonl");
fs.writeFileSync(scriptFile, JSON.stringify(script));
const srv = spawn(path.join(build, "tests", "mock_llm_serve"), [scriptFile, reqFile], { stdio: ["pipe", "pipe", "inherit"] });
const url = await new Promise((resolve, reject) => {
  readline.createInterface({ input: srv.stdout }).once("line", resolve);
  srv.once("exit", (c) => reject(new Error(`mock_llm_serve exited ${c}`)));
});

const client = new OpenAI({ baseURL: `${url}/v1`, apiKey: "sk-test-openai", maxRetries: 2, timeout: 20000 });
const messages = [{ role: "system", content: "You write C." }, { role: "user", content: "Say hello" }];
try {
  const a = await client.chat.completions.create({ model: "tiny-coder", messages, seed: 7, max_tokens: 64, temperature: 0 });
  assert.equal(a.choices[0].message.content, "Hello there");
  assert.equal(a.usage.completion_tokens, 3);

  const s = await client.chat.completions.create({ model: "tiny-coder", messages, stream: true, stream_options: { include_usage: true } });
  let text = "", usage = null;
  for await (const c of s) {
    if (c.choices.length) text += c.choices[0].delta.content ?? "";
    if (c.usage) usage = c.usage;
  }
  assert.equal(text, "```c\nint x;\n```");
  assert.equal(usage.total_tokens, 9);

  const t = await client.chat.completions.create({ model: "tiny-coder", messages, stream: true,
    tools: [{ type: "function", function: { name: "read_file", description: "read", parameters: { type: "object" } } }] });
  let args = "", name = "";
  for await (const c of t) for (const tc of c.choices[0]?.delta.tool_calls ?? []) { args += tc.function?.arguments ?? ""; name ||= tc.function?.name ?? ""; }
  assert.equal(name, "read_file");
  assert.deepEqual(JSON.parse(args), { path: "ckb/models/qwen3.json" });

  const r = await client.chat.completions.create({ model: "tiny-coder", messages }); // a 429 first, retried
  assert.equal(r.choices[0].message.content, "after the retry");

  await assert.rejects(client.chat.completions.create({ model: "tiny-coder", messages }), (e) => {
    assert.equal(e.status, 400);
    assert.match(e.message, /bad request here/);
    return true;
  });
} finally {
  srv.stdin.end();
  await new Promise((r) => srv.once("exit", r));
}
const got = fs.readFileSync(reqFile, "utf8").trim().split("\n").map((l) => JSON.parse(l));
assert.equal(got.length, 6, "the 400 is not retried, the 429 once");
for (const g of got) assert.equal(g.auth, "Bearer sk-test-openai");
const b0 = JSON.parse(got[0].body), b1 = JSON.parse(got[1].body);
assert.equal(b0.model, "tiny-coder");
assert.deepEqual(b0.messages, messages);
assert.equal(b0.seed, 7);
assert.equal(b0.max_tokens, 64);
assert.equal(b1.stream, true);
assert.deepEqual(b1.stream_options, { include_usage: true });
fs.rmSync(tmp, { recursive: true, force: true });
console.log("openai npm client against the scripted server: 6 exchanges as the wire format says");
