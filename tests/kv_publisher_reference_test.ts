// A KvEventPublisher on an etcd runtime also publishes in the reference's (ai-dynamo 1.6.1)
// format: its channel is recorded in etcd, the events published while that publisher starts are
// kept in order, and closing removes the record. Off with `referenceEndpoint: false`, and on a
// runtime without etcd (nothing of the reference's could read it there).

import assert from "node:assert/strict";
import { DistributedRuntime, KvEventPublisher } from "../mod.ts";
import { haveServers, startEtcd, startNats } from "./_helpers/servers.ts";

const CHANNELS = "v1/event_channels/namespace/ns/component/backend/endpoint/";

Deno.test({
  name: "KvEventPublisher on etcd: the reference-format channel, early events kept in order",
  ignore: !haveServers(),
  fn: async () => {
    const [etcd, nats] = await Promise.all([startEtcd(), startNats()]);
    const runtime = await DistributedRuntime.connect({
      discovery: "etcd",
      requestPlane: "tcp",
      etcdEndpoints: etcd.url,
      natsServer: nats.url,
    });
    try {
      const component = runtime.namespace("ns").component("backend");
      const pub = new KvEventPublisher(component, { kvBlockSize: 4 });
      // Published before the reference-format publisher has started: kept, then sent in order.
      const tokenIds = Array.from({ length: 12 }, (_, i) => i);
      await pub.publishStored({
        tokenIds,
        numBlockTokens: [4, 4, 4],
        blockHashes: [11n, 12n, 13n],
      });
      await pub.publishRemoved([13n]);
      assert.equal(pub.reference, undefined, "started at once? then this test proves nothing");
      await pub.ready;
      const ref = pub.reference!;
      assert.ok(ref, "a reference-format publisher on an etcd runtime");
      assert.equal(ref.lastEventId, 2);
      assert.equal(ref.heldBlocks, 2);
      await pub.publishRemoved([12n]);
      assert.equal(ref.lastEventId, 3);
      assert.equal(ref.heldBlocks, 1);
      // Its KV-state query answers from what it was given, the early events included.
      const answer = ref.answerQuery({
        worker_id: BigInt(`0x${runtime.instanceId}`),
        dp_rank: 0,
        start_event_id: 1,
        end_event_id: null,
        supports_tree_dump_failed: true,
        kind: "recovery",
      });
      const events = (answer.Events as { events: unknown[]; last_event_id: number }) ?? {};
      assert.equal(events.last_event_id, 3, JSON.stringify(Object.keys(answer)));
      assert.equal(events.events.length, 3, "the two early events and the later one");
      const channels = await runtime.discovery.list(`${CHANNELS}generate/topic/kv-events/`);
      assert.equal(channels.length, 1);
      assert.match(JSON.parse(channels[0]!.value).transport.config.endpoint, /^tcp:\/\//);
      await pub.close();
      assert.equal(
        (await runtime.discovery.list(`${CHANNELS}generate/topic/kv-events/`)).length,
        0,
      );

      const ours = new KvEventPublisher(component, { kvBlockSize: 4, referenceEndpoint: false });
      await ours.ready;
      assert.equal(ours.reference, undefined);
      assert.equal((await runtime.discovery.list(CHANNELS)).length, 0);
      await ours.close();
    } finally {
      await runtime.shutdown();
      await Promise.all([etcd.stop(), nats.stop()]);
    }
  },
});

Deno.test("KvEventPublisher without etcd publishes our format only", async () => {
  const runtime = await DistributedRuntime.connect({ discovery: "memory", requestPlane: "local" });
  try {
    const pub = new KvEventPublisher(runtime.namespace("ns").component("backend"), {
      kvBlockSize: 4,
    });
    await pub.ready;
    assert.equal(pub.reference, undefined);
    await pub.close();
  } finally {
    await runtime.shutdown();
  }
});
