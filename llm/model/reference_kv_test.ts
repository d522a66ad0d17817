import assert from "node:assert/strict";
import { encode } from "@msgpack/msgpack";
import { MemoryDiscovery } from "../../runtime/discovery/memory.ts";
import { ProtocolError } from "../../runtime/errors.ts";
import { LocalEventBus, LocalEventPlane } from "../../runtime/events/memory.ts";
import { encodeReferenceLoadMessage } from "../../runtime/reference/load_metrics.ts";
import { ZmqPublisher } from "../../runtime/reference/zmq_pub.ts";
import { computeBlockHashesSync } from "../kv_router/hashing.ts";
import type { RouteDecisionRecord } from "../kv_router/router.ts";
import { TieredIndex } from "../kv_router/tiered_index.ts";
import {
  creditedBlocks,
  decodeReferenceKvEvents,
  parseReferenceKvChannel,
  referenceKvEventsSubject,
  ReferenceKvRouter,
  type ReferenceKvRouterOptions,
  referenceLoadChannelsPrefix,
  referenceZmqEnvelope,
} from "./reference_kv.ts";

// One message a 1.6.1 mocker published on NATS after a 130-token prompt (tests/golden).
const golden = JSON.parse(
  await Deno.readTextFile(
    new URL("../../tests/golden/reference_1.6.1/kv_events.json", import.meta.url),
  ),
) as {
  instance_id: string;
  subject: string;
  message_hex: string;
  zmq: { instance_id: string; parts_hex: string[] };
};
const hex = (h: string) => new Uint8Array(h.match(/../g)!.map((b) => parseInt(b, 16)));
const bytes = hex(golden.message_hex);
const prompt = Array.from({ length: 130 }, (_, i) => i + 1);

Deno.test("the reference's kv-events subject is the one its workers publish on", () => {
  assert.equal(
    referenceKvEventsSubject({ namespace: "dynamo", component: "backend", name: "generate" }),
    golden.subject,
  );
});

Deno.test("a reference stored event decodes to our blocks, with our block hashes", () => {
  const events = decodeReferenceKvEvents(bytes);
  assert.equal(events.length, 1);
  const [e] = events;
  assert.equal(e!.workerId, golden.instance_id);
  assert.equal(e!.eventId, 1);
  assert.ok(typeof e!.data === "object" && "stored" in e!.data);
  const { parent_hash, blocks } = e!.data.stored;
  assert.equal(parent_hash, null);
  // The prompt's two full blocks of 64 tokens: the reference hashes as we do.
  const ours = computeBlockHashesSync(prompt, 64);
  assert.deepEqual(blocks.map((b) => b.tokens_hash), ours.local);
  assert.deepEqual(blocks.map((b) => b.block_hash), ours.sequence);
});

Deno.test("reference removed and cleared events decode; anything else is refused", () => {
  const wrap = (events: unknown) =>
    encode({
      publisher_id: 1,
      sequence: 0,
      topic: "kv-events",
      payload: encode(events, { useBigInt64: true }),
    }, {
      useBigInt64: true,
    });
  const removed = decodeReferenceKvEvents(wrap([
    {
      worker_id: 0xabcn,
      event: { event_id: 2, data: { removed: { block_hashes: [2n ** 63n + 5n] } } },
    },
    { worker_id: 0xabcn, event: { event_id: 3, data: "cleared" } },
    {
      worker_id: 0xabcn,
      storage_tier: "host_pinned",
      event: { event_id: 4, data: "cleared" },
    },
    { worker_id: 0xabcn, storage_tier: "remote", event: { event_id: 5, data: "cleared" } },
  ]));
  assert.deepEqual(removed, [
    {
      workerId: "abc",
      eventId: 2,
      tier: "device",
      data: { removed: { block_hashes: [2n ** 63n + 5n] } },
    },
    { workerId: "abc", eventId: 3, tier: "device", data: "cleared" },
    { workerId: "abc", eventId: 4, tier: "host_pinned", data: "cleared" },
    { workerId: "abc", eventId: 5, tier: null, data: "cleared" },
  ]);
  assert.throws(
    () =>
      decodeReferenceKvEvents(
        wrap([{ worker_id: 1, storage_tier: 2, event: { event_id: 1, data: "cleared" } }]),
      ),
    /storage_tier is not a string/,
  );
  assert.throws(() => decodeReferenceKvEvents(new Uint8Array([0xc1])), ProtocolError);
  assert.throws(() => decodeReferenceKvEvents(encode({ payload: "x" })), /binary payload/);
  assert.throws(
    () => decodeReferenceKvEvents(wrap([{ worker_id: 1, event: { event_id: 1, data: {} } }])),
    /unknown event data/,
  );
  assert.throws(
    () => decodeReferenceKvEvents(wrap([{ worker_id: -1, event: { data: "cleared" } }])),
    /worker_id is not a u64/,
  );
});

Deno.test("a reference ZeroMQ kv-events message holds the same envelope", () => {
  const parts = golden.zmq.parts_hex.map(hex);
  assert.equal(new TextDecoder().decode(parts[0]), "kv-events");
  const [e] = decodeReferenceKvEvents(referenceZmqEnvelope(parts));
  assert.equal(e!.workerId, golden.zmq.instance_id);
  assert.ok(typeof e!.data === "object" && "stored" in e!.data);
  assert.deepEqual(
    e!.data.stored.blocks.map((b) => b.block_hash),
    computeBlockHashesSync(prompt, 64).sequence,
  );
  assert.throws(() => referenceZmqEnvelope(parts.slice(1)), /3 parts/);
  const short = [...parts.slice(0, 3), parts[3]!.slice(0, -1)];
  assert.throws(() => referenceZmqEnvelope(short), /payload says/);
});

Deno.test("a reference worker offloading to host memory: each block is indexed in its tier", async () => {
  // A 1.6.1 mocker with 8 GPU blocks and 32 host blocks, sent prompts 0, 1, 2, 3 (4 blocks
  // each) and 0 again (tests/golden, scripts/capture_reference_kv_tiers.ts). It offloads each
  // block to host memory as it computes it, drops blocks from its GPU as the next prompts need
  // room, and loads prompt 0's back.
  const tiers = JSON.parse(
    await Deno.readTextFile(
      new URL("../../tests/golden/reference_1.6.1/kv_events_host_tier.json", import.meta.url),
    ),
  ) as { messages: string[][] };
  const events = tiers.messages.flatMap((m) =>
    decodeReferenceKvEvents(referenceZmqEnvelope(m.map(hex)))
  );
  assert.deepEqual(
    [...new Set(events.map((e) => e.tier))].sort(),
    ["device", "host_pinned"],
    "the capture has events of both tiers",
  );
  const index = new TieredIndex();
  for (const e of events) assert.ok(index.apply(e.workerId, e.data, e.tier!));
  const worker = events[0]!.workerId;
  const held = (p: number) => {
    const tokens = Array.from({ length: 260 }, (_, i) => 1 + p * 1000 + i);
    const m = index.findMatches(computeBlockHashesSync(tokens, 64).local);
    return { device: m.device.get(worker) ?? 0, host: m.host_pinned.get(worker) ?? 0 };
  };
  assert.deepEqual(held(0), { device: 4, host: 4 }, "loaded back: on both");
  assert.deepEqual(held(1), { device: 0, host: 4 }, "evicted from the GPU, kept in host memory");
  assert.deepEqual(held(2), { device: 0, host: 4 });
  assert.deepEqual(held(3), { device: 3, host: 4 }, "its last block evicted for prompt 0's");
  // Read as one tier (as before this index), the GPU's removals took the host's blocks too.
  const flat = new TieredIndex();
  for (const e of events) flat.apply(e.workerId, e.data, "device");
  const tokens1 = Array.from({ length: 260 }, (_, i) => 1001 + i);
  assert.equal(
    flat.findMatches(computeBlockHashesSync(tokens1, 64).local).device.get(worker),
    undefined,
  );
  // Routing counts host blocks at the reference's default credit.
  const m1 = index.findMatches(computeBlockHashesSync(tokens1, 64).local);
  assert.equal(creditedBlocks(m1, worker), 3);
});

Deno.test("reference event channel records name a ZeroMQ endpoint or a NATS subject prefix", () => {
  const record = (transport: unknown) => ({ type: "EventChannel", topic: "kv-events", transport });
  assert.deepEqual(
    parseReferenceKvChannel(
      record({ kind: "Zmq", config: { endpoint: "tcp://127.0.0.1:45131" } }),
    ),
    { kind: "zmq", endpoint: "tcp://127.0.0.1:45131" },
  );
  assert.deepEqual(
    parseReferenceKvChannel(record({ kind: "Nats", config: { subject_prefix: "namespace.d" } })),
    { kind: "nats", subjectPrefix: "namespace.d" },
  );
  assert.throws(() => parseReferenceKvChannel(record({ kind: "Carrier pigeon" })), /unknown/);
  assert.throws(
    () => parseReferenceKvChannel({ ...record({}), topic: "kv_metrics" }),
    /not a kv-events/,
  );
});

Deno.test("ReferenceKvRouter: a worker's reported load (kv_metrics, ZeroMQ) weighs in its cost", async () => {
  const discovery = new MemoryDiscovery();
  const events = new LocalEventPlane(new LocalEventBus());
  const endpoint = { namespace: "dynamo", component: "backend", name: "generate" };
  const pub = ZmqPublisher.listen();
  await discovery.put(
    `${referenceLoadChannelsPrefix(endpoint)}1`,
    JSON.stringify({
      type: "EventChannel",
      scope: { kind: "endpoint", endpoint },
      topic: "kv_metrics",
      instance_id: 1,
      transport: { kind: "Zmq", config: { endpoint: pub.endpoint } },
    }),
  );
  const sent: string[] = [];
  const client = {
    path: "dynamo/backend/generate",
    availableInstanceIds: () => ["a", "b"],
    direct: (_req: unknown, id: string) => {
      sent.push(id);
      return Promise.resolve({ context: {}, instanceId: id, async *[Symbol.asyncIterator]() {} });
    },
    roundRobin: () => Promise.reject(new Error("not expected")),
  };
  const router = new ReferenceKvRouter(events, endpoint, client as never, 16, { discovery });
  try {
    const deadline = Date.now() + 5_000;
    while (pub.subscribers === 0) {
      assert.ok(Date.now() < deadline, "the router did not dial the load channel");
      await new Promise((r) => setTimeout(r, 10));
    }
    const report = (worker: bigint, blocks: number, sequence: bigint) =>
      pub.publish(encodeReferenceLoadMessage({
        publisherId: 1n,
        sequence,
        publishedAt: 0n,
        workerId: worker,
        load: {
          activeDecodeBlocks: blocks,
          activePrefillTokens: blocks * 16,
          kvUsedBlocks: blocks,
        },
      }));
    report(0xan, 4000, 0n);
    report(0xbn, 0, 1n);
    while (router.reportedLoad("b") === undefined) {
      assert.ok(Date.now() < deadline, "the load reports did not arrive");
      await new Promise((r) => setTimeout(r, 10));
    }
    assert.deepEqual(router.reportedLoad("a"), {
      activeDecodeBlocks: 4000,
      activePrefillTokens: 64000,
      kvUsedBlocks: 4000,
    });
    // Cold prompts would go in turn; with a's load, each goes to b.
    for (let i = 0; i < 4; i++) {
      for await (
        const _ of await router.generate(
          { token_ids: Array.from({ length: 64 }, (_, k) => 5000 + i * 100 + k) },
          {},
        )
      ) { /* empty */ }
    }
    assert.deepEqual(sent, ["b", "b", "b", "b"]);
    // Reported idle again: the turns come back.
    report(0xan, 0, 2n);
    while (router.reportedLoad("a")!.activeDecodeBlocks !== 0) {
      assert.ok(Date.now() < deadline + 5_000, "the second report did not arrive");
      await new Promise((r) => setTimeout(r, 10));
    }
    sent.length = 0;
    for (let i = 0; i < 4; i++) {
      await router.generate(
        { token_ids: Array.from({ length: 64 }, (_, k) => 9000 + i * 100 + k) },
        {},
      );
    }
    assert.ok(sent.includes("a"), `a never chosen again: ${sent}`);
  } finally {
    await router.close();
    await pub.close();
    await events.close();
    await discovery.close();
  }
});

/**
 * A ReferenceKvRouter over two fake workers "a" and "b" whose streams hold their first output
 * until released (the prompts are "still prefilling"); `sent` lists where each request went.
 */
function heldRouter(onRoute?: ReferenceKvRouterOptions["onRoute"]) {
  const events = new LocalEventPlane(new LocalEventBus());
  const endpoint = { namespace: "dynamo", component: "backend", name: "generate" };
  const sent: string[] = [];
  const release: Array<() => void> = [];
  const client = {
    path: "dynamo/backend/generate",
    availableInstanceIds: () => ["a", "b"],
    direct: (_req: unknown, id: string) => {
      sent.push(id);
      const first = new Promise<void>((r) => release.push(r));
      return Promise.resolve({
        context: {},
        instanceId: id,
        async *[Symbol.asyncIterator]() {
          await first;
          yield { token_ids: [1] };
        },
      });
    },
    roundRobin: () => Promise.reject(new Error("not expected")),
  };
  const router = new ReferenceKvRouter(events, endpoint, client as never, 16, { onRoute });
  return { events, router, sent, release };
}

Deno.test("ReferenceKvRouter books what it sent: a worker still prefilling a long prompt is passed over, and the book empties as streams end", async () => {
  const { events, router, sent, release } = heldRouter();
  try {
    const prompt = (seed: number, blocks: number) =>
      Array.from({ length: blocks * 16 }, (_, k) => seed * 10_000 + k);
    // A long cold prompt goes somewhere; then short cold prompts avoid the worker prefilling it.
    const long = await router.generate({ token_ids: prompt(1, 400) }, {});
    const busy = sent[0]!;
    const reads: Promise<unknown>[] = [];
    const drain = async (s: AsyncIterable<unknown>) => {
      for await (const _ of s) { /* read */ }
    };
    reads.push(drain(long));
    for (let i = 0; i < 3; i++) {
      reads.push(drain(await router.generate({ token_ids: prompt(2 + i, 2) }, {})));
    }
    assert.deepEqual(sent.slice(1), Array(3).fill(busy === "a" ? "b" : "a"));
    for (const r of release) r();
    await Promise.all(reads);
    // Every stream over: nothing left booked, cold prompts go in turn again.
    sent.length = 0;
    release.length = 0;
    const more: Promise<unknown>[] = [];
    for (let i = 0; i < 4; i++) {
      more.push(drain(await router.generate({ token_ids: prompt(10 + i, 2) }, {})));
      for (const r of release.splice(0)) r();
    }
    await Promise.all(more);
    assert.deepEqual([...sent].sort(), ["a", "a", "b", "b"]);
  } finally {
    await router.close();
    await events.close();
  }
});

Deno.test("ReferenceKvRouter counts a prompt still being prefilled as cached where it went: prompts sharing its prefix follow it", async () => {
  const decisions: RouteDecisionRecord[] = [];
  const { events, router, sent, release } = heldRouter((d) => decisions.push(d));
  try {
    // A tenant's long system prompt, then its users' prompts: no KV event has come yet.
    const system = Array.from({ length: 64 * 16 }, (_, k) => 70_000 + k);
    const reads: Promise<unknown>[] = [];
    const drain = async (s: AsyncIterable<unknown>) => {
      for await (const _ of s) { /* read */ }
    };
    for (let user = 0; user < 4; user++) {
      const prompt = [...system, ...Array.from({ length: 32 }, (_, k) => 90_000 + user * 100 + k)];
      reads.push(drain(await router.generate({ token_ids: prompt }, {})));
    }
    assert.deepEqual(sent, Array(4).fill(sent[0]), "the prefix is computed once, where it went");
    // Each decision is told, with both workers weighed: the followers saw the prefix there.
    assert.deepEqual(decisions.map((d) => d.instanceId), sent);
    for (const d of decisions.slice(1)) {
      assert.equal(d.requestBlocks, 66);
      assert.deepEqual(
        d.candidates.map((c) => [c.workerId, c.overlapBlocks]).sort(),
        [["a", sent[0] === "a" ? 64 : 0], ["b", sent[0] === "b" ? 64 : 0]],
      );
      assert.equal(d.costs?.size, 2);
    }
    for (const r of release) r();
    await Promise.all(reads);
  } finally {
    await router.close();
    await events.close();
  }
});

Deno.test("ReferenceKvRouter sends a prompt to the worker holding its prefix in host memory", async () => {
  const { events, router, sent, release } = heldRouter();
  try {
    const prompt = (k: number) => Array.from({ length: 4 * 16 + k }, (_, i) => 7_000 + i);
    const blocks = computeBlockHashesSync(prompt(0), 16);
    const stored = {
      stored: {
        parent_hash: null,
        start_position: null,
        blocks: blocks.sequence.map((h, i) => ({ block_hash: h, tokens_hash: blocks.local[i]! })),
      },
    };
    // Worker a computed the prefix, offloaded it, and its GPU dropped it.
    const wire = [
      { storage_tier: "device", event: { event_id: 1, data: stored } },
      { storage_tier: "host_pinned", event: { event_id: 2, data: stored } },
      {
        storage_tier: "device",
        event: { event_id: 3, data: { removed: { block_hashes: blocks.sequence } } },
      },
    ].map((e) => ({ worker_id: 0xan, residency_domain: "worker", ...e }));
    await events.publish(
      referenceKvEventsSubject({ namespace: "dynamo", component: "backend", name: "generate" }),
      encode({
        publisher_id: 1,
        sequence: 0,
        topic: "kv-events",
        payload: encode(wire, { useBigInt64: true }),
      }, { useBigInt64: true }),
    );
    const deadline = Date.now() + 5_000;
    while (router.index.blockCount("a", "host_pinned") < 4) {
      assert.ok(Date.now() < deadline, "the events did not arrive");
      await new Promise((r) => setTimeout(r, 10));
    }
    assert.equal(router.index.blockCount("a", "device"), 0);
    // Prompts continuing the prefix go where it is held, though only in host memory.
    for (let k = 1; k <= 4; k++) {
      const stream = await router.generate({ token_ids: prompt(k) }, {});
      for (const r of release.splice(0)) r();
      for await (const _ of stream) { /* read */ }
    }
    assert.deepEqual(sent, ["a", "a", "a", "a"]);
  } finally {
    await router.close();
    await events.close();
  }
});
