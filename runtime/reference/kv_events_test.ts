// Our KV events in the reference's format, byte for byte against the message captured from a
// reference mocker (tests/golden/reference_1.6.1/kv_events.json), and through our ZeroMQ
// publisher to our ZeroMQ subscriber.

import assert from "node:assert/strict";
import { decode, encode } from "@msgpack/msgpack";
import { encodeReferenceKvMessage, ReferenceKvState } from "./kv_events.ts";
import { ZmqPublisher } from "./zmq_pub.ts";
import { ZmqSubscriber } from "./zmq_sub.ts";

const GOLDEN = new URL("../../tests/golden/reference_1.6.1/kv_events.json", import.meta.url);
const STATE = new URL("../../tests/golden/reference_1.6.1/kv_state.json", import.meta.url);
const hex = (s: string) => Uint8Array.from(s.match(/../g)!.map((h) => parseInt(h, 16)));
const toHex = (b: Uint8Array) => Array.from(b, (x) => x.toString(16).padStart(2, "0")).join("");

Deno.test("encodeReferenceKvMessage: the captured reference message, byte for byte", async () => {
  const golden = JSON.parse(await Deno.readTextFile(GOLDEN)) as {
    zmq: { instance_id: string; parts_hex: string[] };
  };
  const parts = golden.zmq.parts_hex.map(hex);
  const view = (b: Uint8Array) => new DataView(b.buffer, b.byteOffset, b.length);
  const publisherId = view(parts[1]!).getBigUint64(0);
  const sequence = view(parts[2]!).getBigUint64(0);
  // published_at: the envelope's third field, a msgpack uint64 after its key.
  const payload = parts[3]!;
  const at = toHex(payload).indexOf(toHex(new TextEncoder().encode("published_at"))) / 2 + 12;
  assert.equal(payload[at], 0xcf);
  const publishedAt = view(payload.subarray(at + 1, at + 9)).getBigUint64(0);
  const ours = encodeReferenceKvMessage({
    publisherId,
    sequence,
    publishedAt,
    workerId: BigInt(`0x${golden.zmq.instance_id}`),
    eventId: 1,
    data: {
      stored: {
        parent_hash: null,
        blocks: [
          { block_hash: 0xf617bf3b93a1d900n, tokens_hash: 0xf617bf3b93a1d900n },
          { block_hash: 0x0e934255bc70c31fn, tokens_hash: 0xeb9dec89f9d951f4n },
        ],
      },
    },
  });
  assert.deepEqual(ours.map(toHex), golden.zmq.parts_hex);
});

Deno.test("ZmqPublisher: a subscriber gets the messages of its topic, whole, in order; others not", async () => {
  const pub = ZmqPublisher.listen();
  const enc = new TextEncoder();
  const sub = await ZmqSubscriber.connect(pub.endpoint, { topic: enc.encode("kv-events") });
  try {
    const deadline = Date.now() + 5_000;
    while (pub.subscribers === 0) {
      assert.ok(Date.now() < deadline, "the subscription did not arrive");
      await new Promise((r) => setTimeout(r, 10));
    }
    const big = new Uint8Array(70_000).fill(7);
    pub.publish([enc.encode("kv_metrics"), enc.encode("not for it")]);
    pub.publish([enc.encode("kv-events"), enc.encode("a")]);
    pub.publish([enc.encode("kv-events"), big, enc.encode("c")]);
    const got: Uint8Array[][] = [];
    for await (const parts of sub) {
      got.push(parts);
      if (got.length === 2) break;
    }
    assert.equal(new TextDecoder().decode(got[0]![1]), "a");
    assert.equal(got[1]!.length, 3);
    assert.deepEqual(got[1]![1], big);
  } finally {
    sub.close();
    await pub.close();
  }
});

/** The blocks the captured mocker stored for tokens 1..130 (block size 64): one chain of two. */
const STORED = {
  stored: {
    parent_hash: null,
    blocks: [
      { block_hash: 0xf617bf3b93a1d900n, tokens_hash: 0xf617bf3b93a1d900n },
      { block_hash: 0x0e934255bc70c31fn, tokens_hash: 0xeb9dec89f9d951f4n },
    ],
  },
};

interface Capture {
  request_hex: string;
  response_items_hex: string[];
}

Deno.test("ReferenceKvState: the captured KV-state answers, byte for byte", async () => {
  const golden = JSON.parse(await Deno.readTextFile(STATE)) as Record<string, unknown> & {
    instance_id: string;
    tree_dump: Capture;
    events: Capture;
    too_new: Capture;
    event_source_json: string;
  };
  const state = new ReferenceKvState(BigInt(`0x${golden.instance_id}`));
  assert.equal(state.record(STORED), 1);
  for (const name of ["tree_dump", "events", "too_new"] as const) {
    const { request_hex: req, response_items_hex: items } = golden[name];
    const request = decode(hex(req), { useBigInt64: true }) as Record<string, unknown>;
    assert.equal(request.kind, "recovery");
    // Our worker answers as the reference's did: the item `{data, complete_final: false}`.
    const ours = encode(
      { data: state.answerQuery(request), complete_final: false },
      { useBigInt64: true },
    );
    assert.equal(toHex(ours), items[0], name);
  }
  // The recovery target the reference names: its query endpoint, as an instance record.
  const source = JSON.parse(golden.event_source_json);
  assert.equal(source.metadata.recovery_target.endpoint, golden.query_endpoint);
  assert.match(String(golden.query_endpoint), /^worker_kv_query_source_[0-9a-f]+$/);
});

Deno.test("ReferenceKvState: events from an id, a dump past the buffer, ranges, other workers", () => {
  const state = new ReferenceKvState(7n, 2);
  const block = (h: bigint) => ({ block_hash: h, tokens_hash: h + 100n });
  state.record({ stored: { parent_hash: null, blocks: [block(1n), block(2n)] } }); // 1
  state.record({ stored: { parent_hash: 2n, blocks: [block(3n)] } }); // 2: a branch under 2
  state.record({ stored: { parent_hash: 2n, blocks: [block(4n), block(5n)] } }); // 3
  state.record({ removed: { block_hashes: [3n] } }); // 4
  const ask = (start: number | null, end: number | null = null, worker = 7n) =>
    state.answerQuery({
      worker_id: worker,
      dp_rank: 0,
      start_event_id: start,
      end_event_id: end,
      supports_tree_dump_failed: true,
      kind: "recovery",
    }) as Record<string, Record<string, unknown>>;
  // From an id still buffered (the last 2): those events, with their ids.
  const events = ask(3).Events!;
  assert.deepEqual(
    (events.events as { event: { event_id: number } }[]).map((e) => e.event.event_id),
    [3, 4],
  );
  assert.equal(events.last_event_id, 4);
  // From an id older than the buffer, or none: the held blocks, parents first, runs together.
  for (const start of [1, null]) {
    const dump = ask(start).TreeDump!;
    assert.equal(dump.last_event_id, 4);
    assert.equal(dump.reset_scope, "all");
    const stored = (dump.events as { event: { event_id: number; data: unknown } }[]).map((e) =>
      e.event.data as { stored: { parent_hash: bigint | null; blocks: { block_hash: bigint }[] } }
    );
    assert.deepEqual(
      stored.map((s) => [s.stored.parent_hash, s.stored.blocks.map((b) => b.block_hash)]),
      [[null, [1n, 2n, 4n, 5n]]],
    );
  }
  assert.deepEqual(ask(5), {
    TooNew: { requested_start: 5, requested_end: 4, newest_available: 4 },
  });
  assert.deepEqual(ask(4, 3), { InvalidRange: { start_id: 4, end_id: 3 } });
  assert.ok("Error" in ask(null, null, 8n));
  state.record("cleared");
  assert.deepEqual(ask(null).TreeDump!.events, []);
});

Deno.test("ReferenceKvState: each event and dumped run names its storage tier", () => {
  const state = new ReferenceKvState(7n);
  const block = (h: bigint) => ({ block_hash: h, tokens_hash: h + 100n });
  const chain = { stored: { parent_hash: null, blocks: [1n, 2n, 3n, 4n].map(block) } };
  state.record(chain); // 1: computed on the GPU
  state.record(chain, "host_pinned"); // 2: offloaded
  state.record({ removed: { block_hashes: [2n, 3n] } }); // 3: evicted from the GPU
  state.record({ removed: { block_hashes: [4n] } }, "host_pinned"); // 4: dropped from the host
  assert.equal(state.heldBlocks, 4, "1 in both tiers, 2 and 3 in host memory, 4 on the GPU");
  const ask = (start: number | null) =>
    state.answerQuery({
      worker_id: 7n,
      dp_rank: 0,
      start_event_id: start,
      end_event_id: null,
      supports_tree_dump_failed: true,
      kind: "recovery",
    }) as Record<string, { events: Record<string, unknown>[] }>;
  assert.deepEqual(
    ask(1).Events!.events.map((e) => e.storage_tier),
    ["device", "host_pinned", "device", "host_pinned"],
  );
  // The dump: per tier, the stretches of each run, parents first.
  const dump = ask(null).TreeDump!.events.map((e) => {
    const data = (e.event as {
      data: { stored: { parent_hash: bigint | null; blocks: { block_hash: bigint }[] } };
    })
      .data.stored;
    return [e.storage_tier, data.parent_hash, data.blocks.map((b) => b.block_hash)];
  });
  assert.deepEqual(dump, [
    ["device", null, [1n]],
    ["host_pinned", null, [1n, 2n, 3n]],
    ["device", 3n, [4n]],
  ]);
  // On the wire: the tier named in each message.
  const parts = encodeReferenceKvMessage({
    publisherId: 1n,
    sequence: 0n,
    publishedAt: 0n,
    workerId: 7n,
    eventId: 5,
    data: { removed: { block_hashes: [1n] } },
    tier: "host_pinned",
  });
  const envelope = decode(parts[3]!.subarray(5), { useBigInt64: true }) as { payload: Uint8Array };
  const [event] = decode(envelope.payload, { useBigInt64: true }) as { storage_tier: string }[];
  assert.equal(event!.storage_tier, "host_pinned");
});

Deno.test("ReferenceKvState refuses an unknown tier and records nothing", () => {
  const state = new ReferenceKvState(7n);
  assert.throws(() => state.record("cleared", "tape" as never), /unknown storage tier "tape"/);
  assert.equal(state.lastEventId, 0);
});
