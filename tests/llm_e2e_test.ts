// End to end with the official `openai` client: `dynamo run` in one process, and a
// `dynamo frontend` with two worker processes on etcd + NATS (migration, cancellation).

import assert from "node:assert/strict";
import OpenAI from "openai";
import { builtinTestModel, DistributedRuntime, Tokenizer } from "../mod.ts";
import { eventually } from "./_helpers/backends.ts";
import { frontendUrl, spawnFrontend, stopChild as stop } from "./_helpers/frontend.ts";
import { type ChildHandle, spawnDeno } from "./_helpers/process.ts";
import { haveServers, startServers } from "./_helpers/servers.ts";

const CLI = new URL("../cli/main.ts", import.meta.url).pathname;
const WORKER = new URL("./_helpers/llm_worker.ts", import.meta.url).pathname;
const MODEL = "Qwen3-0.6B";
const PROMPT = "The quick brown fox jumps over the lazy dog near the quiet river bank today";

let tokenizerCache: Tokenizer | undefined;
async function tokenizer(): Promise<Tokenizer> {
  if (!tokenizerCache) {
    const dir = await builtinTestModel();
    tokenizerCache = Tokenizer.fromBytes(
      await Deno.readFile(`${dir}/tokenizer.json`),
      await Deno.readFile(`${dir}/tokenizer_config.json`),
    );
  }
  return tokenizerCache;
}

/** What the echo engine answers to a completion prompt: the prompt's own tokens, as text. */
async function echoOf(prompt: string, maxTokens?: number): Promise<string> {
  const t = await tokenizer();
  const ids = t.encode(prompt);
  return t.decode(maxTokens === undefined ? ids : ids.slice(0, maxTokens));
}

async function streamText(
  stream: AsyncIterable<OpenAI.Completions.Completion>,
): Promise<{ text: string; finish: string | null }> {
  let text = "";
  let finish: string | null = null;
  for await (const chunk of stream) {
    for (const c of chunk.choices) {
      text += c.text;
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  return { text, finish };
}

Deno.test("dynamo run in=http out=echo serves the OpenAI API to the official client", async (t) => {
  const run = spawnDeno(CLI, { DYN_LOG: "warn" }, [
    "run",
    "in=http",
    "out=echo",
    "--http-port",
    "0",
    "--context-length",
    "64",
  ]);
  try {
    const base = await frontendUrl(run);
    const client = new OpenAI({ baseURL: `${base}/v1`, apiKey: "unused", maxRetries: 0 });

    await t.step("GET /v1/models lists the built-in model", async () => {
      const models = await client.models.list();
      assert.deepEqual(models.data.map((m) => m.id), [MODEL]);
    });

    await t.step("completions, not streaming: the prompt echoed, with usage", async () => {
      const r = await client.completions.create({ model: MODEL, prompt: PROMPT });
      assert.equal(r.choices[0]!.text, await echoOf(PROMPT));
      assert.equal(r.choices[0]!.finish_reason, "stop");
      const n = (await tokenizer()).encode(PROMPT).length;
      assert.deepEqual(r.usage, { prompt_tokens: n, completion_tokens: n, total_tokens: 2 * n });
    });

    await t.step(
      "completions, streaming: the same text, and a usage chunk when asked",
      async () => {
        const stream = await client.completions.create({
          model: MODEL,
          prompt: PROMPT,
          stream: true,
          stream_options: { include_usage: true },
        });
        let text = "";
        let usage;
        for await (const chunk of stream) {
          text += chunk.choices.map((c) => c.text).join("");
          if (chunk.usage) usage = chunk.usage;
        }
        assert.equal(text, await echoOf(PROMPT));
        assert.ok(usage && usage.completion_tokens > 0);
      },
    );

    await t.step("max_tokens ends the answer with finish_reason length", async () => {
      const r = await client.completions.create({ model: MODEL, prompt: PROMPT, max_tokens: 3 });
      assert.equal(r.choices[0]!.text, await echoOf(PROMPT, 3));
      assert.equal(r.choices[0]!.finish_reason, "length");
      assert.equal(r.usage?.completion_tokens, 3);
    });

    await t.step("a stop string cuts the answer before it, streaming or not", async () => {
      const r = await client.completions.create({ model: MODEL, prompt: PROMPT, stop: [" jumps"] });
      assert.equal(r.choices[0]!.text, "The quick brown fox");
      assert.equal(r.choices[0]!.finish_reason, "stop");
      const s = await streamText(
        await client.completions.create({
          model: MODEL,
          prompt: PROMPT,
          stop: [" lazy"],
          stream: true,
        }),
      );
      assert.deepEqual(s, { text: "The quick brown fox jumps over the", finish: "stop" });
    });

    await t.step(
      "chat, streaming and not, agree; the echo stops at the template's end-of-turn token",
      async () => {
        const messages = [{ role: "user" as const, content: "Hello there" }];
        const r = await client.chat.completions.create({ model: MODEL, messages });
        const content = r.choices[0]!.message.content ?? "";
        assert.equal(content, "user\nHello there");
        assert.equal(r.choices[0]!.finish_reason, "stop");
        const stream = await client.chat.completions.create({
          model: MODEL,
          messages,
          stream: true,
        });
        let streamed = "";
        let role;
        for await (const chunk of stream) {
          role ??= chunk.choices[0]?.delta.role;
          streamed += chunk.choices[0]?.delta.content ?? "";
        }
        assert.equal(role, "assistant");
        assert.equal(streamed, content);
      },
    );

    await t.step("n=2 returns two choices", async () => {
      const r = await client.completions.create({ model: MODEL, prompt: "one two three", n: 2 });
      assert.deepEqual(r.choices.map((c) => c.index).sort(), [0, 1]);
      assert.equal(r.choices[0]!.text, r.choices[1]!.text);
    });

    await t.step("errors: unknown model 404, bad types 400, prompt too long 400", async () => {
      await assert.rejects(
        client.completions.create({ model: "nope", prompt: "x" }),
        (e: unknown) => e instanceof OpenAI.NotFoundError && /nope/.test(e.message),
      );
      await assert.rejects(
        client.completions.create({
          model: MODEL,
          prompt: "x",
          temperature: "hot" as unknown as number,
        }),
        (e: unknown) => e instanceof OpenAI.BadRequestError && /temperature/.test(e.message),
      );
      await assert.rejects(
        client.completions.create({ model: MODEL, prompt: "word ".repeat(100) }),
        (e: unknown) =>
          e instanceof OpenAI.BadRequestError && /maximum context length is 64/.test(e.message),
      );
    });

    await t.step(
      "errors: malformed JSON 400 and a body over the limit 413, as OpenAI error objects",
      async () => {
        const bad = await fetch(`${base}/v1/chat/completions`, {
          method: "POST",
          body: "{not json",
          headers: { "content-type": "application/json" },
        });
        assert.equal(bad.status, 400);
        const badBody = await bad.json();
        assert.equal(typeof badBody.error.message, "string");
        const huge = await fetch(`${base}/v1/completions`, {
          method: "POST",
          body: JSON.stringify({ model: MODEL, prompt: "x".repeat(33 * 1024 * 1024) }),
          headers: { "content-type": "application/json" },
        });
        assert.equal(huge.status, 413);
        assert.equal(typeof (await huge.json()).error.message, "string");
      },
    );

    await t.step("health, liveness and Prometheus metrics", async () => {
      const health = await fetch(`${base}/health`);
      assert.equal(health.status, 200);
      assert.equal((await health.json()).status, "healthy");
      assert.equal((await fetch(`${base}/live`)).status, 200);
      const text = await (await fetch(`${base}/metrics`)).text();
      assert.match(
        text,
        /dynamo_frontend_requests_total\{[^}]*model="Qwen3-0\.6B"[^}]*status="success"[^}]*\} \d+/,
      );
      assert.match(text, /dynamo_frontend_time_to_first_token_seconds_count/);
      assert.match(text, /dynamo_frontend_input_sequence_tokens_bucket/);
    });
  } finally {
    await stop(run);
  }
});

/** The echo engine's made-up log probability of a token (llm/engines/synthetic_logprobs.ts). */
const echoLogprob = (id: number) => 0 - (id % 8) / 8;

Deno.test("logprobs through the official client: the echo engine's exact values, streamed and not", async (t) => {
  const run = spawnDeno(CLI, { DYN_LOG: "warn" }, [
    "run",
    "in=http",
    "out=echo",
    "--http-port",
    "0",
  ]);
  try {
    const base = await frontendUrl(run);
    const client = new OpenAI({ baseURL: `${base}/v1`, apiKey: "unused", maxRetries: 0 });
    const tok = await tokenizer();
    const text = (id: number) => tok.decode([id]);

    await t.step("completions: tokens, token_logprobs, top_logprobs, text_offset", async () => {
      const ids = tok.encode(PROMPT);
      let offset = 0;
      const expected = {
        tokens: ids.map(text),
        token_logprobs: ids.map(echoLogprob),
        top_logprobs: ids.map((id) => ({
          [text(id)]: echoLogprob(id),
          [text(id - 1)]: echoLogprob(id) - 1,
        })),
        text_offset: ids.map((id) => (offset += text(id).length) - text(id).length),
      };
      const r = await client.completions.create({ model: MODEL, prompt: PROMPT, logprobs: 2 });
      assert.equal(r.choices[0]!.text, PROMPT);
      assert.deepEqual(r.choices[0]!.logprobs, expected);
      const stream = await client.completions.create({
        model: MODEL,
        prompt: PROMPT,
        logprobs: 2,
        stream: true,
      });
      const tokens: string[] = [];
      const lps: (number | null)[] = [];
      const offsets: number[] = [];
      for await (const chunk of stream) {
        for (const c of chunk.choices) {
          tokens.push(...(c.logprobs?.tokens ?? []));
          lps.push(...(c.logprobs?.token_logprobs ?? []));
          offsets.push(...(c.logprobs?.text_offset ?? []));
        }
      }
      assert.deepEqual(tokens, expected.tokens);
      assert.deepEqual(lps, expected.token_logprobs);
      assert.deepEqual(offsets, expected.text_offset);
      const plain = await client.completions.create({ model: MODEL, prompt: PROMPT });
      assert.equal(plain.choices[0]!.logprobs, null);
    });

    await t.step(
      "chat: content entries with bytes and top_logprobs, streamed the same",
      async () => {
        // The echo answers the rendered prompt: "<|im_start|>user\nHi" then <|im_end|> (eos).
        const ids = tok.encode("<|im_start|>user\nHi", { addSpecialTokens: false });
        const entry = (id: number) => ({
          token: text(id),
          logprob: echoLogprob(id),
          bytes: [...new TextEncoder().encode(text(id))],
        });
        const expected = ids.map((id) => ({
          ...entry(id),
          top_logprobs: [entry(id), { ...entry(id - 1), logprob: echoLogprob(id) - 1 }],
        }));
        const request = {
          model: MODEL,
          messages: [{ role: "user" as const, content: "Hi" }],
          logprobs: true,
          top_logprobs: 2,
        };
        const r = await client.chat.completions.create(request);
        assert.equal(r.choices[0]!.message.content, "user\nHi");
        assert.deepEqual(r.choices[0]!.logprobs, { content: expected });
        const content = [];
        for await (
          const chunk of await client.chat.completions.create({ ...request, stream: true })
        ) {
          for (const c of chunk.choices) content.push(...(c.logprobs?.content ?? []));
        }
        assert.deepEqual(content, expected);
        const none = await client.chat.completions.create({ ...request, top_logprobs: undefined });
        assert.deepEqual(none.choices[0]!.logprobs!.content!.map((e) => e.top_logprobs), [
          [],
          [],
          [],
          [],
        ]);
      },
    );

    await t.step("OpenAI's limits: top_logprobs above 20 is a 400", async () => {
      await assert.rejects(
        client.chat.completions.create({
          model: MODEL,
          messages: [{ role: "user", content: "Hi" }],
          logprobs: true,
          top_logprobs: 21,
        }),
        (e: unknown) => e instanceof OpenAI.BadRequestError,
      );
    });
  } finally {
    await stop(run);
  }
});

Deno.test("out=openai: a frontend in front of another OpenAI server answers with its tokens", async () => {
  const upstream = spawnDeno(CLI, { DYN_LOG: "warn" }, [
    "run",
    "in=http",
    "out=echo",
    "--http-port",
    "0",
  ]);
  let front: ChildHandle | undefined;
  try {
    const upstreamUrl = await frontendUrl(upstream);
    front = spawnDeno(CLI, { DYN_LOG: "warn" }, [
      "run",
      "in=http",
      `out=openai:${upstreamUrl}`,
      MODEL,
      "--http-port",
      "0",
    ]);
    const base = await frontendUrl(front);
    const client = new OpenAI({ baseURL: `${base}/v1`, apiKey: "unused", maxRetries: 0 });
    const direct = new OpenAI({ baseURL: `${upstreamUrl}/v1`, apiKey: "unused", maxRetries: 0 });
    const viaProxy = await client.completions.create({
      model: MODEL,
      prompt: PROMPT,
      max_tokens: 8,
    });
    const straight = await direct.completions.create({
      model: MODEL,
      prompt: PROMPT,
      max_tokens: 8,
    });
    assert.equal(viaProxy.choices[0]!.text, straight.choices[0]!.text);
    // Log probabilities pass through, whole responses too (folded from the upstream's stream).
    const lpRequest = { model: MODEL, prompt: PROMPT, max_tokens: 4, logprobs: 1 };
    const lpProxy = await client.completions.create(lpRequest);
    assert.ok(lpProxy.choices[0]!.logprobs!.tokens!.length === 4);
    assert.deepEqual(
      lpProxy.choices[0]!.logprobs,
      (await direct.completions.create(lpRequest)).choices[0]!.logprobs,
    );
    assert.equal(viaProxy.model, MODEL);
    const s = await streamText(
      await client.completions.create({ model: MODEL, prompt: PROMPT, stream: true }),
    );
    assert.equal(s.text, await echoOf(PROMPT));
    await assert.rejects(
      client.completions.create({ model: MODEL, prompt: "word ".repeat(50000) }),
      (e: unknown) => e instanceof OpenAI.BadRequestError,
      "the upstream's 400 comes back as a 400",
    );
  } finally {
    if (front) await stop(front);
    await stop(upstream);
  }
});

Deno.test({
  name: "frontend + two workers on etcd + NATS: routing, migration, and client disconnects",
  ignore: !haveServers(),
  async fn(t) {
    const servers = await startServers();
    const env = {
      ...servers.env,
      DYN_LOG: "warn",
      DYN_LEASE_TTL: "3",
    };
    const modelPath = await builtinTestModel();
    const children: ChildHandle[] = [];
    const startWorker = async (migrationLimit: number, name = MODEL) => {
      const w = spawnDeno(WORKER, env, [
        modelPath,
        "--delay-ms",
        "20",
        "--migration-limit",
        String(migrationLimit),
        "--model-name",
        name,
      ]);
      children.push(w);
      await w.waitFor((l) => "ready" in l, 30_000, "a worker to register");
      return w;
    };
    try {
      const front = spawnFrontend(env);
      children.push(front);
      const base = await frontendUrl(front);
      const client = new OpenAI({ baseURL: `${base}/v1`, apiKey: "unused", maxRetries: 0 });
      const workers = [await startWorker(3), await startWorker(3)];
      await eventually(
        async () => (await client.models.list()).data.length === 1,
        10_000,
        "the model appears",
      );

      await t.step("requests spread over both workers and return the echo", async () => {
        for (let i = 0; i < 4; i++) {
          const r = await client.completions.create({
            model: MODEL,
            prompt: "alpha beta gamma",
            max_tokens: 3,
          });
          assert.equal(r.choices[0]!.text, await echoOf("alpha beta gamma", 3));
        }
        for (const w of workers) {
          assert.ok(
            w.lines.some((l) => typeof l === "object" && l !== null && "request" in l),
            "both workers served",
          );
        }
      });

      await t.step(
        "a worker killed mid-stream: the stream completes on the other with exactly the expected text",
        async () => {
          const stream = await client.completions.create({
            model: MODEL,
            prompt: PROMPT,
            stream: true,
          });
          const it = stream[Symbol.asyncIterator]();
          let text = "";
          let finish: string | null = null;
          for (let i = 0; i < 4; i++) text += (await it.next()).value!.choices[0]!.text;
          const id = (await it.next()).value!;
          text += id.choices[0]!.text;
          const requestId = id.id.replace(/^cmpl-/, "");
          const victim = workers.find((w) =>
            w.lines.some((l) => (l as { request?: string }).request === requestId)
          )!;
          assert.ok(victim, "one worker reported the request");
          victim.kill("SIGKILL");
          for (let r = await it.next(); !r.done; r = await it.next()) {
            for (const c of r.value.choices) {
              text += c.text;
              if (c.finish_reason) finish = c.finish_reason;
            }
          }
          assert.equal(text, await echoOf(PROMPT));
          assert.equal(finish, "stop");
          const survivor = workers.find((w) => w !== victim)!;
          assert.ok(
            survivor.lines.some((l) =>
              (l as { request?: string; migrated?: number }).request === requestId &&
              (l as { migrated: number }).migrated > 0
            ),
            "the survivor got the migrated request",
          );
          const metrics = await (await fetch(`${base}/metrics`)).text();
          assert.match(metrics, /dynamo_frontend_model_migration_total\{[^}]*\} [1-9]/);
          workers.splice(workers.indexOf(victim), 1);
        },
      );

      await t.step(
        "an HTTP client that disconnects stops the worker's context within 50 ms and is counted",
        async () => {
          const abort = new AbortController();
          const res = await fetch(`${base}/v1/completions`, {
            method: "POST",
            headers: { "content-type": "application/json" },
            body: JSON.stringify({ model: MODEL, prompt: PROMPT, stream: true }),
            signal: abort.signal,
          });
          const reader = res.body!.getReader();
          const first = new TextDecoder().decode((await reader.read()).value);
          const requestId = /"id":"cmpl-([^"]+)"/.exec(first)![1]!;
          const abortedAt = Date.now();
          abort.abort();
          const w = workers[0]!;
          const seen = await w.waitFor<{ at: number }>(
            (l) => l.stopped === requestId,
            5000,
            "the worker to see the stop",
          );
          assert.ok(
            seen.at - abortedAt < 50,
            `worker context stopped ${seen.at - abortedAt} ms after the disconnect`,
          );
          await eventually(
            async () =>
              /dynamo_frontend_disconnected_clients\{[^}]*\} [1-9]/.test(
                await (await fetch(`${base}/metrics`)).text(),
              ),
            2000,
            "the disconnect is counted",
          );
        },
      );

      await t.step("the example workers (tokens and text) serve through the frontend", async () => {
        const tokens = spawnDeno(
          new URL("../examples/llm/tokens_worker.ts", import.meta.url).pathname,
          env,
        );
        const text = spawnDeno(
          new URL("../examples/llm/text_worker.ts", import.meta.url).pathname,
          env,
        );
        children.push(tokens, text);
        await eventually(
          async () => (await client.models.list()).data.some((m) => m.id === "reverser"),
          30_000,
          "the text worker's model appears",
        );
        const r = await client.chat.completions.create({
          model: "reverser",
          messages: [{ role: "user", content: "one two three" }],
        });
        assert.equal(r.choices[0]!.message.content, "three two one");
        const s = await client.chat.completions.create({
          model: "reverser",
          messages: [{ role: "user", content: "a b" }],
          stream: true,
        });
        let streamed = "";
        for await (const c of s) streamed += c.choices[0]?.delta.content ?? "";
        assert.equal(streamed, "b a");
        // The tokens example registers Qwen3-0.6B too (namespace dynamo): the model now has
        // instances on two endpoints, and answers stay the same wherever they go.
        const probe = await DistributedRuntime.connect({
          ...servers.runtimeOptions,
        });
        try {
          await eventually(
            async () =>
              (await probe.discovery.list("v1/models/dynamo/backend/generate/")).length === 1,
            30_000,
            "the tokens example registers its model",
          );
        } finally {
          await probe.shutdown();
        }
        for (let i = 0; i < 4; i++) {
          const c = await client.completions.create({
            model: MODEL,
            prompt: "alpha beta gamma",
            max_tokens: 3,
          });
          assert.equal(c.choices[0]!.text, await echoOf("alpha beta gamma", 3));
        }
      });

      await t.step(
        "with migration_limit 0 a killed worker gives the client a clear error",
        async () => {
          const solo = await startWorker(0, "no-migration");
          await eventually(
            async () => (await client.models.list()).data.some((m) => m.id === "no-migration"),
            10_000,
            "the model appears",
          );
          const stream = await client.completions.create({
            model: "no-migration",
            prompt: PROMPT,
            stream: true,
          });
          const it = stream[Symbol.asyncIterator]();
          await it.next();
          solo.kill("SIGKILL");
          await assert.rejects(async () => {
            for (let r = await it.next(); !r.done; r = await it.next()) { /* drain */ }
          }, /migration/);
        },
      );
    } finally {
      for (const c of children.reverse()) await stop(c);
      await servers.stop();
    }
  },
});
