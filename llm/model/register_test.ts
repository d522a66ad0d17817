import assert from "node:assert/strict";
import { join } from "node:path";
import { DistributedRuntime, EmbeddedCluster, InvalidArgumentError } from "../../mod.ts";
import { haveServers, startServers } from "../../tests/_helpers/servers.ts";
import { computeMdcsum } from "./card.ts";
import { cardObjectName, fetchCardFiles } from "./card_files.ts";
import { ModelSourceError } from "./model_source.ts";
import {
  MODEL_CARD_PREFIX,
  MODEL_ENTRY_PREFIX,
  type ModelDeploymentCard,
  type ModelEntry,
  ModelInput,
  ModelType,
} from "../protocols.ts";
import { modelCardKey, modelEntryKey, registerLlm } from "./register.ts";
import { builtinTestModel } from "./test_model.ts";
import { referenceModelCard } from "../../runtime/reference/worker.ts";

const root = await Deno.makeTempDir({ prefix: "dynamo-register-test-" });
// The Qwen3 tokenizer is 11 MB: materialize the folder once for the whole file.
const qwen = builtinTestModel(join(root, "models"));

async function eventually(check: () => Promise<boolean>, ms: number, what: string) {
  const deadline = Date.now() + ms;
  while (Date.now() < deadline) {
    if (await check()) return;
    await new Promise((r) => setTimeout(r, 20));
  }
  throw new Error(`timed out after ${ms} ms waiting until ${what}`);
}

Deno.test("registerLlm() puts the card and the model entry on the lease, and files in the object store", async () => {
  const cluster = new EmbeddedCluster();
  const worker = await DistributedRuntime.connect({ embedded: cluster });
  const observer = await DistributedRuntime.connect({ embedded: cluster });
  try {
    const endpoint = worker.namespace("qwen").component("backend").endpoint("generate");
    const card = await registerLlm(
      ModelInput.Tokens,
      ModelType.Chat | ModelType.Completions,
      endpoint,
      await qwen,
      { kvCacheBlockSize: 32, migrationLimit: 2, userData: { lora: false } },
    );
    const cardKey = `${MODEL_CARD_PREFIX}qwen/backend/generate/${worker.instanceId}`;
    const entryKey = `${MODEL_ENTRY_PREFIX}qwen/backend/generate/${worker.instanceId}`;
    assert.equal(modelCardKey(endpoint), cardKey);
    assert.equal(modelEntryKey(endpoint), entryKey);
    assert.equal(card.display_name, "Qwen3-0.6B");
    assert.equal(card.kv_cache_block_size, 32);
    assert.equal(card.migration_limit, 2);
    assert.deepEqual(card.user_data, { lora: false });
    assert.equal(card.mdcsum, computeMdcsum(card));

    const cards = await observer.discovery.list(MODEL_CARD_PREFIX);
    assert.deepEqual(cards.map((kv) => kv.key), [cardKey]);
    // The reference's model record (ai-dynamo 1.6.1): the u64 id exact, its card naming the
    // model folder's files, ours in dynamo_deno.
    const record = JSON.parse(cards[0]!.value);
    assert.equal(record.type, "Model");
    assert.deepEqual(
      [record.namespace, record.component, record.endpoint],
      ["qwen", "backend", "generate"],
    );
    assert.ok(
      cards[0]!.value.includes(`"instance_id":${BigInt(`0x${worker.instanceId}`)},`),
      cards[0]!.value.slice(0, 200),
    );
    const cardJson = record.card_json;
    assert.equal(cardJson.display_name, "Qwen3-0.6B");
    assert.equal(cardJson.kv_cache_block_size, 32);
    assert.equal(cardJson.migration_limit, 2);
    assert.equal(cardJson.model_type, "Chat | Completions");
    assert.equal(cardJson.model_input, "Tokens");
    assert.equal(cardJson.source_path, await qwen);
    // As the card of the folder that matches the reference's own card (golden test).
    assert.deepEqual(
      cardJson,
      await referenceModelCard({
        modelPath: await qwen,
        displayName: "Qwen3-0.6B",
        contextLength: card.context_length,
        kvCacheBlockSize: 32,
        migrationLimit: 2,
      }),
    );
    const stored = record.dynamo_deno as ModelDeploymentCard;
    assert.deepEqual(stored, card);
    const entry = JSON.parse((await observer.discovery.get(entryKey))!) as ModelEntry;
    assert.deepEqual(entry, {
      name: "Qwen3-0.6B",
      endpoint: { namespace: "qwen", component: "backend", name: "generate" },
      model_type: ModelType.Chat | ModelType.Completions,
      model_input: "tokens",
      card_key: cardKey,
      mdcsum: card.mdcsum,
    });

    for (const [name, file] of Object.entries(card.files)) {
      assert.ok(await observer.objects.has(cardObjectName(file.sha256)), `${name} uploaded`);
    }
    const files = await fetchCardFiles(observer.objects, stored);
    assert.deepEqual(
      files.get("tokenizer.json"),
      await Deno.readFile(join(await qwen, "tokenizer.json")),
    );

    await worker.shutdown();
    assert.deepEqual(await observer.discovery.list(MODEL_CARD_PREFIX), []);
    assert.deepEqual(await observer.discovery.list(MODEL_ENTRY_PREFIX), []);
  } finally {
    await worker.shutdown();
    await observer.shutdown();
  }
});

Deno.test("registerLlm() registers again by itself after the lease is lost", async () => {
  const cluster = new EmbeddedCluster();
  const worker = await DistributedRuntime.connect({ embedded: cluster });
  try {
    const endpoint = worker.namespace("ns").component("backend").endpoint("generate");
    await registerLlm(ModelInput.Tokens, ModelType.Chat, endpoint, await qwen, {
      modelName: "renamed",
    });
    const lease = worker.leaseId;
    cluster.store.expireLease(lease);
    await eventually(
      async () =>
        worker.leaseId !== lease &&
        (await worker.discovery.get(modelEntryKey(endpoint))) !== undefined,
      3000,
      "the entry is back on a new lease",
    );
    const entry = JSON.parse((await worker.discovery.get(modelEntryKey(endpoint)))!) as ModelEntry;
    assert.equal(entry.name, "renamed");
    assert.ok(await worker.discovery.get(modelCardKey(endpoint)));
  } finally {
    await worker.shutdown();
  }
});

Deno.test("registerLlm() skips uploading files the object store already has", async () => {
  const cluster = new EmbeddedCluster();
  const a = await DistributedRuntime.connect({ embedded: cluster });
  const b = await DistributedRuntime.connect({ embedded: cluster });
  try {
    const puts: string[] = [];
    const put = cluster.objects.put.bind(cluster.objects);
    cluster.objects.put = (name, data) => {
      puts.push(name);
      return put(name, data);
    };
    const model = await qwen;
    const ca = await registerLlm(
      ModelInput.Tokens,
      ModelType.Chat,
      a.namespace("n").component("c").endpoint("e"),
      model,
    );
    assert.equal(puts.length, 4);
    const cb = await registerLlm(
      ModelInput.Tokens,
      ModelType.Chat,
      b.namespace("n").component("c").endpoint("e"),
      model,
    );
    assert.equal(puts.length, 4, "the second worker uploads nothing");
    assert.equal(ca.mdcsum, cb.mdcsum, "the same model gives the same checksum");
    assert.equal((await a.discovery.list(MODEL_ENTRY_PREFIX)).length, 2);
  } finally {
    await a.shutdown();
    await b.shutdown();
  }
});

Deno.test("registerLlm() rejects bad model inputs, types, options and paths, registering nothing", async () => {
  const cluster = new EmbeddedCluster();
  const worker = await DistributedRuntime.connect({ embedded: cluster });
  try {
    const endpoint = worker.namespace("ns").component("backend").endpoint("generate");
    const model = await qwen;
    const cases: [() => Promise<unknown>, new (...a: never[]) => Error, RegExp][] = [
      [
        () => registerLlm("bytes" as never, ModelType.Chat, endpoint, model),
        InvalidArgumentError,
        /modelInput must be .* got "bytes"/,
      ],
      [
        () => registerLlm(ModelInput.Tokens, 0, endpoint, model),
        InvalidArgumentError,
        /modelType must be .* got 0/,
      ],
      [
        () => registerLlm(ModelInput.Tokens, 64, endpoint, model),
        InvalidArgumentError,
        /modelType must be .* got 64/,
      ],
      [
        () => registerLlm(ModelInput.Tokens, "chat" as never, endpoint, model),
        InvalidArgumentError,
        /modelType must be .* got "chat"/,
      ],
      [
        () => registerLlm(ModelInput.Tokens, ModelType.Chat, {} as never, model),
        InvalidArgumentError,
        /endpoint must be an Endpoint/,
      ],
      [
        () =>
          registerLlm(ModelInput.Tokens, ModelType.Chat, endpoint, model, { kvCacheBlockSize: 0 }),
        InvalidArgumentError,
        /kvCacheBlockSize must be a whole number >= 1, got 0/,
      ],
      [
        () =>
          registerLlm(ModelInput.Tokens, ModelType.Chat, endpoint, model, { contextLength: -5 }),
        InvalidArgumentError,
        /contextLength .* got -5/,
      ],
      [
        () =>
          registerLlm(ModelInput.Tokens, ModelType.Chat, endpoint, model, { migrationLimit: 1.5 }),
        InvalidArgumentError,
        /migrationLimit .* got 1\.5/,
      ],
      [
        () => registerLlm(ModelInput.Tokens, ModelType.Chat, endpoint, join(root, "nowhere")),
        ModelSourceError,
        /no such file or folder/,
      ],
    ];
    for (const [call, cls, re] of cases) {
      await assert.rejects(call(), (err: unknown) => {
        assert.ok(err instanceof cls, `${re}: got ${err}`);
        assert.match((err as Error).message, re);
        return true;
      });
    }
    assert.deepEqual(await worker.discovery.list(MODEL_CARD_PREFIX), []);
    assert.deepEqual(await worker.discovery.list(MODEL_ENTRY_PREFIX), []);
    assert.equal(await cluster.objects.has(cardObjectName("0".repeat(64))), false);
  } finally {
    await worker.shutdown();
  }
});

Deno.test({
  name: "registerLlm() on etcd + NATS: another runtime reads the card and fetches its files",
  ignore: !haveServers(),
  async fn() {
    const servers = await startServers();
    const opts = {
      discovery: "etcd",
      requestPlane: "nats",
      etcdEndpoints: servers.etcd.url,
      natsServer: servers.nats.url,
    } as const;
    const worker = await DistributedRuntime.connect(opts);
    const frontend = await DistributedRuntime.connect(opts);
    try {
      const endpoint = worker.namespace("qwen").component("backend").endpoint("generate");
      const card = await registerLlm(ModelInput.Tokens, ModelType.Backend, endpoint, await qwen);
      const entries = await frontend.discovery.list(MODEL_ENTRY_PREFIX);
      assert.equal(entries.length, 1);
      const entry = JSON.parse(entries[0]!.value) as ModelEntry;
      assert.equal(entry.model_type, ModelType.Backend);
      const stored = JSON.parse(
        (await frontend.discovery.get(entry.card_key))!,
      ).dynamo_deno as ModelDeploymentCard;
      assert.equal(stored.mdcsum, card.mdcsum);
      assert.equal(computeMdcsum(stored), stored.mdcsum);
      const files = await fetchCardFiles(frontend.objects, stored);
      assert.deepEqual([...files.keys()].sort(), [
        "config.json",
        "generation_config.json",
        "tokenizer.json",
        "tokenizer_config.json",
      ]);
      assert.deepEqual(
        files.get("tokenizer.json"),
        await Deno.readFile(join(await qwen, "tokenizer.json")),
      );
      await worker.shutdown();
      await eventually(
        async () => (await frontend.discovery.list(MODEL_CARD_PREFIX)).length === 0,
        5000,
        "the card leaves etcd with the worker's lease",
      );
      assert.deepEqual(await frontend.discovery.list(MODEL_ENTRY_PREFIX), []);
    } finally {
      await worker.shutdown();
      await frontend.shutdown();
      await servers.stop();
    }
  },
});

globalThis.addEventListener("unload", () => {
  try {
    Deno.removeSync(root, { recursive: true });
  } catch {
    // already gone
  }
});
