// Structured output end to end with the official `openai` client: `response_format` json_schema
// and json_object enforced by grammar-guided decoding in the llama.cpp engine (the answers parse
// and validate against the schema with ajv), on the tiny random-weight GGUF (a schema whose
// language is finite, so even random weights finish it) and on SmolLM2; and the 400s: an invalid
// schema, a schema outside what the grammar enforces, an engine without guided decoding.

import assert from "node:assert/strict";
import { Ajv } from "ajv";
import OpenAI from "openai";
import { runLlamaCppWorker } from "../llm/engines/llamacpp/mod.ts";
import { echoEngine } from "../llm/engines/echo.ts";
import { runMockerWorker } from "../llm/engines/mocker/worker.ts";
import { registerLlm } from "../llm/model/register.ts";
import { builtinTestModel } from "../llm/model/test_model.ts";
import { ModelInput, ModelType } from "../llm/protocols.ts";
import type { DistributedRuntime } from "../runtime/distributed_runtime.ts";
import { withOpenAIFrontend } from "./_helpers/openai_frontend.ts";
import { smolLm2 } from "./_helpers/smollm2.ts";
import { tinyLlamaGguf } from "./_helpers/tiny_gguf.ts";

const smol = await smolLm2();
const skipped = smol.path === undefined ? ` (skipped: ${smol.reason})` : "";

/**
 * A llama.cpp worker for `path` named `name`; with `others`, an echo worker named "echo" and a
 * mocker named "mocker" (engines without guided decoding).
 */
function workers(path: string, name: string, others = false) {
  return async (runtime: DistributedRuntime) => {
    const endpoint = runtime.namespace("so").component("llama").endpoint("generate");
    const worker = await runLlamaCppWorker(endpoint, path, {
      maxNumSeqs: 2,
      contextLength: 1024,
      publish: false,
      register: { modelName: name },
    });
    if (!others) return () => worker.serving;
    const echo = runtime.namespace("so").component("echo").endpoint("generate");
    echo.serveEndpoint(echoEngine()).catch(() => {});
    await registerLlm(
      ModelInput.Tokens,
      ModelType.Chat | ModelType.Completions,
      echo,
      await builtinTestModel(),
      { modelName: "echo" },
    );
    const mocker = await runMockerWorker(
      runtime.namespace("so").component("mocker").endpoint("generate"),
      { publish: false, speedupRatio: 100, register: { modelName: "mocker" } },
    );
    return async () => {
      await worker.serving;
      await mocker.serving;
    };
  };
}

/** Parses `text` as JSON and validates it against `schema` (ajv), failing with both shown. */
function assertValid(text: string | null | undefined, schema: Record<string, unknown>): unknown {
  assert.ok(typeof text === "string", `no content in the answer: ${text}`);
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (err) {
    assert.fail(`the answer is not JSON: ${JSON.stringify(text)} (${err})`);
  }
  const validate = new Ajv({ strict: false }).compile(schema);
  assert.ok(
    validate(value),
    `the answer ${text} does not validate: ${JSON.stringify(validate.errors)}`,
  );
  return value;
}

/** A schema whose every valid answer is short: enums, booleans, a bounded array. */
const FINITE_SCHEMA = {
  type: "object",
  title: "Pick",
  properties: {
    color: { type: "string", enum: ["red", "green", "blue"] },
    ok: { type: "boolean" },
    sizes: { type: "array", items: { enum: [1, 2, 3] }, maxItems: 2 },
    kind: { anyOf: [{ const: "a" }, { type: "null" }] },
  },
  required: ["color", "ok", "sizes", "kind"],
  additionalProperties: false,
};

Deno.test({
  name: "json_schema answers of the llama.cpp engine (tiny GGUF) validate, streamed and not",
  sanitizeOps: false,
  sanitizeResources: false,
  async fn() {
    const tiny = await tinyLlamaGguf();
    await withOpenAIFrontend(
      workers(tiny, "tiny"),
      ["tiny"],
      async ({ client }) => {
        const response_format = {
          type: "json_schema" as const,
          json_schema: { name: "pick", schema: FINITE_SCHEMA, strict: true },
        };
        // Several seeds: random weights take different paths through the grammar.
        for (const seed of [1, 2, 3]) {
          const res = await client.chat.completions.create({
            model: "tiny",
            messages: [{ role: "user", content: "Pick a color." }],
            response_format,
            temperature: 1,
            seed,
            max_tokens: 200,
          });
          assert.equal(res.choices[0]!.finish_reason, "stop");
          assertValid(res.choices[0]!.message.content, FINITE_SCHEMA);
        }
        const stream = await client.chat.completions.create({
          model: "tiny",
          messages: [{ role: "user", content: "Pick a color." }],
          response_format,
          max_tokens: 200,
          stream: true,
        });
        let text = "";
        let finish: string | null = null;
        for await (const chunk of stream) {
          text += chunk.choices[0]?.delta.content ?? "";
          finish = chunk.choices[0]?.finish_reason ?? finish;
        }
        assert.equal(finish, "stop");
        assertValid(text, FINITE_SCHEMA);

        // The Responses API's text.format is the same constraint.
        const viaResponses = await client.responses.create({
          model: "tiny",
          input: "Pick a color.",
          text: {
            format: { type: "json_schema", name: "pick", schema: FINITE_SCHEMA, strict: true },
          },
          max_output_tokens: 200,
        });
        assert.equal(viaResponses.status, "completed");
        assertValid(viaResponses.output_text, FINITE_SCHEMA);

        // json_object: any JSON object.
        const obj = await client.chat.completions.create({
          model: "tiny",
          messages: [{ role: "user", content: "Answer in JSON." }],
          response_format: { type: "json_object" },
          temperature: 0,
          max_tokens: 300,
        });
        if (obj.choices[0]!.finish_reason === "stop") {
          const value = JSON.parse(obj.choices[0]!.message.content ?? "");
          assert.ok(typeof value === "object" && value !== null && !Array.isArray(value));
        } else {
          // Random weights may write a long string; what came is still the start of an object.
          assert.equal(obj.choices[0]!.finish_reason, "length");
          assert.match(obj.choices[0]!.message.content ?? "", /^\s*\{/);
        }
      },
    );
  },
});

Deno.test({
  name: "bad or unenforceable response_format gets a 400 in OpenAI's error shape",
  sanitizeOps: false,
  sanitizeResources: false,
  async fn() {
    const tiny = await tinyLlamaGguf();
    await withOpenAIFrontend(
      workers(tiny, "tiny", true),
      ["tiny", "echo", "mocker"],
      async ({ client }) => {
        const ask = async (model: string, schema: unknown) => {
          const err = await client.chat.completions.create({
            model,
            messages: [{ role: "user", content: "hi" }],
            response_format: {
              type: "json_schema",
              json_schema: { name: "x", schema: schema as Record<string, unknown> },
            },
          }).then(() => undefined, (e) => e);
          assert.ok(err instanceof OpenAI.BadRequestError, `expected a 400, got ${err}`);
          return err;
        };
        const invalid = await ask("tiny", { type: "objekt" });
        assert.equal(invalid.param, "response_format.json_schema.schema");
        assert.equal(invalid.type, "invalid_request_error");
        assert.match(invalid.message, /not a valid JSON schema: .*type/);

        const pattern = await ask("tiny", {
          type: "object",
          properties: { zip: { type: "string", pattern: "^[0-9]{5}$" } },
        });
        assert.equal(pattern.code, "unsupported_schema");
        assert.match(pattern.message, /`pattern` is not supported .*\/properties\/zip\/pattern/);

        const echo = await ask("echo", FINITE_SCHEMA);
        assert.equal(echo.param, "response_format");
        assert.equal(echo.code, "unsupported_response_format");
        assert.match(echo.message, /model `echo`.*no guided decoding/);
        const mocker = await ask("mocker", FINITE_SCHEMA);
        assert.equal(mocker.code, "unsupported_response_format");
        assert.match(
          mocker.message,
          /model `mocker`: its engine \(mocker\) has no guided decoding/,
        );
        const echoObject = await client.chat.completions.create({
          model: "echo",
          messages: [{ role: "user", content: "hi" }],
          response_format: { type: "json_object" },
        }).then(() => undefined, (e) => e);
        assert.ok(echoObject instanceof OpenAI.BadRequestError);
        // Plain text is still served.
        const text = await client.chat.completions.create({
          model: "echo",
          messages: [{ role: "user", content: "hi" }],
          response_format: { type: "text" },
          max_tokens: 3,
        });
        assert.equal(text.choices[0]!.finish_reason, "length");
      },
    );
  },
});

Deno.test({
  name: `SmolLM2's json_schema answer validates against the schema${skipped}`,
  ignore: smol.path === undefined,
  sanitizeOps: false,
  sanitizeResources: false,
  async fn() {
    const schema = {
      type: "object",
      properties: {
        name: { type: "string", maxLength: 24 },
        age: { type: "integer" },
        city: { type: "string", maxLength: 24 },
        tags: { type: "array", items: { type: "string", maxLength: 12 }, maxItems: 3 },
      },
      required: ["name", "age", "city", "tags"],
      additionalProperties: false,
    };
    await withOpenAIFrontend(
      workers(smol.path!, "smol"),
      ["smol"],
      async ({ client }) => {
        const res = await client.chat.completions.create({
          model: "smol",
          messages: [{ role: "user", content: "Describe a person living in Paris as JSON." }],
          response_format: {
            type: "json_schema",
            json_schema: { name: "person", schema, strict: true },
          },
          temperature: 0,
          max_tokens: 200,
        });
        assert.equal(res.choices[0]!.finish_reason, "stop");
        const person = assertValid(res.choices[0]!.message.content, schema) as { name: string };
        assert.ok(person.name.length > 0);
      },
    );
  },
});
