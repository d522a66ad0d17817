import assert from "node:assert/strict";
import { Context } from "../../runtime/context.ts";
import { InvalidArgumentError } from "../../runtime/errors.ts";
import {
  type HostedQueueReply,
  type HostedQueueRequest,
  prefillQueueHandler,
  RemotePrefillQueue,
} from "./hosted_queue.ts";
import type { Client } from "../../runtime/client.ts";
import type { DecodeMemoryInfo, RemotePrefillRequest } from "./protocol.ts";
import { EmbeddedPrefillQueue } from "./queue.ts";

const MEMORY: DecodeMemoryInfo = {
  agent_name: "decode-x",
  metadata: "{}",
  descs: { mem_type: "DRAM", descs: [] },
  block_bytes: 64,
};

function req(id: string): RemotePrefillRequest {
  return {
    request_id: id,
    token_ids: [1, 2, 3],
    block_size: 16,
    engine_agent: "decode-x",
    first_block: 0,
    block_ids: [0],
    expires_at: Date.now() + 60_000,
  };
}

async function call(
  h: ReturnType<typeof prefillQueueHandler>,
  r: HostedQueueRequest,
): Promise<HostedQueueReply[]> {
  const out: HostedQueueReply[] = [];
  for await (const x of h(r, new Context())) out.push(x);
  return out;
}

Deno.test("prefillQueueHandler serves dequeue, ack, size and the memory info", async () => {
  const q = new EmbeddedPrefillQueue<RemotePrefillRequest>();
  const h = prefillQueueHandler(q, MEMORY, "inst-1");
  try {
    await q.enqueue(req("a"));
    assert.deepEqual(await call(h, { op: "size" }), [{ size: 1 }]);
    const [got] = await call(h, { op: "dequeue", timeout_ms: 0 });
    assert.ok(got && "item" in got && got.item && "instance_id" in got);
    assert.equal(got.item.data.request_id, "a");
    assert.equal(got.instance_id, "inst-1");
    assert.deepEqual(
      await call(h, { op: "ack", id: got.item.id, deliveries: got.item.deliveries }),
      [{ acked: true }],
    );
    assert.deepEqual(await call(h, { op: "ack", id: got.item.id, deliveries: 1 }), [{
      acked: false,
    }]);
    assert.deepEqual(await call(h, { op: "dequeue", timeout_ms: 0 }), [{ item: null }]);
    assert.deepEqual(await call(h, { op: "memory" }), [{ memory: MEMORY }]);
    // A NaN or infinite wait from a peer is no wait at all.
    for (const timeout_ms of [NaN, Infinity, "9" as unknown as number]) {
      assert.deepEqual(await call(h, { op: "dequeue", timeout_ms }), [{ item: null }]);
    }
    await assert.rejects(
      call(h, { op: "nope" } as unknown as HostedQueueRequest),
      InvalidArgumentError,
    );
  } finally {
    await q.close();
  }
});

Deno.test("RemotePrefillQueue reads only a well-formed reply from a live instance; the item goes on unread", async () => {
  let reply: unknown;
  const client = {
    instanceIds: () => ["inst-1"],
    generate: () =>
      Promise.resolve((async function* () {
        yield reply;
      })()),
  } as unknown as Client;
  const q = new RemotePrefillQueue(client);
  for (
    const bad of [
      null,
      "x",
      { item: null },
      { item: { id: 5, deliveries: 1, data: req("a") }, instance_id: "inst-1" },
      { item: { id: "5", deliveries: NaN, data: req("a") }, instance_id: "inst-1" },
      { item: { id: "5", deliveries: 1, data: req("a") }, instance_id: "someone-else" },
    ]
  ) {
    reply = bad;
    assert.equal(await q.dequeue({ timeoutMs: 0 }), undefined, JSON.stringify(bad));
  }
  // A malformed request inside a good envelope is handed on for the prefill worker's door.
  reply = { item: { id: "7", deliveries: 1, data: null }, instance_id: "inst-1" };
  const item = await q.dequeue({ timeoutMs: 0 });
  assert.equal(item?.id, "7");
  assert.equal(item?.data, null);
});
