// Our load reports in the reference's format, byte for byte against the kv_metrics message
// captured from a reference mocker (tests/golden/reference_1.6.1/load_metrics.json), decoded back,
// and counted from an engine's requests.

import assert from "node:assert/strict";
import { decodeReferenceLoad, encodeReferenceLoadMessage } from "./load_metrics.ts";

const GOLDEN = new URL("../../tests/golden/reference_1.6.1/load_metrics.json", import.meta.url);
const hex = (s: string) => Uint8Array.from(s.match(/../g)!.map((h) => parseInt(h, 16)));
const toHex = (b: Uint8Array) => Array.from(b, (x) => x.toString(16).padStart(2, "0")).join("");

Deno.test("encodeReferenceLoadMessage: the captured kv_metrics message, byte for byte", async () => {
  const golden = JSON.parse(await Deno.readTextFile(GOLDEN)) as {
    instance_id: string;
    kv_metrics: { parts_hex: string[] };
  };
  const parts = golden.kv_metrics.parts_hex.map(hex);
  assert.equal(new TextDecoder().decode(parts[0]), "kv_metrics");
  const view = (b: Uint8Array) => new DataView(b.buffer, b.byteOffset, b.length);
  const payload = parts[3]!;
  const decoded = decodeReferenceLoad(payload.subarray(5));
  assert.equal(decoded.workerId, golden.instance_id);
  // The mocker reports the blocks it holds; it leaves the running requests' load out (null).
  assert.deepEqual(decoded.load, {
    activeDecodeBlocks: null,
    activePrefillTokens: null,
    kvUsedBlocks: 3,
  });
  const at = toHex(payload).indexOf(toHex(new TextEncoder().encode("published_at"))) / 2 + 12;
  assert.equal(payload[at], 0xcf);
  const ours = encodeReferenceLoadMessage({
    publisherId: view(parts[1]!).getBigUint64(0),
    sequence: view(parts[2]!).getBigUint64(0),
    publishedAt: view(payload.subarray(at + 1, at + 9)).getBigUint64(0),
    workerId: BigInt(`0x${golden.instance_id}`),
    load: decoded.load,
  });
  assert.deepEqual(ours.map(toHex), golden.kv_metrics.parts_hex);
  // Every field present round-trips.
  const full = { activeDecodeBlocks: 90, activePrefillTokens: 1234, kvUsedBlocks: 95 };
  const again = encodeReferenceLoadMessage({
    publisherId: 1n,
    sequence: 0n,
    publishedAt: 2n,
    workerId: 0xffff_0000_1111_2222n,
    load: full,
  });
  assert.deepEqual(decodeReferenceLoad(again[3]!.subarray(5)), {
    workerId: "ffff000011112222",
    load: full,
  });
});
