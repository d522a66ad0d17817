// The agent-metadata door: valid metadata parses unchanged; random, oversized and corrupted
// metadata is a TransferArgumentError, never a crash; and what passes the parser cannot
// make the native side map or copy past a real segment.

import assert from "node:assert/strict";
import fc from "fast-check";
import { loadNativeLibrary, TransferAgent, TransferArgumentError, TransferError } from "./mod.ts";
import { MAX_METADATA_REGIONS, parseMetadata } from "./metadata.ts";

loadNativeLibrary();

const name = fc.string({ minLength: 1, maxLength: 40 });
const id = fc.maxSafeNat();
const region = fc.oneof(
  fc.record({
    key: name,
    mem_type: fc.constant("DRAM" as const),
    bytes: fc.integer({ min: 1, max: 2 ** 40 }),
    device: fc.constant(0),
    native_id: id,
    shm: name,
  }, { noNullPrototype: true }),
  fc.record({
    key: name,
    mem_type: fc.constant("VRAM" as const),
    bytes: fc.integer({ min: 1, max: 2 ** 40 }),
    device: fc.nat({ max: 16 }),
    native_id: id,
    ipc_handle: fc.stringMatching(/^[0-9a-f]{128}$/),
  }, { noNullPrototype: true }),
);
const metadata = fc.record({
  version: fc.constant(1 as const),
  name,
  process: fc.stringMatching(/^[0-9a-f]{1,16}$/),
  pid: fc.nat(),
  notif_queue: fc.record({ shm: name, native_id: id }, { noNullPrototype: true }),
  regions: fc.uniqueArray(region, { maxLength: 5, selector: (r) => r.key }),
}, { noNullPrototype: true });

function refused(text: string): boolean {
  try {
    parseMetadata(text);
    return false;
  } catch (err) {
    assert.ok(err instanceof TransferArgumentError, `threw past the door: ${err}`);
    return true;
  }
}

Deno.test("valid agent metadata parses unchanged, as bytes or text", () => {
  fc.assert(
    fc.property(metadata, (m) => {
      const text = JSON.stringify(m);
      assert.deepEqual(parseMetadata(text), m);
      assert.deepEqual(parseMetadata(new TextEncoder().encode(text)), m);
    }),
    { numRuns: 300 },
  );
});

Deno.test("random and corrupted agent metadata is refused with TransferArgumentError", () => {
  fc.assert(fc.property(fc.string(), (s) => void refused(s)), { numRuns: 300 });
  fc.assert(fc.property(fc.jsonValue(), (v) => void refused(JSON.stringify(v))), { numRuns: 300 });
  // Values wrong for every field below (an empty region list aside).
  const bad = fc.constantFrom<unknown>(null, "", -1, 1.5, 2 ** 60, "x".repeat(300), [], {});
  fc.assert(
    fc.property(
      metadata.filter((m) => m.regions.length > 0),
      fc.constantFrom("name", "process", "pid", "notif_queue", "regions"),
      fc.constantFrom("key", "mem_type", "bytes", "device", "native_id", "shm", "ipc_handle"),
      bad,
      (m, top, field, value) => {
        const a = JSON.parse(JSON.stringify(m));
        a[top] = value;
        const emptyList = top === "regions" && Array.isArray(value);
        assert.equal(refused(JSON.stringify(a)), !emptyList, `${top} = ${JSON.stringify(value)}`);
        const b = JSON.parse(JSON.stringify(m));
        b.regions[0][field] = value;
        // A DRAM region has no IPC handle and a VRAM one no segment name: those are not read.
        const unread = (field === "shm" && m.regions[0]!.mem_type === "VRAM") ||
          (field === "ipc_handle" && m.regions[0]!.mem_type === "DRAM");
        assert.equal(refused(JSON.stringify(b)), !unread, `regions[0].${field}`);
      },
    ),
    { numRuns: 500 },
  );
});

Deno.test("agent metadata with zero-byte or duplicate regions, or too many, is refused", () => {
  const ok = {
    version: 1,
    name: "d",
    process: "ab",
    pid: 1,
    notif_queue: { shm: "/q", native_id: 1 },
    regions: [{ key: "1", mem_type: "DRAM", bytes: 64, device: 0, native_id: 1, shm: "/r" }],
  };
  assert.equal(refused(JSON.stringify(ok)), false);
  const r = ok.regions[0]!;
  assert.ok(refused(JSON.stringify({ ...ok, regions: [{ ...r, bytes: 0 }] })));
  assert.ok(refused(JSON.stringify({ ...ok, regions: [r, r] })));
  assert.ok(refused(JSON.stringify({ ...ok, pid: 2 ** 53 })));
  assert.ok(refused(JSON.stringify({ ...ok, name: "n".repeat(257) })));
  const many = Array.from({ length: MAX_METADATA_REGIONS + 1 }, (_, i) => ({ ...r, key: `${i}` }));
  assert.ok(refused(JSON.stringify({ ...ok, regions: many })));
});

Deno.test("metadata claiming a bigger segment than the real one is refused when mapped", () => {
  const decode = new TransferAgent("decode-meta");
  const prefill = new TransferAgent("prefill-meta");
  try {
    const dst = decode.allocate("DRAM", 4096);
    decode.registerMemory(dst);
    const meta = JSON.parse(new TextDecoder().decode(decode.getAgentMetadata()));
    // Pose as another process, so the segment is mapped by name with the claimed size.
    meta.process = "0";
    meta.regions[0].bytes = 2 ** 30;
    prefill.addRemoteAgent(JSON.stringify(meta));
    assert.throws(
      () =>
        prefill.prepXferDlist("decode-meta", {
          mem_type: "DRAM",
          descs: [{ region: meta.regions[0].key, offset: 2 ** 29, length: 64 }],
        }),
      (e: unknown) => e instanceof TransferError && /holds 4096 bytes/.test(e.message),
    );
  } finally {
    prefill.close();
    decode.close();
  }
});
