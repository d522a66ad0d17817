// Mocker workers on a runtime: serve a MockerEngine on an endpoint and register the model
// so a frontend routes to it; start many in one process for routing and scale tests.

import type { Endpoint } from "../../../runtime/component.ts";
import {
  DistributedRuntime,
  type DistributedRuntimeOptions,
  EmbeddedCluster,
} from "../../../runtime/distributed_runtime.ts";
import { InvalidArgumentError } from "../../../runtime/errors.ts";
import { type ModelDeploymentCard, ModelInput, ModelType } from "../../protocols.ts";
import { registerLlm, type RegisterLlmOptions } from "../../model/register.ts";
import { builtinTestModel } from "../../model/test_model.ts";
import { fromForwardPassMetrics, KvMetricsPublisher } from "../../kv_router/metrics.ts";
import { KvEventPublisher } from "../../kv_router/publisher.ts";
import { referenceLoadFor } from "../../../runtime/reference/load_metrics.ts";
import { MockerEngine, type MockerEngineOptions } from "./engine.ts";
import { DEFAULT_KV_FETCH_MS_PER_BLOCK } from "./timing.ts";

/** Options of {@linkcode runMockerWorker}. */
export interface MockerWorkerOptions extends MockerEngineOptions {
  /** Model folder, repo id or GGUF file for the card (default: the built-in test model). */
  modelPath?: string;
  /** registerLlm options besides kvCacheBlockSize (which is the engine's blockSize). */
  register?: Omit<RegisterLlmOptions, "kvCacheBlockSize">;
  /**
   * Publish KV events (KvEventPublisher) and load metrics (KvMetricsPublisher) on the
   * endpoint's component, for KV routers and metric aggregators (default true).
   */
  publish?: boolean;
  /**
   * Peer KV fetch: simulated ms to copy one KV block from another mocker worker (default
   * {@linkcode DEFAULT_KV_FETCH_MS_PER_BLOCK}; null: off). The worker serves its cached
   * prefixes to peers on the component's `kv_fetch` endpoint, loads prompts' prefixes from
   * peers when a KV router's hint says where they are, and says so in its metrics. Needs
   * `publish` (routers learn of it from the metrics).
   */
  kvFetchMsPerBlock?: number | null;
}

/** The endpoint on which mocker workers tell peers how much of a prefix they hold. */
export const KV_FETCH_ENDPOINT = "kv_fetch";

/** Most block hashes one `kv_fetch` question may carry. */
const MAX_FETCH_BLOCKS = 1 << 16;

/** Reads a `kv_fetch` question: `{sequence_hashes: ["<u64>", ...]}`. */
function fetchQuestion(req: unknown): bigint[] {
  const hashes = (req as { sequence_hashes?: unknown } | null)?.sequence_hashes;
  if (!Array.isArray(hashes) || hashes.length > MAX_FETCH_BLOCKS) {
    throw new InvalidArgumentError(
      `a kv_fetch request needs sequence_hashes: at most ${MAX_FETCH_BLOCKS} decimal strings`,
    );
  }
  return hashes.map((h) => {
    if (typeof h !== "string" || !/^\d{1,20}$/.test(h) || BigInt(h) >= 1n << 64n) {
      throw new InvalidArgumentError(
        `a kv_fetch sequence hash must be a u64 as a decimal string, got ${
          JSON.stringify(h)?.slice(0, 40)
        }`,
      );
    }
    return BigInt(h);
  });
}

/** A `kv_fetch` answer: how many of the asked blocks the peer holds. */
function fetchAnswer(item: unknown, asked: number): number {
  const blocks = (item as { blocks?: unknown } | null)?.blocks;
  if (!Number.isInteger(blocks) || (blocks as number) < 0 || (blocks as number) > asked) {
    throw new InvalidArgumentError(
      `a kv_fetch answer must be {blocks: 0..${asked}}, got ${JSON.stringify(item)?.slice(0, 80)}`,
    );
  }
  return blocks as number;
}

/** A running mocker worker. */
export interface MockerWorker {
  /** The worker's engine. */
  readonly engine: MockerEngine;
  /** The endpoint the worker serves. */
  readonly endpoint: Endpoint;
  /** The published model card. */
  readonly card: ModelDeploymentCard;
  /** Its KV event publisher (absent with `publish: false`). */
  readonly events?: KvEventPublisher;
  /** Resolves when the endpoint stops serving (the runtime shut down). */
  readonly serving: Promise<void>;
}

/**
 * Serves a mocker engine on `endpoint` and registers it as a Tokens-input chat and
 * completions model (card `kv_cache_block_size` = the engine's block size). The engine
 * closes when the endpoint stops. KV events and load metrics are published on the
 * endpoint's component (KvEventPublisher, KvMetricsPublisher) unless `publish` is false,
 * and also go to `onKvEvent` / `onMetrics` when given.
 *
 * @param endpoint where to serve (its component's service is created if needed)
 * @param options engine options, the model path and registerLlm options
 * @returns the worker once its model is registered
 * @throws {InvalidArgumentError} an engine option out of range
 * @throws {ModelSourceError} the model path is missing or incomplete
 * @example
 * ```ts ignore
 * const endpoint = runtime.namespace("dynamo").component("mocker").endpoint("generate");
 * const worker = await runMockerWorker(endpoint, { speedupRatio: 10, numGpuBlocks: 4096 });
 * ```
 */
export async function runMockerWorker(
  endpoint: Endpoint,
  options: MockerWorkerOptions = {},
): Promise<MockerWorker> {
  const component = endpoint.component;
  await component.createService();
  const publish = options.publish ?? true;
  const blockSize = options.blockSize ?? 16;
  const events = publish
    ? new KvEventPublisher(component, { kvBlockSize: blockSize, referenceEndpoint: endpoint.name })
    : undefined;
  const metrics = publish ? new KvMetricsPublisher() : undefined;
  if (metrics) await metrics.createEndpoint(component);
  // On etcd, its load in the reference's format too (its frontend's busy checks read it).
  const load = publish ? await referenceLoadFor(endpoint, { blockSize }) : undefined;
  const msPerBlock = options.kvFetchMsPerBlock === undefined
    ? DEFAULT_KV_FETCH_MS_PER_BLOCK
    : options.kvFetchMsPerBlock;
  const fetchEndpoint = component.endpoint(KV_FETCH_ENDPOINT);
  let fetchClient: ReturnType<typeof fetchEndpoint.client> | undefined;
  const kvFetch = publish && msPerBlock !== null
    ? {
      msPerBlock,
      peer: async (source: string, hashes: readonly bigint[], signal: AbortSignal) => {
        const client = await (fetchClient ??= fetchEndpoint.client());
        const question = { sequence_hashes: hashes.map(String) };
        for await (const item of await client.direct(question, source, { signal })) {
          return fetchAnswer(item, hashes.length);
        }
        throw new InvalidArgumentError(`the kv_fetch answer of ${source} was empty`);
      },
    }
    : undefined;
  const engine = new MockerEngine({
    ...options,
    kvFetch,
    onKvEvent: (data, tier) => {
      options.onKvEvent?.(data, tier);
      events?.publish(data, tier).catch(() => {
        /* a lost event is found by the indexer's id check */
      });
    },
    onMetrics: (m) => {
      options.onMetrics?.(m);
      metrics?.publish(fromForwardPassMetrics(m));
    },
  });
  // Routers started before the first pass learn of this worker (and of its fetch) at once.
  metrics?.publish(fromForwardPassMetrics(engine.metrics()));
  const serving = endpoint.serveEndpoint(
    load ? load.track(engine.handler) : engine.handler,
    { gracefulShutdown: true },
  );
  // Peers ask here how much of a prefix this worker holds (what it can send them); what they
  // copy is then the first to go here (BlockManager.demote).
  const fetchServing = kvFetch
    ? fetchEndpoint.serveEndpoint(async function* (req: unknown) {
      const hashes = fetchQuestion(req);
      const blocks = engine.blockManager.heldPrefix(hashes);
      engine.blockManager.demote(hashes.slice(0, blocks));
      yield { blocks };
    })
    : Promise.resolve();
  const closed = serving.finally(async () => {
    await fetchServing.catch(() => {});
    await (await fetchClient?.catch(() => undefined))?.close();
    await engine.close();
    metrics?.close();
    await events?.close();
    await load?.close();
  });
  try {
    const card = await registerLlm(
      ModelInput.Tokens,
      ModelType.Chat | ModelType.Completions,
      endpoint,
      options.modelPath ?? await builtinTestModel(),
      {
        // Named in the frontend's errors (e.g. no guided decoding for `response_format`).
        runtimeData: { engine: "mocker" },
        ...options.register,
        kvCacheBlockSize: engine.blockManager.blockSize,
      },
    );
    return { engine, endpoint, card, events, serving: closed };
  } catch (err) {
    await engine.close();
    closed.catch(() => {});
    throw err;
  }
}

/** Options of {@linkcode startMockerWorkers}. */
export interface MockerWorkersOptions extends MockerWorkerOptions {
  /**
   * How each worker's runtime connects (default memory discovery and the local request
   * plane on `embedded`); each worker gets its own runtime, hence its own instance id.
   */
  connect?: DistributedRuntimeOptions;
  /** Shared in-process cluster of the embedded default (default: a new one). */
  embedded?: EmbeddedCluster;
  /** Default "dynamo". */
  namespace?: string;
  /** Default "mocker". */
  component?: string;
  /** Default "generate". */
  endpoint?: string;
  /** Workers started at once (default 16). */
  concurrency?: number;
}

/** Mocker workers started by {@linkcode startMockerWorkers}. */
export interface MockerWorkers {
  /** The workers, each with its runtime. */
  readonly workers: readonly (MockerWorker & { readonly runtime: DistributedRuntime })[];
  /** The shared cluster when the workers run embedded (connect a frontend runtime to it). */
  readonly embedded: EmbeddedCluster;
  /** Shuts every worker's runtime down. */
  shutdown(): Promise<void>;
}

/**
 * Starts `count` mocker workers in this process, each on its own DistributedRuntime
 * (own lease and instance id) sharing one backend: an EmbeddedCluster by default, or
 * etcd + NATS through `connect`. For routing and scale tests (e.g. 256 workers).
 *
 * @param count how many workers (>= 1)
 * @param options engine, model, naming and connection options
 * @returns the workers, once all are registered
 * @throws {InvalidArgumentError} a bad count or option (started workers are shut down)
 * @example
 * ```ts ignore
 * const fleet = await startMockerWorkers(8, { speedupRatio: 100 });
 * const frontend = await DistributedRuntime.connect({ embedded: fleet.embedded });
 * // ...
 * await fleet.shutdown();
 * ```
 */
export async function startMockerWorkers(
  count: number,
  options: MockerWorkersOptions = {},
): Promise<MockerWorkers> {
  if (!Number.isInteger(count) || count < 1) {
    throw new InvalidArgumentError(`count must be a whole number >= 1, got ${count}`);
  }
  const concurrency = options.concurrency ?? 16;
  if (!Number.isInteger(concurrency) || concurrency < 1) {
    throw new InvalidArgumentError(`concurrency must be a whole number >= 1, got ${concurrency}`);
  }
  const embedded = options.embedded ?? options.connect?.embedded ?? new EmbeddedCluster();
  // Load the model path once: every worker registers the same card.
  const modelPath = options.modelPath ?? await builtinTestModel();
  const workers: (MockerWorker & { runtime: DistributedRuntime })[] = [];
  const runtimes: DistributedRuntime[] = [];
  const shutdown = async () => {
    await Promise.allSettled(runtimes.map((rt) => rt.shutdown()));
  };
  try {
    for (let start = 0; start < count; start += concurrency) {
      const batch = Array.from({ length: Math.min(concurrency, count - start) }, async () => {
        const runtime = await DistributedRuntime.connect({
          discovery: "memory",
          requestPlane: "local",
          ...options.connect,
          embedded,
        });
        runtimes.push(runtime);
        const endpoint = runtime.namespace(options.namespace ?? "dynamo")
          .component(options.component ?? "mocker").endpoint(options.endpoint ?? "generate");
        const worker = await runMockerWorker(endpoint, { ...options, modelPath });
        workers.push({ ...worker, runtime });
      });
      const results = await Promise.allSettled(batch);
      const failed = results.find((r) => r.status === "rejected");
      if (failed) throw (failed as PromiseRejectedResult).reason;
    }
  } catch (err) {
    await shutdown();
    throw err;
  }
  return { workers, embedded, shutdown };
}
