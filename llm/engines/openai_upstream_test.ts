import assert from "node:assert/strict";
import { DistributedRuntime } from "../../runtime/distributed_runtime.ts";
import { UpstreamError } from "../../runtime/errors.ts";
import { Context } from "../../runtime/context.ts";
import { openaiUpstream } from "./openai_upstream.ts";

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
        { model: "m", messages: [{ role: "user", content: "hi" }] },
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
