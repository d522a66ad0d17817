import assert from "node:assert/strict";
import { DistributedRuntime, EmbeddedCluster } from "../../runtime/distributed_runtime.ts";
import { eventually } from "../../tests/_helpers/backends.ts";
import { ACTIVE_SEQUENCES_EVENTS, ReplicaSync } from "./replica_sync.ts";
import { ActiveSequences } from "./scheduler.ts";
import { KvRouter } from "./router.ts";
import { startMockerWorkers } from "../engines/mocker/worker.ts";

async function replicas() {
  const embedded = new EmbeddedCluster();
  const [rtA, rtB] = await Promise.all([
    DistributedRuntime.connect({ embedded }),
    DistributedRuntime.connect({ embedded }),
  ]);
  const make = (rt: DistributedRuntime) => {
    const component = rt.namespace("sync").component("backend");
    // The book tells the sync of its bookings; the sync books the others' in the book.
    const box: { sync?: ReplicaSync } = {};
    const book = new ActiveSequences(16, { onBooking: (e) => box.sync?.publish(e) });
    const sync = new ReplicaSync(component, book, { ttlMs: 200 });
    box.sync = sync;
    return { book, sync, component };
  };
  const a = make(rtA);
  const b = make(rtB);
  await Promise.all([a.sync.ready, b.sync.ready]);
  return {
    a,
    b,
    async [Symbol.asyncDispose]() {
      await Promise.all([a.sync.close(), b.sync.close()]);
      await Promise.all([rtA.shutdown(), rtB.shutdown()]);
    },
  };
}

Deno.test("ReplicaSync books another router's requests in this router's book, and frees them", async () => {
  await using r = await replicas();
  r.a.book.add("req-1", "w1", 320, 4);
  await eventually(() => r.b.book.load("w1").requests === 1, 2000, "b to book a's request");
  assert.deepEqual(r.b.book.load("w1"), {
    activeBlocks: 20,
    prefillBlocks: 16,
    requests: 1,
    waiting: 1,
  });
  r.a.book.progress("req-1", 1);
  await eventually(() => r.b.book.load("w1").prefillBlocks === 0, 2000, "b to see prefill done");
  assert.equal(r.b.book.load("w1").waiting, 0);
  r.a.book.free("req-1");
  await eventually(() => r.b.book.load("w1").requests === 0, 2000, "b to free it");
  // Its own bookings do not come back to it, nor do remote ones echo.
  assert.equal(r.a.book.size, 0);
  assert.equal(r.b.sync.remoteBookings, 0);
});

Deno.test("ReplicaSync refuses malformed bookings and drops a silent replica's after their lifetime", async () => {
  await using r = await replicas();
  const enc = (v: unknown) => new TextEncoder().encode(JSON.stringify(v));
  for (
    const bad of [
      "not json",
      { router_id: "x" },
      {
        router_id: "x",
        event: {
          kind: "add",
          request_id: "q",
          worker_id: "w",
          prompt_tokens: -1,
          overlap_blocks: 0,
        },
      },
      { router_id: "x", event: { kind: "explode", request_id: "q" } },
    ]
  ) {
    await r.a.component.publishEvent(
      ACTIVE_SEQUENCES_EVENTS,
      typeof bad === "string" ? new TextEncoder().encode(bad) : enc(bad),
    );
  }
  await eventually(() => r.b.sync.refused === 4, 2000, "b to refuse the four");
  assert.equal(r.b.book.size, 0);
  // A booking whose free never comes (its replica died) goes after the lifetime (200 ms here).
  await r.a.component.publishEvent(
    ACTIVE_SEQUENCES_EVENTS,
    enc({
      router_id: "gone",
      event: {
        kind: "add",
        request_id: "q",
        worker_id: "w9",
        prompt_tokens: 16,
        overlap_blocks: 0,
      },
    }),
  );
  await eventually(() => r.b.book.load("w9").requests === 1, 2000, "b to book it");
  await eventually(
    () => r.b.book.load("w9").requests === 0,
    3000,
    "b to drop it after its lifetime",
  );
});

Deno.test("two KvRouters with replicaSync see each other's bookings on the workers", async () => {
  const fleet = await startMockerWorkers(2, { speedupRatio: 1000, component: "sync2" });
  const rts = await Promise.all(
    [0, 1].map(() => DistributedRuntime.connect({ embedded: fleet.embedded })),
  );
  const routers = rts.map((rt) =>
    new KvRouter(rt.namespace("dynamo").component("sync2").endpoint("generate"), {
      blockSize: 16,
      replicaSync: true,
    })
  );
  try {
    await Promise.all(routers.map((r) => r.ready));
    const tokens = Array.from({ length: 64 }, (_, i) => 100 + i);
    const { instanceId } = await routers[0]!.findBestMatch(tokens, { requestId: "r1" });
    await eventually(
      () => routers[1]!.load(instanceId).requests === 1,
      2000,
      "the second router to book the first one's request",
    );
    routers[0]!.free("r1");
    await eventually(() => routers[1]!.load(instanceId).requests === 0, 2000, "its free");
  } finally {
    await Promise.all(routers.map((r) => r.close()));
    await Promise.all(rts.map((rt) => rt.shutdown()));
    await fleet.shutdown();
  }
});
