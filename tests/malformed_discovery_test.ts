// Malformed records in a real etcd, next to a served model: the frontend reports them once,
// keeps serving, goes on applying updates, and holds the right state once they are gone.

import assert from "node:assert/strict";
import type { DistributedRuntime } from "../mod.ts";
import {
  createFrontend,
  echoEngine,
  ModelInput,
  ModelManager,
  ModelType,
  registerLlm,
} from "../llm/mod.ts";
import { builtinTestModel } from "../llm/model/test_model.ts";
import { eventually, openReal } from "./_helpers/backends.ts";
import { haveServers } from "./_helpers/servers.ts";
import { recordingLogger } from "./_helpers/recording_logger.ts";

async function serveModel(rt: DistributedRuntime, model: string) {
  const endpoint = rt.namespace("ns").component("backend").endpoint("generate");
  endpoint.serveEndpoint(echoEngine()).catch(() => {});
  await registerLlm(ModelInput.Tokens, ModelType.Completions, endpoint, await builtinTestModel(), {
    modelName: model,
  });
  return endpoint;
}

Deno.test({
  name: "a frontend keeps serving next to malformed model and instance records in etcd",
  ignore: !haveServers(),
  async fn() {
    const backend = await openReal();
    const { logger, warnings } = recordingLogger();
    const malformed = (key: string) =>
      warnings.filter((w) => /malformed/.test(w.msg) && w.fields.key === key).length;
    try {
      const a = await backend.runtime();
      const front = await backend.runtime({ logger });
      const admin = await backend.runtime();
      const models = new ModelManager(front, { logger });
      const app = createFrontend({ models });
      const ids = async () =>
        ((await (await app.fetch(new Request("http://x/v1/models"))).json()).data as {
          id: string;
        }[]).map((m) => m.id).sort();
      const complete = async (model: string) => {
        const r = await app.fetch(
          new Request("http://x/v1/completions", {
            method: "POST",
            body: JSON.stringify({ model, prompt: "hello world", max_tokens: 2 }),
          }),
        );
        return { status: r.status, body: await r.json() };
      };
      try {
        await serveModel(a, "m1");
        // Malformed records under the models prefix (the wire layout, spelled out) and an
        // instance record that routes nowhere, next to m1's endpoint.
        const junk = "v1/models/ns/backend/generate/bad1";
        const wrongShape = "v1/models/ns/backend/generate/bad2";
        const badInstance = "v1/instances/ns/backend/generate/bad3";
        // Well formed but for a name no endpoint can have (the old check let it through,
        // and building its client threw inside the watch).
        const badName = "v1/models/ns/backend/generate/bad4";
        await admin.discovery.put(junk, "{not json");
        await admin.discovery.put(wrongShape, JSON.stringify({ name: 42, endpoint: "x" }));
        await admin.discovery.put(badInstance, JSON.stringify({ instance_id: 7 }));
        await admin.discovery.put(
          badName,
          JSON.stringify({
            name: "m3",
            endpoint: { namespace: "no spaces!", component: "backend", name: "generate" },
            model_type: ModelType.Completions,
            model_input: ModelInput.Tokens,
            card_key: "v1/mdc/ns/backend/generate/bad4",
            mdcsum: "",
          }),
        );
        await models.start();
        await eventually(async () => (await ids()).includes("m1"), 10_000, "m1 is listed");
        assert.deepEqual(await ids(), ["m1"]);
        for (let i = 0; i < 3; i++) {
          const { status, body } = await complete("m1");
          assert.equal(status, 200, JSON.stringify(body));
          assert.equal(body.choices[0].text, "hello world");
        }
        assert.equal(malformed(junk), 1, "the non-JSON entry is reported once");
        assert.equal(malformed(wrongShape), 1, "the wrong-shape entry is reported once");
        assert.equal(malformed(badName), 1, "the entry with a bad name is reported once");
        await eventually(() => malformed(badInstance) === 1, 5000, "the bad instance is reported");

        // Later updates are applied: a second worker serves m2.
        const b = await backend.runtime();
        const endpointB = await serveModel(b, "m2");
        await eventually(async () => (await ids()).includes("m2"), 10_000, "m2 is listed");
        assert.equal((await complete("m2")).status, 200);

        // A malformed value over m2's good entry reads as its delete; fixing it restores m2.
        const m2Key = `v1/models/ns/backend/generate/${endpointB.instanceId}`;
        const m2Entry = (await admin.discovery.get(m2Key))!;
        await admin.discovery.put(m2Key, JSON.stringify({ name: "m2" }));
        await eventually(async () => !(await ids()).includes("m2"), 10_000, "m2 is dropped");
        assert.equal(malformed(m2Key), 1);
        await admin.discovery.put(m2Key, m2Entry);
        await eventually(async () => (await ids()).includes("m2"), 10_000, "m2 is back");

        // Deleting the malformed records changes nothing served; deleting m2's entry drops it.
        await admin.discovery.delete(junk);
        await admin.discovery.delete(wrongShape);
        await admin.discovery.delete(badInstance);
        await admin.discovery.delete(badName);
        await admin.discovery.delete(m2Key);
        await eventually(async () => !(await ids()).includes("m2"), 10_000, "m2 is gone");
        assert.deepEqual(await ids(), ["m1"]);
        assert.equal((await complete("m1")).status, 200);
        assert.equal(malformed(junk) + malformed(wrongShape), 2, "nothing was reported twice");
        assert.ok(
          !warnings.some((w) => /failed; retrying/.test(w.msg)),
          `no watch was restarted: ${JSON.stringify(warnings)}`,
        );
      } finally {
        await models.close();
      }
    } finally {
      await backend.close();
    }
  },
});
