// The frontend's registry of the models on the network: watches model entries, groups them
// by name and endpoint, and keeps a client per serving endpoint. A model exists while at
// least one instance registers it. Loading cards (./loader.ts), routing
// (../pipeline/route.ts) and the KV routers (./kv_routers.ts) live in their own modules.

import type { DistributedRuntime } from "../../runtime/distributed_runtime.ts";
import { watchPrefix } from "../../runtime/discovery/watch_prefix.ts";
import { InvalidArgumentError } from "../../runtime/errors.ts";
import { keyInstanceId } from "../../runtime/keys.ts";
import { type Logger, silentLogger } from "../../runtime/logger.ts";
import { ReferenceClient } from "../../runtime/reference/client.ts";
import { natsConnectionOf } from "../../runtime/transport/tcp.ts";
import { ReferenceEndpointClient } from "../../runtime/reference/endpoint_client.ts";
import {
  MODEL_CARD_PREFIX,
  MODEL_ENTRY_PREFIX,
  type ModelEntry,
  ModelInput,
} from "../protocols.ts";
import type { RoutePolicy, RouterMode } from "../pipeline/route.ts";
import { type EndpointClient, type EndpointGroup, endpointPath } from "./endpoints.ts";
import { KvRouters, type KvRouterSettings } from "./kv_routers.ts";
import { ModelLoader } from "./loader.ts";
import { type ModelEntryRecord, modelEntrySchema } from "./model_entry.ts";
import {
  REFERENCE_LLM_CODEC,
  referenceModelEntrySchema,
  type ReferenceWorkersOptions,
} from "./reference_models.ts";
import { ServedModel } from "./served_model.ts";

export type { RouterMode } from "../pipeline/route.ts";
export type { KvRouterSettings } from "./kv_routers.ts";
export type { ModelPipeline } from "./loader.ts";
export { ServedModel } from "./served_model.ts";
export type { ReferenceWorkersOptions } from "./reference_models.ts";

/** Options of {@linkcode ModelManager}. */
export interface ModelManagerOptions {
  /** How a request picks an instance: "round-robin" (default), "random" or "kv". */
  routerMode?: RouterMode;
  /** Settings of the KV router (router mode "kv"). */
  kvRouter?: KvRouterSettings;
  /** Where the manager logs (default: silent). */
  logger?: Logger;
  /** How long a request waits for a registered model's endpoint to be served (ms, default 5000). */
  instanceWaitMs?: number;
  /**
   * How long after its last instance left a model is still known (ms, default 60 000):
   * requests for it get 503 with Retry-After (workers re-registering after an etcd outage,
   * or restarting) instead of 404.
   */
  goneGraceMs?: number;
  /**
   * Serve only the models whose endpoints are in this namespace (the reference frontend's
   * `--namespace`, `DYN_NAMESPACE`); default: every namespace.
   */
  namespace?: string;
  /**
   * Also serve the models of reference (ai-dynamo 1.6.1) workers registered in the same etcd:
   * their records under `v1/mdc/`, their TCP request plane (default: off).
   */
  referenceWorkers?: ReferenceWorkersOptions;
}

/**
 * Watches `v1/models/` and serves the frontend's model lookups.
 *
 * @example
 * ```ts
 * import { DistributedRuntime } from "../../runtime/distributed_runtime.ts";
 *
 * const runtime = await DistributedRuntime.connect({ discovery: "memory", requestPlane: "local" });
 * const models = new ModelManager(runtime, { routerMode: "round-robin" });
 * await models.start(); // after the first listing of registered models
 * for (const model of models.list()) console.log(model.name);
 * await models.close();
 * await runtime.shutdown();
 * ```
 */
export class ModelManager {
  /** How a request picks an instance of its model. */
  readonly routerMode: RouterMode;
  /** How long a request waits for a registered model's endpoint to be served (ms). */
  readonly instanceWaitMs: number;
  /** Where the models' cards and preprocessing pipelines are loaded from. */
  readonly loader: ModelLoader;
  readonly #runtime: DistributedRuntime;
  readonly #log: Logger;
  readonly #models = new Map<string, ServedModel>();
  /** Models whose last instance left, and when (ms, performance.now()). */
  readonly #gone = new Map<string, number>();
  readonly #goneGraceMs: number;
  readonly #namespace: string | undefined;
  readonly #entries = new Map<string, ModelEntry>(); // key -> entry
  readonly #clients = new Map<string, Promise<EndpointClient>>();
  readonly #referenceOptions: ReferenceWorkersOptions | undefined;
  #referenceClient: ReferenceClient | undefined;
  #referenceWatching: Promise<void> | undefined;
  readonly #stop = new AbortController();
  #synced = false;
  #watching: Promise<void> | undefined;
  readonly #kvRouters: KvRouters;
  readonly #routePolicy: RoutePolicy;

  /**
   * Creates a manager of the models registered on `runtime`; {@linkcode ModelManager.start}
   * begins watching them.
   * @throws {InvalidArgumentError} an unknown router mode
   */
  constructor(runtime: DistributedRuntime, options: ModelManagerOptions = {}) {
    const mode = options.routerMode ?? "round-robin";
    if (mode !== "round-robin" && mode !== "random" && mode !== "kv") {
      throw new InvalidArgumentError(
        `router mode must be round-robin, random or kv, got ${JSON.stringify(mode)}`,
      );
    }
    this.routerMode = mode;
    this.instanceWaitMs = options.instanceWaitMs ?? 5000;
    this.#goneGraceMs = options.goneGraceMs ?? 60_000;
    this.#namespace = options.namespace;
    this.#runtime = runtime;
    this.#log = options.logger ?? silentLogger;
    this.#referenceOptions = options.referenceWorkers;
    this.loader = new ModelLoader(runtime, options.referenceWorkers);
    const kvRouters = new KvRouters(runtime, options.kvRouter ?? {}, this.#log);
    this.#kvRouters = kvRouters;
    this.#routePolicy = {
      mode,
      instanceWaitMs: this.instanceWaitMs,
      kvRouter: (endpoint, client, blockSize) => kvRouters.get(endpoint, client, blockSize),
      logger: this.#log,
    };
  }

  /** True once the first listing of model entries was applied. */
  get synced(): boolean {
    return this.#synced;
  }

  /** Starts watching; resolves after the first listing. */
  start(): Promise<void> {
    const ready = Promise.withResolvers<void>();
    this.#watching = this.#watch(ready.resolve).catch((err) => ready.reject(err));
    if (this.#referenceOptions === undefined) return ready.promise;
    const reference = Promise.withResolvers<void>();
    this.#referenceWatching = this.#watch(reference.resolve, true)
      .catch((err) => reference.reject(err));
    return Promise.all([ready.promise, reference.promise]).then(() => {});
  }

  /**
   * Follows our model entries, or (`reference`) the reference workers' model records: both
   * feed the same models, apart by key prefix (`v1/models/` and `v1/mdc/`).
   */
  async #watch(onSynced: () => void, reference = false): Promise<void> {
    // Our own cards share the reference's prefix and are not model records: that watch skips
    // them without a log line (a reference record that does not parse is skipped alike).
    const events = reference
      ? watchPrefix(this.#runtime.discovery, MODEL_CARD_PREFIX, {
        schema: referenceModelEntrySchema,
        signal: this.#stop.signal,
        what: "reference model record",
      })
      : watchPrefix(this.#runtime.discovery, MODEL_ENTRY_PREFIX, {
        schema: modelEntrySchema,
        signal: this.#stop.signal,
        logger: this.#log,
        what: "model entry",
      });
    const prefix = reference ? MODEL_CARD_PREFIX : MODEL_ENTRY_PREFIX;
    for await (const ev of events) {
      if (ev.type === "synced") {
        // The listing, swapped in: new and changed entries first (unchanged ones stay as
        // they are), then those that vanished while the watch was down, so a model served
        // throughout is never dropped in between.
        for (const [key, record] of ev.records) {
          const held = this.#entries.get(key);
          if (held === undefined || JSON.stringify(held) !== JSON.stringify(record.entry)) {
            this.#put(key, record);
          }
        }
        for (const key of [...this.#entries.keys()]) {
          if (key.startsWith(prefix) && !ev.records.has(key)) this.#remove(key);
        }
        this.#synced = true;
        onSynced();
      } else if (ev.type === "put") {
        this.#put(ev.key, ev.value);
      } else {
        this.#remove(ev.key);
      }
    }
  }

  #put(key: string, { instanceId: instance, entry }: ModelEntryRecord): void {
    this.#remove(key, false);
    // Another namespace's model: not this frontend's to serve.
    if (this.#namespace !== undefined && entry.endpoint.namespace !== this.#namespace) return;
    this.#entries.set(key, entry);
    let model = this.#models.get(entry.name);
    const added = model === undefined;
    if (!model) {
      model = new ServedModel(entry, this.loader, this.#routePolicy);
      this.#gone.delete(entry.name);
      this.#models.set(entry.name, model);
      this.#log.info("model added", { model: entry.name, input: entry.model_input });
    }
    model.modelInput = entry.model_input;
    model.modelType = entry.model_type;
    const newCard = model.cardKey !== entry.card_key;
    model.cardKey = entry.card_key;
    if (model.modelInput === ModelInput.Tokens && (added || newCard)) {
      // Load the tokenizer and template now, not on the first request: it takes a few
      // hundred ms of the event loop, which would stall every stream in flight then.
      model.pipeline().catch((err: unknown) => {
        this.#log.warn("could not load the model's preprocessing pipeline; will retry on use", {
          model: entry.name,
          error: err instanceof Error ? err.message : String(err),
        });
      });
    }
    const { namespace, component, name } = entry.endpoint;
    const path = endpointPath(entry.endpoint);
    const groupKey = groupKeyOf(key, path);
    let group = model.endpoints.get(groupKey);
    if (!group) {
      let client = this.#clients.get(groupKey);
      if (!client) {
        client = groupKey === path
          ? this.#runtime.namespace(namespace).component(component).endpoint(name).client()
          : ReferenceEndpointClient.start(
            this.#runtime.discovery,
            { namespace, component, endpoint: name },
            { client: this.#reference(), codec: REFERENCE_LLM_CODEC, logger: this.#log },
          );
        client.catch(() => this.#clients.delete(groupKey));
        this.#clients.set(groupKey, client);
      }
      group = { id: { namespace, component, name }, path, client, instances: new Set() };
      model.endpoints.set(groupKey, group);
      if (groupKey !== path && this.routerMode === "kv") this.#startKvRouter(model, group);
    }
    group.instances.add(instance);
  }

  #remove(key: string, log = true): void {
    const entry = this.#entries.get(key);
    if (!entry) return;
    this.#entries.delete(key);
    const model = this.#models.get(entry.name);
    if (!model) return;
    const groupKey = groupKeyOf(key, endpointPath(entry.endpoint));
    const group = model.endpoints.get(groupKey);
    group?.instances.delete(keyInstanceId(key));
    if (group && group.instances.size === 0) model.endpoints.delete(groupKey);
    if (model.endpoints.size === 0) {
      this.#models.delete(entry.name);
      this.#gone.set(entry.name, performance.now());
      if (log) this.#log.info("model removed", { model: entry.name });
    } else if (model.cardKey === entry.card_key) {
      // Point at a card that is still registered.
      for (const e of this.#entries.values()) {
        if (e.name === entry.name) {
          model.cardKey = e.card_key;
          break;
        }
      }
    }
  }

  /** Models with at least one live instance, sorted by name. */
  list(): ServedModel[] {
    return [...this.#models.values()].sort((a, b) => a.name.localeCompare(b.name));
  }

  /** The model of that name, if any instance serves it. */
  get(name: string): ServedModel | undefined {
    return this.#models.get(name);
  }

  /**
   * True when no instance serves `name` now but one did within the grace period
   * ({@linkcode ModelManagerOptions.goneGraceMs}).
   */
  recentlyServed(name: string): boolean {
    const at = this.#gone.get(name);
    if (at === undefined || this.#models.has(name)) return false;
    if (performance.now() - at < this.#goneGraceMs) return true;
    this.#gone.delete(name);
    return false;
  }

  /** Stops watching and closes the clients. */
  async close(): Promise<void> {
    this.#stop.abort();
    await this.#watching;
    await this.#referenceWatching;
    await this.#kvRouters.close();
    await Promise.allSettled([...this.#clients.values()].map(async (c) => (await c).close()));
    await this.#referenceClient?.close();
  }

  /**
   * Starts the KV router of reference workers' endpoint now rather than on the first request:
   * a ZeroMQ publisher drops the events it sends before the router subscribes.
   */
  #startKvRouter(model: ServedModel, group: EndpointGroup): void {
    Promise.all([model.pipeline(), group.client]).then(([pipeline, client]) => {
      if (this.#stop.signal.aborted) return;
      this.#routePolicy.kvRouter(group.id, client, pipeline.card.kv_cache_block_size);
    }).catch(() => {}); // the first request tries again, and says why
  }

  /** The one caller of reference workers (its call-home server), made on first use. */
  #reference(): ReferenceClient {
    return this.#referenceClient ??= ReferenceClient.create({
      callHomeHostname: this.#referenceOptions?.callHomeHostname,
      logger: this.#log,
      // Workers on the reference's NATS request plane are sent to on the runtime's connection.
      nats: natsConnectionOf(this.#runtime.plane),
    });
  }
}

/**
 * Where a model's instances of one endpoint are grouped: by the endpoint's path, apart for
 * reference workers (their records are under `v1/mdc/`; they are reached by another client).
 */
function groupKeyOf(recordKey: string, path: string): string {
  return recordKey.startsWith(MODEL_CARD_PREFIX) ? `reference:${path}` : path;
}
