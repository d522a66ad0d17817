// The instance record is the reference's (ai-dynamo 1.6.1) own, checked against the golden record
// captured from its processes; our discovery reads it and the earlier record of ours, and tells
// the workers it can call from those that speak the reference's wire only.

import assert from "node:assert/strict";
import discovery from "../tests/golden/reference_1.6.1/discovery.json" with { type: "json" };
import { encodeInstanceRecord, type InstanceRecord, instanceRecordSchema } from "./names.ts";
import { parseReferenceInstance } from "./reference/instances.ts";

const KEY = "v1/instances/dynamo/backend/generate/4e24a21101676f09";
const golden = (discovery.etcd as Record<string, Record<string, unknown>>)[KEY]!;

function ours(wire: "dynamo" | "reference"): InstanceRecord {
  return {
    type: "Endpoint",
    component: "backend",
    endpoint: "generate",
    namespace: "dynamo",
    instance_id: "4e24a21101676f09",
    transport: { tcp: "127.0.0.1:43491/4e24a21101676f09/dynamo/backend/generate" },
    device_type: golden.device_type as string,
    request_plane_codec: "msgpack",
    dynamo_deno: { instance_id: "4e24a21101676f09", wire },
  };
}

Deno.test("our instance record is the reference's, field for field, with our facts added", () => {
  const text = encodeInstanceRecord(ours("dynamo"));
  // The u64 id as the reference writes it: an exact JSON number (beyond 2^53).
  assert.match(text, /"instance_id":5630803628041662217,/);
  const parsed = JSON.parse(text) as Record<string, unknown>;
  const { dynamo_deno, ...theirs } = parsed;
  // Same fields in the same order, same values (the golden file stored the id as a double).
  assert.deepEqual(Object.keys(theirs), Object.keys(golden));
  assert.deepEqual(theirs, golden);
  assert.deepEqual(dynamo_deno, { instance_id: "4e24a21101676f09", wire: "dynamo" });
  // An id that is not hex (none of our backends makes one) stays a string.
  assert.match(encodeInstanceRecord({ ...ours("dynamo"), instance_id: "x-1" }), /"x-1"/);
});

Deno.test("our discovery reads our records old and new, and leaves reference-wire ones to its client", () => {
  const read = (value: unknown) =>
    instanceRecordSchema.safeParse({ key: "4e24a21101676f09", value });
  const subject = "127.0.0.1:43491/4e24a21101676f09/dynamo/backend/generate";
  // Ours now: the reference's record with dynamo_deno naming our wire.
  const now = read(JSON.parse(encodeInstanceRecord(ours("dynamo"))));
  assert.ok(now.success);
  assert.deepEqual(now.data, { id: "4e24a21101676f09", subject });
  // Ours before: instance_id a hex string, no type, no dynamo_deno.
  const before = read({
    namespace: "dynamo",
    component: "backend",
    endpoint: "generate",
    instance_id: "4e24a21101676f09",
    transport: { nats_tcp: "dynamo_backend.generate-4e24a21101676f09" },
  });
  assert.ok(before.success);
  assert.equal(before.data.subject, "dynamo_backend.generate-4e24a21101676f09");
  // The reference's own worker, and ours on its wire: not for our plane.
  for (const value of [golden, JSON.parse(encodeInstanceRecord(ours("reference")))]) {
    const r = read(value);
    assert.ok(!r.success);
    assert.match(r.error.message, /reference's wire only/);
  }
  // A wire we do not know is refused too.
  const unknown = JSON.parse(encodeInstanceRecord(ours("dynamo")));
  unknown.dynamo_deno.wire = "carrier-pigeon";
  assert.ok(!read(unknown).success);
});

Deno.test("the reference workers' client takes theirs and ours on TCP and NATS (both speak its framing)", () => {
  assert.equal(parseReferenceInstance(KEY, JSON.stringify(golden)).port, 43491);
  const referenceWire = parseReferenceInstance(KEY, encodeInstanceRecord(ours("reference")));
  assert.equal(referenceWire.endpointPath, "4e24a21101676f09/dynamo/backend/generate");
  assert.equal(parseReferenceInstance(KEY, encodeInstanceRecord(ours("dynamo"))).port, 43491);
  // Ours on the NATS plane: reached on its subject, as the reference's own NATS workers are.
  const nats: InstanceRecord = {
    ...ours("dynamo"),
    transport: { nats_tcp: "dynamo_backend.generate-4e24a21101676f09" },
  };
  assert.equal(
    parseReferenceInstance(KEY, encodeInstanceRecord(nats)).natsSubject,
    "dynamo_backend.generate-4e24a21101676f09",
  );
  const odd = JSON.parse(encodeInstanceRecord(ours("dynamo")));
  odd.dynamo_deno.wire = "carrier-pigeon";
  assert.throws(() => parseReferenceInstance(KEY, JSON.stringify(odd)), /unknown wire/);
});
