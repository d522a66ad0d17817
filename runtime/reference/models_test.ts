// The reference's captured model record parses into the model it serves; malformed ones are
// left out with their key.

import assert from "node:assert/strict";
import discovery from "../../tests/golden/reference_1.6.1/discovery.json" with { type: "json" };
import { MemoryDiscovery } from "../discovery/memory.ts";
import { ReferenceRecordError } from "./errors.ts";
import { listReferenceModels, parseReferenceModel } from "./models.ts";

const KEY = "v1/mdc/dynamo/backend/generate/4e24a21101676f09";
const golden = (discovery.etcd as Record<string, unknown>)[KEY] as Record<string, unknown>;

Deno.test("the reference's captured model record parses", () => {
  const model = parseReferenceModel(KEY, JSON.stringify(golden));
  assert.equal(model.name, "Qwen3-0.6B");
  assert.equal(model.instanceId, "4e24a21101676f09");
  assert.deepEqual([model.namespace, model.component, model.endpoint], [
    "dynamo",
    "backend",
    "generate",
  ]);
  assert.equal(model.modelType, "Chat | Completions");
  assert.equal(model.modelInput, "Tokens");
  assert.equal(model.kvCacheBlockSize, 64);
  assert.equal(model.card.slug, "qwen3-0_6b");
});

Deno.test("listReferenceModels leaves out malformed records and says so", async () => {
  const d = new MemoryDiscovery();
  try {
    await d.put(KEY, JSON.stringify(golden));
    const card = golden.card_json as Record<string, unknown>;
    await d.put("v1/mdc/dynamo/backend/generate/1", JSON.stringify({ ...golden, card_json: 1 }));
    await d.put(
      "v1/mdc/dynamo/backend/generate/2",
      JSON.stringify({ ...golden, card_json: { ...card, kv_cache_block_size: 0 } }),
    );
    await d.put("v1/mdc/other/backend/generate/3", JSON.stringify(golden));
    const invalid: string[] = [];
    const models = await listReferenceModels(d, {
      namespace: "dynamo",
      onInvalid: (err) => {
        assert.ok(err instanceof ReferenceRecordError);
        invalid.push(err.key);
      },
    });
    assert.deepEqual(models.map((m) => m.name), ["Qwen3-0.6B"]);
    assert.deepEqual(invalid, [
      "v1/mdc/dynamo/backend/generate/1",
      "v1/mdc/dynamo/backend/generate/2",
    ]);
    assert.equal((await listReferenceModels(d)).length, 2);
  } finally {
    await d.close();
  }
});
