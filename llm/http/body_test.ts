import assert from "node:assert/strict";
import { RequestError } from "../openai/errors.ts";
import { readJsonBody } from "./body.ts";

const post = (body: BodyInit, headers: Record<string, string> = {}) =>
  new Request("http://x/", { method: "POST", body, headers });

function chunked(parts: string[]): ReadableStream<Uint8Array> {
  const enc = new TextEncoder();
  return new ReadableStream({
    start(c) {
      for (const p of parts) c.enqueue(enc.encode(p));
      c.close();
    },
  });
}

Deno.test("readJsonBody parses JSON with or without a declared length", async () => {
  assert.deepEqual(await readJsonBody(post('{"a":1}'), 100), { a: 1 });
  assert.deepEqual(await readJsonBody(post(chunked(['{"a"', ":2}"])), 100), { a: 2 });
});

Deno.test("readJsonBody: over the limit is 413, declared or streamed; bad JSON, bad UTF-8 and empty are 400", async () => {
  const status = async (r: Request, limit = 10) => {
    try {
      await readJsonBody(r, limit);
      return 200;
    } catch (e) {
      assert.ok(e instanceof RequestError);
      return e.status;
    }
  };
  assert.equal(await status(post("x".repeat(11))), 413);
  assert.equal(await status(post(chunked(["12345", "678901"]))), 413);
  assert.equal(await status(post("{nope")), 400);
  assert.equal(await status(post(new Uint8Array([0x7b, 0xff, 0x7d]))), 400);
  assert.equal(await status(post("   ")), 400);
  assert.equal(await status(new Request("http://x/", { method: "POST" })), 400);
  await assert.rejects(readJsonBody(post(" \n "), 10), /request body is empty/);
  await assert.rejects(readJsonBody(post(" {x"), 10), /not valid JSON/);
});
