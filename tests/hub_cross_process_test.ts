// The runtime across processes on the hub backend: a HubServer in the test process, two
// worker processes joined through DYN_HUB, a client here. Worker death, routing, tokens.

import assert from "node:assert/strict";
import { DistributedRuntime, StreamIncompleteError } from "../mod.ts";
import { HubAuthError, HubServer } from "../runtime/hub/mod.ts";
import { eventually } from "./_helpers/backends.ts";
import { type ChildHandle, runDeno, spawnDeno } from "./_helpers/process.ts";

const WORKER = new URL("./_helpers/worker_proc.ts", import.meta.url).pathname;
const TOKEN = "xproc-token";

Deno.test("runtime across processes on the hub", async (t) => {
  const hub = await HubServer.start({ token: TOKEN });
  // Empty ETCD_ENDPOINTS/NATS_SERVER: the children must not pick real servers from our env.
  const env = { ...hub.env(), ETCD_ENDPOINTS: "", NATS_SERVER: "", DYN_LOG: "warn" };
  const caller = await DistributedRuntime.connect({
    discovery: "hub",
    requestPlane: "hub",
    hubAddress: hub.address,
    hubToken: TOKEN,
  });
  const client = await caller.namespace("xproc").component("worker").endpoint("generate")
    .client();
  const workers: ChildHandle[] = [];
  /** Waits until `worker` serves and the client sees it; returns its instance id. */
  const untilServing = async (worker: ChildHandle): Promise<string> => {
    const { ready } = await worker.waitFor<{ ready: string }>(
      (l) => "ready" in l,
      30_000,
      "the worker to serve",
    );
    await eventually(
      () => client.instanceIds().includes(ready),
      5000,
      "the client sees the worker",
    );
    return ready;
  };
  try {
    workers.push(spawnDeno(WORKER, env), spawnDeno(WORKER, env));
    const [id1, id2] = await Promise.all(workers.map(untilServing)) as [string, string];

    await t.step("two worker processes serve; round robin reaches both", async () => {
      assert.deepEqual(client.instanceIds(), [id1, id2].sort());
      for (const id of [id1, id2]) {
        const items = [];
        for await (const x of await client.direct({ n: 3, tag: id }, id)) items.push(x);
        assert.deepEqual(items, [0, 1, 2].map((i) => ({ i, tag: id })));
      }
      const seen = new Set<string>();
      for (let i = 0; i < 4; i++) {
        for await (const x of await client.generate({ n: 1, tag: i })) {
          seen.add(JSON.stringify(x));
        }
      }
      assert.equal(seen.size, 4);
    });

    await t.step(
      "SIGKILL mid-stream fails the caller with StreamIncompleteError and the instance vanishes within 2 s",
      async () => {
        const stream = await client.direct({ n: 1_000_000, delayMs: 2 }, id1);
        let killedAt = 0;
        let n = 0;
        await assert.rejects(async () => {
          for await (const _ of stream) {
            if (++n === 5) {
              workers[0]!.kill("SIGKILL");
              killedAt = Date.now();
            }
          }
        }, StreamIncompleteError);
        await eventually(
          () => !client.instanceIds().includes(id1),
          2000,
          "the killed worker's instance leaves discovery",
        );
        const goneAfter = Date.now() - killedAt;
        assert.ok(goneAfter < 2000, `gone after ${goneAfter} ms`);
        assert.deepEqual(client.instanceIds(), [id2]);
        const items = [];
        for await (const x of await client.generate({ n: 2, tag: "after" })) items.push(x);
        assert.deepEqual(items, [{ i: 0, tag: "after" }, { i: 1, tag: "after" }]);
      },
    );

    await t.step("a worker with the wrong token exits with a clear error", async () => {
      const bad = await runDeno([WORKER], { ...env, DYN_HUB_TOKEN: "wrong" }, 30_000);
      assert.notEqual(bad.code, 0);
      assert.match(bad.stderr, /HubAuthError|wrong hub token/);
      assert.match(bad.stderr, /wrong hub token/);
      await assert.rejects(
        DistributedRuntime.fromEnv({ env: { ...env, DYN_HUB_TOKEN: "wrong" } }),
        HubAuthError,
      );
    });

    await t.step(
      "SIGTERM shuts a worker down gracefully and its instance leaves at once",
      async () => {
        workers[1]!.kill("SIGTERM");
        const status = await workers[1]!.status;
        assert.equal(status.code, 0);
        await eventually(
          () => client.instanceIds().length === 0,
          1000,
          "the instance leaves discovery",
        );
      },
    );
  } finally {
    for (const w of workers) {
      w.kill();
      await w.status;
    }
    await caller.shutdown();
    await hub.close();
  }
});
