// deno-lint-ignore-file no-console -- a program or test that prints; library code takes a Logger
// No single request stalls the frontend (issue: reliability at the boundaries): while a prompt
// near the model's whole context (~38.9k tokens) is tokenized and answered, and ~19.5k tokens are
// streamed back one event each, /live keeps answering. The worst /live delay seen (an upper bound of
// the event loop's longest stall, HTTP included) is printed and recorded in BENCHMARKS.md.

import assert from "node:assert/strict";
import { startDynamoRun } from "./_helpers/dynamo_run.ts";
import { probeLive } from "./_helpers/live_probe.ts";

Deno.test("a prompt near the whole context and its echo never stall /live", async () => {
  const run = await startDynamoRun();
  try {
    const base = run.url;
    const words = (n: number) => Array.from({ length: n }, (_, i) => `word${i % 1000}`).join(" ");
    const ask = async (content: string, stream: boolean) => {
      const r = await fetch(`${base}/v1/chat/completions`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({
          model: "Qwen3-0.6B",
          messages: [{ role: "user", content }],
          stream,
        }),
      });
      const text = await r.text();
      assert.equal(r.status, 200, text.slice(0, 300));
      return text;
    };
    await ask("warm up", false); // the tokenizer and template are loaded before we measure
    const probe = probeLive(base);
    // A prompt of ~38.9k tokens (the context is 40,960), answered whole ...
    const whole = JSON.parse(await ask(words(10_000), false));
    assert.ok(whole.usage.prompt_tokens > 38_000, JSON.stringify(whole.usage));
    // ... and ~19.5k tokens in, ~19.5k tokens streamed back one event at a time.
    const streamed = await ask(words(5_000), true);
    const worst = await probe.stop();
    assert.ok(streamed.endsWith("data: [DONE]\n\n"));
    assert.ok(streamed.split("\n\n").length > 19_000, "one event per token");
    console.log(`worst /live delay while the large requests ran: ${worst.toFixed(1)} ms`);
    assert.ok(worst < 500, `the frontend stalled ${worst.toFixed(0)} ms`);
  } finally {
    await run.stop();
  }
});
