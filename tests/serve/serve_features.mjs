// mi-serve's prefix cache, chunked prefill, n > 1, echo and structured
// output, driven by the official `openai` npm client. References are
// independent of the server: mi-run's greedy answers and prompt logprobs (one
// sequence, no cache, the whole prompt at once) and a JSON Schema validator
// written here.
//
// usage: node tests/serve/serve_features.mjs BUILD_DIR
// Exit 77 (ctest: skipped) when the openai package is not installed.
import { spawnSync } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import assert from "node:assert/strict";
import { startServer as startServer_, stopServer as stopServer_, metric } from "../../tools/bench/serve_proc.mjs";
import { importPinned, openaiOrSkip } from "../util/node_packages.mjs";
import { check, fail, finish } from "../util/node_checks.mjs";

const build = path.resolve(process.argv[2] || "build");
const OpenAI = await openaiOrSkip();
// one row at a time and many rows at once give the same bits on this path
// (the CPU platform's default may round bf16 activations of 4+ rows)
process.env.MI_CPU_MATMUL_ACT = "f32";
// A prompt run in chunks (--prefill-chunk, a restored prefix) takes other
// matmul paths than one whole pass (short-prompt kernels below 32 rows, the
// hybrid's delta rule in 64-token chunks from each call's start): logits
// differ by about 1e-6 of their spread, so logprobs are compared to 1e-4.
const LP_TOL = 1e-4;
// the sanitizer tree: every path once, fewer seeds and prompts
const QUICK = process.env.MI_TEST_QUICK === "1";

function makeModel(name, args) {
  const dir = path.join(build, "models", name);
  if (!fs.existsSync(path.join(dir, "config.json"))) {
    const r = spawnSync(path.join(build, "bin", "mi-mkmodel"), [...args, "--out", dir],
      { stdio: "inherit" });
    assert.equal(r.status, 0, "mi-mkmodel failed");
  }
  return dir;
}
const dense = makeModel("tiny-seed5", ["--shape", "tiny", "--seed", "5"]);
const hybrid = makeModel("hybrid-tiny-seed21", ["--family", "qwen35", "--shape", "tiny", "--seed", "21"]);

function miRun(model, args) {
  const r = spawnSync(path.join(build, "bin", "mi-run"), ["-m", model, "-t", "1", "--temp", "0", ...args],
    { encoding: "utf8" });
  assert.equal(r.status, 0, r.stderr);
  return r.stdout;
}
function miRunJson(model, prompt, n, extra = []) {
  const lines = miRun(model, ["-p", prompt, "-n", String(n), "--json", ...extra]).trim().split("\n")
    .map((l) => JSON.parse(l));
  const toks = lines.filter((o) => "token_id" in o);
  const text = miRun(model, ["-p", prompt, "-n", String(n), ...extra]).replace(/\n$/, "");
  return { text, ids: toks.map((t) => t.token_id), logprobs: toks.map((t) => t.logprob),
    prompt: lines.find((o) => o.prompt_logprobs)?.prompt_logprobs, promptIds: lines[0].prompt_ids };
}

async function startServer(model, args) {
  const s = await startServer_(build, ["-m", model, "-t", "1", ...args]);
  return { ...s, client: new OpenAI({ baseURL: `${s.base}/v1`, apiKey: "none", maxRetries: 0 }) };
}
async function stopServer(s) {
  const code = await stopServer_(s);
  if (code !== 0) fail(`mi-serve exited ${code} on SIGTERM`);
}

// ---- a JSON Schema validator for the subset mi-serve compiles ----------
function validate(v, s, defs, at = "$") {
  if (s === true || s === undefined) return;
  if (s.$ref) return validate(v, defs[s.$ref.split("/").pop()], defs, at);
  if (s.anyOf || s.oneOf) {
    const alts = s.anyOf || s.oneOf;
    const errs = [];
    for (const a of alts) {
      try { validate(v, a, defs, at); return; } catch (e) { errs.push(e.message); }
    }
    throw new Error(`${at}: matches no alternative (${errs.join("; ")})`);
  }
  if ("const" in s) assert.deepEqual(v, s.const, `${at}: const`);
  if (s.enum) assert.ok(s.enum.some((e) => JSON.stringify(e) === JSON.stringify(v)), `${at}: enum`);
  const type = Array.isArray(v) ? "array" : v === null ? "null" : typeof v;
  if (s.type) {
    const types = [].concat(s.type);
    const ok = types.some((t) => t === type || (t === "integer" && Number.isInteger(v)) ||
      (t === "number" && type === "number"));
    assert.ok(ok, `${at}: ${JSON.stringify(v)} is not ${types.join("|")}`);
  }
  if (type === "object") {
    for (const k of s.required || []) assert.ok(k in v, `${at}: missing ${k}`);
    for (const [k, x] of Object.entries(v)) {
      if (s.properties && k in s.properties) validate(x, s.properties[k], defs, `${at}.${k}`);
      else if (s.additionalProperties === false) assert.fail(`${at}: extra key ${k}`);
      else if (typeof s.additionalProperties === "object") validate(x, s.additionalProperties, defs, `${at}.${k}`);
    }
  }
  if (type === "array") {
    if (s.minItems !== undefined) assert.ok(v.length >= s.minItems, `${at}: minItems`);
    if (s.maxItems !== undefined) assert.ok(v.length <= s.maxItems, `${at}: maxItems`);
    if (s.items) v.forEach((x, i) => validate(x, s.items, defs, `${at}[${i}]`));
  }
  if (type === "string") {
    const n = [...v].length;
    if (s.minLength !== undefined) assert.ok(n >= s.minLength, `${at}: minLength`);
    if (s.maxLength !== undefined) assert.ok(n <= s.maxLength, `${at}: maxLength`);
  }
}

// ===== the dense model: cache in blocks of 16, prefill in chunks of 8 =====
{
  const s = await startServer(dense, ["-c", "512", "--parallel", "4", "--cache-block", "16",
    "--prefill-chunk", "8"]);
  const { client, base } = s;
  const long = "The history of the printing press begins in the fifteenth century, when movable " +
    "type made books cheap enough for merchants, students and clerks to own them. Within fifty " +
    "years presses ran in more than two hundred cities, and the price of a bible fell";

  await check("prefix cache: a repeated prompt restores whole blocks; answer = mi-run's", async () => {
    const ref = miRunJson(dense, long, 12);
    const body = { model: "tiny-seed5", prompt: long, max_tokens: 12, temperature: 0, logprobs: 1 };
    const a = await client.completions.create(body);
    const b = await client.completions.create(body);
    const n = ref.promptIds.length;
    assert.ok(n > 40, `the prompt has ${n} tokens`);
    assert.equal(a.usage.prompt_tokens_details.cached_tokens, 0);
    const cached = b.usage.prompt_tokens_details.cached_tokens;
    assert.ok(cached > 0 && cached % 16 === 0 && cached < n, `cached ${cached} of ${n}`);
    for (const r of [a, b]) {
      assert.equal(r.choices[0].text, ref.text);
      r.choices[0].logprobs.token_logprobs.forEach((lp, i) =>
        assert.ok(Math.abs(lp - ref.logprobs[i]) < LP_TOL, `logprob ${i}: ${lp} vs ${ref.logprobs[i]}`));
    }
    assert.ok(await metric(base, "mi_prefix_cache_hit_tokens_total") >= cached);
    assert.ok(await metric(base, "mi_prefix_cache_hit_rate") > 0);
    assert.ok(await metric(base, "mi_prefix_cache_blocks") >= Math.floor(n / 16));
  });

  await check("prefix cache: the next turn of a conversation hits the previous turn", async () => {
    const msgs = [{ role: "system", content: long }, { role: "user", content: "Summarise." }];
    const t1 = await client.chat.completions.create({ model: "tiny-seed5", messages: msgs,
      max_tokens: 8, temperature: 0 });
    const t2 = await client.chat.completions.create({ model: "tiny-seed5", max_tokens: 8,
      temperature: 0, messages: [...msgs, t1.choices[0].message, { role: "user", content: "Shorter." }] });
    assert.ok(t2.usage.prompt_tokens_details.cached_tokens >= t1.usage.prompt_tokens - 16,
      `cached ${t2.usage.prompt_tokens_details.cached_tokens} of turn 1's ${t1.usage.prompt_tokens}`);
  });

  await check("chunked prefill: four prompts at once, each = mi-run's greedy answer", async () => {
    const prompts = QUICK ? [long, "Short one."] : [long, "Short one.", long.slice(0, 120), "Another short prompt"];
    const refs = prompts.map((p) => miRunJson(dense, p, 10).text);
    const rs = await Promise.all(prompts.map((p) => client.completions.create({ model: "tiny-seed5",
      prompt: p, max_tokens: 10, temperature: 0 })));
    rs.forEach((r, i) => assert.equal(r.choices[0].text, refs[i], `prompt ${i}`));
  });

  await check("n = 3: greedy choices all = mi-run; seeded choices reproducible and indexed", async () => {
    const ref = miRunJson(dense, "Once upon a time", 8);
    const g = await client.completions.create({ model: "tiny-seed5", prompt: "Once upon a time",
      max_tokens: 8, temperature: 0, n: 3 });
    assert.deepEqual(g.choices.map((c) => c.index), [0, 1, 2]);
    g.choices.forEach((c) => assert.equal(c.text, ref.text));
    assert.equal(g.usage.completion_tokens, 3 * ref.ids.length);
    const body = { model: "tiny-seed5", messages: [{ role: "user", content: "Hi" }], max_tokens: 16,
      temperature: 1.5, seed: 99, n: 3 };
    const a = await client.chat.completions.create(body);
    const b = await client.chat.completions.create(body);
    assert.equal(a.choices.length, 3);
    assert.deepEqual(a.choices.map((c) => c.message.content), b.choices.map((c) => c.message.content));
    assert.ok(new Set(a.choices.map((c) => c.message.content)).size > 1, "three equal draws");
  });

  await check("n = 2 streamed: each index's chunks = the non-streamed choice", async () => {
    const body = { model: "tiny-seed5", prompt: "Count: one, two,", max_tokens: 10, temperature: 0.9,
      seed: 7, n: 2 };
    const plain = await client.completions.create(body);
    const stream = await client.completions.create({ ...body, stream: true });
    const text = ["", ""], fin = [null, null];
    for await (const ch of stream) for (const c of ch.choices) {
      text[c.index] += c.text ?? "";
      if (c.finish_reason) fin[c.index] = c.finish_reason;
    }
    assert.deepEqual(text, plain.choices.map((c) => c.text));
    assert.deepEqual(fin, plain.choices.map((c) => c.finish_reason));
  });

  await check("echo + logprobs: the prompt's logprobs = mi-run --prompt-logprobs", async () => {
    const p = "The quick brown fox jumps over the lazy dog because";
    const ref = miRunJson(dense, p, 1, ["--prompt-logprobs", "--top-logprobs", "2"]);
    for (const max_tokens of QUICK ? [0] : [0, 3]) {
      const r = await client.completions.create({ model: "tiny-seed5", prompt: p, echo: true,
        logprobs: 2, max_tokens, temperature: 0 });
      const lp = r.choices[0].logprobs;
      assert.ok(r.choices[0].text.startsWith(p));
      assert.equal(lp.token_logprobs.length, ref.promptIds.length + max_tokens);
      assert.equal(lp.token_logprobs[0], null);
      for (let i = 1; i < ref.promptIds.length; i++) {
        assert.ok(Math.abs(lp.token_logprobs[i] - ref.prompt[i].logprob) < LP_TOL,
          `prompt token ${i}: ${lp.token_logprobs[i]} vs ${ref.prompt[i].logprob}`);
        assert.equal(Object.keys(lp.top_logprobs[i]).length <= 2, true);
      }
    }
  });

  const schema = {
    type: "object",
    properties: {
      name: { type: "string", maxLength: 12 },
      age: { type: "integer" },
      mood: { enum: ["happy", "sad", null] },
      tags: { type: "array", items: { type: "string", maxLength: 6 }, maxItems: 3 },
      pos: { $ref: "#/$defs/point" },
    },
    required: ["name", "age", "mood", "pos"],
    additionalProperties: false,
    $defs: { point: { type: "object", properties: { x: { type: "number" }, y: { type: "number" } },
      required: ["x", "y"], additionalProperties: false } },
  };
  await check("json_schema on random weights: every answer parses and validates", async () => {
    let stopped = 0;
    const seeds = QUICK ? [1, 2, 3] : [1, 2, 3, 4, 5, 6];
    for (const seed of seeds) {
      const r = await client.chat.completions.create({ model: "tiny-seed5",
        messages: [{ role: "user", content: "Describe a person as JSON." }],
        response_format: { type: "json_schema", json_schema: { name: "person", schema } },
        temperature: 1.0, seed, max_tokens: 400 });
      const c = r.choices[0];
      if (c.finish_reason !== "stop") continue; // ran out of tokens inside a string: allowed
      stopped++;
      validate(JSON.parse(c.message.content), schema, schema.$defs);
    }
    assert.ok(stopped * 2 >= seeds.length, `only ${stopped} of ${seeds.length} answers ended`);
  });

  await check("json_object + logit_bias: one JSON object each, strings closed by the bias", async () => {
    // any object: key and value strings are unbounded, and on random weights
    // a string rarely meets its closing quote: logit_bias favours '"' and
    // '}' (the constraint and the bias together), so answers end
    const tok = async (t) => (await fetch(`${base}/tokenize`, { method: "POST",
      headers: { "Content-Type": "application/json" }, body: JSON.stringify({ content: t }) })
      .then((x) => x.json())).tokens;
    const [quote] = await tok('"'), [close] = await tok("}");
    let stopped = 0;
    const seeds = QUICK ? [1, 2, 3] : [1, 2, 3, 4, 5, 6];
    for (const seed of seeds) {
      const r = await client.chat.completions.create({ model: "tiny-seed5",
        messages: [{ role: "user", content: "JSON please" }], response_format: { type: "json_object" },
        temperature: 0.8, seed, max_tokens: 300, logit_bias: { [quote]: 15, [close]: 15 } });
      const c = r.choices[0];
      assert.ok(c.message.content.startsWith("{"), c.message.content.slice(0, 40));
      if (c.finish_reason !== "stop") continue;
      stopped++;
      const v = JSON.parse(c.message.content);
      assert.ok(v && typeof v === "object" && !Array.isArray(v));
    }
    assert.ok(stopped * 3 >= seeds.length * 2, `only ${stopped} of ${seeds.length} answers ended`);
  });

  // A tool-calling conversation: tool_choice "required" makes even a
  // random-weight model call a tool (grammar-constrained, in the template's
  // <tool_call> format); the call is parsed, checked against its schema,
  // sent back with the tool's answer, and that turn's prompt is what
  // @huggingface/jinja renders from the model's own template.
  const tools = [
    { type: "function", function: { name: "get_weather", description: "Weather now",
      parameters: { type: "object", properties: { city: { type: "string", maxLength: 10 },
        days: { type: "integer", minimum: 1, maximum: 7 } }, required: ["city", "days"],
        additionalProperties: false } } },
    { type: "function", function: { name: "get_time", parameters: { type: "object",
      properties: { zone: { enum: ["UTC", "CET"] } }, required: ["zone"], additionalProperties: false } } },
  ];
  const toolSchema = Object.fromEntries(tools.map((t) => [t.function.name, t.function.parameters]));
  let Template = null;
  try {
    ({ Template } = await importPinned("@huggingface/jinja"));
  } catch { /* the rendering check is skipped */ }
  await check("tool calling: required call parsed and valid, its answer rendered back", async () => {
    const msgs = [{ role: "user", content: "What is the weather in Paris?" }];
    const r1 = await client.chat.completions.create({ model: "tiny-seed5", messages: msgs, tools,
      tool_choice: "required", temperature: 1.0, seed: 11, max_tokens: 200 });
    const c = r1.choices[0];
    assert.equal(c.finish_reason, "tool_calls", JSON.stringify(c.message));
    assert.equal(c.message.tool_calls.length, 1);
    const call = c.message.tool_calls[0];
    assert.ok(call.function.name in toolSchema, call.function.name);
    validate(JSON.parse(call.function.arguments), toolSchema[call.function.name], {});
    msgs.push(c.message, { role: "tool", tool_call_id: call.id, content: "18 C, sunny" });
    const r2 = await client.chat.completions.create({ model: "tiny-seed5", messages: msgs, tools,
      max_tokens: 4, temperature: 0 });
    assert.ok(r2.usage.prompt_tokens > r1.usage.prompt_tokens);
    if (Template) {
      const cfg = JSON.parse(fs.readFileSync(path.join(dense, "tokenizer_config.json"), "utf8"));
      const ref = msgs.map((m) => m.tool_calls ? { ...m, content: m.content ?? "",
        tool_calls: m.tool_calls.map((tc) => ({ ...tc,
          function: { ...tc.function, arguments: JSON.parse(tc.function.arguments) } })) } : m);
      const text = new Template(cfg.chat_template).render({ messages: ref, tools, add_generation_prompt: true });
      assert.ok(text.includes("<tool_response>\n18 C, sunny\n</tool_response>"), text);
      const tok = await fetch(`${base}/tokenize`, { method: "POST",
        headers: { "Content-Type": "application/json" }, body: JSON.stringify({ content: text }) })
        .then((x) => x.json());
      assert.equal(r2.usage.prompt_tokens, tok.tokens.length);
    }
  });

  await check("tool calling: a named function, streamed = non-streamed", async () => {
    const body = { model: "tiny-seed5", messages: [{ role: "user", content: "Time?" }], tools,
      tool_choice: { type: "function", function: { name: "get_time" } }, temperature: 1.0, seed: 5,
      max_tokens: 100 };
    const plain = await client.chat.completions.create(body);
    const call = plain.choices[0].message.tool_calls[0];
    assert.equal(call.function.name, "get_time");
    validate(JSON.parse(call.function.arguments), toolSchema.get_time, {});
    const stream = await client.chat.completions.create({ ...body, stream: true });
    let name = "", args = "", finish = null;
    for await (const ch of stream) {
      const d = ch.choices[0]?.delta;
      for (const tc of d?.tool_calls ?? []) {
        name += tc.function?.name ?? "";
        args += tc.function?.arguments ?? "";
      }
      if (ch.choices[0]?.finish_reason) finish = ch.choices[0].finish_reason;
    }
    assert.equal(finish, "tool_calls");
    assert.equal(name, "get_time");
    assert.deepEqual(JSON.parse(args), JSON.parse(call.function.arguments));
  });

  await check("logit_bias: -100 bans the greedy token, +100 forces a token", async () => {
    const body = { model: "tiny-seed5", prompt: "The sky is", max_tokens: 3, temperature: 0, logprobs: 1 };
    const plain = await client.completions.create(body);
    const tokenize = async (t) => (await fetch(`${base}/tokenize`, { method: "POST",
      headers: { "Content-Type": "application/json" }, body: JSON.stringify({ content: t }) })
      .then((x) => x.json())).tokens;
    const [first] = await tokenize(plain.choices[0].logprobs.tokens[0]);
    const banned = await client.completions.create({ ...body, logit_bias: { [first]: -100 } });
    assert.notEqual(banned.choices[0].logprobs.tokens[0], plain.choices[0].logprobs.tokens[0]);
    const [x] = await tokenize(" banana");
    const xText = (await fetch(`${base}/detokenize`, { method: "POST",
      headers: { "Content-Type": "application/json" }, body: JSON.stringify({ tokens: [x] }) })
      .then((r) => r.json())).content;
    const forced = await client.completions.create({ ...body, logit_bias: { [x]: 100 } });
    assert.equal(forced.choices[0].text, xText.repeat(3));
  });

  await check("hostile schemas: too deep, too many nodes → 400 within a limit", async () => {
    let deep = { type: "integer" };
    for (let i = 0; i < 40; i++) deep = { type: "array", items: deep };
    const props = Object.fromEntries(Array.from({ length: 5000 }, (_, i) => [`k${i}`, { type: "integer" }]));
    for (const schema of [deep, { type: "object", properties: props }]) {
      const t0 = Date.now();
      await assert.rejects(client.chat.completions.create({ model: "tiny-seed5",
        messages: [{ role: "user", content: "x" }],
        response_format: { type: "json_schema", json_schema: { name: "x", schema } } }),
      (e) => e instanceof OpenAI.BadRequestError && e.param === "response_format" &&
        !e.message.includes("\n"));
      assert.ok(Date.now() - t0 < 5000, "refused too slowly");
    }
  });

  await check("json_schema with an unsupported keyword → 400 naming it", async () => {
    await assert.rejects(client.chat.completions.create({ model: "tiny-seed5",
      messages: [{ role: "user", content: "x" }], response_format: { type: "json_schema",
        json_schema: { name: "x", schema: { type: "string", pattern: "^a+$" } } } }),
    (e) => e instanceof OpenAI.BadRequestError && /pattern/.test(e.message));
  });

  await stopServer(s);
}

// ===== the hybrid: fixed recurrent state, snapshots at prompt ends =====
{
  const s = await startServer(hybrid, ["-c", "512", "--parallel", "2", "--cache-block", "16",
    "--prefill-chunk", "32"]);
  const p = "In a hybrid model most layers keep a fixed recurrent state instead of a cache of keys " +
    "and values, so a prefix can be resumed only where that state was saved.";
  await check("hybrid: a repeated prompt resumes at a saved state; answer = mi-run's", async () => {
    const ref = miRunJson(hybrid, p, 10);
    const body = { model: "hybrid-tiny-seed21", prompt: p, max_tokens: 10, temperature: 0, logprobs: 1 };
    const a = await s.client.completions.create(body);
    const b = await s.client.completions.create(body);
    assert.equal(a.usage.prompt_tokens_details.cached_tokens, 0);
    const n = ref.promptIds.length;
    assert.equal(b.usage.prompt_tokens_details.cached_tokens, Math.floor((n - 1) / 16) * 16);
    for (const r of [a, b]) {
      assert.equal(r.choices[0].text, ref.text);
      r.choices[0].logprobs.token_logprobs.forEach((lp, i) =>
        assert.ok(Math.abs(lp - ref.logprobs[i]) < LP_TOL, `logprob ${i}`));
    }
    assert.ok(await metric(s.base, "mi_prefix_cache_snapshots") >= 1);
  });
  await stopServer(s);
}

finish();
