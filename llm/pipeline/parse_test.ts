import assert from "node:assert/strict";
import { RequestError } from "../openai/errors.ts";
import { parseRequest } from "./parse.ts";

const post = (body: string) =>
  new Request("http://x/v1/chat/completions", { method: "POST", body });

Deno.test("parseRequest() validates a chat body as a chat request", async () => {
  const req = await parseRequest(
    post(JSON.stringify({ model: "m", messages: [{ role: "user", content: "hi" }] })),
    "chat",
    1024,
  );
  assert.equal(req.model, "m");
  assert.ok("messages" in req);
});

Deno.test("parseRequest() answers 413 past the size limit and 400 for bad JSON or fields", async () => {
  const status = (p: Promise<unknown>) =>
    p.then(() => 0, (e: unknown) => e instanceof RequestError ? e.status : -1);
  assert.equal(
    await status(parseRequest(post(JSON.stringify({ prompt: "x".repeat(100) })), "completion", 10)),
    413,
  );
  assert.equal(await status(parseRequest(post("{not json"), "completion", 1024)), 400);
  assert.equal(
    await status(
      parseRequest(
        post(JSON.stringify({ model: "m", prompt: "p", temperature: 9 })),
        "completion",
        1024,
      ),
    ),
    400,
  );
});
