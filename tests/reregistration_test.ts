// The re-registration gap (issue: reliability at the boundaries): when a worker's lease is lost
// (revoked behind its back, as an etcd outage or an operator can do), its model entries vanish
// and come back under a new lease. Meanwhile the frontend must not call a model it knows
// "not found": requests get 200, or 503 with Retry-After, never 404. Real processes, etcd + NATS.

import assert from "node:assert/strict";
import { Etcd3 } from "etcd3";
import { builtinTestModel } from "../mod.ts";
import { eventually } from "./_helpers/backends.ts";
import { frontendUrl, spawnFrontend, stopChild } from "./_helpers/frontend.ts";
import { spawnDeno } from "./_helpers/process.ts";
import { haveServers, startServers } from "./_helpers/servers.ts";

const WORKER = new URL("./_helpers/llm_worker.ts", import.meta.url).pathname;

Deno.test({
  name: "a worker re-registering after its lease was lost: its model answers 200 or 503, never 404",
  ignore: !haveServers(),
  async fn() {
    const servers = await startServers();
    const env = { ...servers.env, DYN_LOG: "warn", DYN_LEASE_TTL: "3" };
    const front = spawnFrontend(env);
    const worker = spawnDeno(WORKER, env, [await builtinTestModel()]);
    const admin = new Etcd3({ hosts: servers.etcd.url });
    try {
      const base = await frontendUrl(front);
      const { ready } = await worker.waitFor<{ ready: string }>(
        (l) => "ready" in l,
        30_000,
        "ready",
      );
      const ask = async () => {
        const r = await fetch(`${base}/v1/completions`, {
          method: "POST",
          headers: { "content-type": "application/json" },
          body: JSON.stringify({ model: "Qwen3-0.6B", prompt: "still there", max_tokens: 2 }),
        });
        await r.body?.cancel();
        return { status: r.status, retryAfter: r.headers.get("retry-after") };
      };
      await eventually(async () => (await ask()).status === 200, 15_000, "the model answers");
      // The worker's first lease id is its instance id.
      await admin.leaseClient.leaseRevoke({ ID: BigInt("0x" + ready).toString() });
      const seen: { status: number; retryAfter: string | null }[] = [];
      const until = Date.now() + 4000;
      while (Date.now() < until) {
        seen.push(await ask());
        await new Promise((r) => setTimeout(r, 10));
      }
      const statuses = [...new Set(seen.map((s) => s.status))].sort();
      assert.ok(!statuses.includes(404), `statuses seen: ${statuses}`);
      for (const s of seen) {
        assert.ok(s.status === 200 || s.status === 503, `status ${s.status}`);
        if (s.status === 503) assert.equal(s.retryAfter, "1");
      }
      assert.equal(seen.at(-1)!.status, 200, "served again under the new lease");
    } finally {
      admin.close();
      worker.kill("SIGKILL");
      await worker.status;
      await stopChild(front);
      await servers.stop();
    }
  },
});
