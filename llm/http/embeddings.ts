// `POST /v1/embeddings`: parse, resolve a model that serves embeddings, tokenize its inputs
// (Tokens models), send one request to an instance, check its one answer, encode.

import { Context } from "../../runtime/context.ts";
import type { ServedModel } from "../model/served_model.ts";
import {
  embeddingBase64,
  type EmbeddingRequest,
  type EmbeddingResponse,
  validateEmbeddingRequest,
} from "../openai/embeddings.ts";
import { RequestError } from "../openai/errors.ts";
import { Admission } from "../pipeline/admit.ts";
import { jsonResponse } from "../pipeline/encode.ts";
import { WorkerOutputError } from "../pipeline/engine_output.ts";
import { resolveModel } from "../pipeline/resolve.ts";
import {
  type EmbeddingsEngineOutput,
  ModelInput,
  ModelType,
  type PreprocessedEmbeddingRequest,
} from "../protocols.ts";
import { readJsonBody } from "./body.ts";
import type { FrontendMetrics } from "./metrics.ts";

/** What the embeddings route needs from the frontend. */
export interface EmbeddingsRouteOptions {
  /** Where models are looked up. */
  models: { get(name: string): ServedModel | undefined; recentlyServed?(name: string): boolean };
  /** Where requests are counted. */
  metrics: FrontendMetrics;
  /** Largest request body in bytes. */
  maxBodyBytes: number;
}

/**
 * Answers one `POST /v1/embeddings`.
 *
 * @param request the HTTP request
 * @param requestId the id to answer under (the client's `x-request-id` when valid)
 * @param options models, metrics, body limit
 * @returns the embedding response
 * @throws {RequestError} 400 for a bad body, a model without embeddings or an input over its
 *   context; 404 for an unknown model
 * @throws {WorkerOutputError} the worker's answer is not one vector per input
 */
export async function embeddingsRoute(
  request: Request,
  requestId: string,
  options: EmbeddingsRouteOptions,
): Promise<Response> {
  const req = validateEmbeddingRequest(await readJsonBody(request, options.maxBodyBytes));
  const model = resolveModel(options.models, req.model);
  if ((model.modelType & ModelType.Embedding) === 0) {
    throw new RequestError(
      400,
      `The model \`${model.name}\` does not serve embeddings (it was not registered with ModelType.Embedding).`,
      { param: "model", code: "model_not_embedding" },
    );
  }
  const admission = new Admission(options.metrics, {
    model: model.name,
    endpoint: "embeddings",
    request_type: "unary",
  });
  const ctx = new Context(crypto.randomUUID());
  try {
    const body = model.modelInput === ModelInput.Tokens
      ? await tokensEmbeddings(model, req, ctx)
      : await firstItem(await model.generate<unknown>(req, ctx));
    admission.finish("success");
    return jsonResponse(body, 200, { "x-request-id": requestId });
  } catch (err) {
    ctx.kill();
    admission.finish("error");
    throw err;
  }
}

async function tokensEmbeddings(
  model: ServedModel,
  req: EmbeddingRequest,
  ctx: Context,
): Promise<EmbeddingResponse> {
  const { tokenizer, card } = await model.pipeline();
  const input = req.input;
  const lists: number[][] = typeof input === "string"
    ? [tokenizer.encode(input)]
    : typeof input[0] === "string"
    ? (input as string[]).map((s) => tokenizer.encode(s))
    : typeof input[0] === "number"
    ? [input as number[]]
    : input as number[][];
  const vocab = tokenizer.vocabSize;
  lists.forEach((ids, i) => {
    const param = lists.length === 1 ? "input" : `input[${i}]`;
    if (ids.length === 0) throw new RequestError(400, `\`${param}\` has no tokens`, { param });
    if (card.context_length > 0 && ids.length > card.context_length) {
      throw new RequestError(
        400,
        `This model's maximum context length is ${card.context_length} tokens. However, \`${param}\` resulted in ${ids.length} tokens. Please reduce its length.`,
        { param, code: "context_length_exceeded" },
      );
    }
    const outOfRange = ids.find((t) => t >= vocab);
    if (outOfRange !== undefined) {
      throw new RequestError(
        400,
        `\`${param}\` holds the token id ${outOfRange}, outside the model's vocabulary of ${vocab}`,
        { param },
      );
    }
  });
  const engineRequest: PreprocessedEmbeddingRequest = { model: model.name, token_ids: lists };
  const stream = await model.generate<EmbeddingsEngineOutput>(engineRequest, ctx);
  const out = await firstItem(stream);
  const vectors = checkEmbeddings(out, lists.length, stream.instanceId);
  const tokens = lists.reduce((n, ids) => n + ids.length, 0);
  return {
    object: "list",
    data: vectors.map((v, index) => ({
      object: "embedding",
      index,
      embedding: req.encoding_format === "base64" ? embeddingBase64(v) : v,
    })),
    model: model.name,
    usage: { prompt_tokens: tokens, total_tokens: tokens },
  };
}

/** The stream's first item (the stream is then closed). */
async function firstItem<T>(stream: AsyncIterable<T> & { instanceId: string }): Promise<T> {
  for await (const item of stream) return item;
  throw new WorkerOutputError(stream.instanceId, "the embedding stream ended without an answer");
}

/** The worker's vectors, checked: one per input, all of one size, finite numbers. */
function checkEmbeddings(out: unknown, inputs: number, instanceId: string): number[][] {
  const vectors = (out as Partial<EmbeddingsEngineOutput> | null)?.embeddings;
  if (!Array.isArray(vectors) || vectors.length !== inputs) {
    throw new WorkerOutputError(
      instanceId,
      `expected ${inputs} embedding vector(s), got ${
        Array.isArray(vectors) ? vectors.length : typeof vectors
      }`,
    );
  }
  const size = Array.isArray(vectors[0]) ? vectors[0].length : -1;
  for (const v of vectors) {
    if (
      !Array.isArray(v) || v.length === 0 || v.length !== size ||
      !v.every((x) => typeof x === "number" && Number.isFinite(x))
    ) {
      throw new WorkerOutputError(
        instanceId,
        "embedding vectors must be non-empty lists of finite numbers, all of one size",
      );
    }
  }
  return vectors as number[][];
}
