// What a new user meets in the first hour: a frontend started without backend settings says
// that it runs on a private, in-process default (and /health reports it) instead of silently
// never meeting its workers; an upstream server that cannot be reached makes /health unhealthy
// and requests 502, with the cause logged once.

import assert from "node:assert/strict";
import { startDynamoRun } from "./_helpers/dynamo_run.ts";
import { frontendUrl, spawnFrontend, stopChild } from "./_helpers/frontend.ts";

Deno.test("a frontend without backend settings warns that it runs on the in-process default", async () => {
  const stderr: string[] = [];
  const child = spawnFrontend(
    { ETCD_ENDPOINTS: "", NATS_SERVER: "", DYN_HUB: "", NO_COLOR: "1" },
    { onStderrLine: (line) => stderr.push(line) },
  );
  try {
    const url = await frontendUrl(child);
    const health = await (await fetch(`${url}/health`)).json();
    assert.equal(health.backends?.process_local, true, JSON.stringify(health));
    assert.equal(health.backends?.discovery, "memory");
    const text = stderr.join("\n");
    assert.match(text, /backends discovery=memory request_plane=local/);
    assert.match(text, /in-process default: only this process can see/);
    assert.match(text, /ETCD_ENDPOINTS and NATS_SERVER/);
  } finally {
    await stopChild(child);
  }
});

Deno.test("dynamo run out=openai: with the upstream down: /health is 503, requests 502, the cause logged once", async () => {
  const closed = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const port = (closed.addr as Deno.NetAddr).port;
  closed.close(); // nothing listens there now
  const run = await startDynamoRun(["out=openai:http://127.0.0.1:" + port, "upstream-model"], {
    DYN_LOG: "info",
  });
  try {
    const health = await fetch(`${run.url}/health`);
    assert.equal(health.status, 503);
    assert.match(
      (await health.json()).message,
      /upstream http:\/\/127\.0\.0\.1:\d+ cannot be reached/,
    );
    for (let i = 0; i < 3; i++) {
      const r = await fetch(`${run.url}/v1/chat/completions`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({
          model: "upstream-model",
          messages: [{ role: "user", content: "hi" }],
        }),
      });
      assert.equal(r.status, 502);
      assert.match((await r.json()).error.message, /cannot reach upstream/);
    }
    const warnings = run.output().split("\n").filter((l) => l.includes("upstream unreachable"));
    assert.equal(warnings.length, 1, run.output());
  } finally {
    await run.stop();
  }
});
