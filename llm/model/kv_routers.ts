// The frontend's KV routers: one per endpoint and KV block size, started on first use and
// closed with the model registry.

import type { Client } from "../../runtime/client.ts";
import type { DistributedRuntime } from "../../runtime/distributed_runtime.ts";
import { type Logger, silentLogger } from "../../runtime/logger.ts";
import { KvRouter, type KvRouterOptions } from "../kv_router/router.ts";
import { type EndpointId, endpointPath } from "./endpoints.ts";

/** The KV router's settings (router mode "kv"); see {@linkcode KvRouterOptions}. */
export type KvRouterSettings = Pick<
  KvRouterOptions,
  | "overlapScoreWeight"
  | "temperature"
  | "queuedPrefillWeight"
  | "loadBound"
  | "activeDecodeBlocksThreshold"
  | "activePrefillTokensThreshold"
  | "replicaSync"
  | "onRoute"
>;

/** Makes and keeps one {@linkcode KvRouter} per endpoint and block size. */
export class KvRouters {
  readonly #runtime: DistributedRuntime;
  readonly #settings: KvRouterSettings;
  readonly #log: Logger;
  readonly #routers = new Map<string, KvRouter>();

  constructor(runtime: DistributedRuntime, settings: KvRouterSettings = {}, logger?: Logger) {
    this.#runtime = runtime;
    this.#settings = settings;
    this.#log = logger ?? silentLogger;
  }

  /** The KV router of `endpoint` for blocks of `blockSize` tokens (made on first use). */
  get(endpoint: EndpointId, client: Client, blockSize: number): KvRouter {
    const path = endpointPath(endpoint);
    const key = `${path}#${blockSize}`;
    let router = this.#routers.get(key);
    if (!router) {
      const target = this.#runtime.namespace(endpoint.namespace).component(endpoint.component)
        .endpoint(endpoint.name);
      router = new KvRouter(target, { ...this.#settings, blockSize, client });
      this.#routers.set(key, router);
      this.#log.info("kv router started", { endpoint: path, block_size: blockSize });
    }
    return router;
  }

  /** Closes every router. */
  async close(): Promise<void> {
    await Promise.allSettled([...this.#routers.values()].map((r) => r.close()));
  }
}
