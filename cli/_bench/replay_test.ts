// The replay client reads the frontend's server-sent events with eventsource-parser: chunks
// split anywhere, CRLF line ends and comments still give one timing per content chunk, the
// usage, and a failure when the stream ends without [DONE].

import assert from "node:assert/strict";
import { sendOne } from "./replay.ts";

const encoder = new TextEncoder();

/** Serves `body` as an SSE stream, cut into pieces of `cut` bytes, on a loopback port. */
function serveSse(body: string, cut: number) {
  return Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, () => {
    const bytes = encoder.encode(body);
    const stream = new ReadableStream<Uint8Array>({
      start(controller) {
        for (let i = 0; i < bytes.length; i += cut) controller.enqueue(bytes.slice(i, i + cut));
        controller.close();
      },
    });
    return new Response(stream, { headers: { "content-type": "text/event-stream" } });
  });
}

const chunk = (text: string) => JSON.stringify({ choices: [{ index: 0, text }] });
const usage = JSON.stringify({
  choices: [],
  usage: { prompt_tokens: 8, completion_tokens: 3, prompt_tokens_details: { cached_tokens: 4 } },
});
const request = { timestamp: 0, inputLength: 8, outputLength: 3, hashIds: [1] };

for (const cut of [1, 3, 7, 64]) {
  Deno.test(`sendOne reads a stream cut every ${cut} bytes, with CRLF and comments`, async () => {
    const body = `: keep-alive\r\n\r\ndata: ${chunk("a")}\r\n\r\ndata: ${chunk("b")}\n\n` +
      `data: ${chunk("c")}\r\n\r\ndata: ${usage}\n\ndata: [DONE]\n\n`;
    const server = serveSse(body, cut);
    try {
      const r = await sendOne(request, {
        baseUrl: `http://127.0.0.1:${server.addr.port}`,
        model: "m",
        requestTimeoutMs: 10_000,
      });
      assert.equal(r.ok, true, `failed: ${r.error}`);
      assert.equal(typeof r.ttftMs, "number");
      assert.equal(r.itlMs.length, 2);
      assert.equal(r.outputTokens, 3);
      assert.equal(r.cachedTokens, 4);
    } finally {
      await server.shutdown();
    }
  });
}

Deno.test("sendOne fails a stream that ends without [DONE]", async () => {
  const server = serveSse(`data: ${chunk("a")}\n\n`, 5);
  try {
    const r = await sendOne(request, {
      baseUrl: `http://127.0.0.1:${server.addr.port}`,
      model: "m",
      requestTimeoutMs: 10_000,
    });
    assert.equal(r.ok, false);
    assert.match(r.error ?? "", /without \[DONE\]/);
  } finally {
    await server.shutdown();
  }
});
