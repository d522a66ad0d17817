import assert from "node:assert/strict";
import { DistributedRuntime } from "../../runtime/distributed_runtime.ts";
import { UpstreamError } from "../../runtime/errors.ts";
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
