import assert from "node:assert/strict";
import { ChatTemplate, ChatTemplateError } from "./chat_template.ts";
import { RequestError } from "../openai/errors.ts";
import { qwen3ChatTemplate } from "../../tests/_helpers/qwen3.ts";

const qwen3 = new ChatTemplate(qwen3ChatTemplate());

Deno.test("ChatTemplate renders a system and user conversation with Qwen3's real template", () => {
  const prompt = qwen3.render({
    messages: [
      { role: "system", content: "You are a helpful assistant." },
      { role: "user", content: "What is 2+2?" },
    ],
  });
  assert.equal(
    prompt,
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n" +
      "<|im_start|>user\nWhat is 2+2?<|im_end|>\n" +
      "<|im_start|>assistant\n",
  );
});

Deno.test("ChatTemplate leaves out the assistant opener when add_generation_prompt is false", () => {
  const prompt = qwen3.render({
    messages: [{ role: "user", content: "Hi" }],
    add_generation_prompt: false,
  });
  assert.equal(prompt, "<|im_start|>user\nHi<|im_end|>\n");
});

Deno.test("ChatTemplate passes extra variables such as enable_thinking to the template", () => {
  const prompt = qwen3.render({
    messages: [{ role: "user", content: "Hi" }],
    enable_thinking: false,
  });
  assert.equal(
    prompt,
    "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n",
  );
});

Deno.test("ChatTemplate joins text content parts with newlines", () => {
  const prompt = qwen3.render({
    messages: [{
      role: "user",
      content: [{ type: "text", text: "first" }, { type: "text", text: "second" }],
    }],
  });
  assert.equal(prompt, "<|im_start|>user\nfirst\nsecond<|im_end|>\n<|im_start|>assistant\n");
});

Deno.test("ChatTemplate renders developer messages as system messages", () => {
  const prompt = qwen3.render({
    messages: [{ role: "developer", content: "Be brief." }, { role: "user", content: "Hi" }],
  });
  assert.ok(prompt.startsWith("<|im_start|>system\nBe brief.<|im_end|>\n"), prompt);
});

Deno.test("ChatTemplate drops the reasoning of earlier assistant turns as Qwen3 does", () => {
  const prompt = qwen3.render({
    messages: [
      { role: "user", content: "Hi" },
      { role: "assistant", content: "<think>\nGreet back.\n</think>\n\nHello!" },
      { role: "user", content: "Bye" },
    ],
  });
  assert.equal(
    prompt,
    "<|im_start|>user\nHi<|im_end|>\n" +
      "<|im_start|>assistant\nHello!<|im_end|>\n" +
      "<|im_start|>user\nBye<|im_end|>\n" +
      "<|im_start|>assistant\n",
  );
});

Deno.test("ChatTemplate renders tools and earlier tool calls with parsed arguments", () => {
  const prompt = qwen3.render({
    messages: [
      { role: "user", content: "Weather in Paris?" },
      {
        role: "assistant",
        content: null,
        tool_calls: [{
          id: "call_1",
          type: "function",
          function: { name: "get_weather", arguments: '{"city": "Paris"}' },
        }],
      },
      { role: "tool", tool_call_id: "call_1", content: "sunny" },
    ],
    tools: [{
      type: "function",
      function: { name: "get_weather", parameters: { type: "object", properties: {} } },
    }],
  });
  assert.ok(prompt.startsWith("<|im_start|>system\n# Tools\n"), prompt);
  assert.ok(prompt.includes('"name": "get_weather"'), prompt);
  assert.ok(
    prompt.includes(
      '<|im_start|>assistant\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call><|im_end|>',
    ),
    prompt,
  );
  assert.ok(prompt.includes("<tool_response>\nsunny\n</tool_response>"), prompt);
});

Deno.test("ChatTemplate refuses non-text content parts with a 400 naming the part", () => {
  assert.throws(
    () =>
      qwen3.render({
        messages: [{
          role: "user",
          content: [{ type: "text", text: "look" }, {
            type: "image_url",
            image_url: { url: "http://x/y.png" },
          }],
        }],
      }),
    (err: unknown) =>
      err instanceof RequestError && err.status === 400 &&
      err.param === "messages[0].content[1]" && err.message.includes("image_url"),
  );
});

Deno.test("ChatTemplate turns an error raised by the template into a 400 with its message", () => {
  const strict = new ChatTemplate(
    "{% for m in messages %}{% if m.role == 'system' %}" +
      "{{ raise_exception('System role not supported') }}{% endif %}{{ m.content }}{% endfor %}",
  );
  assert.equal(strict.render({ messages: [{ role: "user", content: "ok" }] }), "ok");
  assert.throws(
    () => strict.render({ messages: [{ role: "system", content: "no" }] }),
    (err: unknown) =>
      err instanceof RequestError && err.status === 400 &&
      err.message.includes("System role not supported"),
  );
});

Deno.test("ChatTemplate rejects a source that does not parse", () => {
  assert.throws(() => new ChatTemplate("{% for m in messages %}"), ChatTemplateError);
});

Deno.test("ChatTemplate gives the template the card's bos and eos tokens", () => {
  const t = new ChatTemplate("{{ bos_token }}{{ messages[0].content }}{{ eos_token }}");
  assert.equal(
    t.render({ messages: [{ role: "user", content: "x" }], bos_token: "<s>", eos_token: "</s>" }),
    "<s>x</s>",
  );
  assert.equal(t.render({ messages: [{ role: "user", content: "x" }] }), "x");
});

Deno.test("ChatTemplate renders exactly what the plain interpreter renders", async () => {
  const { Template } = await import("@huggingface/jinja");
  const plain = new Template(qwen3ChatTemplate());
  const tools = [{ type: "function", function: { name: "f", parameters: { type: "object" } } }];
  const cases: Record<string, unknown>[] = [
    { messages: [{ role: "user", content: "Hi" }] },
    { messages: [{ role: "user", content: "Hi" }], enable_thinking: false },
    {
      messages: [
        { role: "system", content: "Be brief." },
        { role: "user", content: "Q1" },
        { role: "assistant", content: "<think>\nhmm\n</think>\n\nA1" },
        { role: "user", content: "Q2" },
      ],
    },
    {
      messages: [
        { role: "user", content: "weather?" },
        {
          role: "assistant",
          content: "",
          tool_calls: [{ type: "function", function: { name: "f", arguments: { a: 1 } } }],
        },
        { role: "tool", content: "sunny" },
      ],
      tools,
    },
  ];
  for (const c of cases) {
    const vars = { add_generation_prompt: true, bos_token: "", eos_token: "", ...c };
    assert.equal(qwen3.render(c as never), plain.render(vars), JSON.stringify(c));
  }
});
