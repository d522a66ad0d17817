// Admission control and the API key end to end: `dynamo run in=http out=echo` with
// --max-inflight (the echo engine's per-token delay keeps streams open) and with a key.

import assert from "node:assert/strict";
import OpenAI from "openai";
import { parseHttpFlags } from "../cli/frontend.ts";
import { UsageError } from "../cli/_common.ts";
import { eventually } from "./_helpers/backends.ts";
import {
  echoOf,
  metricValue,
  MODEL,
  openAIErrorProblem,
  startDynamoRun,
  tokenCount,
} from "./_helpers/dynamo_run.ts";

const PROMPT = "The quick brown fox jumps over the lazy dog near the quiet river bank " +
  "while seven small birds sing softly in the old oak tree";
const DELAY_MS = 80;

/** A streamed completion: its status, and (when admitted) a reader of its events. */
async function openStream(
  url: string,
  signal?: AbortSignal,
): Promise<Response> {
  return await fetch(`${url}/v1/completions`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ model: MODEL, prompt: PROMPT, stream: true }),
    signal,
  });
}

/** Reads a completion stream to its [DONE]: the text and the last finish reason. */
async function readStream(res: Response): Promise<{ text: string; finish: string | null }> {
  let text = "";
  let finish: string | null = null;
  let buf = "";
  for await (const chunk of res.body!.pipeThrough(new TextDecoderStream())) {
    buf += chunk;
    let at;
    while ((at = buf.indexOf("\n\n")) >= 0) {
      const event = buf.slice(0, at);
      buf = buf.slice(at + 2);
      if (!event.startsWith("data: ")) continue;
      const data = event.slice(6);
      if (data === "[DONE]") return { text, finish };
      const json = JSON.parse(data);
      if (json.error) throw new Error(`stream failed: ${data}`);
      for (const c of json.choices) {
        text += c.text;
        finish = c.finish_reason ?? finish;
      }
    }
  }
  throw new Error(`stream ended without [DONE]; got ${JSON.stringify(text)}`);
}

/** Reads the first event of an admitted stream (so the engine is producing). */
async function firstEvent(res: Response): Promise<ReadableStreamDefaultReader<Uint8Array>> {
  const reader = res.body!.getReader();
  const first = await reader.read();
  assert.ok(!first.done && first.value.length > 0, "the stream's first event");
  return reader;
}

async function assertRefused(res: Response): Promise<void> {
  assert.equal(res.status, 429);
  assert.equal(res.headers.get("retry-after"), "1");
  assert.equal(res.headers.get("content-type"), "application/json");
  const body = await res.json();
  assert.equal(openAIErrorProblem(body), undefined, JSON.stringify(body));
  assert.equal(body.error.type, "rate_limit_error");
  assert.equal(body.error.code, "overloaded");
}

const admitted = (url: string) => metricValue(url, "dynamo_frontend_admitted_requests");

Deno.test("dynamo run --max-inflight 4 refuses a fifth request with 429 until a stream ends", async (t) => {
  const run = await startDynamoRun(["--delay-ms", String(DELAY_MS), "--max-inflight", "4"]);
  const expected = await echoOf(PROMPT);
  // Long enough that the admitted streams are still open while the refusals are checked.
  assert.ok((await tokenCount(PROMPT)) * DELAY_MS >= 1500);
  try {
    await t.step("four streams are admitted, the fifth and sixth are refused", async () => {
      const streams = await Promise.all([1, 2, 3, 4].map(() => openStream(run.url)));
      assert.deepEqual(streams.map((r) => r.status), [200, 200, 200, 200]);
      assert.equal(await admitted(run.url), 4);

      await assertRefused(await openStream(run.url));
      await assertRefused(
        await fetch(`${run.url}/v1/chat/completions`, {
          method: "POST",
          headers: { "content-type": "application/json" },
          body: JSON.stringify({ model: MODEL, messages: [{ role: "user", content: "hi" }] }),
        }),
      );
      // The official client sees a RateLimitError (retries off: it would honour Retry-After).
      const client = new OpenAI({ baseURL: `${run.url}/v1`, apiKey: "unused", maxRetries: 0 });
      await assert.rejects(
        client.completions.create({ model: MODEL, prompt: "hi" }),
        (e: unknown) => e instanceof OpenAI.RateLimitError && e.status === 429,
      );

      // Probes, /metrics and /v1/models are never limited.
      for (const path of ["/health", "/live", "/metrics", "/v1/models"]) {
        const r = await fetch(run.url + path);
        assert.equal(r.status, 200, path);
        await r.body?.cancel();
      }
      assert.equal(
        await metricValue(run.url, "dynamo_frontend_rejected_requests_total", {
          reason: "overloaded",
        }),
        3,
      );

      // Every admitted stream completes, exactly.
      const results = await Promise.all(streams.map(readStream));
      for (const r of results) assert.deepEqual(r, { text: expected, finish: "stop" });
    });

    await t.step("capacity returns when the streams end", async () => {
      await eventually(async () => await admitted(run.url) === 0, 5_000, "no request admitted");
      const streams = await Promise.all([1, 2, 3, 4].map(() => openStream(run.url)));
      assert.deepEqual(streams.map((r) => r.status), [200, 200, 200, 200]);
      await assertRefused(await openStream(run.url));
      const results = await Promise.all(streams.map(readStream));
      for (const r of results) assert.deepEqual(r, { text: expected, finish: "stop" });
    });

    await t.step("a client that disconnects gives its slot back", async () => {
      await eventually(async () => await admitted(run.url) === 0, 5_000, "no request admitted");
      const aborts = [1, 2, 3, 4].map(() => new AbortController());
      const streams = await Promise.all(aborts.map((a) => openStream(run.url, a.signal)));
      assert.deepEqual(streams.map((r) => r.status), [200, 200, 200, 200]);
      // Two clients read a first event, then go away mid-stream.
      const readers = await Promise.all(streams.slice(0, 2).map(firstEvent));
      aborts[0]!.abort();
      aborts[1]!.abort();
      await Promise.allSettled(readers.map((r) => r.closed));
      await eventually(
        async () => await admitted(run.url) === 2,
        5_000,
        "the two disconnected streams to be released",
      );
      const more = await Promise.all([openStream(run.url), openStream(run.url)]);
      assert.deepEqual(more.map((r) => r.status), [200, 200]);
      await assertRefused(await openStream(run.url));
      const results = await Promise.all([...streams.slice(2), ...more].map(readStream));
      for (const r of results) assert.deepEqual(r, { text: expected, finish: "stop" });
      await eventually(async () => await admitted(run.url) === 0, 5_000, "every slot free");
    });
  } finally {
    const status = await run.stop();
    assert.equal(status.code, 0, run.output());
  }
});

Deno.test("dynamo run --max-queued 1 holds one request until a slot frees, refuses the next", async () => {
  const run = await startDynamoRun([
    "--delay-ms",
    String(DELAY_MS),
    "--max-inflight",
    "1",
    "--max-queued",
    "1",
    "--queue-timeout-ms",
    "30000",
  ]);
  const expected = await echoOf(PROMPT);
  try {
    const first = await openStream(run.url);
    assert.equal(first.status, 200);
    const queued = openStream(run.url);
    await eventually(
      async () => await metricValue(run.url, "dynamo_frontend_queued_requests") === 1,
      5_000,
      "one request in the queue",
    );
    await assertRefused(await openStream(run.url));
    assert.deepEqual(await readStream(first), { text: expected, finish: "stop" });
    // The queued request gets the freed slot and is served in full.
    const second = await queued;
    assert.equal(second.status, 200);
    assert.equal(await metricValue(run.url, "dynamo_frontend_queued_requests"), 0);
    assert.deepEqual(await readStream(second), { text: expected, finish: "stop" });
  } finally {
    const status = await run.stop();
    assert.equal(status.code, 0, run.output());
  }
});

Deno.test("dynamo run with DYN_HTTP_API_KEY needs `Authorization: Bearer` on /v1 and never prints the key", async (t) => {
  const key = `sk-dyn-${crypto.randomUUID()}`;
  const wrong = `sk-wrong-${crypto.randomUUID()}`;
  const run = await startDynamoRun([], { DYN_HTTP_API_KEY: key, DYN_LOG: "debug" });
  try {
    await t.step(
      "no header, another scheme and a wrong key get 401 and an error object",
      async () => {
        for (
          const headers of [
            {},
            { authorization: `Basic ${btoa(`user:${key}`)}` },
            { authorization: `Bearer ${wrong}` },
          ] as Record<string, string>[]
        ) {
          for (const path of ["/v1/models", "/v1/completions"]) {
            const post = path === "/v1/completions";
            const r = await fetch(run.url + path, {
              method: post ? "POST" : "GET",
              headers: { ...headers, "content-type": "application/json" },
              body: post ? JSON.stringify({ model: MODEL, prompt: "hi" }) : undefined,
            });
            assert.equal(r.status, 401, `${path} with ${JSON.stringify(Object.keys(headers))}`);
            assert.equal(r.headers.get("www-authenticate"), "Bearer");
            const body = await r.json();
            assert.equal(openAIErrorProblem(body), undefined, JSON.stringify(body));
            assert.equal(body.error.code, "invalid_api_key");
          }
        }
        const client = new OpenAI({ baseURL: `${run.url}/v1`, apiKey: wrong, maxRetries: 0 });
        await assert.rejects(
          client.models.list(),
          (e: unknown) => e instanceof OpenAI.AuthenticationError && !e.message.includes(wrong),
        );
      },
    );

    await t.step("the official client with the right key is served", async () => {
      const client = new OpenAI({ baseURL: `${run.url}/v1`, apiKey: key, maxRetries: 0 });
      assert.deepEqual((await client.models.list()).data.map((m) => m.id), [MODEL]);
      const r = await client.completions.create({ model: MODEL, prompt: PROMPT });
      assert.equal(r.choices[0]!.text, await echoOf(PROMPT));
      const stream = await client.chat.completions.create({
        model: MODEL,
        messages: [{ role: "user", content: "Hello there" }],
        stream: true,
      });
      let text = "";
      for await (const chunk of stream) text += chunk.choices[0]?.delta.content ?? "";
      assert.equal(text, "user\nHello there");
    });

    await t.step("/health, /live and /metrics stay open", async () => {
      for (const path of ["/health", "/live", "/metrics"]) {
        const r = await fetch(run.url + path);
        assert.equal(r.status, 200, path);
        await r.body?.cancel();
      }
      assert.equal(
        await metricValue(run.url, "dynamo_frontend_rejected_requests_total", {
          reason: "unauthorized",
        }),
        7,
      );
    });
  } finally {
    const status = await run.stop();
    assert.equal(status.code, 0, run.output());
  }
  const output = run.output();
  assert.match(output, /api_key=required/, "the startup log says a key is required");
  assert.ok(!output.includes(key), `the key is printed:\n${output}`);
  assert.ok(!output.includes(wrong), `a presented key is printed:\n${output}`);
});

Deno.test("parseHttpFlags() reads the admission flags, falls back to DYN_HTTP_*, and keeps keys out of errors", () => {
  const env = (vars: Record<string, string>) => (name: string) => vars[name];
  const host = { host: "127.0.0.1" };
  assert.deepEqual(parseHttpFlags("run", {}, host, env({})).guard, {
    maxInflight: undefined,
    maxQueued: undefined,
    queueTimeoutMs: undefined,
  });
  assert.deepEqual(
    parseHttpFlags(
      "run",
      { "max-inflight": "8", "max-queued": "2", "queue-timeout-ms": "250", "api-key": "flag-key" },
      host,
      env({ DYN_HTTP_MAX_INFLIGHT: "99", DYN_HTTP_API_KEY: "env-key" }),
    ).guard,
    { maxInflight: 8, maxQueued: 2, queueTimeoutMs: 250, apiKey: "flag-key" },
  );
  assert.deepEqual(
    parseHttpFlags(
      "frontend",
      {},
      host,
      env({ DYN_HTTP_MAX_INFLIGHT: "99", DYN_HTTP_MAX_QUEUED: "0", DYN_HTTP_API_KEY: "env-key" }),
    ).guard,
    { maxInflight: 99, maxQueued: 0, queueTimeoutMs: undefined, apiKey: "env-key" },
  );
  for (const bad of ["0", "-1", "1.5", "", "many", "1e99"]) {
    assert.throws(
      () => parseHttpFlags("run", { "max-inflight": bad }, host, env({})),
      (e: unknown) =>
        e instanceof UsageError && /--max-inflight must be a whole number/.test(e.message),
    );
  }
  assert.throws(
    () => parseHttpFlags("run", {}, host, env({ DYN_HTTP_MAX_QUEUED: "-2" })),
    (e: unknown) => e instanceof UsageError && /DYN_HTTP_MAX_QUEUED/.test(e.message),
  );
  for (const bad of ["", "two words", "tab\tkey"]) {
    assert.throws(
      () => parseHttpFlags("run", {}, host, env({ DYN_HTTP_API_KEY: bad })),
      (e: unknown) =>
        e instanceof UsageError && /DYN_HTTP_API_KEY must be/.test(e.message) &&
        (bad === "" || !e.message.includes(bad)),
    );
  }
});
