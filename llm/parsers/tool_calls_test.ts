import assert from "node:assert/strict";
import fc from "fast-check";
import { toolCallParser, UnknownParserError } from "./mod.ts";
import type { ParsedToolCall } from "./types.ts";

/** Feeds `chunks` to a new parser of `name`; returns the joined content and all calls. */
function run(name: string, chunks: string[]): { content: string; calls: ParsedToolCall[] } {
  const p = toolCallParser(name);
  let content = "";
  const calls: ParsedToolCall[] = [];
  for (const chunk of [...chunks.map((c) => p.push(c)), p.finish()]) {
    content += chunk.content;
    calls.push(...chunk.calls);
  }
  return { content, calls };
}

const weather = { name: "get_weather", arguments: '{"city":"Paris","unit":"c"}' };
const time = { name: "get_time", arguments: '{"tz":"Europe/Paris"}' };

/** Known outputs of each format: the text and what it reads as. */
const CASES: { parser: string; text: string; content: string; calls: ParsedToolCall[] }[] = [
  {
    parser: "hermes",
    text: 'Let me check.\n<tool_call>\n{"name": "get_weather", "arguments": ' +
      '{"city": "Paris", "unit": "c"}}\n</tool_call>\n<tool_call>\n{"name": "get_time", ' +
      '"arguments": {"tz": "Europe/Paris"}}\n</tool_call>',
    content: "Let me check.",
    calls: [weather, time],
  },
  {
    parser: "hermes",
    text: "No tools needed: 2 < 3 and <tool> is not a marker.",
    content: "No tools needed: 2 < 3 and <tool> is not a marker.",
    calls: [],
  },
  {
    parser: "hermes",
    text: "<tool_call>not json</tool_call> after",
    content: "<tool_call>not json</tool_call> after",
    calls: [],
  },
  {
    parser: "llama3_json",
    text: '{"name": "get_weather", "parameters": {"city": "Paris", "unit": "c"}}; ' +
      '{"name": "get_time", "parameters": {"tz": "Europe/Paris"}}',
    content: "",
    calls: [weather, time],
  },
  {
    parser: "llama3_json",
    text: '<|python_tag|>{"name": "get_weather", "parameters": {"city": "Paris", "unit": "c"}}',
    content: "",
    calls: [weather],
  },
  {
    parser: "llama3_json",
    text: '{"answer": 42} is plain JSON, not a call',
    content: '{"answer": 42} is plain JSON, not a call',
    calls: [],
  },
  {
    parser: "mistral",
    text: '[TOOL_CALLS] [{"name": "get_weather", "arguments": {"city": "Paris", "unit": "c"}}, ' +
      '{"name": "get_time", "arguments": {"tz": "Europe/Paris"}}]',
    content: "",
    calls: [weather, time],
  },
  {
    parser: "mistral",
    text: 'Sure.[TOOL_CALLS]get_weather[ARGS]{"city": "Paris", "unit": "c"}' +
      '[TOOL_CALLS]get_time[ARGS]{"tz": "Europe/Paris"}',
    content: "Sure.",
    calls: [weather, time],
  },
  {
    parser: "pythonic",
    text: '[get_weather(city="Paris", unit=\'c\'), get_time(tz="Europe/Paris")]',
    content: "",
    calls: [weather, time],
  },
  {
    parser: "pythonic",
    text: "<|python_start|>[get_weather(city='Paris', unit='c')]<|python_end|>",
    content: "",
    calls: [weather],
  },
  {
    parser: "pythonic",
    text: "[1] is a citation, not a call.",
    content: "[1] is a citation, not a call.",
    calls: [],
  },
  {
    parser: "deepseek_v3",
    text:
      "Checking.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n" +
      '```json\n{"city": "Paris", "unit": "c"}\n```<｜tool▁call▁end｜>' +
      "<｜tool▁call▁begin｜>function<｜tool▁sep｜>get_time\n" +
      '```json\n{"tz": "Europe/Paris"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>',
    content: "Checking.",
    calls: [weather, time],
  },
  {
    parser: "deepseek_v3_1",
    text: "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>" +
      '{"city": "Paris", "unit": "c"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>',
    content: "",
    calls: [weather],
  },
];

for (const c of CASES) {
  Deno.test(`tool-call parser ${c.parser} reads ${JSON.stringify(c.text.slice(0, 40))}`, () => {
    assert.deepEqual(run(c.parser, [c.text]), { content: c.content, calls: c.calls });
  });
}

Deno.test("tool-call parsers give the same content and calls wherever the text is split", () => {
  fc.assert(
    fc.property(
      fc.constantFrom(...CASES),
      fc.array(fc.nat(), { maxLength: 12 }),
      (c, cuts) => {
        const points = [...new Set(cuts.map((x) => x % (c.text.length + 1)))].sort((a, b) => a - b);
        const chunks: string[] = [];
        let last = 0;
        for (const p of points) {
          chunks.push(c.text.slice(last, p));
          last = p;
        }
        chunks.push(c.text.slice(last));
        assert.deepEqual(run(c.parser, chunks), { content: c.content, calls: c.calls });
      },
    ),
    { numRuns: 400 },
  );
});

Deno.test("tool-call parsers stream content at once and hold back only a possible marker", () => {
  const p = toolCallParser("hermes");
  assert.deepEqual(p.push("Hello there <tool_"), { content: "Hello there", calls: [] });
  assert.deepEqual(p.push("cal"), { content: "", calls: [] });
  assert.deepEqual(p.push("x> ok"), { content: " <tool_calx> ok", calls: [] });
  assert.deepEqual(p.finish(), { content: "", calls: [] });
});

Deno.test("an unclosed call at the end of the answer is read when it is complete JSON", () => {
  assert.deepEqual(run("hermes", ['<tool_call>{"name": "f", "arguments": {}}']), {
    content: "",
    calls: [{ name: "f", arguments: "{}" }],
  });
  assert.deepEqual(run("hermes", ['<tool_call>{"name": "f", "argu']), {
    content: '<tool_call>{"name": "f", "argu',
    calls: [],
  });
});

Deno.test("text arbitrary models write reads the same whole and split, for every parser", () => {
  const alphabet = fc.constantFrom(
    "a",
    " ",
    "\n",
    "{",
    "}",
    "[",
    "]",
    '"',
    "<tool_call>",
    "</tool_call>",
    "<|python_tag|>",
    "[TOOL_CALLS]",
    '{"name": "f", "arguments": {}}',
    "f(x=1)",
    ";",
  );
  fc.assert(
    fc.property(
      fc.constantFrom("hermes", "llama3_json", "mistral", "pythonic", "deepseek_v3"),
      fc.array(alphabet, { maxLength: 12 }).map((parts) => parts.join("")),
      fc.array(fc.nat(), { maxLength: 6 }),
      (parser, text, cuts) => {
        const points = [...new Set(cuts.map((x) => x % (text.length + 1)))].sort((a, b) => a - b);
        const chunks: string[] = [];
        let last = 0;
        for (const p of points) {
          chunks.push(text.slice(last, p));
          last = p;
        }
        chunks.push(text.slice(last));
        assert.deepEqual(run(parser, chunks), run(parser, [text]));
      },
    ),
    { numRuns: 500 },
  );
});

Deno.test("toolCallParser names the known parsers when asked for an unknown one", () => {
  assert.throws(() => toolCallParser("nope"), (err: unknown) => {
    assert.ok(err instanceof UnknownParserError);
    assert.equal(err.parser, "nope");
    assert.ok(err.known.includes("hermes"));
    assert.match(err.message, /llama3_json/);
    return true;
  });
});
