// A llama.cpp worker on a runtime: load the GGUF, serve it on an endpoint, publish its KV events
// and load (so `--router-mode kv` routes to the worker holding a prompt's prefix) and register
// the model as a Tokens model whose tokenizer and chat template come from the GGUF.

import type { Endpoint } from "../../../runtime/component.ts";
import { fromForwardPassMetrics, KvMetricsPublisher } from "../../kv_router/metrics.ts";
import { KvEventPublisher } from "../../kv_router/publisher.ts";
import {
  referenceLoadFor,
  type ReferenceLoadPublisher,
} from "../../../runtime/reference/load_metrics.ts";
import { registerLlm, type RegisterLlmOptions } from "../../model/register.ts";
import { type ModelDeploymentCard, ModelInput, ModelType } from "../../protocols.ts";
import { LlamaCppEngine, type LlamaCppEngineOptions } from "./engine.ts";

/** Options of {@linkcode runLlamaCppWorker}. */
export interface LlamaCppWorkerOptions
  extends Omit<LlamaCppEngineOptions, "onKvEvent" | "onMetrics"> {
  /** registerLlm options besides the block size and context length (the engine's). */
  register?: Omit<RegisterLlmOptions, "kvCacheBlockSize" | "contextLength">;
  /** Publish KV events and load metrics on the endpoint's component (default true). */
  publish?: boolean;
  /** Also serve `/v1/embeddings` with the model (registers `ModelType.Embedding`; default false). */
  embedding?: boolean;
}

/** What the card says of the llama.cpp engine: its name and the structured output it enforces. */
export const LLAMACPP_RUNTIME_DATA: Readonly<Record<string, unknown>> = Object.freeze({
  engine: "llamacpp",
  guided_decoding: Object.freeze(["json_object", "json_schema"]),
});

/** A running llama.cpp worker. */
export interface LlamaCppWorker {
  /** The loaded engine. */
  readonly engine: LlamaCppEngine;
  /** The endpoint it serves. */
  readonly endpoint: Endpoint;
  /** The registered model card. */
  readonly card: ModelDeploymentCard;
  /** Its KV event publisher (absent with `publish: false`). */
  readonly events?: KvEventPublisher;
  /** Resolves once the endpoint stopped serving and the engine closed. */
  readonly serving: Promise<void>;
}

/**
 * Loads `modelPath`, serves it on `endpoint` (graceful shutdown: running requests finish) and
 * registers it as a Tokens-input chat and completions model (and embeddings with `embedding`)
 * whose card says it enforces `response_format` (json_object, json_schema) by grammar. The
 * engine closes when the endpoint stops.
 *
 * @param endpoint where to serve (its component's service is created if needed)
 * @param modelPath the `.gguf` file
 * @param options engine options, registerLlm options, whether to publish KV events and load
 * @returns the worker once its model is registered
 * @throws {LlamaCppLoadError} the file is missing, not a GGUF, truncated or refused
 * @example
 * ```ts ignore
 * const endpoint = runtime.namespace("dynamo").component("backend").endpoint("generate");
 * const worker = await runLlamaCppWorker(endpoint, "SmolLM2-135M-Instruct.Q4_1.gguf");
 * await worker.serving;
 * ```
 */
export async function runLlamaCppWorker(
  endpoint: Endpoint,
  modelPath: string,
  options: LlamaCppWorkerOptions = {},
): Promise<LlamaCppWorker> {
  const component = endpoint.component;
  await component.createService();
  const kvBlockSize = options.kvBlockSize ?? 16;
  const publish = options.publish ?? true;
  const events = publish
    ? new KvEventPublisher(component, { kvBlockSize, referenceEndpoint: endpoint.name })
    : undefined;
  const metrics = publish ? new KvMetricsPublisher() : undefined;
  let load: ReferenceLoadPublisher | undefined;
  const log = component.runtimeInternals.logger;
  const closePublishers = async () => {
    metrics?.close();
    await events?.close();
    await load?.close();
  };
  let engine: LlamaCppEngine;
  try {
    if (metrics) await metrics.createEndpoint(component);
    // On etcd, its load in the reference's format too (its frontend's busy checks read it).
    if (publish) load = await referenceLoadFor(endpoint, { blockSize: kvBlockSize });
    engine = await LlamaCppEngine.load(modelPath, {
      ...options,
      kvBlockSize,
      onKvEvent: events && ((data) => {
        // A lost event shows as a gap in event ids: the indexer then asks for the state.
        events.publish(data).catch((err) =>
          log.debug("kv event not published", { error: String(err) })
        );
      }),
      onMetrics: metrics && ((m) => metrics.publish(fromForwardPassMetrics(m))),
    });
  } catch (err) {
    await closePublishers();
    throw err;
  }
  const serving = endpoint.serveEndpoint(load ? load.track(engine.handler) : engine.handler, {
    gracefulShutdown: true,
  });
  const closed = serving.finally(async () => {
    await engine.close();
    await closePublishers();
  });
  try {
    const card = await registerLlm(
      ModelInput.Tokens,
      ModelType.Chat | ModelType.Completions | (options.embedding ? ModelType.Embedding : 0),
      endpoint,
      modelPath,
      {
        ...options.register,
        runtimeData: { ...LLAMACPP_RUNTIME_DATA, ...options.register?.runtimeData },
        kvCacheBlockSize: kvBlockSize,
        contextLength: engine.contextLength,
      },
    );
    metrics?.publish(fromForwardPassMetrics(engine.metrics()));
    return { engine, endpoint, card, events, serving: closed };
  } catch (err) {
    closed.catch(() => {});
    await engine.close();
    await closePublishers();
    throw err;
  }
}
