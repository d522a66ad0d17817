// The frontend's view of the models on the network: watches model entries, groups them
// by name, keeps a client per serving endpoint, and loads each model's card, tokenizer
// and preprocessor once. A model exists while at least one instance registers it.

import type { Client } from "../../runtime/client.ts";
import type { Context } from "../../runtime/context.ts";
import type { DistributedRuntime } from "../../runtime/distributed_runtime.ts";
import { watchPrefix } from "../../runtime/discovery/watch_prefix.ts";
import { DynamoError, InvalidArgumentError, NoInstancesError } from "../../runtime/errors.ts";
import { keyInstanceId } from "../../runtime/keys.ts";
import { type Logger, silentLogger } from "../../runtime/logger.ts";
import type { ResponseStream } from "../../runtime/stream.ts";
import { fetchCardFiles } from "./card.ts";
import { type ModelEntryRecord, modelEntrySchema } from "./model_entry.ts";
import { Preprocessor } from "../preprocess/preprocessor.ts";
import {
  MODEL_ENTRY_PREFIX,
  type ModelDeploymentCard,
  type ModelEntry,
  ModelInput,
  type ModelType,
} from "../protocols.ts";
import { KvRouter } from "../kv_router/router.ts";
import { Tokenizer } from "../preprocess/tokenizer.ts";

/**
 * How the frontend spreads requests over a model's instances. "kv" applies to models that
 * take tokens; requests to text models go round-robin (logged once per model).
 */
export type RouterMode = "round-robin" | "random" | "kv";

/** The KV router's settings (router mode "kv"). */
export interface KvRouterSettings {
  /** Weight of uncached prefill blocks against decode load (default 1). */
  overlapScoreWeight?: number;
  /** 0 (default): the cheapest worker; above 0: sampling. */
  temperature?: number;
  /** Weight of blocks other requests still prefill on a worker (default 1). */
  queuedPrefillWeight?: number;
}

/** Options of {@linkcode ModelManager}. */
export interface ModelManagerOptions {
  routerMode?: RouterMode;
  /** Settings of the KV router (router mode "kv"). */
  kvRouter?: KvRouterSettings;
  logger?: Logger;
  /** How long a request waits for a registered model's endpoint to be served (ms, default 5000). */
  instanceWaitMs?: number;
}

/** Loaded once per card: what preprocessing needs. */
export interface ModelPipeline {
  card: ModelDeploymentCard;
  tokenizer: Tokenizer;
  preprocessor: Preprocessor;
}

interface EndpointGroup {
  path: string;
  client: Promise<Client>;
  instances: Set<string>;
}

/** A tokens request, as the KV router reads it. */
interface TokensRequest {
  token_ids: number[];
}

function hasTokens(request: unknown): request is TokensRequest {
  return typeof request === "object" && request !== null &&
    Array.isArray((request as TokensRequest).token_ids);
}

/** One model name served by one or more endpoints. */
export class ServedModel {
  readonly name: string;
  readonly created: number = Math.floor(Date.now() / 1000);
  modelInput: ModelInput;
  modelType: ModelType;
  /** Card key of any live instance (cards of one model are expected to agree). */
  cardKey: string;
  readonly endpoints: Map<string, EndpointGroup> = new Map();
  readonly #manager: ModelManager;
  #pipeline: Promise<ModelPipeline> | undefined;
  #pipelineKey: string | undefined;
  #next = 0;
  #kvFallbackLogged = false;

  /** @internal */
  constructor(manager: ModelManager, entry: ModelEntry) {
    this.#manager = manager;
    this.name = entry.name;
    this.modelInput = entry.model_input;
    this.modelType = entry.model_type;
    this.cardKey = entry.card_key;
  }

  /** Live instances across the model's endpoints. */
  get instanceCount(): number {
    let n = 0;
    for (const g of this.endpoints.values()) n += g.instances.size;
    return n;
  }

  /**
   * The model's card, tokenizer and preprocessor: loaded once per card checksum (each
   * worker publishes its own card under its own key; equal checksums share one pipeline).
   */
  pipeline(): Promise<ModelPipeline> {
    const key = this.cardKey;
    if (this.#pipeline && this.#pipelineKey === key) return this.#pipeline;
    this.#pipelineKey = key;
    const previous = this.#pipeline;
    const loading = (async () => {
      const old = await previous?.catch(() => undefined);
      if (old !== undefined) {
        const card = await this.#manager.loadCard(key);
        if (card.mdcsum !== undefined && card.mdcsum === old.card.mdcsum) return old;
      }
      return await this.#manager.loadPipeline(key);
    })();
    this.#pipeline = loading;
    loading.catch(() => {
      if (this.#pipeline === loading) this.#pipeline = undefined;
    });
    return loading;
  }

  /** The card of a live instance. */
  async card(): Promise<ModelDeploymentCard> {
    return await this.#manager.loadCard(this.cardKey);
  }

  /**
   * Skips an instance for a while in routing (its stream broke: dead or leaving), until
   * discovery confirms or clears it.
   */
  reportInstanceDown(instanceId: string): void {
    for (const g of this.endpoints.values()) {
      if (g.instances.has(instanceId)) {
        void g.client.then((c) => c.reportInstanceDown(instanceId), () => {});
      }
    }
  }

  /**
   * Sends `request` to one of the model's instances, by the manager's router mode.
   * @throws {NoInstancesError} no instance is live
   */
  async generate<T>(request: unknown, context: Context): Promise<ResponseStream<T>> {
    const groups = [...this.endpoints.values()].filter((g) => g.instances.size > 0);
    if (groups.length === 0) throw new NoInstancesError(this.name);
    const group = groups[this.#next++ % groups.length]!;
    const client = await group.client;
    // Only the instances that registered this model: an endpoint may serve several.
    const instances = [...group.instances];
    // Workers register the model before they serve (seed 001's order): give the endpoint's
    // instance a moment to appear instead of failing a request in that window.
    await client.waitForInstances({
      among: instances,
      timeoutMs: this.#manager.instanceWaitMs,
      signal: context.signal,
    })
      .catch(() => {});
    const options = { context, instances };
    const mode = this.#manager.routerMode;
    if (mode === "kv") {
      if (hasTokens(request) && this.modelInput === ModelInput.Tokens) {
        const { card } = await this.pipeline();
        const router = this.#manager.kvRouterFor(group.path, client, card.kv_cache_block_size);
        return await router.generate<T & { token_ids?: number[] }>(
          request,
          options,
        ) as ResponseStream<
          T
        >;
      }
      // The KV router needs token ids: a text model (or a request without them) goes
      // round-robin. Say so once per model, or the operator sees kv mode silently not apply.
      if (!this.#kvFallbackLogged) {
        this.#kvFallbackLogged = true;
        this.#manager.kvFallback(
          this.name,
          this.modelInput === ModelInput.Tokens
            ? "request has no token_ids"
            : "model takes text, not tokens",
        );
      }
    }
    return mode === "random"
      ? await client.random<T>(request, options)
      : await client.roundRobin<T>(request, options);
  }
}

/** Watches `v1/models/` and serves the frontend's model lookups. */
export class ModelManager {
  readonly routerMode: RouterMode;
  readonly instanceWaitMs: number;
  readonly #runtime: DistributedRuntime;
  readonly #log: Logger;
  readonly #models = new Map<string, ServedModel>();
  readonly #entries = new Map<string, ModelEntry>(); // key -> entry
  readonly #clients = new Map<string, Promise<Client>>();
  readonly #stop = new AbortController();
  #synced = false;
  #watching: Promise<void> | undefined;
  readonly #kvSettings: KvRouterSettings;
  readonly #kvRouters = new Map<string, KvRouter>();

  constructor(runtime: DistributedRuntime, options: ModelManagerOptions = {}) {
    const mode = options.routerMode ?? "round-robin";
    if (mode !== "round-robin" && mode !== "random" && mode !== "kv") {
      throw new InvalidArgumentError(
        `router mode must be round-robin, random or kv, got ${JSON.stringify(mode)}`,
      );
    }
    this.routerMode = mode;
    this.#kvSettings = options.kvRouter ?? {};
    this.instanceWaitMs = options.instanceWaitMs ?? 5000;
    this.#runtime = runtime;
    this.#log = options.logger ?? silentLogger;
  }

  /** True once the first listing of model entries was applied. */
  get synced(): boolean {
    return this.#synced;
  }

  /** Starts watching; resolves after the first listing. */
  start(): Promise<void> {
    const ready = Promise.withResolvers<void>();
    this.#watching = this.#watch(ready.resolve).catch((err) => ready.reject(err));
    return ready.promise;
  }

  async #watch(onSynced: () => void): Promise<void> {
    const events = watchPrefix(this.#runtime.discovery, MODEL_ENTRY_PREFIX, {
      schema: modelEntrySchema,
      signal: this.#stop.signal,
      logger: this.#log,
      what: "model entry",
    });
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
        for (const key of [...this.#entries.keys()]) if (!ev.records.has(key)) this.#remove(key);
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
    this.#entries.set(key, entry);
    let model = this.#models.get(entry.name);
    const added = model === undefined;
    if (!model) {
      model = new ServedModel(this, entry);
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
    const path = `${namespace}/${component}/${name}`;
    let group = model.endpoints.get(path);
    if (!group) {
      let client = this.#clients.get(path);
      if (!client) {
        client = this.#runtime.namespace(namespace).component(component).endpoint(name).client();
        client.catch(() => this.#clients.delete(path));
        this.#clients.set(path, client);
      }
      group = { path, client, instances: new Set() };
      model.endpoints.set(path, group);
    }
    group.instances.add(instance);
  }

  #remove(key: string, log = true): void {
    const entry = this.#entries.get(key);
    if (!entry) return;
    this.#entries.delete(key);
    const model = this.#models.get(entry.name);
    if (!model) return;
    const path = `${entry.endpoint.namespace}/${entry.endpoint.component}/${entry.endpoint.name}`;
    const group = model.endpoints.get(path);
    group?.instances.delete(keyInstanceId(key));
    if (group && group.instances.size === 0) model.endpoints.delete(path);
    if (model.endpoints.size === 0) {
      this.#models.delete(entry.name);
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

  /** @internal */
  async loadCard(cardKey: string): Promise<ModelDeploymentCard> {
    const raw = await this.#runtime.discovery.get(cardKey);
    if (raw === undefined) throw new DynamoError(`model card ${cardKey} is gone`);
    return JSON.parse(raw) as ModelDeploymentCard;
  }

  /** @internal */
  async loadPipeline(cardKey: string): Promise<ModelPipeline> {
    const card = await this.loadCard(cardKey);
    if (card.model_input !== ModelInput.Tokens) {
      throw new DynamoError(
        `model ${card.display_name} takes text; it has no preprocessing pipeline`,
      );
    }
    const files = await fetchCardFiles(this.#runtime.objects, card);
    const tj = files.get("tokenizer.json");
    const tc = files.get("tokenizer_config.json");
    if (!tj || !tc) {
      throw new DynamoError(
        `model ${card.display_name} has no tokenizer.json/tokenizer_config.json to preprocess with`,
      );
    }
    const tokenizer = Tokenizer.fromBytes(tj, tc);
    return { card, tokenizer, preprocessor: new Preprocessor({ card, tokenizer }) };
  }

  /** @internal Logs that a model's requests bypass the KV router (called once per model). */
  kvFallback(model: string, reason: string): void {
    this.#log.warn("router mode kv does not apply; routing round-robin", { model, reason });
  }

  /**
   * @internal The KV router of one endpoint (one per endpoint and block size).
   */
  kvRouterFor(path: string, client: Client, blockSize: number): KvRouter {
    const key = `${path}#${blockSize}`;
    let router = this.#kvRouters.get(key);
    if (!router) {
      const [namespace, component, name] = path.split("/") as [string, string, string];
      const endpoint = this.#runtime.namespace(namespace).component(component).endpoint(name);
      router = new KvRouter(endpoint, { ...this.#kvSettings, blockSize, client });
      this.#kvRouters.set(key, router);
      this.#log.info("kv router started", { endpoint: path, block_size: blockSize });
    }
    return router;
  }

  /** Stops watching and closes the clients. */
  async close(): Promise<void> {
    this.#stop.abort();
    await this.#watching;
    await Promise.allSettled([...this.#kvRouters.values()].map((r) => r.close()));
    await Promise.allSettled([...this.#clients.values()].map(async (c) => (await c).close()));
  }
}
