// The runtime across processes on real etcd + NATS: worker death, cancellation latency,
// many concurrent streams, and large items.

import assert from "node:assert/strict";
import { DistributedRuntime, StreamIncompleteError } from "../mod.ts";
import { eventually } from "./_helpers/backends.ts";
import { type ChildHandle, spawnDeno } from "./_helpers/process.ts";
import { haveServers, startServers, testRequestPlane } from "./_helpers/servers.ts";
import { bigString } from "./_helpers/worker_proc.ts";

const WORKER = new URL("./_helpers/worker_proc.ts", import.meta.url).pathname;
const TTL = 3;

Deno.test({
  name: `runtime across processes on etcd + NATS, ${testRequestPlane()} request plane`,
  ignore: !haveServers(),
  async fn(t) {
    const servers = await startServers();
    const env = {
      ...servers.env,
      DYN_LEASE_TTL: String(TTL),
      DYN_LOG: "warn",
    };
    const caller = await DistributedRuntime.connect({
      ...servers.runtimeOptions,
    });
    const client = await caller.namespace("xproc").component("worker").endpoint("generate")
      .client();
    /** Waits until `worker` serves and the client sees it; returns its instance id. */
    const untilServing = async (worker: ChildHandle): Promise<string> => {
      const { ready } = await worker.waitFor<{ ready: string }>(
        (l) => "ready" in l,
        20_000,
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
      await t.step(
        "a worker killed with SIGKILL mid-stream fails the caller within 1 s and leaves discovery within the lease TTL",
        async () => {
          const worker = spawnDeno(WORKER, env);
          try {
            const ready = await untilServing(worker);
            const stream = await client.direct({ n: 1_000_000, delayMs: 2 }, ready);
            let killedAt = 0;
            let n = 0;
            await assert.rejects(async () => {
              for await (const _ of stream) {
                if (++n === 5) {
                  worker.kill("SIGKILL");
                  killedAt = performance.now();
                }
              }
            }, StreamIncompleteError);
            const errorAfter = performance.now() - killedAt;
            assert.ok(
              errorAfter < 1000,
              `caller saw the failure ${errorAfter.toFixed(0)} ms after the kill`,
            );
            const killed = Date.now();
            await eventually(
              () => !client.instanceIds().includes(ready),
              TTL * 1000 + 1500,
              "the dead instance leaves discovery",
            );
            const goneAfter = Date.now() - killed;
            assert.ok(goneAfter <= TTL * 1000 + 1500, `gone after ${goneAfter} ms (TTL ${TTL} s)`);
          } finally {
            worker.kill();
            await worker.status;
          }
        },
      );

      const worker = spawnDeno(WORKER, env);
      try {
        const ready = await untilServing(worker);

        await t.step("the worker observes a caller's cancellation within 50 ms", async () => {
          for (let round = 0; round < 5; round++) {
            const stream = await client.direct({ n: 1_000_000, delayMs: 1 }, ready);
            let brokeAt = 0;
            let n = 0;
            for await (const _ of stream) {
              if (++n === 10) {
                brokeAt = Date.now();
                break;
              }
            }
            const seen = await worker.waitFor<{ at: number }>(
              (l) => l.stopped === stream.context.id,
              2000,
              "the worker to report the stop",
            );
            const latency = seen.at - brokeAt;
            assert.ok(latency < 50, `worker saw the stop after ${latency} ms`);
          }
        });

        await t.step(
          "1,000 concurrent streams of 100 items each arrive with nothing lost, duplicated or reordered",
          async () => {
            const streams = await Promise.all(
              Array.from({ length: 1000 }, (_, tag) => client.direct({ n: 100, tag }, ready)),
            );
            const results = await Promise.all(streams.map(async (s) => {
              const items: { i: number; tag: number }[] = [];
              for await (const x of s) items.push(x as { i: number; tag: number });
              return items;
            }));
            results.forEach((items, tag) => {
              assert.equal(items.length, 100, `stream ${tag} got ${items.length} items`);
              items.forEach((x, i) => assert.deepEqual(x, { i, tag }));
            });
          },
        );

        await t.step("a 4 MiB item arrives intact", async () => {
          const bytes = 4 * 1024 * 1024;
          const items: string[] = [];
          for await (const x of await client.direct({ bigBytes: bytes }, ready)) {
            items.push(x as string);
          }
          assert.equal(items.length, 1);
          assert.equal(items[0]!.length, bytes);
          assert.equal(items[0], bigString(bytes));
        });

        await t.step(
          "SIGTERM shuts the worker down gracefully and revokes its lease at once",
          async () => {
            worker.kill("SIGTERM");
            const status = await worker.status;
            assert.equal(status.code, 0);
            await eventually(
              () => !client.instanceIds().includes(ready),
              1000,
              "the instance leaves discovery",
            );
          },
        );
      } finally {
        worker.kill();
        await worker.status;
      }
    } finally {
      await caller.shutdown();
      await servers.stop();
    }
  },
});
