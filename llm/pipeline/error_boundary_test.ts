import assert from "node:assert/strict";
import { NoInstancesError, RemoteError, UpstreamError } from "../../runtime/errors.ts";
import { silentLogger } from "../../runtime/logger.ts";
import { RequestError } from "../openai/errors.ts";
import { errorResponse } from "./error_boundary.ts";
import { MigrationExhaustedError } from "./migration.ts";

async function answer(err: unknown) {
  const r = errorResponse(err, silentLogger);
  return {
    status: r.status,
    retryAfter: r.headers.get("retry-after"),
    error: (await r.json()).error,
  };
}

Deno.test("errorResponse() gives each typed failure its status and OpenAI error object", async () => {
  assert.equal((await answer(new RequestError(400, "bad"))).status, 400);
  const none = await answer(new NoInstancesError("ns/c/e"));
  assert.deepEqual([none.status, none.retryAfter, none.error.code], [503, "1", "no_instances"]);
  const exhausted = await answer(new MigrationExhaustedError(2, new Error("x")));
  assert.deepEqual([exhausted.status, exhausted.error.code], [500, "migration_exhausted"]);
  const engine = await answer(new RemoteError("boom", "TypeError"));
  assert.deepEqual([engine.status, engine.error.message, engine.error.code], [
    500,
    "engine error: boom",
    "TypeError",
  ]);
  const other = await answer(new Error("secret detail"));
  assert.deepEqual([other.status, other.error.message], [500, "internal error"]);
});

Deno.test("an upstream's client error keeps its status; its server errors are 502", async () => {
  const client = await answer(new UpstreamError(400, "prompt too long"));
  assert.deepEqual([client.status, client.error.message, client.error.type], [
    400,
    "prompt too long",
    "invalid_request_error",
  ]);
  const server = await answer(new UpstreamError(503, "overloaded"));
  assert.deepEqual([server.status, server.error.type], [502, "upstream_error"]);
});
