// registerLlm's one model record (the reference's, ours in dynamo_deno): the reference card for
// each kind of model source, our readers of old and new records, and no double listing.

import assert from "node:assert/strict";
import { join } from "node:path";
import { DistributedRuntime, EmbeddedCluster } from "../../mod.ts";
import { tinyLlamaGguf } from "../../tests/_helpers/tiny_gguf.ts";
import { referenceCardFile } from "../../runtime/reference/worker.ts";
import { bareUpstreamCard } from "../engines/openai_upstream.ts";
import { computeMdcsum } from "./card.ts";
import { ModelLoader } from "./loader.ts";
import { ModelManager } from "./registry.ts";
import { loadModelSource } from "./model_source.ts";
import {
  MODEL_CARD_PREFIX,
  type ModelDeploymentCard,
  ModelInput,
  ModelType,
} from "../protocols.ts";
import {
  encodeModelRecord,
  ourCardOf,
  referenceCardOf,
  referenceModelTypeText,
} from "./reference_card.ts";
import { isReferenceModelRecord, referenceModelEntrySchema } from "./reference_models.ts";
import { modelCardKey, publishModelCard, registerLlm } from "./register.ts";
import { builtinTestModel } from "./test_model.ts";

const root = await Deno.makeTempDir({ prefix: "dynamo-reference-card-test-" });
const qwen = builtinTestModel(join(root, "models"));

Deno.test("referenceModelTypeText names our flags as the reference does", () => {
  assert.equal(
    referenceModelTypeText(ModelType.Chat | ModelType.Completions),
    "Chat | Completions",
  );
  assert.equal(referenceModelTypeText(ModelType.Backend), "Chat | Completions");
  assert.equal(referenceModelTypeText(ModelType.Embedding), "Embedding");
  assert.equal(referenceModelTypeText(ModelType.Chat), "Chat");
});

Deno.test("a folder whose files differ from the card's gets the card's files written out, content-addressed", async () => {
  const dir = join(root, "edited");
  await Deno.mkdir(dir, { recursive: true });
  for (const f of ["config.json", "tokenizer.json", "tokenizer_config.json"]) {
    await Deno.copyFile(join(await qwen, f), join(dir, f));
  }
  const loaded = await loadModelSource(dir, { modelName: "edited" });
  // The card's tokenizer_config.json is not what is on disk now.
  await Deno.writeTextFile(join(dir, "tokenizer_config.json"), "{}");
  const filesDir = join(root, "written");
  const cardJson = await referenceCardOf(loaded, loaded.card, { filesDir });
  const named = (cardJson.prompt_formatter as Record<string, { path: string }>)
    .hf_tokenizer_config_json!;
  assert.ok(named.path.startsWith(join(filesDir, "dynamo-reference-card-files")), named.path);
  const bytes = loaded.files.get("tokenizer_config.json")!;
  assert.deepEqual(await Deno.readFile(named.path), bytes);
  assert.deepEqual(named, await referenceCardFile(named.path, bytes));
  assert.equal(cardJson.source_path, join(named.path, ".."));
  // A second worker of the same model names the same folder.
  const again = await referenceCardOf(loaded, loaded.card, { filesDir });
  assert.deepEqual(again, cardJson);
  assert.equal(
    [...Deno.readDirSync(join(filesDir, "dynamo-reference-card-files"))].length,
    1,
    "one folder per content, no leftovers",
  );
});

Deno.test("a GGUF model's reference card names a Hugging Face folder written from the GGUF", async () => {
  const gguf = await tinyLlamaGguf({ dir: join(root, "gguf") });
  const loaded = await loadModelSource(gguf, { modelName: "tiny" });
  const cardJson = await referenceCardOf(loaded, loaded.card, { filesDir: join(root, "g") });
  const section = (name: string, field: string) =>
    (cardJson[name] as Record<string, { path: string; size: number }>)[field]!;
  for (
    const [name, field] of [
      ["model_info", "hf_config_json"],
      ["tokenizer", "hf_tokenizer_json"],
      ["prompt_formatter", "hf_tokenizer_config_json"],
    ] as const
  ) {
    const f = section(name, field);
    assert.equal((await Deno.stat(f.path)).size, f.size, `${name} ${f.path}`);
  }
  assert.equal(cardJson.gen_config, null);
  assert.equal(cardJson.model_input, "Tokens");
  const tokenizer = JSON.parse(
    await Deno.readTextFile(section("tokenizer", "hf_tokenizer_json").path),
  );
  assert.deepEqual(
    tokenizer,
    JSON.parse(new TextDecoder().decode(loaded.files.get("tokenizer.json")!)),
  );
});

Deno.test("an upstream model (Text, no files) gets a reference card that names no files", async () => {
  const loaded = bareUpstreamCard({ baseUrl: "http://127.0.0.1:9/v1", upstreamModel: "up" });
  const cardJson = await referenceCardOf(loaded, loaded.card, { filesDir: join(root, "u") });
  assert.equal(cardJson.model_input, "Text");
  assert.equal(cardJson.display_name, "up");
  for (const s of ["model_info", "tokenizer", "prompt_formatter", "gen_config"]) {
    assert.equal(cardJson[s], null, s);
  }
});

Deno.test("model record: the reference's Model record, exact u64 id, our card in dynamo_deno", () => {
  const card = { display_name: "m", files: {} } as unknown as ModelDeploymentCard;
  const text = encodeModelRecord(
    { namespace: "ns", component: "c", endpoint: "e", instanceId: "fedcba9876543210" },
    { display_name: "m" },
    card,
  );
  assert.ok(text.includes(`"instance_id":18364758544493064720,`), text);
  const value = JSON.parse(text);
  assert.deepEqual(
    [value.type, value.namespace, value.component, value.endpoint],
    ["Model", "ns", "c", "e"],
  );
  assert.deepEqual(ourCardOf(value), card);
  // An id that is not hex (a local runtime's) stays a string.
  assert.equal(
    JSON.parse(encodeModelRecord(
      { namespace: "ns", component: "c", endpoint: "e", instanceId: "local-1" },
      {},
      card,
    )).instance_id,
    "local-1",
  );
  // Older records of ours are the plain card; a reference worker's record holds none of ours.
  assert.deepEqual(ourCardOf(card), card);
  assert.equal(ourCardOf({ type: "Model", card_json: { display_name: "r" } }), undefined);
  assert.equal(ourCardOf(null), undefined);
});

Deno.test("our readers: the loader reads our card from new and older records; the reference watch skips ours", async () => {
  const cluster = new EmbeddedCluster();
  const worker = await DistributedRuntime.connect({ embedded: cluster });
  const frontend = await DistributedRuntime.connect({ embedded: cluster });
  try {
    const endpoint = worker.namespace("ns").component("backend").endpoint("generate");
    const card = await registerLlm(ModelInput.Tokens, ModelType.Chat, endpoint, await qwen, {
      modelName: "new-record",
    });
    const key = modelCardKey(endpoint);
    const value = JSON.parse((await frontend.discovery.get(key))!);
    // Not a reference worker's record: the reference-card watch does not list it again.
    assert.ok(!isReferenceModelRecord(value));
    assert.throws(
      () => referenceModelEntrySchema.parse({ key: key.slice(MODEL_CARD_PREFIX.length), value }),
      /a worker of ours/,
    );
    const loader = new ModelLoader(frontend);
    assert.deepEqual(await loader.loadCard(key), card);
    const pipeline = await loader.loadPipeline(key);
    assert.deepEqual(pipeline.card, card);
    assert.ok(pipeline.tokenizer.encode("hello world").length > 0);

    // An older worker's record: our plain card under the same key.
    const old = worker.namespace("ns").component("old").endpoint("generate");
    const loaded = await loadModelSource(await qwen, { modelName: "old-record" });
    await publishModelCard(old, loaded);
    const plain = { ...loaded.card, mdcsum: computeMdcsum(loaded.card) };
    await worker.internals.registerKey(modelCardKey(old), JSON.stringify(plain));
    assert.deepEqual(await loader.loadCard(modelCardKey(old)), plain);
    assert.equal((await loader.loadPipeline(modelCardKey(old))).card.display_name, "old-record");
  } finally {
    await worker.shutdown();
    await frontend.shutdown();
  }
});

Deno.test("a frontend watching reference records too lists our worker once, as ours", async () => {
  const cluster = new EmbeddedCluster();
  const worker = await DistributedRuntime.connect({ embedded: cluster });
  const front = await DistributedRuntime.connect({ embedded: cluster });
  // Both watches (our entries, the reference's records) list what is there before start resolves.
  const models = new ModelManager(front, { referenceWorkers: {} });
  try {
    const endpoint = worker.namespace("ns").component("backend").endpoint("generate");
    await registerLlm(ModelInput.Tokens, ModelType.Chat, endpoint, await qwen, {
      modelName: "once",
    });
    await models.start();
    assert.deepEqual(models.list().map((m) => m.name), ["once"]);
    assert.deepEqual([...models.get("once")!.endpoints.keys()], ["ns/backend/generate"]);
  } finally {
    await models.close();
    await worker.shutdown();
    await front.shutdown();
  }
});

globalThis.addEventListener("unload", () => {
  try {
    Deno.removeSync(root, { recursive: true });
  } catch {
    // already gone
  }
});

Deno.test("where the files cannot be written out, the reference card names none and registration goes on", async () => {
  const gguf = await tinyLlamaGguf({ dir: join(root, "gguf-ro") });
  const loaded = await loadModelSource(gguf, { modelName: "tiny" });
  // A path no folder can be made under (a file stands where the folder would go).
  const blocker = join(root, "not-a-dir");
  await Deno.writeTextFile(blocker, "");
  const cardJson = await referenceCardOf(loaded, loaded.card, { filesDir: join(blocker, "x") });
  assert.equal(cardJson.display_name, "tiny");
  assert.equal(
    (cardJson.tokenizer as Record<string, unknown> | null | undefined)?.hf_tokenizer_json,
    undefined,
  );
});
