// `/v1/embeddings` end to end with the official `openai` client: a llama.cpp worker registered
// with ModelType.Embedding (the tiny random-weight GGUF) behind an in-process frontend. One
// vector per input, in order, of the model's width; identical inputs have cosine 1, different
// ones less; base64 and float encodings agree; token-id inputs; usage; the 400s and 404.

import assert from "node:assert/strict";
import OpenAI from "openai";
import { runLlamaCppWorker } from "../llm/engines/llamacpp/mod.ts";
import { echoEngine } from "../llm/engines/echo.ts";
import { registerLlm } from "../llm/model/register.ts";
import { builtinTestModel } from "../llm/model/test_model.ts";
import { ModelInput, ModelType } from "../llm/protocols.ts";
import type { DistributedRuntime } from "../runtime/distributed_runtime.ts";
import { withOpenAIFrontend } from "./_helpers/openai_frontend.ts";
import { tinyLlamaGguf } from "./_helpers/tiny_gguf.ts";
import { startDynamoRun } from "./_helpers/dynamo_run.ts";

/** Embedding width of the tiny GGUF (`embd`, default 64). */
const TINY_WIDTH = 64;

function cosine(a: readonly number[], b: readonly number[]): number {
  assert.equal(a.length, b.length);
  let dot = 0, na = 0, nb = 0;
  for (let i = 0; i < a.length; i++) {
    dot += a[i]! * b[i]!;
    na += a[i]! ** 2;
    nb += b[i]! ** 2;
  }
  return dot / Math.sqrt(na * nb);
}

async function workers(runtime: DistributedRuntime) {
  const endpoint = runtime.namespace("emb").component("llama").endpoint("generate");
  const worker = await runLlamaCppWorker(endpoint, await tinyLlamaGguf(), {
    maxNumSeqs: 1,
    contextLength: 256,
    publish: false,
    embedding: true,
    register: { modelName: "tiny-embed" },
  });
  const echo = runtime.namespace("emb").component("echo").endpoint("generate");
  echo.serveEndpoint(echoEngine()).catch(() => {});
  await registerLlm(
    ModelInput.Tokens,
    ModelType.Chat | ModelType.Completions,
    echo,
    await builtinTestModel(),
    { modelName: "echo" },
  );
  return async () => {
    await worker.serving;
  };
}

Deno.test({
  name: "/v1/embeddings with the openai client: shape, order, cosine, encodings, usage",
  sanitizeOps: false,
  sanitizeResources: false,
  async fn() {
    await withOpenAIFrontend(workers, ["tiny-embed", "echo"], async ({ client, baseUrl }) => {
      const texts = ["hello world", "something else entirely", "hello world"];
      // The client asks for base64 by default and decodes it.
      const res = await client.embeddings.create({ model: "tiny-embed", input: texts });
      assert.equal(res.object, "list");
      assert.equal(res.model, "tiny-embed");
      assert.equal(res.data.length, 3);
      res.data.forEach((d, i) => {
        assert.equal(d.object, "embedding");
        assert.equal(d.index, i);
        assert.equal(d.embedding.length, TINY_WIDTH);
        // Normalised.
        assert.ok(Math.abs(cosine(d.embedding, d.embedding) - 1) < 1e-6);
        assert.ok(Math.abs(Math.hypot(...d.embedding) - 1) < 1e-5);
      });
      const [a, b, c] = res.data.map((d) => d.embedding) as [number[], number[], number[]];
      assert.ok(Math.abs(cosine(a, c) - 1) < 1e-6, `identical inputs: cosine ${cosine(a, c)}`);
      assert.ok(cosine(a, b) < 0.999, `different inputs: cosine ${cosine(a, b)}`);
      assert.ok(res.usage.prompt_tokens > 0);
      assert.equal(res.usage.total_tokens, res.usage.prompt_tokens);

      // Plain floats, one string: the same vector as the base64 one (float32 precision).
      const floats = await client.embeddings.create({
        model: "tiny-embed",
        input: "hello world",
        encoding_format: "float",
      });
      assert.equal(floats.data.length, 1);
      floats.data[0]!.embedding.forEach((x, i) => assert.ok(Math.abs(x - a[i]!) < 1e-6));
      // The three texts' tokens: twice "hello world", plus the other text's.
      assert.ok(res.usage.prompt_tokens - 2 * floats.usage.prompt_tokens > 0);

      // Raw wire check of the base64 form.
      const raw = await fetch(`${baseUrl}/v1/embeddings`, {
        method: "POST",
        headers: { "content-type": "application/json", "x-request-id": "emb-1" },
        body: JSON.stringify({
          model: "tiny-embed",
          input: "hello world",
          encoding_format: "base64",
        }),
      });
      assert.equal(raw.status, 200);
      assert.equal(raw.headers.get("x-request-id"), "emb-1");
      const rawBody = await raw.json();
      assert.equal(typeof rawBody.data[0].embedding, "string");
      const bytes = Uint8Array.from(atob(rawBody.data[0].embedding), (ch) => ch.charCodeAt(0));
      assert.equal(bytes.length, TINY_WIDTH * 4);
      const decoded = new Float32Array(bytes.buffer);
      decoded.forEach((x, i) => assert.ok(Math.abs(x - a[i]!) < 1e-6));

      // Token-id inputs; usage counts them exactly.
      const ids = await client.embeddings.create({
        model: "tiny-embed",
        input: [[5, 6, 7], [5, 6, 7], [40, 41]],
        encoding_format: "float",
      });
      assert.equal(ids.usage.prompt_tokens, 8);
      const [x, y, z] = ids.data.map((d) => d.embedding) as [number[], number[], number[]];
      assert.ok(Math.abs(cosine(x, y) - 1) < 1e-6);
      assert.ok(cosine(x, z) < 0.999);
      const single = await client.embeddings.create({
        model: "tiny-embed",
        input: [5, 6, 7],
        encoding_format: "float",
      });
      assert.ok(Math.abs(cosine(single.data[0]!.embedding, x) - 1) < 1e-6);
    });
  },
});

Deno.test({
  name: "/v1/embeddings and chat on one model behind --router-mode kv",
  sanitizeOps: false,
  sanitizeResources: false,
  async fn() {
    await withOpenAIFrontend(
      workers,
      ["tiny-embed"],
      async ({ client }) => {
        const res = await client.embeddings.create({
          model: "tiny-embed",
          input: ["hello world", "hello world"],
          encoding_format: "float",
        });
        const [a, b] = res.data.map((d) => d.embedding) as [number[], number[]];
        assert.ok(Math.abs(cosine(a, b) - 1) < 1e-6);
        // Chat on the same model is still KV-routed.
        const chat = await client.chat.completions.create({
          model: "tiny-embed",
          messages: [{ role: "user", content: "hi" }],
          max_tokens: 2,
          temperature: 0,
        });
        assert.equal(chat.usage?.completion_tokens, 2);
      },
      {},
      { routerMode: "kv" },
    );
  },
});

Deno.test({
  name: "/v1/embeddings refuses bad requests in OpenAI's error shape",
  sanitizeOps: false,
  sanitizeResources: false,
  async fn() {
    await withOpenAIFrontend(workers, ["tiny-embed", "echo"], async ({ client, baseUrl }) => {
      const fails = async (body: Record<string, unknown>, status: number, param: string | null) => {
        const res = await fetch(`${baseUrl}/v1/embeddings`, {
          method: "POST",
          headers: { "content-type": "application/json" },
          body: JSON.stringify(body),
        });
        const json = await res.json();
        assert.equal(res.status, status, JSON.stringify(json));
        assert.equal(json.error.param, param);
        assert.equal(typeof json.error.message, "string");
        return json.error;
      };
      const notEmbedding = await fails({ model: "echo", input: "hi" }, 400, "model");
      assert.match(notEmbedding.message, /does not serve embeddings/);
      await fails({ model: "nope", input: "hi" }, 404, "model");
      await fails({ model: "tiny-embed", input: "" }, 400, "input");
      await fails({ model: "tiny-embed", input: [] }, 400, "input");
      await fails({ model: "tiny-embed", input: ["a", 3] }, 400, "input[1]");
      await fails({ model: "tiny-embed", input: [[1, -2]] }, 400, "input[0]");
      await fails({ model: "tiny-embed", input: [[1, 2], [100000]] }, 400, "input[1]");
      await fails(
        { model: "tiny-embed", input: "hi", encoding_format: "int8" },
        400,
        "encoding_format",
      );
      await fails({ model: "tiny-embed", input: "hi", dimensions: 8 }, 400, "dimensions");
      const long = await fails({ model: "tiny-embed", input: "word ".repeat(400) }, 400, "input");
      assert.equal(long.code, "context_length_exceeded");
      const viaClient = await client.embeddings.create({ model: "echo", input: "hi" }).then(
        () => undefined,
        (e) => e,
      );
      assert.ok(viaClient instanceof OpenAI.BadRequestError);
      const get = await fetch(`${baseUrl}/v1/embeddings`);
      assert.equal(get.status, 405);
      await get.body?.cancel();
    });
  },
});

Deno.test({
  name: "dynamo run out=llamacpp --embedding serves /v1/embeddings to the openai client",
  sanitizeOps: false,
  sanitizeResources: false,
  async fn() {
    const run = await startDynamoRun([
      "out=llamacpp",
      await tinyLlamaGguf(),
      "--model-name",
      "tiny-cli",
      "--context-length",
      "256",
      "--embedding",
    ]);
    try {
      const client = new OpenAI({ baseURL: `${run.url}/v1`, apiKey: "unused", maxRetries: 0 });
      const res = await client.embeddings.create({
        model: "tiny-cli",
        input: ["same text", "same text", "other words"],
      });
      const [a, b, c] = res.data.map((d) => d.embedding) as [number[], number[], number[]];
      assert.equal(a.length, TINY_WIDTH);
      assert.ok(Math.abs(cosine(a, b) - 1) < 1e-6);
      assert.ok(cosine(a, c) < 0.999);
      // The chat routes still serve the same model.
      const chat = await client.chat.completions.create({
        model: "tiny-cli",
        messages: [{ role: "user", content: "hi" }],
        max_tokens: 2,
        temperature: 0,
      });
      assert.equal(chat.choices[0]!.finish_reason, "length");
      assert.equal(chat.usage?.completion_tokens, 2);
    } finally {
      await run.stop();
    }
    const echo = new Deno.Command(Deno.execPath(), {
      args: [
        "run",
        "-A",
        new URL("../cli/main.ts", import.meta.url).pathname,
        "run",
        "in=http",
        "out=echo",
        "--embedding",
      ],
      stdout: "piped",
      stderr: "piped",
    });
    const out = await echo.output();
    assert.equal(out.code, 2);
    assert.match(
      new TextDecoder().decode(out.stderr),
      /--embedding is for out=llamacpp, got out=echo/,
    );
  },
});
