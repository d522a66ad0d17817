// The discovery key layout, spelled out: these strings are the wire (other processes, the
// reference system and `etcdctl` read them), so a change here must be deliberate.

import assert from "node:assert/strict";
import {
  componentKey,
  decodeMemoryKey,
  instanceKey,
  instancePrefix,
  keyInstanceId,
  modelCardKey,
  modelEntryKey,
} from "./keys.ts";

Deno.test("discovery keys follow the v1/ layout", () => {
  assert.equal(instancePrefix(), "v1/instances/");
  assert.equal(instancePrefix("ns"), "v1/instances/ns/");
  assert.equal(instancePrefix("ns", "backend"), "v1/instances/ns/backend/");
  assert.equal(instancePrefix("ns", "backend", "generate"), "v1/instances/ns/backend/generate/");
  assert.equal(
    instanceKey("ns", "backend", "generate", "694d"),
    "v1/instances/ns/backend/generate/694d",
  );
  assert.equal(componentKey("ns", "backend", "694d"), "v1/components/ns/backend/694d");
  assert.equal(
    modelEntryKey("ns", "backend", "generate", "694d"),
    "v1/models/ns/backend/generate/694d",
  );
  assert.equal(
    modelCardKey("ns", "backend", "generate", "694d"),
    "v1/mdc/ns/backend/generate/694d",
  );
  assert.equal(decodeMemoryKey("ns", "decode-0"), "v1/disagg/ns/decode_memory/decode-0");
});

Deno.test("keyInstanceId reads the instance id a model key ends with", () => {
  assert.equal(keyInstanceId("v1/models/ns/backend/generate/694d"), "694d");
  assert.equal(keyInstanceId("694d"), "694d");
});
