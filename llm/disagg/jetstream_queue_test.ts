// JetStreamPrefillQueue against a real nats-server with JetStream.

import assert from "node:assert/strict";
import { connect } from "nats";
import { haveServers, startNats } from "../../tests/_helpers/servers.ts";
import { JetStreamPrefillQueue } from "./jetstream_queue.ts";

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
