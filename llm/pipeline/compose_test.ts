import assert from "node:assert/strict";
import { Context } from "../../runtime/context.ts";
import { DynamoError, StreamIncompleteError } from "../../runtime/errors.ts";
import { silentLogger } from "../../runtime/logger.ts";
import type { ResponseStream } from "../../runtime/stream.ts";
import { QWEN3_IM_END, qwen3Tokenizer } from "../../tests/_helpers/qwen3.ts";
import { FrontendMetrics } from "../http/metrics.ts";
import type { ModelPipeline } from "../model/loader.ts";
import type { ServedModel } from "../model/served_model.ts";
import type { Preprocessor } from "../preprocess/preprocessor.ts";
import {
  type LLMEngineOutput,
  type ModelDeploymentCard,
  ModelInput,
  type PreprocessedRequest,
} from "../protocols.ts";
import { admit } from "./admit.ts";
import { ModelPipelines } from "./compose.ts";

const tok = qwen3Tokenizer();
const card = { display_name: "m", migration_limit: 1 } as unknown as ModelDeploymentCard;

function stream<T>(items: T[], breakAfter?: number): ResponseStream<T> {
  const gen = (async function* () {
    for (let i = 0; i < items.length; i++) {
      if (i === breakAfter) throw new StreamIncompleteError("worker died", i);
      yield items[i]!;
    }
  })();
  return Object.assign(gen, { context: new Context(), instanceId: "w" });
}

/** A model whose engine answers each attempt from `attempts` in turn. */
function fakeModel(
  modelInput: ModelInput,
  attempts: (() => Promise<ResponseStream<unknown>>)[],
  seen: unknown[],
): ServedModel {
  const [hello] = tok.encode("Hello", { addSpecialTokens: false });
  const pre: PreprocessedRequest = {
    model: "m",
    token_ids: [hello!],
    stop_conditions: {},
    sampling_options: {},
    eos_token_ids: [QWEN3_IM_END],
  };
  const preprocessor = {
    completion: () => ({ request: pre, promptTokens: 1, n: 1 }),
  } as unknown as Preprocessor;
  const loaded: ModelPipeline = { card, tokenizer: tok, preprocessor };
  let attempt = 0;
  return {
    name: "m",
    modelInput,
    pipeline: () => Promise.resolve(loaded),
    card: () => Promise.resolve(card),
    generate: (request: unknown) => {
      seen.push(request);
      return attempts[attempt++]!();
    },
    reportInstanceDown: () => {},
  } as unknown as ServedModel;
}

Deno.test("a model's pipeline is composed once per card, not per request", async () => {
  const pipelines = new ModelPipelines({ metrics: new FrontendMetrics(), logger: silentLogger });
  const model = fakeModel(ModelInput.Tokens, [], []);
  assert.equal(await pipelines.get(model), await pipelines.get(model));
  const text = fakeModel(ModelInput.Text, [], []);
  assert.equal(await pipelines.get(text), await pipelines.get(text));
});

Deno.test("a tokens model's request is preprocessed, migrated when its worker dies, and postprocessed", async () => {
  const metrics = new FrontendMetrics();
  const pipelines = new ModelPipelines({ metrics, logger: silentLogger });
  const [a, b] = tok.encode(" world", { addSpecialTokens: false }).concat(QWEN3_IM_END);
  const seen: unknown[] = [];
  const model = fakeModel(ModelInput.Tokens, [
    () => Promise.resolve(stream<LLMEngineOutput>([{ token_ids: [a!] }, { token_ids: [b!] }], 1)),
    () => Promise.resolve(stream<LLMEngineOutput>([{ token_ids: [b!], finish_reason: "eos" }])),
  ], seen);
  const pipeline = await pipelines.get(model);
  const ctx = new Context("r1");
  const run = await pipeline.start(
    "completion",
    { model: "m", prompt: "Hello" },
    ctx,
    admit(metrics, "m", "completion", false),
  );
  const body = await run.collect() as { id: string; choices: { text: string }[] };
  assert.equal(body.id, "cmpl-r1");
  assert.equal(body.choices[0]!.text, " world");
  assert.deepEqual(
    (seen[1] as PreprocessedRequest).token_ids.slice(-1),
    [a],
    "the migrated attempt carries the generated tokens",
  );
  assert.match(await metrics.render(), /dynamo_frontend_model_migration_total\{model="m"\} 1/);
});

Deno.test("a text model fails over only while opening, and its chunks are folded for a unary client", async () => {
  const metrics = new FrontendMetrics();
  const pipelines = new ModelPipelines({ metrics, logger: silentLogger });
  const chunk = (text: string) => ({
    id: "c",
    object: "text_completion",
    created: 1,
    model: "m",
    choices: [{ index: 0, text }],
  });
  const model = fakeModel(ModelInput.Text, [
    () => Promise.reject(new StreamIncompleteError("worker died before its prologue")),
    () => Promise.resolve(stream([chunk("a"), chunk("b")])),
  ], []);
  const run = await (await pipelines.get(model)).start(
    "completion",
    { model: "m", prompt: "p" },
    new Context(),
    admit(metrics, "m", "completion", false),
  );
  const body = await run.collect() as { choices: { text: string }[] };
  assert.equal(body.choices[0]!.text, "ab");
  assert.match(await metrics.render(), /dynamo_frontend_model_migration_total\{model="m"\} 1/);
});

Deno.test("a card naming an unknown parser fails its model's requests, saying which name", async () => {
  const pipelines = new ModelPipelines({ metrics: new FrontendMetrics(), logger: silentLogger });
  const bad = { ...card, runtime_config: { tool_call_parser: "hermes3" } };
  const model = {
    name: "m",
    modelInput: ModelInput.Tokens,
    cardKey: "k",
    pipeline: () =>
      Promise.resolve({ card: bad, tokenizer: tok, preprocessor: {} as Preprocessor }),
  } as unknown as ServedModel;
  await assert.rejects(pipelines.get(model), (err: unknown) => {
    assert.ok(err instanceof DynamoError);
    assert.match(err.message, /model m: unknown tool call parser "hermes3"; known: hermes,/);
    return true;
  });
});
