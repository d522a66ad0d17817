// The reference's own instance records (captured from ai-dynamo 1.6.1) parse; malformed ones are
// refused at the door with the key and the reason.

import assert from "node:assert/strict";
import discovery from "../../tests/golden/reference_1.6.1/discovery.json" with { type: "json" };
import { MemoryDiscovery } from "../discovery/memory.ts";
import { TimeoutError } from "../errors.ts";
import { ReferenceRecordError } from "./errors.ts";
import {
  listReferenceInstances,
  parseReferenceInstance,
  waitForReferenceInstances,
} from "./instances.ts";

const KEY = "v1/instances/dynamo/backend/generate/4e24a21101676f09";
const golden = (discovery.etcd as Record<string, unknown>)[KEY] as Record<string, unknown>;
const ENDPOINT = { namespace: "dynamo", component: "backend", endpoint: "generate" };

Deno.test("the reference's captured instance record parses", () => {
  assert.deepEqual(parseReferenceInstance(KEY, JSON.stringify(golden)), {
    instanceId: "4e24a21101676f09",
    namespace: "dynamo",
    component: "backend",
    endpoint: "generate",
    hostname: "127.0.0.1",
    port: 43491,
    endpointPath: "4e24a21101676f09/dynamo/backend/generate",
    codec: "msgpack",
  });
});

Deno.test("a reference worker on its NATS request plane: its record names the subject", () => {
  // As a 1.6.1 mocker wrote it with DYN_REQUEST_PLANE=nats (captured 2026-11-25).
  const key = "v1/instances/dynamo/backend/generate/7c3ca212aa826208";
  const record = '{"type":"Endpoint","component":"backend","endpoint":"generate",' +
    '"namespace":"dynamo","instance_id":8952208360359485960,' +
    '"transport":{"nats_tcp":"dynamo_backend.generate-7c3ca212aa826208"},' +
    '"device_type":"cuda","request_plane_codec":"msgpack"}';
  assert.deepEqual(parseReferenceInstance(key, record), {
    instanceId: "7c3ca212aa826208",
    namespace: "dynamo",
    component: "backend",
    endpoint: "generate",
    hostname: "",
    port: 0,
    endpointPath: "7c3ca212aa826208/dynamo/backend/generate",
    codec: "msgpack",
    natsSubject: "dynamo_backend.generate-7c3ca212aa826208",
  });
});

Deno.test("malformed instance records are refused with the key and the reason", () => {
  const bad: [string, string, RegExp][] = [
    [KEY, "{", /not JSON/],
    [KEY, "[]", /not a JSON object/],
    [KEY, JSON.stringify({ ...golden, type: "Model" }), /not "Endpoint"/],
    [KEY, JSON.stringify({ ...golden, component: "other" }), /component/],
    [KEY, JSON.stringify({ ...golden, transport: { nats_tcp: "x" } }), /not this instance's/],
    [
      KEY,
      JSON.stringify({ ...golden, transport: { nats_tcp: "a b-4e24a21101676f09" } }),
      /not this instance's/,
    ],
    [KEY, JSON.stringify({ ...golden, transport: { http: "x" } }), /neither/],
    [KEY, JSON.stringify({ ...golden, transport: { tcp: "127.0.0.1/x" } }), /host:port/],
    [KEY, JSON.stringify({ ...golden, transport: { tcp: "h:70000/" + KEY.slice(13) } }), /port/],
    [
      KEY,
      JSON.stringify({ ...golden, transport: { tcp: "h:1/ffff/dynamo/backend/generate" } }),
      /does not match the key/,
    ],
    [KEY, JSON.stringify({ ...golden, request_plane_codec: "cbor" }), /codec/],
    ["v1/instances/dynamo/backend/generate", JSON.stringify(golden), /key is not/],
    ["v1/instances/dynamo/backend/generate/XYZ", JSON.stringify(golden), /not hex/],
    ["v1/mdc/dynamo/backend/generate/4e24", JSON.stringify(golden), /not under/],
  ];
  for (const [key, value, why] of bad) {
    assert.throws(
      () => parseReferenceInstance(key, value),
      (err: Error) =>
        err instanceof ReferenceRecordError && err.key === key && why.test(err.message),
      `${key} ${value}`,
    );
  }
});

Deno.test("listReferenceInstances leaves out what does not parse and says so", async () => {
  const d = new MemoryDiscovery();
  try {
    await d.put(KEY, JSON.stringify(golden));
    await d.put("v1/instances/dynamo/backend/generate/abc", "not json");
    await d.put("v1/instances/dynamo/backend/other/abc", JSON.stringify(golden));
    const invalid: string[] = [];
    const found = await listReferenceInstances(d, ENDPOINT, {
      onInvalid: (err) => invalid.push(err.key),
    });
    assert.deepEqual(found.map((i) => i.instanceId), ["4e24a21101676f09"]);
    assert.deepEqual(invalid, ["v1/instances/dynamo/backend/generate/abc"]);
  } finally {
    await d.close();
  }
});

Deno.test("waitForReferenceInstances gives up at its deadline with what it found", async () => {
  const d = new MemoryDiscovery();
  try {
    await assert.rejects(
      waitForReferenceInstances(d, ENDPOINT, { timeoutMs: 50, pollMs: 10 }),
      (err: Error) => err instanceof TimeoutError && /0 of 1/.test(err.message),
    );
  } finally {
    await d.close();
  }
});
