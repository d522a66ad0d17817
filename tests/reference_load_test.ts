// deno-lint-ignore-file no-console -- a test that says why it is skipped
// A worker's load in the reference's kv_metrics format, counted from its engine's requests
// (ReferenceLoadPublisher.track), as a subscriber of its ZeroMQ channel reads it, and the
// channel's EventChannel record in etcd.

import assert from "node:assert/strict";
import { DistributedRuntime, MockerEngine } from "../mod.ts";
import { Context } from "../runtime/context.ts";
import {
  decodeReferenceLoad,
  type ReferenceLoad,
  ReferenceLoadPublisher,
} from "../runtime/reference/load_metrics.ts";
import { ZmqSubscriber } from "../runtime/reference/zmq_sub.ts";
import { referenceZmqEnvelope } from "../llm/model/reference_kv.ts";
import { haveServers, startEtcd, startNats } from "./_helpers/servers.ts";

if (!haveServers()) console.warn("reference_load_test skipped: etcd or nats-server missing");

Deno.test({
  name: "ReferenceLoadPublisher counts a running request's prefill and blocks, then none",
  ignore: !haveServers(),
  fn: async () => {
    const [etcd, nats] = await Promise.all([startEtcd(), startNats()]);
    const runtime = await DistributedRuntime.connect({
      discovery: "etcd",
      requestPlane: "tcp",
      etcdEndpoints: etcd.url,
      natsServer: nats.url,
    });
    const engine = new MockerEngine({ speedupRatio: 5, blockSize: 16 });
    let load: ReferenceLoadPublisher | undefined;
    let sub: ZmqSubscriber | undefined;
    try {
      load = await ReferenceLoadPublisher.start({
        runtime,
        namespace: "dynamo",
        component: "backend",
        endpoint: "generate",
        blockSize: 16,
      });
      const records = await runtime.discovery.list(
        "v1/event_channels/namespace/dynamo/component/backend/endpoint/generate/topic/kv_metrics/",
      );
      assert.equal(records.length, 1);
      const channel = JSON.parse(records[0]!.value);
      assert.equal(channel.type, "EventChannel");
      sub = await ZmqSubscriber.connect(channel.transport.config.endpoint);
      const deadline = Date.now() + 5_000;
      while (load.subscribers === 0) {
        assert.ok(Date.now() < deadline, "the subscription did not arrive");
        await new Promise((r) => setTimeout(r, 10));
      }
      await new Promise((r) => setTimeout(r, 300)); // ZeroMQ's slow joiner
      const reports: { workerId: string; load: ReferenceLoad }[] = [];
      const reading = (async () => {
        for await (const parts of sub!) {
          reports.push(decodeReferenceLoad(referenceZmqEnvelope(parts)));
          if (reports.at(-1)!.load.activeDecodeBlocks === 0) break;
        }
      })();
      const tracked = load.track(engine.handler as never);
      // 40 prompt tokens (3 blocks of 16), 10 generated: 50 tokens, 4 blocks at the end.
      let outputs = 0;
      for await (
        const _ of await tracked({
          model: "m",
          token_ids: Array.from({ length: 40 }, (_, i) => i + 1),
          stop_conditions: { max_tokens: 10, ignore_eos: true },
          sampling_options: {},
          eos_token_ids: [],
        } as never, new Context())
      ) outputs++;
      assert.ok(outputs > 0);
      await reading;
      assert.ok(reports.every((r) => r.workerId === runtime.leaseId));
      const loads = reports.map((r) => r.load);
      assert.deepEqual(loads[0], {
        activeDecodeBlocks: 3,
        activePrefillTokens: 40,
        kvUsedBlocks: 3,
      });
      assert.ok(
        loads.some((l) => l.activeDecodeBlocks === 4 && l.activePrefillTokens === 0),
        JSON.stringify(loads),
      );
      assert.deepEqual(loads.at(-1), {
        activeDecodeBlocks: 0,
        activePrefillTokens: 0,
        kvUsedBlocks: 0,
      });
    } finally {
      sub?.close();
      await load?.close();
      await engine.close();
      await runtime.shutdown();
      await Promise.all([etcd.stop(), nats.stop()]);
    }
  },
});
