import assert from "node:assert/strict";
import fc from "fast-check";
import {
  ChatOutputParser,
  type IndexedToolCall,
  reasoningFormat,
  type ReasoningParser,
  reasoningParser,
  startsInReasoning,
  toolCallParser,
  UnknownParserError,
} from "./mod.ts";

function run(p: ReasoningParser, chunks: string[]): { content: string; reasoning: string } {
  let content = "";
  let reasoning = "";
  for (const out of [...chunks.map((c) => p.push(c)), p.finish()]) {
    content += out.content;
    reasoning += out.reasoning;
  }
  return { content, reasoning };
}

function split(text: string, cuts: number[]): string[] {
  const points = [...new Set(cuts.map((x) => x % (text.length + 1)))].sort((a, b) => a - b);
  const chunks: string[] = [];
  let last = 0;
  for (const p of points) {
    chunks.push(text.slice(last, p));
    last = p;
  }
  chunks.push(text.slice(last));
  return chunks;
}

Deno.test("qwen3 splits a think block from the answer", () => {
  assert.deepEqual(
    run(reasoningParser("qwen3"), ["<think>\nIt is sunny.\n</think>\n\nTake sunglasses."]),
    { reasoning: "\nIt is sunny.\n", content: "Take sunglasses." },
  );
  assert.deepEqual(run(reasoningParser("qwen3"), ["No thinking here."]), {
    reasoning: "",
    content: "No thinking here.",
  });
});

Deno.test("deepseek_r1 starts inside the reasoning: the template wrote <think>", () => {
  assert.deepEqual(run(reasoningParser("deepseek_r1"), ["Hmm, 2+2.</think>4"]), {
    reasoning: "Hmm, 2+2.",
    content: "4",
  });
  // A model that writes the opening tag anyway: it is dropped.
  assert.deepEqual(run(reasoningParser("deepseek_r1"), ["<think>Hmm.</think>4"]), {
    reasoning: "Hmm.",
    content: "4",
  });
  // Never closed: all reasoning.
  assert.deepEqual(run(reasoningParser("deepseek_r1"), ["still thinking"]), {
    reasoning: "still thinking",
    content: "",
  });
});

Deno.test("the rendered prompt and enable_thinking decide where an answer starts", () => {
  const qwen3 = reasoningFormat("qwen3");
  const r1 = reasoningFormat("deepseek_r1");
  assert.equal(startsInReasoning(qwen3, { prompt: "<|im_start|>assistant\n<think>\n" }), true);
  assert.equal(
    startsInReasoning(r1, { prompt: "<|im_start|>assistant\n<think>\n\n</think>\n\n" }),
    false,
  );
  assert.equal(startsInReasoning(r1, { templateKwargs: { enable_thinking: false } }), false);
  assert.equal(startsInReasoning(r1, {}), true);
  assert.equal(startsInReasoning(qwen3, {}), false);
});

const KNOWN = [
  { parser: "qwen3", text: "<think>a < b</think>\n\nanswer <thin", reasoning: "a < b" },
  { parser: "qwen3", text: "pre<think>x</think>post", reasoning: "x" },
  { parser: "deepseek_r1", text: "<think>\nr\n</think>c", reasoning: "\nr\n" },
  { parser: "deepseek_r1", text: "  r</think>  c</think>", reasoning: "  r" },
];

Deno.test("reasoning parsers give the same split wherever the text is split", () => {
  fc.assert(
    fc.property(fc.constantFrom(...KNOWN), fc.array(fc.nat(), { maxLength: 10 }), (c, cuts) => {
      const whole = run(reasoningParser(c.parser), [c.text]);
      assert.equal(whole.reasoning, c.reasoning);
      assert.deepEqual(run(reasoningParser(c.parser), split(c.text, cuts)), whole);
    }),
    { numRuns: 300 },
  );
  const alphabet = fc.constantFrom("a", " ", "\n", "<", ">", "<think>", "</think>", "/");
  fc.assert(
    fc.property(
      fc.constantFrom("qwen3", "deepseek_r1"),
      fc.array(alphabet, { maxLength: 14 }).map((p) => p.join("")),
      fc.array(fc.nat(), { maxLength: 6 }),
      (parser, text, cuts) => {
        assert.deepEqual(
          run(reasoningParser(parser), split(text, cuts)),
          run(reasoningParser(parser), [text]),
        );
      },
    ),
    { numRuns: 500 },
  );
});

/** A chat answer through both parsers, ids numbered. */
function chatRun(chunks: string[], reasoning = "qwen3", tools = "hermes") {
  let n = 0;
  const p = new ChatOutputParser({
    reasoning: reasoningParser(reasoning),
    tools: toolCallParser(tools),
    newId: () => `call_${n++}`,
  });
  let content = "";
  let reasoningText = "";
  const calls: IndexedToolCall[] = [];
  for (const out of [...chunks.map((c) => p.push(c)), p.finish()]) {
    content += out.content;
    reasoningText += out.reasoning;
    calls.push(...out.calls);
  }
  return { content, reasoning: reasoningText, calls };
}

const QWEN_ANSWER = "<think>\nThe user wants the weather; call the tool.\n</think>\n\n" +
  'I will check.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n' +
  '</tool_call>\n<tool_call>\n{"name": "get_time", "arguments": {}}\n</tool_call>';

Deno.test("a chat answer splits into reasoning, content and numbered tool calls", () => {
  assert.deepEqual(chatRun([QWEN_ANSWER]), {
    reasoning: "\nThe user wants the weather; call the tool.\n",
    content: "I will check.",
    calls: [
      { index: 0, id: "call_0", name: "get_weather", arguments: '{"city":"Paris"}' },
      { index: 1, id: "call_1", name: "get_time", arguments: "{}" },
    ],
  });
});

Deno.test("a chat answer reads the same wherever it is split (property)", () => {
  fc.assert(
    fc.property(fc.array(fc.nat(), { maxLength: 16 }), (cuts) => {
      assert.deepEqual(chatRun(split(QWEN_ANSWER, cuts)), chatRun([QWEN_ANSWER]));
    }),
    { numRuns: 300 },
  );
});

Deno.test("singleCall keeps only the first tool call", () => {
  const p = new ChatOutputParser({ tools: toolCallParser("hermes"), singleCall: true });
  const out = p.push(QWEN_ANSWER.slice(QWEN_ANSWER.indexOf("I will")));
  const tail = p.finish();
  assert.deepEqual([...out.calls, ...tail.calls].map((c) => c.name), ["get_weather"]);
  assert.match(out.calls[0]!.id, /^call_[A-Za-z0-9]{24}$/);
});

Deno.test("reasoningParser names the known parsers when asked for an unknown one", () => {
  assert.throws(() => reasoningParser("nope"), UnknownParserError);
});
