// KV-aware routing over reference (ai-dynamo 1.6.1) workers: their own KV events, read off the
// NATS event plane (`namespace.<ns>.component.<c>.endpoint.<e>.kv-events`, a msgpack envelope
// around a msgpack list of router events), fed to our radix tree; requests go to the worker our
// routing policy picks from the overlaps. Workers publish there when started with
// `--event-plane nats` (1.6.1's default event plane is ZMQ, which this does not read).

import { decode } from "@msgpack/msgpack";
import type { Context } from "../../runtime/context.ts";
import { ProtocolError } from "../../runtime/errors.ts";
import type { EventPlane, EventSubscription } from "../../runtime/events/types.ts";
import { type Logger, silentLogger } from "../../runtime/logger.ts";
import type { ReferenceEndpointClient } from "../../runtime/reference/endpoint_client.ts";
import type { ResponseStream } from "../../runtime/stream.ts";
import { computeLocalHashes } from "../kv_router/hashing.ts";
import { RoutingPolicy, type RoutingPolicyOptions } from "../kv_router/policy.ts";
import type { KvCacheEventData } from "../kv_router/protocols.ts";
import { RadixTree } from "../kv_router/radix_tree.ts";
import type { TokenRouter } from "../pipeline/route.ts";
import type { EndpointId } from "./endpoints.ts";

/** The subject a reference endpoint's workers publish KV events on (NATS event plane). */
export function referenceKvEventsSubject(endpoint: EndpointId): string {
  return `namespace.${endpoint.namespace}.component.${endpoint.component}.endpoint.${endpoint.name}.kv-events`;
}

/** One KV event of a reference worker, as ours: its worker (hex id) and what happened. */
export interface ReferenceKvEvent {
  /** The worker's instance id, lowercase hex. */
  workerId: string;
  /** Stored blocks, removed blocks, or the cache cleared. */
  data: KvCacheEventData;
}

const isObject = (v: unknown): v is Record<string, unknown> =>
  typeof v === "object" && v !== null && !Array.isArray(v) && !(v instanceof Uint8Array);

function hash(v: unknown, what: string): bigint {
  if (typeof v === "bigint") return BigInt.asUintN(64, v);
  if (typeof v === "number" && Number.isSafeInteger(v) && v >= 0) return BigInt(v);
  throw new ProtocolError(`${what} is not a u64`);
}

/**
 * Decodes one message of a reference worker's `kv-events` subject: the event-plane envelope
 * (`{publisher_id, sequence, published_at, topic, payload}`) and the router events in its
 * payload.
 *
 * @param bytes the NATS message payload
 * @returns the events, in order
 * @throws {ProtocolError} bytes that are not such a message
 */
export function decodeReferenceKvEvents(bytes: Uint8Array): ReferenceKvEvent[] {
  let envelope: unknown;
  let events: unknown;
  try {
    envelope = decode(bytes, { useBigInt64: true });
    if (!isObject(envelope) || !(envelope.payload instanceof Uint8Array)) {
      throw new ProtocolError("the envelope has no binary payload");
    }
    events = decode(envelope.payload, { useBigInt64: true });
  } catch (err) {
    if (err instanceof ProtocolError) throw err;
    throw new ProtocolError(`not msgpack: ${(err as Error).message}`, { cause: err });
  }
  if (!Array.isArray(events)) throw new ProtocolError("the payload is not a list of events");
  return events.map((e, i): ReferenceKvEvent => {
    const at = `event ${i}`;
    if (!isObject(e) || !isObject(e.event)) throw new ProtocolError(`${at} is not a router event`);
    const workerId = hash(e.worker_id, `${at}.worker_id`).toString(16);
    const data = e.event.data;
    if (data === "cleared" || (isObject(data) && "cleared" in data)) {
      return { workerId, data: "cleared" };
    }
    if (isObject(data) && isObject(data.stored)) {
      const { parent_hash: parent, blocks } = data.stored;
      if (!Array.isArray(blocks)) throw new ProtocolError(`${at}: stored blocks is not a list`);
      return {
        workerId,
        data: {
          stored: {
            parent_hash: parent === null || parent === undefined
              ? null
              : hash(parent, `${at}.parent_hash`),
            blocks: blocks.map((b, j) => {
              if (!isObject(b)) throw new ProtocolError(`${at}: block ${j} is not an object`);
              return {
                block_hash: hash(b.block_hash, `${at}: block ${j} block_hash`),
                tokens_hash: hash(b.tokens_hash, `${at}: block ${j} tokens_hash`),
              };
            }),
          },
        },
      };
    }
    if (isObject(data) && isObject(data.removed) && Array.isArray(data.removed.block_hashes)) {
      return {
        workerId,
        data: {
          removed: {
            block_hashes: data.removed.block_hashes.map((h, j) => hash(h, `${at}: hash ${j}`)),
          },
        },
      };
    }
    throw new ProtocolError(`${at}: unknown event data`);
  });
}

/** Options of {@linkcode ReferenceKvRouter}. */
export interface ReferenceKvRouterOptions extends RoutingPolicyOptions {
  /** Hears of messages that do not decode. */
  logger?: Logger;
}

/**
 * Routes tokens requests to the reference worker that caches most of their prefix, by our
 * routing policy (cold prompts in turn); its load is the requests this router has in flight on
 * each worker. Events apply as they come (the reference's event ids are not checked for gaps).
 */
export class ReferenceKvRouter implements TokenRouter {
  /** The radix tree of the workers' cached blocks. */
  readonly tree: RadixTree = new RadixTree();
  readonly #client: ReferenceEndpointClient<unknown>;
  readonly #blockSize: number;
  readonly #policy: RoutingPolicy;
  readonly #sub: EventSubscription;
  readonly #consuming: Promise<void>;
  readonly #inflight = new Map<string, number>();
  #invalid = 0;

  /**
   * Subscribes to the endpoint's reference KV events.
   *
   * @param events the event plane the workers publish on (NATS)
   * @param endpoint the workers' endpoint
   * @param client the endpoint's reference client
   * @param blockSize the workers' KV block size (their card's)
   * @param options routing policy settings, logger
   */
  constructor(
    events: EventPlane,
    endpoint: EndpointId,
    client: ReferenceEndpointClient<unknown>,
    blockSize: number,
    options: ReferenceKvRouterOptions = {},
  ) {
    this.#client = client;
    this.#blockSize = blockSize;
    this.#policy = new RoutingPolicy(blockSize, options);
    const sub = events.subscribe(referenceKvEventsSubject(endpoint));
    this.#sub = sub;
    const log = options.logger ?? silentLogger;
    this.#consuming = (async () => {
      for await (const { payload } of sub) {
        try {
          for (const e of decodeReferenceKvEvents(payload)) this.tree.apply(e.workerId, e.data);
        } catch (err) {
          if (this.#invalid++ === 0) {
            log.warn("ignoring reference KV events that do not decode", {
              endpoint: client.path,
              error: (err as Error).message,
            });
          }
        }
      }
    })().catch((err) => log.warn("reference KV events ended", { error: String(err) }));
  }

  /** Resolves once the event subscription is in place. */
  get ready(): Promise<void> {
    return this.#sub.ready ?? Promise.resolve();
  }

  /**
   * Sends the request to the worker the policy picks from the cached overlaps.
   * @throws {NoInstancesError} no worker is live
   */
  async generate<T extends { token_ids?: number[] }>(
    request: { token_ids: number[] },
    options: { context?: Context; instances?: readonly string[] },
  ): Promise<ResponseStream<T>> {
    const allowed = options.instances === undefined ? undefined : new Set(options.instances);
    const ids = this.#client.availableInstanceIds().filter((id) =>
      allowed === undefined || allowed.has(id)
    );
    if (ids.length === 0) return await this.#client.roundRobin<T>(request, options);
    const { scores } = this.tree.findMatches(
      computeLocalHashes(request.token_ids, this.#blockSize),
    );
    const requestBlocks = Math.ceil(request.token_ids.length / this.#blockSize);
    let total = 0;
    const candidates = ids.map((workerId) => {
      const activeRequests = this.#inflight.get(workerId) ?? 0;
      total += activeRequests;
      return {
        workerId,
        overlapBlocks: scores.get(workerId) ?? 0,
        requestBlocks,
        activeBlocks: 0,
        prefillBlocks: 0,
        activeRequests,
      };
    });
    const chosen = this.#policy.choose(candidates, { totalRequests: total });
    const stream = await this.#client.direct<T>(request, chosen.workerId, options);
    return this.#counted(stream);
  }

  #counted<T>(stream: ResponseStream<T>): ResponseStream<T> {
    const id = stream.instanceId;
    this.#inflight.set(id, (this.#inflight.get(id) ?? 0) + 1);
    const inflight = this.#inflight;
    let done = false;
    const release = () => {
      if (done) return;
      done = true;
      const n = (inflight.get(id) ?? 1) - 1;
      if (n > 0) inflight.set(id, n);
      else inflight.delete(id);
    };
    return {
      context: stream.context,
      instanceId: id,
      async *[Symbol.asyncIterator]() {
        try {
          yield* stream;
        } finally {
          release();
        }
      },
    };
  }

  /** Ends the event subscription. */
  async close(): Promise<void> {
    await this.#sub.unsubscribe();
    await this.#consuming;
  }
}
