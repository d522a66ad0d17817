// deno-lint-ignore-file no-console -- a program or test that prints; library code takes a Logger
// Infrastructure restarts (issue: reliability): under steady load through `dynamo
// frontend` and two workers, nats-server is killed and restarted, then etcd (down longer
// than the lease TTL, so leases expire). Frontend and workers must reconnect and
// re-register on their own: no request fails (requests sent during the NATS outage wait for
// the connection within their deadline), and they succeed within 10 s of each server's return.

import assert from "node:assert/strict";
import { builtinTestModel } from "../mod.ts";
import { eventually } from "./_helpers/backends.ts";
import { frontendUrl, spawnFrontend } from "./_helpers/frontend.ts";
import { type ChildHandle, spawnDeno } from "./_helpers/process.ts";
import { haveServers, type ServerProcess, startServers } from "./_helpers/servers.ts";

const WORKER = new URL("./_helpers/llm_worker.ts", import.meta.url).pathname;
const MODEL = "Qwen3-0.6B";
const RECOVERY_MS = 10_000;

interface Outcome {
  at: number;
  ok: boolean;
  error?: string;
}

Deno.test({
  name: "nats-server, then etcd, restarted under load: everything reconnects without help",
  ignore: !haveServers(),
  async fn() {
    const servers = await startServers();
    const env = { ...servers.env, DYN_LOG: "warn", DYN_LEASE_TTL: "3" };
    const modelPath = await builtinTestModel();
    const children: ChildHandle[] = [];
    let loading = true;
    let load: Promise<void> | undefined;
    try {
      const front = spawnFrontend(env);
      children.push(front);
      const base = await frontendUrl(front);
      for (let i = 0; i < 2; i++) {
        const w = spawnDeno(WORKER, env, [modelPath, "--migration-limit", "3"]);
        children.push(w);
        await w.waitFor((l) => "ready" in l, 30_000, "a worker to register");
      }
      const body = JSON.stringify({ model: MODEL, prompt: "steady load", max_tokens: 2 });
      const ask = async (): Promise<Outcome> => {
        const at = performance.now();
        try {
          const r = await fetch(`${base}/v1/completions`, {
            method: "POST",
            headers: { "content-type": "application/json" },
            body,
            signal: AbortSignal.timeout(5_000),
          });
          const text = await r.text();
          return r.ok ? { at, ok: true } : { at, ok: false, error: `${r.status} ${text}` };
        } catch (err) {
          return { at, ok: false, error: String(err) };
        }
      };
      await eventually(async () => (await ask()).ok, 15_000, "the model answers");

      const outcomes: Outcome[] = [];
      load = Promise.all(Array.from({ length: 4 }, async () => {
        while (loading) {
          outcomes.push(await ask());
          await new Promise((r) => setTimeout(r, 20));
        }
      })).then(() => {});

      const sinceOk = (t: number) => outcomes.filter((o) => o.at >= t && o.ok).length;
      /** Kills `server` for `downMs`, restarts it, and returns ms until requests succeed again. */
      const outage = async (server: ServerProcess, downMs: number) => {
        const start = performance.now();
        await new Promise((r) => setTimeout(r, 1_500)); // steady load first
        // Only requests sent in this phase: one sent during the previous outage can time
        // out (5 s) after that phase's count was reset.
        const steady = outcomes.filter((o) => !o.ok && o.at >= start);
        assert.deepEqual(steady.map((o) => o.error), [], "no failures before the outage");
        await server.kill();
        await new Promise((r) => setTimeout(r, downMs));
        await server.restart();
        const back = performance.now();
        await eventually(() => sinceOk(back + 1) >= 8, RECOVERY_MS, "requests to succeed again");
        const recoveredMs = Math.max(
          0,
          outcomes.filter((o) => o.ok && o.at > back).map((o) => o.at)[0]! - back,
        );
        // Then it stays healthy: two seconds with no failure.
        const calm = performance.now();
        await new Promise((r) => setTimeout(r, 2_000));
        const after = outcomes.filter((o) => o.at >= calm && !o.ok);
        assert.deepEqual(after.map((o) => o.error), [], "no failures once recovered");
        const failed = outcomes.filter((o) => !o.ok && o.at >= start).length;
        outcomes.length = 0;
        return { recoveredMs, failed };
      };

      const nats = await outage(servers.nats, 2_000);
      const etcd = await outage(servers.etcd, 4_000); // past the 3 s lease TTL
      console.log(
        `nats-server down 2 s: ${nats.failed} requests failed, first success ` +
          `${nats.recoveredMs.toFixed(0)} ms after it was back; etcd down 4 s: ${etcd.failed} ` +
          `failed, first success ${etcd.recoveredMs.toFixed(0)} ms after it was back`,
      );
      // Requests in flight through a short outage wait for the connection and succeed.
      assert.equal(nats.failed, 0, "requests failed through a 2 s nats-server outage");
      assert.equal(etcd.failed, 0, "requests failed through a 4 s etcd outage");
    } finally {
      loading = false;
      await load;
      for (const c of children) c.kill("SIGKILL");
      await Promise.all(children.map((c) => c.status));
      await servers.stop();
    }
  },
});
