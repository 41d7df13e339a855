// Regenerates tests/template/golden_templates.json: real chat templates
// (tests/template/templates/*.jinja, provenance in the README there)
// rendered by @huggingface/jinja 0.5.11 (the Jinja engine of transformers.js;
// like transformers it renders with trim_blocks and lstrip_blocks on) over a
// set of conversations, with bos_token / eos_token passed as transformers
// passes them (the tokenizer's special tokens). A case whose render throws
// (raise_exception in the template) records the error message instead.
// tests/template's Check suite renders every case with core/template and
// requires byte-for-byte equality. From the repo root:
//   node tools/node/template_goldens.mjs > tests/template/golden_templates.json
import { readFileSync } from "node:fs";
import { Template } from "@huggingface/jinja";

const dir = new URL("../../tests/template/templates/", import.meta.url);
const U = (c) => ({ role: "user", content: c });
const A = (c) => ({ role: "assistant", content: c });
const S = (c) => ({ role: "system", content: c });
const tools = [
  {
    type: "function",
    function: {
      name: "get_weather",
      description: "Get the current weather in a city.",
      parameters: {
        type: "object",
        properties: {
          city: { type: "string", description: "The city, e.g. \"Paris\"" },
          unit: { type: "string", enum: ["celsius", "fahrenheit"] },
        },
        required: ["city"],
      },
    },
  },
];
const call = { id: "call_1", type: "function", function: { name: "get_weather", arguments: { city: "Paris", unit: "celsius" } } };
const AC = (content) => ({ role: "assistant", content, tool_calls: [call] });
const TOOL = (c) => ({ role: "tool", tool_call_id: "call_1", name: "get_weather", content: c });

const chat = [
  [[U("Hello")], true],
  [[U("Hello")], false],
  [[S("You are a helpful assistant."), U("What is 2+2?")], true],
  [[S("sys"), U("hi"), A("Hello! How can I help?"), U("Tell me a joke.")], true],
  [[U("hi"), A("Hello!"), U("bye"), A("Goodbye.")], false],
  [[U("  padded  \n"), A("\n answer \n")], true],
  [[U("你好 👋 \"quotes\" and \\backslash"), A("你好！")], true],
  [[S("first"), U("u"), A("a"), S("second system")], true],
];
const withTools = [
  [[U("What's the weather in Paris?")], true, { tools }],
  [[S("Be brief."), U("What's the weather in Paris?")], true, { tools }],
  [[U("What's the weather in Paris?"), AC(""), TOOL("22 degrees"), A("It is 22 degrees in Paris.")], false, { tools }],
  [[U("Weather?"), AC(""), TOOL("{\"temp\": 22}")], true, { tools }],
];
const families = [
  { file: "qwen3.jinja", special: { eos_token: "<|im_end|>" },
    // not chat[5]: @huggingface/jinja's lstrip('\n') strips all whitespace,
    // Python's (transformers') only '\n' (tests/template checks the latter)
    convs: [...chat.filter((_, i) => i !== 5), ...withTools,
      [[U("hi"), A("<think>\nI should greet.\n</think>\n\nHello!"), U("again")], true],
      [[U("hi"), A("<think>\nI should greet.\n</think>\n\nHello!")], false],
      [[U("Hello")], true, { enable_thinking: false }],
      [[U("q"), A("a1"), TOOL("result 1"), TOOL("result 2"), A("done")], false],
      [[U("hi"), { role: "assistant", content: "Hello!", reasoning_content: "Greet back." }, U("more")], true],
    ] },
  { file: "qwen2.5-7b-instruct.jinja", special: { eos_token: "<|im_end|>" }, convs: [...chat, ...withTools] },
  { file: "llama-3.1-8b-instruct.jinja", special: { bos_token: "<|begin_of_text|>", eos_token: "<|eot_id|>" },
    convs: [...chat, ...withTools,
      [[U("What's the weather in Paris?")], true, { tools, tools_in_user_message: false }],
      [[U("Hi")], true, { date_string: "05 Dec 2025" }],
      [[U("a"), AC(""), { role: "assistant", content: "", tool_calls: [call, call] }], false, { tools }],
    ] },
  { file: "llama-3.2-3b-instruct.jinja", special: { bos_token: "<|begin_of_text|>", eos_token: "<|eot_id|>" },
    // date_string given: strftime_now in @huggingface/jinja reads the wall clock
    convs: [...chat, ...withTools].map(([m, g, x]) => [m, g, { ...(x ?? {}), date_string: "26 Jul 2024" }]) },
  { file: "mistral-7b-instruct-v0.3.jinja", special: { bos_token: "<s>", eos_token: "</s>" },
    convs: [
      [[U("Hello")], true], [[U("hi"), A("Hello!"), U("bye")], true], [[U("hi"), A("Hello!")], false],
      [[U("你好 👋")], true],
      [[U("What's the weather in Paris?")], true, { tools }],
      [[U("What's the weather in Paris?"), { role: "assistant", tool_calls: [call] }, TOOL("22"), A("22 degrees.")], false, { tools }],
    ] },
  { file: "mistral-nemo-instruct-2407.jinja", special: { bos_token: "<s>", eos_token: "</s>" },
    convs: [
      [[U("Hello")], true], [[S("Be brief."), U("hi"), A("Hello!"), U("bye")], true], [[U("hi"), A("Hello!")], false],
      // not [U, U]: @huggingface/jinja renders it, transformers raises the
      // template's "roles must alternate" (tests/template checks the latter)
      [[U("What's the weather in Paris?")], true, { tools }],
      [[U("What's the weather in Paris?"), { role: "assistant", tool_calls: [{ ...call, id: "abc123xyz" }] }, { ...TOOL("22"), tool_call_id: "abc123xyz" }, A("22 degrees.")], false, { tools }],
    ] },
  { file: "gemma-2-2b-it.jinja", special: { bos_token: "<bos>", eos_token: "<eos>" },
    convs: [
      [[U("Hello")], true], [[U("Hello")], false], [[U("hi"), A("Hello!"), U("bye")], true],
      [[U("  spaced  "), A(" x ")], false], [[S("sys"), U("hi")], true], [[U("a"), U("b")], true],
    ] },
  { file: "gemma-3-1b-it.jinja", special: { bos_token: "<bos>", eos_token: "<eos>" },
    convs: [
      [[U("Hello")], true], [[U("Hello")], false], [[U("hi"), A("Hello!"), U("bye")], true],
      [[{ role: "system", content: [{ type: "text", text: "Be brief." }] }, U("hi")], true],
      [[{ role: "user", content: [{ type: "image" }, { type: "text", text: " Describe. " }] }], true],
      [[U("a"), U("b")], true],
    ] },
];

const out = { source: "@huggingface/jinja 0.5.11 rendering the templates in tests/template/templates", templates: [] };
for (const fam of families) {
  const text = readFileSync(new URL(fam.file, dir), "utf8");
  const tpl = new Template(text);
  const cases = [];
  for (const [messages, gen, extra] of fam.convs) {
    const context = { messages, add_generation_prompt: gen, ...fam.special, ...(extra ?? {}) };
    try {
      cases.push({ context, text: tpl.render(context) });
    } catch (e) {
      cases.push({ context, error: String(e.message ?? e) });
    }
  }
  out.templates.push({ file: fam.file, template: text, cases });
}
process.stdout.write(JSON.stringify(out, null, 1) + "\n");
