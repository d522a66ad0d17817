import assert from "node:assert/strict";
import { DistributedRuntime } from "../../runtime/distributed_runtime.ts";
import { DynamoError } from "../../runtime/errors.ts";
import { referenceTokensRequest } from "../../runtime/reference/request.ts";
import { ModelInput, ModelType, type PreprocessedRequest } from "../protocols.ts";
import {
  fromReferenceOutput,
  isReferenceModelRecord,
  loadReferencePipeline,
  referenceModelEntrySchema,
  referenceModelType,
  toReferenceRequest,
} from "./reference_models.ts";
import { ModelLoader } from "./loader.ts";
import { builtinTestModel } from "./test_model.ts";

// A model record a 1.6.1 mocker wrote (tests/golden), its file paths pointed where a test wants.
const golden = JSON.parse(
  await Deno.readTextFile(
    new URL("../../tests/golden/reference_1.6.1/discovery.json", import.meta.url),
  ),
).etcd as Record<string, Record<string, unknown>>;
const KEY = Object.keys(golden).find((k) => k.startsWith("v1/mdc/"))!;
const model = await builtinTestModel();

function record(filesAt: (name: string) => string, patch: Record<string, unknown> = {}): string {
  const r = structuredClone(golden[KEY]!);
  const card = r.card_json as Record<string, Record<string, Record<string, unknown>>>;
  card.model_info!.hf_config_json!.path = filesAt("config.json");
  card.tokenizer!.hf_tokenizer_json!.path = filesAt("tokenizer.json");
  card.prompt_formatter!.hf_tokenizer_config_json!.path = filesAt("tokenizer_config.json");
  card.gen_config!.hf_generation_config_json!.path = filesAt("generation_config.json");
  Object.assign(card, patch);
  return JSON.stringify(r);
}

Deno.test("referenceModelType reads the flags we serve and leaves the others out", () => {
  assert.equal(referenceModelType("Chat | Completions"), ModelType.Chat | ModelType.Completions);
  assert.equal(referenceModelType("Embedding"), ModelType.Embedding);
  assert.equal(referenceModelType("TensorBased"), 0);
});

Deno.test("a reference model record is a model entry; our own card is not", () => {
  const value = JSON.parse(record((f) => `${model}/${f}`));
  assert.ok(isReferenceModelRecord(value));
  const parsed = referenceModelEntrySchema.parse({ key: KEY.slice("v1/mdc/".length), value });
  assert.equal(parsed.instanceId, KEY.split("/").at(-1));
  assert.deepEqual(parsed.entry, {
    name: "Qwen3-0.6B",
    endpoint: { namespace: "dynamo", component: "backend", name: "generate" },
    model_type: ModelType.Chat | ModelType.Completions,
    model_input: ModelInput.Tokens,
    card_key: KEY,
    mdcsum: "",
  });
  const ours = { display_name: "m", model_input: "Tokens", kv_cache_block_size: 16 };
  assert.ok(!isReferenceModelRecord(ours));
  assert.throws(() => referenceModelEntrySchema.parse({ key: "ns/c/e/1a", value: ours }));
  const tensor = { ...value, card_json: { ...value.card_json, model_type: "TensorBased" } };
  assert.throws(
    () => referenceModelEntrySchema.parse({ key: KEY.slice(7), value: tensor }),
    /serves nothing we serve/,
  );
});

Deno.test("our preprocessed request becomes the reference's, every field present", () => {
  const ours: PreprocessedRequest = {
    model: "Qwen3-0.6B",
    token_ids: [1, 2, 3],
    stop_conditions: { max_tokens: 7, stop_token_ids_hidden: [9], min_tokens: 2, ignore_eos: true },
    sampling_options: { temperature: 0.5, top_p: 0.9, seed: 4 },
    eos_token_ids: [9],
    output_options: { logprobs: 2 },
    mdc_sum: "ours",
  };
  const wire = toReferenceRequest(ours);
  const full = referenceTokensRequest({ model: "m", tokenIds: [], maxTokens: 1 });
  assert.deepEqual(Object.keys(wire).sort(), Object.keys(full).sort());
  assert.deepEqual(
    Object.keys(wire.stop_conditions).sort(),
    Object.keys(full.stop_conditions).sort(),
  );
  assert.deepEqual(wire.token_ids, [1, 2, 3]);
  assert.equal(wire.stop_conditions.max_tokens, 7);
  assert.deepEqual(wire.stop_conditions.stop_token_ids_hidden, [9]);
  assert.equal(wire.stop_conditions.min_tokens, 2);
  assert.equal(wire.stop_conditions.ignore_eos, true);
  assert.equal(wire.sampling_options.temperature, 0.5);
  assert.equal(wire.sampling_options.top_p, 0.9);
  assert.equal(wire.sampling_options.seed, 4);
  assert.equal(wire.sampling_options.top_k, null);
  assert.equal(wire.output_options.logprobs, 2);
  assert.deepEqual(wire.eos_token_ids, [9]);
  assert.equal(wire.mdc_sum, null, "our checksum is not the reference's");
});

Deno.test("reference outputs become ours: finish reasons known or error", () => {
  assert.deepEqual(
    fromReferenceOutput({ token_ids: [5], finish_reason: null, text: null }),
    { token_ids: [5] },
  );
  assert.deepEqual(
    fromReferenceOutput({ token_ids: [], finish_reason: "length", text: null }),
    { token_ids: [], finish_reason: "length" },
  );
  assert.equal(
    fromReferenceOutput({ token_ids: [], finish_reason: "weird", text: null }).finish_reason,
    "error",
  ); // The worker's prefix-cache hits (its usage, on the last output) become our cached_tokens.
  assert.equal(
    fromReferenceOutput({
      token_ids: [],
      finish_reason: "length",
      text: null,
      completion_usage: {
        prompt_tokens: 9,
        completion_tokens: 5,
        total_tokens: 14,
        prompt_tokens_details: { audio_tokens: null, cached_tokens: 64 },
      },
    }).cached_tokens,
    64,
  );
});

Deno.test("a reference card naming local files loads our card and tokenizer", async () => {
  const loaded = await loadReferencePipeline(KEY, record((f) => `${model}/${f}`), {
    migrationLimit: 2,
  });
  assert.equal(loaded.card.display_name, "Qwen3-0.6B");
  assert.equal(loaded.card.kv_cache_block_size, 64, "the reference card's block size");
  assert.equal(loaded.card.migration_limit, 2);
  assert.equal(loaded.card.model_input, ModelInput.Tokens);
  assert.ok(loaded.card.eos_token_ids.length > 0);
  assert.ok(loaded.tokenizer.encode("Hello world").length > 0);
  const ctx = await loadReferencePipeline(
    KEY,
    record((f) => `${model}/${f}`, { context_length: 99 }),
  );
  assert.equal(ctx.card.context_length, 99);
  assert.equal(ctx.card.migration_limit, 0);
});

Deno.test("a reference card naming files the frontend cannot see says so", async () => {
  await assert.rejects(
    loadReferencePipeline(KEY, record((f) => `/nonexistent/worker/folder/${f}`)),
    (err: Error) =>
      err instanceof DynamoError && /cannot read the model files its card names/.test(err.message),
  );
});

Deno.test("a reference card naming files by URL fetches them from the worker", async () => {
  const requested: string[] = [];
  const server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, async (req) => {
    const name = new URL(req.url).pathname.split("/").at(-1)!;
    requested.push(name);
    if (name === "missing.json") return new Response("no", { status: 404 });
    return new Response(await Deno.readFile(`${model}/${name}`));
  });
  const base = `http://127.0.0.1:${server.addr.port}/v1/metadata/dynamo/backend/generate/_base`;
  try {
    const sizes = Object.fromEntries(
      await Promise.all(
        ["config.json", "tokenizer.json", "tokenizer_config.json", "generation_config.json"].map(
          async (f) => [f, (await Deno.stat(`${model}/${f}`)).size] as const,
        ),
      ),
    );
    const value = JSON.parse(record((f) => `${base}/${f}`));
    for (const section of ["model_info", "tokenizer", "prompt_formatter", "gen_config"]) {
      for (
        const file of Object.values(value.card_json[section]) as { path: string; size: number }[]
      ) {
        file.size = sizes[file.path.split("/").at(-1)!]!;
      }
    }
    const loaded = await loadReferencePipeline(KEY, JSON.stringify(value));
    assert.equal(loaded.card.display_name, "Qwen3-0.6B");
    assert.ok(loaded.tokenizer.encode("Hello").length > 0);
    assert.deepEqual(requested.sort(), Object.keys(sizes).sort());

    value.card_json.tokenizer.hf_tokenizer_json.size = 12;
    await assert.rejects(
      loadReferencePipeline(KEY, JSON.stringify(value)),
      /tokenizer\.json is \d+ bytes, its card says 12/,
    );
    value.card_json.tokenizer.hf_tokenizer_json.path = `${base}/missing.json`;
    await assert.rejects(loadReferencePipeline(KEY, JSON.stringify(value)), /answered 404/);
  } finally {
    await server.shutdown();
  }
});

Deno.test("the loader builds one pipeline for a fleet's reference records (equal but for the instance id), another for a changed card", async () => {
  const runtime = await DistributedRuntime.connect({ discovery: "memory", requestPlane: "local" });
  try {
    const base = JSON.parse(record((f) => `${model}/${f}`));
    const prefix = KEY.slice(0, KEY.lastIndexOf("/") + 1);
    const keys = ["1a", "1b", "1c"].map((id) => `${prefix}${id}`);
    for (const [i, key] of keys.entries()) {
      await runtime.discovery.put(key, JSON.stringify({ ...base, instance_id: 100 + i }));
    }
    const loader = new ModelLoader(runtime);
    const [a, b, c] = await Promise.all(keys.map((k) => loader.loadPipeline(k)));
    assert.equal(a, b, "the second worker's record reuses the first's pipeline");
    assert.equal(a, c);
    assert.equal(await loader.loadCard(keys[2]!), a!.card, "its card too, with nothing loaded");
    // A changed card (another block size) is another pipeline.
    const changed = `${prefix}2a`;
    await runtime.discovery.put(
      changed,
      JSON.stringify({ ...base, card_json: { ...base.card_json, kv_cache_block_size: 32 } }),
    );
    const d = await loader.loadPipeline(changed);
    assert.notEqual(d, a);
    assert.equal(d.card.kv_cache_block_size, 32);
  } finally {
    await runtime.shutdown();
  }
});
