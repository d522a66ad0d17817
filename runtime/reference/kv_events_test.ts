// Our KV events in the reference's format, byte for byte against the message captured from a
// reference mocker (tests/golden/reference_1.6.1/kv_events.json), and through our ZeroMQ
// publisher to our ZeroMQ subscriber.

import assert from "node:assert/strict";
import { encodeReferenceKvMessage } from "./kv_events.ts";
import { ZmqPublisher } from "./zmq_pub.ts";
import { ZmqSubscriber } from "./zmq_sub.ts";

const GOLDEN = new URL("../../tests/golden/reference_1.6.1/kv_events.json", import.meta.url);
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
