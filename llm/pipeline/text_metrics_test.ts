import assert from "node:assert/strict";
import { measuredText, type TextSeries } from "./text_metrics.ts";

function recordingSeries() {
  const seen = {
    ttft: [] as number[],
    itl: [] as number[],
    input: [] as number[],
    output: [] as number[],
  };
  const series: TextSeries = {
    ttft: { observe: (v) => void seen.ttft.push(v) },
    itl: { observe: (v) => void seen.itl.push(v) },
    inputTokens: { observe: (v) => void seen.input.push(v) },
    outputTokens: { observe: (v) => void seen.output.push(v) },
  };
  return { series, seen };
}

async function* items(list: Record<string, unknown>[]) {
  yield* list;
}

async function drain(it: AsyncIterable<Record<string, unknown>>) {
  const out: Record<string, unknown>[] = [];
  for await (const x of it) out.push(x);
  return out;
}

const delta = (d: Record<string, unknown>, finish: string | null = null) => ({
  object: "chat.completion.chunk",
  choices: [{ index: 0, delta: d, finish_reason: finish }],
});
const usage = { prompt_tokens: 7, completion_tokens: 3, total_tokens: 10 };
const stream = [
  delta({ role: "assistant", content: "" }),
  delta({ reasoning_content: "hm" }),
  delta({ content: "a" }),
  delta({ tool_calls: [{ index: 0, function: { arguments: "{}" } }] }),
  delta({}, "stop"),
  { object: "chat.completion.chunk", choices: [], usage },
];

Deno.test("a streamed text answer gives one TTFT, a gap per later output chunk, and usage's counts", async () => {
  const { series, seen } = recordingSeries();
  const started = performance.now();
  const out = await drain(
    measuredText(items(stream), series, { started, streamed: true, includeUsage: true }),
  );
  assert.deepEqual(out, stream);
  assert.equal(seen.ttft.length, 1);
  assert.ok(seen.ttft[0]! >= 0);
  assert.equal(seen.itl.length, 2, "reasoning, content and tool-call chunks carry output");
  assert.deepEqual(seen.input, [7]);
  assert.deepEqual(seen.output, [3]);
});

Deno.test("usage reaches streaming clients only when they asked; whole answers keep it", async () => {
  const { series, seen } = recordingSeries();
  const opts = { started: performance.now(), streamed: true, includeUsage: false };
  const withUsageOnAChoice = [{ ...delta({ content: "x" }, "stop"), usage }];
  assert.deepEqual(await drain(measuredText(items(stream), series, opts)), stream.slice(0, -1));
  assert.deepEqual(
    await drain(measuredText(items(withUsageOnAChoice), series, opts)),
    [delta({ content: "x" }, "stop")],
  );
  assert.deepEqual(seen.output, [3, 3], "counted even when not passed on");
  const whole = {
    object: "chat.completion",
    choices: [{ index: 0, message: { role: "assistant", content: "hi" }, finish_reason: "stop" }],
    usage,
  };
  const out = await drain(
    measuredText(items([whole]), series, { ...opts, streamed: false }),
  );
  assert.deepEqual(out, [whole]);
  assert.equal(seen.ttft.length, 3);
});

Deno.test("an answer without usage or output observes no counts and no TTFT", async () => {
  const { series, seen } = recordingSeries();
  await drain(
    measuredText(items([delta({ content: "" }), { usage: "bogus" }]), series, {
      started: 0,
      streamed: false,
      includeUsage: false,
    }),
  );
  assert.deepEqual(seen, { ttft: [], itl: [], input: [], output: [] });
});
