// The tiny random-weight llama GGUF (tests/_helpers/tiny_gguf.ts): a valid file llama.cpp loads,
// whose tokenizer ours rebuilds exactly, with deterministic greedy output equal to the library's,
// served through registerLlm and the frontend in this process.

import assert from "node:assert/strict";
import { getLlama, LlamaLogLevel, type Token } from "node-llama-cpp";
import { LlamaCppEngine } from "../llm/engines/llamacpp/mod.ts";
import { readGgufMetadata } from "../llm/model/gguf.ts";
import { loadModelSource } from "../llm/model/model_source.ts";
import { Tokenizer } from "../llm/preprocess/tokenizer.ts";
import {
  createFrontend,
  DistributedRuntime,
  ModelInput,
  ModelManager,
  ModelType,
  registerLlm,
} from "../mod.ts";
import type { PreprocessedRequest } from "../llm/protocols.ts";
import { eventually } from "./_helpers/backends.ts";
import {
  GgmlType,
  TINY_LLAMA_CHAT_TEMPLATE,
  TINY_LLAMA_TOKENS,
  tinyLlamaChat,
  tinyLlamaGguf,
  tinyLlamaGgufBytes,
} from "./_helpers/tiny_gguf.ts";

const path = await tinyLlamaGguf();

/** Our tokenizer, built the way the frontend builds it: from the card's files. */
async function ourTokenizer(): Promise<Tokenizer> {
  const { files } = await loadModelSource(path, {
    modelInput: ModelInput.Tokens,
    modelType: ModelType.Chat,
  });
  return Tokenizer.fromBytes(files.get("tokenizer.json")!, files.get("tokenizer_config.json"));
}

function greedyRequest(promptIds: number[], maxTokens: number): PreprocessedRequest {
  return {
    model: "tiny-llama",
    token_ids: promptIds,
    stop_conditions: { max_tokens: maxTokens, ignore_eos: true },
    sampling_options: { temperature: 0 },
    eos_token_ids: [TINY_LLAMA_TOKENS.imEnd],
  };
}

async function engineTokens(engine: LlamaCppEngine, request: PreprocessedRequest) {
  const ids: number[] = [];
  for await (const out of engine.generate(request)) ids.push(...out.token_ids);
  return ids;
}

Deno.test("tinyLlamaGguf: the same options give the same bytes, another seed other weights", () => {
  const a = tinyLlamaGgufBytes();
  assert.deepEqual(tinyLlamaGgufBytes(), a);
  const b = tinyLlamaGgufBytes({ seed: 2 });
  assert.equal(b.length, a.length);
  assert.notDeepEqual(b, a);
});

Deno.test("readGgufMetadata reads the tiny GGUF; its tensors are laid out as GGUF v3 says", async () => {
  const { version, tensorCount, metadata, metadataBytes } = await readGgufMetadata(path);
  assert.equal(version, 3);
  assert.equal(metadata["general.architecture"], "llama");
  assert.equal(metadata["general.name"], "tiny-llama");
  assert.equal(metadata["llama.context_length"], 2048);
  assert.equal(metadata["llama.block_count"], 2);
  assert.equal(metadata["tokenizer.ggml.model"], "gpt2");
  assert.equal((metadata["tokenizer.ggml.tokens"] as string[]).length, 512);
  assert.equal(
    (metadata["tokenizer.ggml.tokens"] as string[])[TINY_LLAMA_TOKENS.imEnd],
    "<|im_end|>",
  );
  assert.equal(metadata["tokenizer.chat_template"], TINY_LLAMA_CHAT_TEMPLATE);
  assert.equal(tensorCount, 3 + 2 * 9);

  // The tensor infos follow the metadata; the data starts at the next multiple of 32.
  const file = await Deno.readFile(path);
  const view = new DataView(file.buffer);
  let at = metadataBytes;
  const infos: Array<{ name: string; dims: number[]; type: number; offset: number }> = [];
  for (let i = 0; i < tensorCount; i++) {
    const len = Number(view.getBigUint64(at, true));
    const name = new TextDecoder().decode(file.subarray(at + 8, at + 8 + len));
    at += 8 + len;
    const nDims = view.getUint32(at, true);
    const dims = Array.from(
      { length: nDims },
      (_, d) => Number(view.getBigUint64(at + 4 + 8 * d, true)),
    );
    at += 4 + 8 * nDims;
    infos.push({
      name,
      dims,
      type: view.getUint32(at, true),
      offset: Number(view.getBigUint64(at + 4, true)),
    });
    at += 12;
  }
  const dataStart = Math.ceil(at / 32) * 32;
  assert.deepEqual(infos[0], { name: "token_embd.weight", dims: [64, 512], type: 0, offset: 0 });
  assert.deepEqual(
    infos.find((t) => t.name === "blk.1.attn_k.weight")?.dims,
    [64, 32],
    "GQA: 2 of 4 heads",
  );
  for (const t of infos) assert.equal(t.offset % 32, 0, `${t.name} is aligned`);
  const last = infos.at(-1)!;
  assert.equal(last.name, "output.weight");
  assert.equal(
    dataStart + last.offset + 4 * 64 * 512,
    file.length,
    "the file ends with the last tensor",
  );
});

Deno.test({
  name: "llama.cpp loads the tiny GGUF and its tokenizer agrees with ours on encode and decode",
  sanitizeOps: false,
  sanitizeResources: false,
  async fn() {
    const engine = await LlamaCppEngine.load(path, {
      maxNumSeqs: 1,
      contextLength: 256,
      threads: 1,
    });
    try {
      const ours = await ourTokenizer();
      assert.equal(ours.vocabSize, 512);
      assert.equal(engine.model.tokens.eos, TINY_LLAMA_TOKENS.imEnd);
      const texts = [
        "Hello, how are you today?",
        "The quick brown fox , jumps . over",
        "  two  spaces\n\nnew lines\r\n\ttab",
        "In 2024: 1234 apples!",
        "I'm sure you're right, it's what they'd say",
        "café naïve 😀 日本語",
        tinyLlamaChat("What is the capital of France?"),
      ];
      for (const text of texts) {
        const ids = ours.encode(text, { addSpecialTokens: false });
        assert.deepEqual(ids, [...engine.model.tokenize(text, true)], JSON.stringify(text));
        assert.equal(ours.decode(ids), text);
        assert.equal(engine.model.detokenize(ids as Token[], true), text);
      }
      // Merges are learned: common words are single tokens, not bytes.
      assert.equal(ours.encode(" the", { addSpecialTokens: false }).length, 1);
    } finally {
      await engine.close();
    }
  },
});

Deno.test({
  name: "greedy generation is deterministic, not one token forever, and equals node-llama-cpp's " +
    "own greedy decoding on a fresh sequence",
  sanitizeOps: false,
  sanitizeResources: false,
  async fn() {
    const engine = await LlamaCppEngine.load(path, {
      maxNumSeqs: 2,
      contextLength: 512,
      threads: 1,
    });
    const llama = await getLlama({ gpu: false, build: "never", logLevel: LlamaLogLevel.warn });
    const model = await llama.loadModel({ modelPath: path });
    const context = await model.createContext({ sequences: 1, contextSize: 512, threads: 1 });
    try {
      const prompt = [...engine.model.tokenize(tinyLlamaChat("Tell me a joke about a dog."), true)];
      const first = await engineTokens(engine, greedyRequest(prompt, 32));
      const second = await engineTokens(engine, greedyRequest(prompt, 32));
      assert.equal(first.length, 32);
      assert.deepEqual(second, first);
      assert.ok(new Set(first).size >= 8, `varied output expected, got ${first}`);

      const library: number[] = [];
      for await (
        const token of context.getSequence().evaluate(prompt as Token[], {
          temperature: 0,
          yieldEogToken: true,
        })
      ) {
        library.push(token);
        if (library.length === 32) break;
      }
      assert.deepEqual(first, library);
    } finally {
      await context.dispose();
      await model.dispose();
      await engine.close();
    }
  },
});

Deno.test({
  name: "an F16 variant with one layer, no GQA and 1,000 tokens loads and generates",
  sanitizeOps: false,
  sanitizeResources: false,
  async fn() {
    const f16 = await tinyLlamaGguf({
      tensorType: GgmlType.F16,
      layers: 1,
      kvHeads: 4,
      vocab: 1000,
      seed: 3,
    });
    assert.notEqual(f16, path);
    const engine = await LlamaCppEngine.load(f16, {
      maxNumSeqs: 1,
      contextLength: 128,
      threads: 1,
    });
    try {
      const prompt = [...engine.model.tokenize("Once upon a time", false)];
      const ids = await engineTokens(engine, greedyRequest(prompt, 8));
      assert.equal(ids.length, 8);
    } finally {
      await engine.close();
    }
  },
});

Deno.test({
  name: "registerLlm serves the tiny GGUF through the frontend: a chat completion returns the " +
    "engine's greedy text, counted with our tokenizer",
  sanitizeOps: false,
  sanitizeResources: false,
  async fn() {
    const engine = await LlamaCppEngine.load(path, {
      maxNumSeqs: 1,
      contextLength: 512,
      threads: 1,
    });
    const runtime = await DistributedRuntime.connect({
      discovery: "memory",
      requestPlane: "local",
    });
    const models = new ModelManager(runtime);
    try {
      const endpoint = runtime.namespace("tiny").component("backend").endpoint("generate");
      endpoint.serveEndpoint(engine.handler as never).catch(() => {});
      await registerLlm(
        ModelInput.Tokens,
        ModelType.Chat | ModelType.Completions,
        endpoint,
        path,
        { modelName: "tiny-llama", contextLength: engine.contextLength },
      );
      await models.start();
      const app = createFrontend({ models });
      await eventually(() => models.get("tiny-llama") !== undefined, 5_000, "the model is listed");

      const question = "What is the capital of France?";
      const tokenizer = await ourTokenizer();
      const promptIds = tokenizer.encode(tinyLlamaChat(question), { addSpecialTokens: false });
      const expected = await engineTokens(engine, {
        ...greedyRequest(promptIds, 16),
        stop_conditions: { max_tokens: 16 },
      });
      const res = await app.fetch(
        new Request("http://x/v1/chat/completions", {
          method: "POST",
          body: JSON.stringify({
            model: "tiny-llama",
            messages: [{ role: "user", content: question }],
            max_tokens: 16,
            temperature: 0,
          }),
        }),
      );
      assert.equal(res.status, 200);
      const body = await res.json();
      // The frontend leaves special tokens out of the text (random weights do pick them).
      const text = tokenizer.decode(expected, { skipSpecialTokens: true });
      assert.ok(text.length > 0, "greedy output is more than an eos");
      assert.equal(body.choices[0].message.content, text);
      assert.equal(body.usage.prompt_tokens, promptIds.length);
      assert.equal(body.usage.completion_tokens, expected.length);
    } finally {
      await models.close();
      await runtime.shutdown();
      await engine.close();
    }
  },
});
