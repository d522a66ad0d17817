// What a new user meets in the first hour: a frontend started without backend settings says
// that it runs on a private, in-process default (and /health reports it) instead of silently
// never meeting its workers; an upstream server that cannot be reached makes /health unhealthy
// and requests 502, with the cause logged once; a JetStream queue on a server without JetStream
// is a one-line error.

import assert from "node:assert/strict";
import { startDynamoRun } from "./_helpers/dynamo_run.ts";
import { haveServers, startEtcd, startNats } from "./_helpers/servers.ts";
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

Deno.test({
  name:
    "a disaggregation worker told --queue jetstream on a nats-server without JetStream says so in one line",
  ignore: !haveServers(),
  async fn() {
    const [etcd, nats] = await Promise.all([startEtcd(), startNats({ jetstream: false })]);
    try {
      const out = await new Deno.Command(Deno.execPath(), {
        args: ["run", "-A", "examples/disagg/decode_worker.ts", "--queue", "jetstream"],
        cwd: new URL("..", import.meta.url).pathname,
        env: { ETCD_ENDPOINTS: etcd.url, NATS_SERVER: nats.url, DYN_LOG: "error", NO_COLOR: "1" },
        stdin: "null",
        stdout: "piped",
        stderr: "piped",
      }).output();
      const stderr = new TextDecoder().decode(out.stderr).trim();
      assert.equal(out.code, 1, stderr);
      const lines = stderr.split("\n").filter((l) => l.trim() !== "");
      assert.equal(lines.length, 1, `one line, got:\n${stderr}`);
      assert.match(
        lines[0]!,
        /^error: the JetStream prefill queue needs a nats-server with JetStream/,
      );
      assert.match(lines[0]!, /nats-server -js/);
    } finally {
      await Promise.all([etcd.stop(), nats.stop()]);
    }
  },
});
