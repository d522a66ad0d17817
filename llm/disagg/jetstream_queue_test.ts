// JetStreamPrefillQueue against a real nats-server with JetStream, directly and on a
// runtime's own (authenticated) connection.

import assert from "node:assert/strict";
import { connect } from "nats";
import { DistributedRuntime } from "../../runtime/distributed_runtime.ts";
import { haveServers, startNats } from "../../tests/_helpers/servers.ts";
import {
  JetStreamPrefillQueue,
  JetStreamUnavailableError,
  NatsUnavailableError,
  runtimeNatsConnection,
} from "./jetstream_queue.ts";

Deno.test({
  name: "JetStreamPrefillQueue delivers in order, acks, and redelivers an un-acked item",
  ignore: !haveServers(),
  async fn() {
    const nats = await startNats();
    const nc = await connect({ servers: nats.url });
    try {
      const q = await JetStreamPrefillQueue.open<{ n: number }>(nc, { ackWaitMs: 1000 });
      for (const n of [1, 2, 3]) await q.enqueue({ n });
      assert.equal(await q.size(), 3);
      const a = (await q.dequeue({ timeoutMs: 1000 }))!;
      assert.deepEqual([a.data, a.deliveries], [{ n: 1 }, 1]);
      assert.equal(await a.ack(), true);
      const b = (await q.dequeue({ timeoutMs: 1000 }))!;
      assert.deepEqual(b.data, { n: 2 });
      // b is not acked: the server hands it out again after ackWaitMs.
      const c = (await q.dequeue({ timeoutMs: 1000 }))!;
      assert.deepEqual(c.data, { n: 3 });
      await c.ack();
      const again = (await q.dequeue({ timeoutMs: 5000 }))!;
      assert.equal(again.id, b.id);
      assert.equal(again.deliveries, 2);
      await again.ack();
      assert.equal(await q.dequeue({ timeoutMs: 1000 }), undefined);
      assert.equal(await q.size(), 0);
      await q.close();
    } finally {
      await nc.close();
      await nats.stop();
    }
  },
});

Deno.test({
  name: "the JetStream prefill queue works on a runtime's own NATS connection with credentials",
  ignore: !haveServers(),
  async fn() {
    const nats = await startNats({ user: { user: "dynamo", pass: "s3cret-pass" } });
    const connect = (pass: string) =>
      DistributedRuntime.connect({
        discovery: "memory",
        requestPlane: "nats",
        natsServer: nats.url,
        natsAuth: { user: "dynamo", pass },
      });
    const decode = await connect("s3cret-pass");
    const prefill = await connect("s3cret-pass");
    try {
      const q1 = await JetStreamPrefillQueue.open<{ n: number }>(runtimeNatsConnection(decode));
      const q2 = await JetStreamPrefillQueue.open<{ n: number }>(runtimeNatsConnection(prefill));
      await q1.enqueue({ n: 7 });
      const item = (await q2.dequeue({ timeoutMs: 2000 }))!;
      assert.deepEqual(item.data, { n: 7 });
      assert.equal(await item.ack(), true);
      assert.equal(await q1.size(), 0);
      await q2.close();
      await q1.close();
      assert.equal(runtimeNatsConnection(decode).isClosed(), false, "the runtime keeps it");
      // Without the password there is no connection to take the queue from.
      await assert.rejects(connect("wrong"), /authorization/i);
    } finally {
      await prefill.shutdown();
      await decode.shutdown();
      await nats.stop();
    }
  },
});

Deno.test("runtimeNatsConnection names the plane when the runtime is not on NATS", async () => {
  const runtime = await DistributedRuntime.connect();
  try {
    assert.throws(
      () => runtimeNatsConnection(runtime),
      (e: unknown) => e instanceof NatsUnavailableError && e.requestPlane === "local",
    );
  } finally {
    await runtime.shutdown();
  }
});

Deno.test({
  name: "JetStreamPrefillQueue.open on a server without JetStream says how to enable it",
  ignore: !haveServers(),
  async fn() {
    const nats = await startNats({ jetstream: false });
    const nc = await connect({ servers: nats.url });
    try {
      await assert.rejects(
        JetStreamPrefillQueue.open(nc),
        (err: unknown) =>
          err instanceof JetStreamUnavailableError && /nats-server -js/.test(err.message) &&
          /--queue hosted/.test(err.message),
      );
    } finally {
      await nc.close();
      await nats.stop();
    }
  },
});

Deno.test({
  name: "JetStreamPrefillQueue hands a non-JSON payload on as undefined, for the consumer to drop",
  ignore: !haveServers(),
  async fn() {
    const nats = await startNats();
    const nc = await connect({ servers: nats.url });
    try {
      const q = await JetStreamPrefillQueue.open<{ n: number }>(nc, {
        ackWaitMs: 1000,
        subject: "garbage.requests",
      });
      await nc.jetstream().publish("garbage.requests", new TextEncoder().encode("{not json"));
      await q.enqueue({ n: 1 });
      const bad = (await q.dequeue({ timeoutMs: 1000 }))!;
      assert.equal(bad.data, undefined);
      assert.equal(await bad.ack(), true); // acked, so never redelivered
      assert.deepEqual((await q.dequeue({ timeoutMs: 1000 }))?.data, { n: 1 });
      await q.close();
    } finally {
      await nc.close();
      await nats.stop();
    }
  },
});
