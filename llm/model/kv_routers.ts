// The frontend's KV routers: one per endpoint and KV block size, started on first use and
// closed with the model registry.

import type { Client } from "../../runtime/client.ts";
import type { ReferenceEndpointClient } from "../../runtime/reference/endpoint_client.ts";
import type { DistributedRuntime } from "../../runtime/distributed_runtime.ts";
import { type Logger, silentLogger } from "../../runtime/logger.ts";
import { ApproxKvIndexer } from "../kv_router/approx_indexer.ts";
import { KvRouter, type KvRouterOptions } from "../kv_router/router.ts";
import type { TokenRouter } from "../pipeline/route.ts";
import { type EndpointClient, type EndpointId, endpointPath } from "./endpoints.ts";
import { ReferenceKvRouter } from "./reference_kv.ts";

/** The KV router's settings (router mode "kv"); see {@linkcode KvRouterOptions}. */
export type KvRouterSettings =
  & Pick<
    KvRouterOptions,
    | "overlapScoreWeight"
    | "temperature"
    | "queuedPrefillWeight"
    | "loadBound"
    | "activeDecodeBlocksThreshold"
    | "activePrefillTokensThreshold"
    | "replicaSync"
    | "onRoute"
  >
  & {
    /**
     * Whether overlaps come from the workers' KV events (default true). False (the
     * reference's `--no-kv-events`): an approximate indexer that remembers where the router
     * sent each prompt, for engines that publish no events.
     */
    useKvEvents?: boolean;
  };

/** Makes and keeps one {@linkcode KvRouter} per endpoint and block size. */
export class KvRouters {
  readonly #runtime: DistributedRuntime;
  readonly #settings: KvRouterSettings;
  readonly #log: Logger;
  readonly #routers = new Map<string, KvRouter | ReferenceKvRouter>();

  constructor(runtime: DistributedRuntime, settings: KvRouterSettings = {}, logger?: Logger) {
    this.#runtime = runtime;
    this.#settings = settings;
    this.#log = logger ?? silentLogger;
  }

  /**
   * The KV router of `endpoint` for blocks of `blockSize` tokens (made on first use): ours, or
   * for reference workers one that reads their KV events ({@linkcode ReferenceKvRouter}).
   */
  get(endpoint: EndpointId, client: EndpointClient, blockSize: number): TokenRouter {
    const path = endpointPath(endpoint);
    const reference = client.kind === "reference";
    const key = `${reference ? "reference:" : ""}${path}#${blockSize}`;
    let router = this.#routers.get(key);
    if (!router && reference) {
      const { overlapScoreWeight, temperature, queuedPrefillWeight, loadBound, onRoute } =
        this.#settings;
      router = new ReferenceKvRouter(
        this.#runtime.events,
        endpoint,
        client as ReferenceEndpointClient<unknown>,
        blockSize,
        {
          overlapScoreWeight,
          temperature,
          queuedPrefillWeight,
          loadBound,
          onRoute,
          discovery: this.#runtime.discovery,
          logger: this.#log,
        },
      );
      this.#routers.set(key, router);
      this.#log.info("reference kv router started", { endpoint: path, block_size: blockSize });
    } else if (!router) {
      const target = this.#runtime.namespace(endpoint.namespace).component(endpoint.component)
        .endpoint(endpoint.name);
      const { useKvEvents, ...settings } = this.#settings;
      router = new KvRouter(target, {
        ...settings,
        blockSize,
        // Every client but the reference's is our runtime's.
        client: client as Client,
        ...(useKvEvents === false ? { indexer: new ApproxKvIndexer(blockSize) } : {}),
      });
      this.#routers.set(key, router);
      this.#log.info("kv router started", {
        endpoint: path,
        block_size: blockSize,
        overlaps: this.#settings.useKvEvents === false ? "approximate" : "kv events",
      });
    }
    return router;
  }

  /** Closes every router. */
  async close(): Promise<void> {
    await Promise.allSettled([...this.#routers.values()].map((r) => r.close()));
  }
}
