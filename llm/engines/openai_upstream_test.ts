import assert from "node:assert/strict";
import { DistributedRuntime } from "../../runtime/distributed_runtime.ts";
import { UpstreamError } from "../../runtime/errors.ts";
import { Context } from "../../runtime/context.ts";
import {
  bareUpstreamCard,
  checkUpstream,
  openaiUpstream,
  upstreamModelCard,
} from "./openai_upstream.ts";
import { ModelInput } from "../protocols.ts";
import type { Logger } from "../../runtime/logger.ts";

Deno.test("an upstream's error status reaches the caller across the request plane as an UpstreamError", async () => {
  const rt = await DistributedRuntime.connect();
  try {
    const endpoint = rt.namespace("ns").component("upstream").endpoint("generate");
    const fakeFetch = () =>
      Promise.resolve(
        new Response(JSON.stringify({ error: { message: "prompt is too long" } }), {
          status: 400,
        }),
      );
    endpoint.serveEndpoint(
      openaiUpstream({ baseUrl: "http://127.0.0.1:1", fetch: fakeFetch as typeof fetch }),
    ).catch(() => {});
    const client = await endpoint.client();
    await client.waitForInstances({ timeoutMs: 5000 });
    await assert.rejects(
      client.generate({ model: "m", prompt: "p" }),
      (e: unknown) =>
        e instanceof UpstreamError && e.status === 400 && e.message === "prompt is too long",
    );
    await client.close();
  } finally {
    await rt.shutdown();
  }
});

Deno.test("upstream SSE is parsed the same however its bytes are split (CRLF, comments, multi-line data)", async () => {
  const chunk = (i: number) => ({
    id: "x",
    object: "chat.completion.chunk",
    choices: [{ index: 0, delta: { content: `t${i}` }, finish_reason: null }],
  });
  const body = ": keep-alive\r\n\r\n" +
    [0, 1, 2].map((i) => `event: message\r\ndata: ${JSON.stringify(chunk(i))}\r\n\r\n`).join("") +
    // A JSON object split over two data lines is one event (joined with a newline).
    'data: {"id":"x","object":"chat.completion.chunk",\ndata: "choices":[]}\n\n' +
    "data: [DONE]\n\n";
  const bytes = new TextEncoder().encode(body);
  for (const step of [1, 3, 7, 64, bytes.length]) {
    const fakeFetch = () =>
      Promise.resolve(
        new Response(
          new ReadableStream<Uint8Array>({
            start(c) {
              for (let i = 0; i < bytes.length; i += step) c.enqueue(bytes.slice(i, i + step));
              c.close();
            },
          }),
          { headers: { "content-type": "text/event-stream" } },
        ),
      );
    const handler = openaiUpstream({
      baseUrl: "http://127.0.0.1:1",
      fetch: fakeFetch as typeof fetch,
    });
    const got: Record<string, unknown>[] = [];
    for await (
      const c of handler(
        { model: "m", messages: [{ role: "user", content: "hi" }], stream: true },
        new Context(),
      )
    ) got.push(c);
    assert.deepEqual(
      got.map((c) => (c.choices as { delta?: { content?: string } }[])[0]?.delta?.content ?? null),
      ["t0", "t1", "t2", null],
      `split every ${step} bytes`,
    );
    assert.ok(got.every((c) => c.model === "m"));
  }
});

/** A fake fetch over upstreams by origin; each answers with its `answer(body, url)`. */
function fakeUpstreams(
  answers: Record<string, ((body: Record<string, unknown>, url: URL) => Response) | "down">,
) {
  const calls: { origin: string; path: string; body: Record<string, unknown> }[] = [];
  const fetchFn = (input: URL | RequestInfo, init?: RequestInit): Promise<Response> => {
    const url = new URL(String(input));
    const answer = answers[url.origin];
    if (answer === undefined || answer === "down") {
      return Promise.reject(new TypeError(`connection refused (${url.origin})`));
    }
    const body = init?.body ? JSON.parse(String(init.body)) : {};
    calls.push({ origin: url.origin, path: url.pathname, body });
    return Promise.resolve(answer(body, url));
  };
  return { fetch: fetchFn as typeof fetch, calls };
}

const sse = (chunks: unknown[]) =>
  new Response(chunks.map((c) => `data: ${JSON.stringify(c)}\n\n`).join("") + "data: [DONE]\n\n", {
    headers: { "content-type": "text/event-stream" },
  });
const chunk = (content: string) => ({
  id: "c",
  object: "chat.completion.chunk",
  choices: [{ index: 0, delta: { content }, finish_reason: null }],
});
const chatReq = (extra: Record<string, unknown> = {}) => ({
  model: "ours",
  messages: [{ role: "user", content: "hi" }],
  ...extra,
});

async function drain(
  it: AsyncIterable<Record<string, unknown>>,
): Promise<Record<string, unknown>[]> {
  const out: Record<string, unknown>[] = [];
  for await (const c of it) out.push(c);
  return out;
}

Deno.test("a non-streaming request is forwarded as is and its whole answer passed on", async () => {
  const answer = {
    id: "x",
    object: "chat.completion",
    model: "upstream-name",
    choices: [{
      index: 0,
      message: {
        role: "assistant",
        content: null,
        reasoning_content: "thinking",
        tool_calls: [{ id: "call_1", type: "function", function: { name: "f", arguments: "{}" } }],
      },
      logprobs: { content: [{ token: "a", logprob: -0.5, bytes: [97], top_logprobs: [] }] },
      finish_reason: "tool_calls",
    }],
    usage: { prompt_tokens: 5, completion_tokens: 3, total_tokens: 8 },
  };
  const up = fakeUpstreams({ "http://a.test": () => Response.json(answer) });
  const handler = openaiUpstream({
    baseUrl: "http://a.test",
    upstreamModel: "up",
    fetch: up.fetch,
  });
  const got = await drain(handler(chatReq({ logprobs: true }), new Context()));
  assert.deepEqual(got, [{ ...answer, model: "ours" }]);
  assert.equal(up.calls[0]!.body.stream, undefined, "asked as the client asked");
  assert.equal(up.calls[0]!.body.stream_options, undefined);
  assert.equal(up.calls[0]!.body.model, "up");
});

Deno.test("a streaming request always asks for usage and passes the usage chunk on", async () => {
  const usage = {
    id: "c",
    object: "chat.completion.chunk",
    choices: [],
    usage: { prompt_tokens: 2, completion_tokens: 1, total_tokens: 3 },
  };
  const up = fakeUpstreams({ "http://a.test": () => sse([chunk("hi"), usage]) });
  const handler = openaiUpstream({ baseUrl: "http://a.test", fetch: up.fetch });
  const got = await drain(handler(chatReq({ stream: true }), new Context()));
  assert.deepEqual(up.calls[0]!.body.stream_options, { include_usage: true });
  assert.deepEqual(got.at(-1), { ...usage, model: "ours" });
});

Deno.test("requests go to the upstream with the fewest in flight, ties in turn", async () => {
  const held: ReadableStreamDefaultController<Uint8Array>[] = [];
  const holding = () =>
    new Response(
      new ReadableStream<Uint8Array>({
        start(c) {
          c.enqueue(new TextEncoder().encode(`data: ${JSON.stringify(chunk("x"))}\n\n`));
          held.push(c);
        },
      }),
      { headers: { "content-type": "text/event-stream" } },
    );
  const up = fakeUpstreams({
    "http://a.test": holding,
    "http://b.test": holding,
    "http://c.test": holding,
  });
  const handler = openaiUpstream({
    baseUrl: ["http://a.test", "http://b.test", "http://c.test"],
    fetch: up.fetch,
  });
  const open: AsyncGenerator<Record<string, unknown>>[] = [];
  const start = async () => {
    const it = handler(chatReq({ stream: true }), new Context());
    await it.next(); // the request is in flight at its upstream
    open.push(it);
    return up.calls.at(-1)!.origin;
  };
  // Three at once: one each (a busy upstream is passed over whatever the turn).
  const first = [await start(), await start(), await start()];
  assert.deepEqual([...first].sort(), ["http://a.test", "http://b.test", "http://c.test"]);
  // b's request ends: b is the least loaded, so the next goes there.
  const atB = first.indexOf("http://b.test");
  held[atB]!.close();
  await drain(open[atB]!);
  assert.equal(await start(), "http://b.test");
  for (const c of held) {
    try {
      c.close();
    } catch {
      // closed above
    }
  }
  await Promise.all(open.map(drain));
});

Deno.test("an upstream that cannot be reached is passed over, reported once, and health-checked back in", async () => {
  const answers: Record<string, "down" | (() => Response)> = {
    "http://a.test": "down",
    "http://b.test": () => sse([chunk("from b")]),
  };
  const up = fakeUpstreams(answers);
  const lines: { msg: string }[] = [];
  const logger: Logger = {
    debug() {},
    info: (msg) => void lines.push({ msg }),
    warn: (msg) => void lines.push({ msg }),
    error() {},
    child: () => logger,
  };
  let now = 0;
  const handler = openaiUpstream({
    baseUrl: ["http://a.test", "http://b.test"],
    fetch: up.fetch,
    logger,
    retryAfterMs: 1_000,
  });
  const perf = performance.now;
  performance.now = () => now;
  try {
    for (let i = 0; i < 4; i++) {
      const got = await drain(handler(chatReq({ stream: true }), new Context()));
      assert.equal(
        (got[0]!.choices as { delta: { content: string } }[])[0]!.delta.content,
        "from b",
      );
    }
    assert.equal(lines.filter((l) => l.msg === "upstream unreachable").length, 1);
    // Before retryAfterMs, a is not even checked.
    assert.equal(up.calls.filter((c) => c.origin === "http://a.test").length, 0);
    // a is back; after retryAfterMs the next request (served by b) starts a health check of
    // a, and once that answered, a takes requests again.
    answers["http://a.test"] = () => sse([chunk("from a")]);
    now = 1_000;
    await drain(handler(chatReq({ stream: true }), new Context()));
    assert.equal(up.calls.at(-1)!.origin, "http://b.test");
    await new Promise((r) => setTimeout(r, 0));
    assert.deepEqual(
      up.calls.filter((c) => c.origin === "http://a.test").map((c) => c.path),
      ["/v1/models"],
    );
    const origins = [];
    for (let i = 0; i < 2; i++) {
      await drain(handler(chatReq({ stream: true }), new Context()));
      origins.push(up.calls.at(-1)!.origin);
    }
    assert.ok(origins.includes("http://a.test"), `a takes requests again: ${origins}`);
    assert.equal(lines.filter((l) => l.msg === "upstream reachable again").length, 1);
  } finally {
    performance.now = perf;
  }
  // Every upstream down: the request fails with the last reason, as a 502.
  const none = openaiUpstream({ baseUrl: ["http://x.test", "http://y.test"], fetch: up.fetch });
  await assert.rejects(
    drain(none(chatReq({ stream: true }), new Context())),
    (e: unknown) =>
      e instanceof UpstreamError && e.status === 502 && /cannot reach upstream/.test(e.message),
  );
});

Deno.test("the model card comes from the upstream's /v1/models, tokenizer unknown", async () => {
  const models = (data: unknown[]) => () => Response.json({ object: "list", data });
  const vllm = fakeUpstreams({
    "http://a.test": models([{ id: "Qwen/Qwen3-8B", object: "model", max_model_len: 32768 }]),
  });
  const card = await upstreamModelCard({ baseUrl: "http://a.test/v1", fetch: vllm.fetch });
  assert.equal(card.card.display_name, "Qwen/Qwen3-8B");
  assert.equal(card.card.context_length, 32768);
  assert.equal(card.card.model_input, ModelInput.Text);
  assert.deepEqual(card.card.files, {});
  assert.equal(card.files.size, 0);
  assert.equal(card.card.chat_template, undefined);
  const said = card.card.user_data?.upstream as Record<string, unknown>;
  assert.match(String(said.tokenizer), /unknown/);
  assert.equal(said.model, "Qwen/Qwen3-8B");

  // llama.cpp's server; a name for clients and a context length of our own.
  const llama = fakeUpstreams({
    "http://a.test": "down",
    "http://b.test": models([
      { id: "smol.gguf", meta: { n_ctx_train: 8192 } },
      { id: "other" },
    ]),
  });
  const named = await upstreamModelCard({
    baseUrl: ["http://a.test", "http://b.test"],
    upstreamModel: "smol.gguf",
    modelName: "smol",
    fetch: llama.fetch,
  });
  assert.equal(named.card.display_name, "smol");
  assert.equal(named.card.context_length, 8192);
  const overridden = await upstreamModelCard({
    baseUrl: "http://b.test",
    upstreamModel: "other",
    contextLength: 1000,
    fetch: llama.fetch,
  });
  assert.equal(overridden.card.context_length, 1000);
  assert.equal(
    (await upstreamModelCard({
      baseUrl: "http://b.test",
      upstreamModel: "other",
      fetch: llama.fetch,
    }))
      .card.context_length,
    0,
    "none reported: 0",
  );

  const fails = async (
    options: Parameters<typeof upstreamModelCard>[0],
    status: number,
    message: RegExp,
  ) =>
    await assert.rejects(upstreamModelCard(options), (e: unknown) => {
      assert.ok(e instanceof UpstreamError, String(e));
      assert.equal(e.status, status);
      assert.match(e.message, message);
      return true;
    });
  await fails(
    { baseUrl: "http://b.test", fetch: llama.fetch },
    400,
    /several models.*"smol.gguf", "other"/,
  );
  await fails(
    { baseUrl: "http://b.test", upstreamModel: "nope", fetch: llama.fetch },
    404,
    /does not serve "nope"/,
  );
  await fails(
    { baseUrl: "http://a.test", fetch: llama.fetch },
    502,
    /cannot read the model list.*connection refused/,
  );
  const notJson = fakeUpstreams({ "http://a.test": () => new Response("hello") });
  await fails({ baseUrl: "http://a.test", fetch: notJson.fetch }, 502, /not JSON/);
});

Deno.test("checkUpstream is healthy while one upstream answers", async () => {
  const up = fakeUpstreams({
    "http://a.test": "down",
    "http://b.test": () => Response.json({ data: [] }),
  });
  assert.equal(
    await checkUpstream({ baseUrl: ["http://a.test", "http://b.test"], fetch: up.fetch }),
    undefined,
  );
  const problem = await checkUpstream({ baseUrl: ["http://a.test"], fetch: up.fetch });
  assert.match(problem ?? "", /upstream http:\/\/a\.test cannot be reached/);
  assert.throws(() => openaiUpstream({ baseUrl: [] }), /at least one upstream URL/);
});

Deno.test("a bare card names the upstream's model and says what is not known", () => {
  const card = bareUpstreamCard({
    baseUrl: ["http://a.test/v1", "http://b.test"],
    upstreamModel: "m",
    migrationLimit: 2,
  });
  assert.equal(card.card.display_name, "m");
  assert.equal(card.card.context_length, 0);
  assert.equal(card.card.migration_limit, 2);
  assert.equal(card.card.model_input, ModelInput.Text);
  assert.equal(card.card.source_path, "http://a.test,http://b.test");
  const said = card.card.user_data?.upstream as Record<string, unknown>;
  assert.deepEqual(said.urls, ["http://a.test", "http://b.test"]);
  assert.match(String(said.tokenizer), /unknown/);
  assert.match(String(said.context_length), /could not be reached/);
  assert.throws(() => bareUpstreamCard({ baseUrl: "http://a.test" }), /needs its name/);
});

Deno.test("the headers deadline does not cut a stream that lasts longer; a silent upstream fails", async () => {
  // A fetch that honours its signal, as the real one does, for the body too.
  const slowFetch = ((_url: URL, init: RequestInit) => {
    const signal = init.signal!;
    const body = new ReadableStream<Uint8Array>({
      async start(c) {
        for (let i = 0; i < 3; i++) {
          await new Promise((r) => setTimeout(r, 40));
          if (signal.aborted) return c.error(signal.reason);
          c.enqueue(new TextEncoder().encode(`data: ${JSON.stringify(chunk(`t${i}`))}\n\n`));
        }
        c.close();
      },
    });
    return Promise.resolve(
      new Response(body, { headers: { "content-type": "text/event-stream" } }),
    );
  }) as unknown as typeof fetch;
  const handler = openaiUpstream({
    baseUrl: "http://a.test",
    fetch: slowFetch,
    connectTimeoutMs: 30,
  });
  const got = await drain(handler(chatReq({ stream: true }), new Context()));
  assert.equal(got.length, 3, "120 ms of stream past a 30 ms headers deadline");

  const silentFetch =
    ((_url: URL, init: RequestInit) =>
      new Promise((_, reject) =>
        init.signal!.addEventListener("abort", () => reject(init.signal!.reason), { once: true })
      )) as unknown as typeof fetch;
  const silent = openaiUpstream({
    baseUrl: "http://a.test",
    fetch: silentFetch,
    connectTimeoutMs: 30,
  });
  await assert.rejects(
    drain(silent(chatReq({ stream: true }), new Context())),
    (e: unknown) => e instanceof UpstreamError && /no answer within 30 ms/.test(e.message),
  );
});
