import assert from "node:assert/strict";
import { join } from "node:path";
import fc from "fast-check";
import { InvalidArgumentError } from "../../runtime/errors.ts";
import { MemoryObjectStore } from "../../runtime/objects/mod.ts";
import { CardFileError, cardObjectName, fetchCardFiles, sha256Hex } from "./card_files.ts";
import { canonicalJson, computeMdcsum, trimModelInfo } from "./card.ts";
import { loadModelSource, ModelSourceError } from "./model_source.ts";
import { ModelInput, ModelType } from "../protocols.ts";
import { builtinTestModel, TEST_MODEL_NAME } from "./test_model.ts";

const root = await Deno.makeTempDir({ prefix: "dynamo-card-test-" });
// The real Qwen3 tokenizer is 11 MB: materialize it once for the whole file.
const qwen = builtinTestModel(join(root, "models"));

const TOKENIZER = {
  version: "1.0",
  added_tokens: [
    { id: 5, content: "<|end|>", special: true },
    { id: 6, content: "<s>", special: true },
  ],
  model: { type: "BPE", vocab: { a: 0, b: 1, c: 2, "</eos>": 3, x: 4 }, merges: [] },
};

interface Fixture {
  config?: Record<string, unknown> | string;
  tokenizer?: Record<string, unknown>;
  tokenizerConfig?: Record<string, unknown>;
  generationConfig?: Record<string, unknown>;
  extra?: Record<string, string>;
}

let counter = 0;
async function folder(f: Fixture, name = `model-${++counter}`): Promise<string> {
  const dir = join(root, name);
  await Deno.mkdir(dir, { recursive: true });
  const put = (file: string, v: unknown) =>
    Deno.writeTextFile(join(dir, file), typeof v === "string" ? v : JSON.stringify(v));
  if (f.config !== undefined) await put("config.json", f.config);
  if (f.tokenizer !== undefined) await put("tokenizer.json", f.tokenizer);
  if (f.tokenizerConfig !== undefined) await put("tokenizer_config.json", f.tokenizerConfig);
  if (f.generationConfig !== undefined) await put("generation_config.json", f.generationConfig);
  for (const [file, text] of Object.entries(f.extra ?? {})) await put(file, text);
  return dir;
}

const complete = (over: Fixture = {}): Fixture => ({
  config: { max_position_embeddings: 2048, eos_token_id: 5, model_type: "tiny" },
  tokenizer: TOKENIZER,
  tokenizerConfig: { eos_token: "<|end|>", bos_token: "<s>", chat_template: "{{ x }}" },
  ...over,
});

Deno.test("loadModelSource() builds a card from a model folder with defaults", async () => {
  const dir = await folder(complete({ generationConfig: { eos_token_id: [5, 3] } }), "Tiny-1B");
  const { card, files, localPath } = await loadModelSource(dir);
  assert.equal(localPath, dir);
  assert.equal(card.display_name, "Tiny-1B");
  assert.equal(card.source_path, dir);
  assert.equal(card.model_input, ModelInput.Tokens);
  assert.equal(card.model_type, ModelType.Chat | ModelType.Completions);
  assert.equal(card.context_length, 2048);
  assert.equal(card.kv_cache_block_size, 16);
  assert.equal(card.migration_limit, 0);
  assert.equal(card.user_data, undefined);
  assert.equal(card.chat_template, "{{ x }}");
  assert.equal(card.bos_token, "<s>");
  assert.equal(card.eos_token, "<|end|>");
  assert.deepEqual(card.eos_token_ids, [5, 3]);
  assert.deepEqual(card.model_info, {
    max_position_embeddings: 2048,
    eos_token_id: 5,
    model_type: "tiny",
  });
  assert.deepEqual([...files.keys()].sort(), [
    "config.json",
    "generation_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
  ]);
  for (const [name, bytes] of files) {
    assert.deepEqual(card.files[name], { sha256: sha256Hex(bytes), bytes: bytes.length });
    assert.deepEqual(bytes, await Deno.readFile(join(dir, name)));
  }
});

Deno.test("loadModelSource() hands over the tokenizer JSON it parsed, for a tokenizer built next", async () => {
  const dir = await folder(complete(), "Tiny-1B");
  const { files, parsed } = await loadModelSource(dir);
  const json = (name: string) => JSON.parse(new TextDecoder().decode(files.get(name)!));
  assert.deepEqual(parsed?.tokenizer, json("tokenizer.json"));
  assert.deepEqual(parsed?.tokenizerConfig, json("tokenizer_config.json"));
});

Deno.test("loadModelSource() names each missing file and the folder", async () => {
  for (const drop of ["config", "tokenizer", "tokenizerConfig"] as const) {
    const dir = await folder(complete({ [drop]: undefined }));
    const file = {
      config: "config.json",
      tokenizer: "tokenizer.json",
      tokenizerConfig: "tokenizer_config.json",
    }[drop];
    await assert.rejects(loadModelSource(dir), (err: unknown) => {
      assert.ok(err instanceof ModelSourceError);
      assert.ok(err.message.includes(`${dir} is missing ${file} `), err.message);
      return true;
    });
  }
  const empty = await folder({});
  await assert.rejects(
    loadModelSource(empty),
    /is missing config\.json, tokenizer\.json, tokenizer_config\.json/,
  );
});

Deno.test("loadModelSource() rejects a missing path, a non-GGUF file and broken JSON clearly", async () => {
  const missing = join(root, "no", "such", "model");
  await assert.rejects(loadModelSource(missing), (err: unknown) => {
    assert.ok(err instanceof ModelSourceError);
    assert.match(err.message, /no such file or folder/);
    assert.ok(err.message.includes(missing));
    return true;
  });
  const text = join(root, "notes.txt");
  await Deno.writeTextFile(text, "not a model");
  await assert.rejects(loadModelSource(text), /notes\.txt is a file but not a GGUF model/);
  const broken = await folder(complete({ config: "{ not json" }));
  await assert.rejects(loadModelSource(broken), /config\.json is not valid JSON/);
  const arr = await folder(complete({ tokenizerConfig: [] as unknown as Record<string, unknown> }));
  await assert.rejects(loadModelSource(arr), /tokenizer_config\.json must hold a JSON object/);
});

Deno.test("loadModelSource() unions eos ids of config, generation config and the eos token", async () => {
  const cases: [Fixture, number[]][] = [
    [complete({ config: { max_position_embeddings: 8, eos_token_id: [3, 4] } }), [3, 4, 5]],
    [complete({ generationConfig: { eos_token_id: 4 } }), [5, 4]],
    [
      complete({
        config: { max_position_embeddings: 8 },
        tokenizerConfig: { eos_token: "</eos>" },
      }),
      [3],
    ],
    [
      complete({
        config: { max_position_embeddings: 8 },
        tokenizerConfig: { eos_token: { content: "<|end|>", __type: "AddedToken" } },
      }),
      [5],
    ],
    [complete({ config: { max_position_embeddings: 8 }, tokenizerConfig: {} }), []],
    [complete({ config: { max_position_embeddings: 8, eos_token_id: null } }), [5]],
  ];
  for (const [fixture, want] of cases) {
    const { card } = await loadModelSource(await folder(fixture));
    assert.deepEqual(card.eos_token_ids, want, JSON.stringify(fixture));
  }
});

Deno.test("loadModelSource() takes context length from the option, then config.json, then the tokenizer", async () => {
  const both = await folder(complete({
    config: { max_position_embeddings: 4096 },
    tokenizerConfig: { model_max_length: 1024 },
  }));
  assert.equal((await loadModelSource(both)).card.context_length, 4096);
  assert.equal((await loadModelSource(both, { contextLength: 512 })).card.context_length, 512);
  const tokOnly = await folder(
    complete({ config: {}, tokenizerConfig: { model_max_length: 1024 } }),
  );
  assert.equal((await loadModelSource(tokOnly)).card.context_length, 1024);
  const sentinel = await folder(
    complete({ config: {}, tokenizerConfig: { model_max_length: 1e30 } }),
  );
  await assert.rejects(
    loadModelSource(sentinel),
    /cannot tell the context length.*pass contextLength/,
  );
  assert.equal((await loadModelSource(sentinel, { contextLength: 99 })).card.context_length, 99);
  const nested = await folder(
    complete({ config: { text_config: { max_position_embeddings: 777 } } }),
  );
  assert.equal((await loadModelSource(nested)).card.context_length, 777);
});

Deno.test("loadModelSource() finds the chat template in a named list, chat_template.jinja, or nowhere", async () => {
  const list = await folder(complete({
    tokenizerConfig: {
      chat_template: [{ name: "tool_use", template: "T" }, { name: "default", template: "D" }],
    },
  }));
  assert.equal((await loadModelSource(list)).card.chat_template, "D");
  const jinja = await folder(
    complete({ tokenizerConfig: {}, extra: { "chat_template.jinja": "J" } }),
  );
  assert.equal((await loadModelSource(jinja)).card.chat_template, "J");
  const none = await folder(complete({ tokenizerConfig: {} }));
  const { card } = await loadModelSource(none);
  assert.equal("chat_template" in card, false);
});

Deno.test("loadModelSource() applies and validates the register options", async () => {
  const dir = await folder(complete());
  const { card } = await loadModelSource(dir, {
    modelName: "my-model",
    kvCacheBlockSize: 64,
    migrationLimit: 3,
    userData: { lora: { rank: 8 } },
    modelInput: ModelInput.Text,
    modelType: ModelType.Chat,
  });
  assert.equal(card.display_name, "my-model");
  assert.equal(card.kv_cache_block_size, 64);
  assert.equal(card.migration_limit, 3);
  assert.deepEqual(card.user_data, { lora: { rank: 8 } });
  assert.equal(card.model_input, "text");
  assert.equal(card.model_type, 1);
  const bad: [Record<string, unknown>, RegExp][] = [
    [{ contextLength: 0 }, /contextLength must be a whole number >= 1, got 0/],
    [{ contextLength: 1.5 }, /contextLength .* got 1\.5/],
    [{ kvCacheBlockSize: -16 }, /kvCacheBlockSize .* got -16/],
    [{ kvCacheBlockSize: "16" }, /kvCacheBlockSize .* got 16/],
    [{ migrationLimit: -1 }, /migrationLimit must be a whole number >= 0, got -1/],
    [{ migrationLimit: NaN }, /migrationLimit .* got NaN/],
    [{ modelName: "" }, /modelName must be a non-empty string/],
    [{ userData: [1] }, /userData must be an object/],
    [{ modelInput: "tokens!" }, /modelInput must be .* got "tokens!"/],
    [{ modelType: 16 }, /modelType must be .* got 16/],
    [{ modelType: 0 }, /modelType must be .* got 0/],
  ];
  for (const [opts, re] of bad) {
    await assert.rejects(loadModelSource(dir, opts), (err: unknown) => {
      assert.ok(err instanceof InvalidArgumentError, String(err));
      assert.match(err.message, re);
      return true;
    });
  }
});

Deno.test("trimModelInfo() keeps scalars, short arrays and small objects only", () => {
  const info = trimModelInfo({
    a: 1,
    s: "x",
    n: null,
    b: false,
    arch: ["X"],
    big: Array.from({ length: 100 }, (_, i) => i),
    long: "y".repeat(5000),
    rope: { type: "yarn", factor: 4, deep: { deeper: { deepest: 1 } } },
    inf: Infinity,
    objs: [{ a: 1 }],
    bi: 2n ** 70n,
  });
  assert.deepEqual(info, {
    a: 1,
    s: "x",
    n: null,
    b: false,
    arch: ["X"],
    rope: { type: "yarn", factor: 4 },
    bi: (2n ** 70n).toString(),
  });
});

Deno.test("computeMdcsum() is the same for equal cards whatever their key order", () => {
  fc.assert(
    fc.property(fc.dictionary(fc.string(), fc.jsonValue()), (extra) => {
      const card = { display_name: "m", files: {}, eos_token_ids: [1], user_data: extra };
      const shuffled = JSON.parse(canonicalJson(card)) as typeof card;
      const reversed = Object.fromEntries(Object.entries(shuffled).reverse()) as typeof card;
      assert.equal(
        computeMdcsum(card as never),
        computeMdcsum({ ...reversed, mdcsum: "ignored" } as never),
      );
    }),
  );
  const a = { display_name: "m", eos_token_ids: [1] };
  assert.notEqual(computeMdcsum(a as never), computeMdcsum({ ...a, eos_token_ids: [2] } as never));
  assert.match(computeMdcsum(a as never), /^[0-9a-f]{64}$/);
});

Deno.test("fetchCardFiles() returns the files and reports missing or corrupt ones", async () => {
  const { card, files } = await loadModelSource(await folder(complete()));
  const store = new MemoryObjectStore();
  const full = { ...card, mdcsum: computeMdcsum(card) };
  await assert.rejects(fetchCardFiles(store, full), (err: unknown) => {
    assert.ok(err instanceof CardFileError);
    assert.match(err.message, /is not in the memory object store/);
    return true;
  });
  for (const [name, bytes] of files) {
    await store.put(cardObjectName(card.files[name]!.sha256), bytes);
  }
  const got = await fetchCardFiles(store, full);
  assert.deepEqual(got, files);
  const only = await fetchCardFiles(store, full, { only: ["tokenizer.json"] });
  assert.deepEqual([...only.keys()], ["tokenizer.json"]);
  await store.put(
    cardObjectName(card.files["config.json"]!.sha256),
    new TextEncoder().encode("{}"),
  );
  await assert.rejects(
    fetchCardFiles(store, full),
    /config\.json of model .* is corrupt .*expected/,
  );
});

Deno.test("builtinTestModel() is a Qwen3-0.6B folder the loader reads like the real one", async () => {
  const dir = await qwen;
  const { card, files } = await loadModelSource(dir);
  assert.equal(card.display_name, TEST_MODEL_NAME);
  assert.equal(card.context_length, 40960);
  assert.deepEqual(card.eos_token_ids, [151645, 151643]);
  assert.equal(card.eos_token, "<|im_end|>");
  assert.equal(card.bos_token, undefined);
  assert.match(card.chat_template ?? "", /<\|im_start\|>/);
  assert.deepEqual(card.model_info?.architectures, ["Qwen3ForCausalLM"]);
  assert.equal(card.model_info?.num_key_value_heads, 8);
  assert.equal(files.size, 4);
  assert.ok(files.get("tokenizer.json")!.length > 5_000_000);
});

Deno.test("builtinTestModel() leaves files with the same content alone", async () => {
  const dir = await qwen;
  const before = await Deno.stat(join(dir, "tokenizer.json"));
  await Deno.writeTextFile(join(dir, "config.json"), "{}");
  assert.equal(await builtinTestModel(join(root, "models")), dir);
  const after = await Deno.stat(join(dir, "tokenizer.json"));
  assert.equal(after.mtime?.getTime(), before.mtime?.getTime());
  assert.equal(JSON.parse(await Deno.readTextFile(join(dir, "config.json"))).model_type, "qwen3");
  const leftovers = [...Deno.readDirSync(dir)].filter((e) => e.name.endsWith(".tmp"));
  assert.deepEqual(leftovers, []);
});

globalThis.addEventListener("unload", () => {
  try {
    Deno.removeSync(root, { recursive: true });
  } catch {
    // already gone
  }
});

Deno.test("loadModelSource() writes the parsers to the card's runtime_config, known names only", async () => {
  const dir = await builtinTestModel();
  const { card } = await loadModelSource(dir, {
    toolCallParser: "hermes",
    reasoningParser: "qwen3",
  });
  assert.deepEqual(card.runtime_config, { tool_call_parser: "hermes", reasoning_parser: "qwen3" });
  assert.equal((await loadModelSource(dir)).card.runtime_config, undefined);
  await assert.rejects(
    loadModelSource(dir, { reasoningParser: "qwen4" }),
    (err: unknown) =>
      err instanceof InvalidArgumentError &&
      /reasoningParser must be one of basic/.test(err.message),
  );
});
