// deno-lint-ignore-file no-console -- a test that says why it is skipped
// Our router over reference-format workers (ReferenceKvRouter) recovers a worker's KV state
// through the worker's KV-state query (the reference's WorkerKvQueryRequest, served by our
// ReferenceKvEventPublisher): what it cached before the router started, and the events of a
// message lost on the way (a jump in the event ids). Real etcd, ZeroMQ and TCP request plane.

import assert from "node:assert/strict";
import { DistributedRuntime, MockerEngine } from "../mod.ts";
import { computeLocalHashes } from "../llm/kv_router/hashing.ts";
import { ReferenceKvRouter } from "../llm/model/reference_kv.ts";
import { Context } from "../runtime/context.ts";
import { EtcdDiscovery } from "../runtime/discovery/etcd.ts";
import { LocalEventBus, LocalEventPlane } from "../runtime/events/memory.ts";
import { ReferenceClient } from "../runtime/reference/client.ts";
import { ReferenceKvEventPublisher } from "../runtime/reference/kv_events.ts";
import { haveServers, startEtcd, startNats } from "./_helpers/servers.ts";

if (!haveServers()) console.warn("reference_kv_recovery_test skipped: etcd or nats-server missing");

Deno.test({
  name: "ReferenceKvRouter recovers a worker's KV state at start and after a gap",
  ignore: !haveServers(),
  fn: async () => {
    const [etcd, nats] = await Promise.all([startEtcd(), startNats()]);
    const runtime = await DistributedRuntime.connect({
      discovery: "etcd",
      requestPlane: "tcp",
      etcdEndpoints: etcd.url,
      natsServer: nats.url,
    });
    const discovery = new EtcdDiscovery({ endpoints: [etcd.url] });
    const events = new LocalEventPlane(new LocalEventBus());
    const client = ReferenceClient.create();
    const target = { namespace: "dynamo", component: "backend", endpoint: "generate" };
    let lose = false;
    const sink: { pub?: ReferenceKvEventPublisher } = {};
    const engine = new MockerEngine({
      speedupRatio: 50,
      blockSize: 16,
      onKvEvent: (d, tier) => lose ? sink.pub?.publishLost(d, tier) : sink.pub?.publish(d, tier),
    });
    let router: ReferenceKvRouter | undefined;
    try {
      const pub = sink.pub = await ReferenceKvEventPublisher.start({ runtime, ...target });
      const prompt = (seed: number) => Array.from({ length: 64 }, (_, i) => 100 + seed * 100 + i);
      const compute = async (tokens: number[]) => {
        for await (
          const _ of engine.handler({
            model: "m",
            token_ids: tokens,
            stop_conditions: { max_tokens: 1 },
            sampling_options: {},
            eos_token_ids: [],
          } as never, new Context())
        ) { /* run it through */ }
      };
      const held = (seed: number) =>
        router!.tree.findMatches(computeLocalHashes(prompt(seed), 16)).scores.get(
          runtime.leaseId,
        ) ?? 0;
      await compute(prompt(1)); // before any router: only the query can tell
      router = new ReferenceKvRouter(
        events,
        { namespace: "dynamo", component: "backend", name: "generate" },
        { path: "dynamo/backend/generate", referenceClient: client } as never,
        16,
        { discovery },
      );
      await router.ready;
      assert.equal(router.recoveries, 1, "asked once, at the start");
      assert.equal(held(1), 4, "the prompt cached before the router started");
      const deadline = Date.now() + 10_000;
      while (pub.subscribers === 0) {
        assert.ok(Date.now() < deadline, "the router did not follow the worker's events");
        await new Promise((r) => setTimeout(r, 20));
      }
      await new Promise((r) => setTimeout(r, 500)); // ZeroMQ's slow joiner
      await compute(prompt(2));
      while (held(2) < 4) {
        assert.ok(Date.now() < deadline, "a live event did not arrive");
        await new Promise((r) => setTimeout(r, 20));
      }
      assert.equal(router.recoveries, 1, "no gap, no query");
      lose = true;
      await compute(prompt(3)); // its events never sent
      lose = false;
      await compute(prompt(4)); // the ids jump: the router asks for the missing ones
      while (router.recoveries < 2 || held(4) < 4) {
        assert.ok(Date.now() < deadline, `no recovery after the gap (${router.recoveries})`);
        await new Promise((r) => setTimeout(r, 20));
      }
      assert.equal(held(3), 4, "the lost event's blocks, recovered");
      assert.equal(held(4), 4);
      assert.equal(pub.queriesServed, 2);
    } finally {
      await router?.close();
      await sink.pub?.close();
      await engine.close();
      await client.close();
      await events.close();
      await discovery.close();
      await runtime.shutdown();
      await Promise.all([etcd.stop(), nats.stop()]);
    }
  },
});
