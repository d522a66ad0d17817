// `dynamo run in=http out=mocker` as a user runs it: a subprocess serving the OpenAI API.

import assert from "node:assert/strict";
import { type ChildHandle, spawnDeno } from "../../../tests/_helpers/process.ts";

const CLI = new URL("../../../cli/main.ts", import.meta.url).pathname;

async function stop(child: ChildHandle): Promise<void> {
  child.kill("SIGTERM");
  const timer = setTimeout(() => child.kill("SIGKILL"), 10_000);
  try {
    await child.status;
  } finally {
    clearTimeout(timer);
  }
}

Deno.test("dynamo run in=http out=mocker answers a chat completion with max_tokens tokens", async () => {
  const run = spawnDeno(CLI, { DYN_LOG: "warn", ETCD_ENDPOINTS: "", NATS_SERVER: "" }, [
    "run",
    "in=http",
    "out=mocker",
    "--http-port",
    "0",
    "--num-workers",
    "3",
    "--speedup-ratio",
    "100",
    "--num-gpu-blocks",
    "1024",
  ]);
  try {
    const line = await run.waitFor<{ text: string }>(
      (l) => typeof l.text === "string" && l.text.includes("listening on"),
      60_000,
      "the frontend to listen",
    );
    const base = /listening on (\S+)/.exec(line.text)![1]!;
    const models = await (await fetch(`${base}/v1/models`, { signal: AbortSignal.timeout(10_000) }))
      .json() as { data: { id: string }[] };
    assert.deepEqual(models.data.map((m) => m.id), ["Qwen3-0.6B"]);

    const res = await fetch(`${base}/v1/chat/completions`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({
        model: "Qwen3-0.6B",
        messages: [{ role: "user", content: "Hello there, how are you today?" }],
        max_tokens: 8,
      }),
      signal: AbortSignal.timeout(10_000),
    });
    assert.equal(res.status, 200, await res.clone().text());
    const body = await res.json() as {
      choices: { message: { role: string; content: string }; finish_reason: string }[];
      usage: { completion_tokens: number };
    };
    assert.equal(body.choices[0]!.message.role, "assistant");
    assert.equal(body.choices[0]!.finish_reason, "length");
    assert.equal(body.usage.completion_tokens, 8);
    assert.ok(body.choices[0]!.message.content.length > 0);
  } finally {
    await stop(run);
  }
});

Deno.test("dynamo run out=mocker rejects a bad mocker flag with exit code 2", async () => {
  const run = spawnDeno(CLI, { DYN_LOG: "warn" }, [
    "run",
    "in=http",
    "out=mocker",
    "--speedup-ratio",
    "fast",
  ]);
  const timer = setTimeout(() => run.kill(), 30_000);
  const status = await run.status.finally(() => clearTimeout(timer));
  assert.equal(status.code, 2);
});
