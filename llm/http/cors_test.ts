import assert from "node:assert/strict";
import { withCors } from "./cors.ts";

const inner = () => new Response("ok", { headers: { "x-request-id": "r1" } });

Deno.test("withCors answers an allowed origin's preflight and marks its responses", async () => {
  const handler = withCors(inner, { allowOrigins: ["https://app.example"] });
  const pre = await handler(
    new Request("http://x/v1/chat/completions", {
      method: "OPTIONS",
      headers: { origin: "https://app.example", "access-control-request-method": "POST" },
    }),
  );
  assert.equal(pre.status, 204);
  assert.equal(pre.headers.get("access-control-allow-origin"), "https://app.example");
  assert.match(pre.headers.get("access-control-allow-headers") ?? "", /authorization/);
  const res = await handler(
    new Request("http://x/v1/models", { headers: { origin: "https://app.example" } }),
  );
  assert.equal(res.headers.get("access-control-allow-origin"), "https://app.example");
  assert.match(res.headers.get("access-control-expose-headers") ?? "", /x-request-id/);
  await res.text();
});

Deno.test("withCors refuses other origins' preflights and leaves their responses unmarked", async () => {
  const handler = withCors(inner, { allowOrigins: ["https://app.example"] });
  const pre = await handler(
    new Request("http://x/v1/models", {
      method: "OPTIONS",
      headers: { origin: "https://evil.example", "access-control-request-method": "GET" },
    }),
  );
  assert.equal(pre.status, 403);
  const res = await handler(
    new Request("http://x/v1/models", { headers: { origin: "https://evil.example" } }),
  );
  assert.equal(res.headers.get("access-control-allow-origin"), null);
  await res.text();
});

Deno.test("withCors with * allows any origin", async () => {
  const handler = withCors(inner, { allowOrigins: ["*"] });
  const res = await handler(new Request("http://x/", { headers: { origin: "https://a.example" } }));
  assert.equal(res.headers.get("access-control-allow-origin"), "*");
  await res.text();
});
