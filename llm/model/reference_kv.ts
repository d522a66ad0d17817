// KV-aware routing over reference (ai-dynamo 1.6.1) workers: their own KV events fed to our
// radix trees, one per storage tier (a worker offloading to host memory names the tier of each
// event); requests go to the worker our routing policy picks from the overlaps. The events
// (a msgpack envelope around a msgpack list of router events) come on the worker's event channel
// as its etcd record names it: a ZeroMQ publisher (1.6.1's default; we dial it as a SUB socket)
// or NATS (`--event-plane nats`: `namespace.<ns>.component.<c>.endpoint.<e>.kv-events`).

import { z } from "zod";
import type { Context } from "../../runtime/context.ts";
import type { Discovery } from "../../runtime/discovery/types.ts";
import { idSet, type InstanceIds } from "../../runtime/_id_set.ts";
import { type DiscoveryRecord, watchPrefix } from "../../runtime/discovery/watch_prefix.ts";
import { ProtocolError } from "../../runtime/errors.ts";
import type { EventPlane, EventSubscription } from "../../runtime/events/types.ts";
import { type Logger, silentLogger } from "../../runtime/logger.ts";
import type { ReferenceEndpointClient } from "../../runtime/reference/endpoint_client.ts";
import {
  listReferenceInstances,
  type ReferenceEndpoint,
  type ReferenceInstance,
} from "../../runtime/reference/instances.ts";
import { decodeReferenceLoad, type ReferenceLoad } from "../../runtime/reference/load_metrics.ts";
import { msgpackDecode } from "../../runtime/reference/_msgpack.ts";
import { ZmqSubscriber } from "../../runtime/reference/zmq_sub.ts";
import type { ResponseStream } from "../../runtime/stream.ts";
import { computeBlockHashesSync } from "../kv_router/hashing.ts";
import { PendingPrefills } from "../kv_router/pending_prefills.ts";
import { RoutingPolicy, type RoutingPolicyOptions } from "../kv_router/policy.ts";
import { ActiveSequences } from "../kv_router/scheduler.ts";
import { type KvCacheEventData, STORAGE_TIERS, type StorageTier } from "../kv_router/protocols.ts";
import type { KvRouterOptions } from "../kv_router/router.ts";
import type { RadixTree } from "../kv_router/radix_tree.ts";
import { TieredIndex, type TieredMatches } from "../kv_router/tiered_index.ts";
import type { TokenRouter } from "../pipeline/route.ts";
import type { EndpointId } from "./endpoints.ts";

/** The subject a reference endpoint's workers publish KV events on (NATS event plane). */
export function referenceKvEventsSubject(endpoint: EndpointId): string {
  return `namespace.${endpoint.namespace}.component.${endpoint.component}.endpoint.${endpoint.name}.kv-events`;
}

/** Where a reference endpoint's workers record their KV event channels in etcd. */
export function referenceKvChannelsPrefix(endpoint: EndpointId): string {
  return `v1/event_channels/namespace/${endpoint.namespace}/component/${endpoint.component}` +
    `/endpoint/${endpoint.name}/topic/kv-events/`;
}

/** A worker's KV event channel, from its etcd record. */
export type ReferenceKvChannel =
  | { kind: "zmq"; endpoint: string }
  | { kind: "nats"; subjectPrefix: string };

/**
 * Parses the value of an event channel record (`{type: "EventChannel", topic, transport}`).
 *
 * @param value the JSON-parsed record
 * @returns the channel
 * @throws {ProtocolError} a value that is not a kv-events channel of a known transport
 */
export function parseReferenceKvChannel(value: unknown): ReferenceKvChannel {
  if (!isObject(value) || value.type !== "EventChannel" || value.topic !== "kv-events") {
    throw new ProtocolError("not a kv-events EventChannel record");
  }
  const t = value.transport;
  const config = isObject(t) && isObject(t.config) ? t.config : undefined;
  if (isObject(t) && t.kind === "Zmq" && typeof config?.endpoint === "string") {
    return { kind: "zmq", endpoint: config.endpoint };
  }
  if (isObject(t) && t.kind === "Nats" && typeof config?.subject_prefix === "string") {
    return { kind: "nats", subjectPrefix: config.subject_prefix };
  }
  throw new ProtocolError(`unknown event channel transport ${JSON.stringify(t)}`);
}

const channelSchema = z.object({ key: z.string(), value: z.unknown() }).transform(({ value }) =>
  parseReferenceKvChannel(value)
);

/** Where a reference endpoint's workers record their KV event sources (with recovery targets). */
export function referenceKvSourcesPrefix(endpoint: EndpointId): string {
  return `v1/event_sources/namespace/${endpoint.namespace}/component/${endpoint.component}` +
    `/endpoint/${endpoint.name}/topic/kv-events/`;
}

/**
 * The KV-state query endpoint an EventSource record names (`metadata.recovery_target`), if any.
 *
 * @param value the JSON-parsed record
 * @returns the endpoint to ask, or undefined where the source names none
 * @throws {ProtocolError} a value that is not a kv-events EventSource record
 */
export function parseReferenceRecoveryTarget(value: unknown): ReferenceEndpoint | undefined {
  if (!isObject(value) || value.type !== "EventSource" || value.topic !== "kv-events") {
    throw new ProtocolError("not a kv-events EventSource record");
  }
  const target = isObject(value.metadata) ? value.metadata.recovery_target : undefined;
  if (target === undefined || target === null) return undefined;
  if (
    !isObject(target) || typeof target.namespace !== "string" ||
    typeof target.component !== "string" || typeof target.endpoint !== "string"
  ) {
    throw new ProtocolError("the recovery target is not an endpoint");
  }
  return { namespace: target.namespace, component: target.component, endpoint: target.endpoint };
}

const sourceSchema = z.object({ key: z.string(), value: z.unknown() }).transform(({ value }) =>
  parseReferenceRecoveryTarget(value) ?? null
);

/** Where a reference endpoint's workers record their load channels (`kv_metrics`) in etcd. */
export function referenceLoadChannelsPrefix(endpoint: EndpointId): string {
  return `v1/event_channels/namespace/${endpoint.namespace}/component/${endpoint.component}` +
    `/endpoint/${endpoint.name}/topic/kv_metrics/`;
}

const loadChannelSchema = z.object({ key: z.string(), value: z.unknown() }).transform(
  ({ value }) => {
    if (!isObject(value) || value.type !== "EventChannel" || value.topic !== "kv_metrics") {
      throw new ProtocolError("not a kv_metrics EventChannel record");
    }
    const t = value.transport;
    const config = isObject(t) && isObject(t.config) ? t.config : undefined;
    if (isObject(t) && t.kind === "Zmq" && typeof config?.endpoint === "string") {
      return { kind: "zmq", endpoint: config.endpoint } as ReferenceKvChannel;
    }
    throw new ProtocolError(`kv_metrics channel transport ${JSON.stringify(t)} is not ZeroMQ`);
  },
);

/**
 * The envelope inside a ZeroMQ kv-events message (`[topic, publisher id, sequence, payload]`,
 * the payload a version byte 1, a u32 big-endian length and the envelope).
 *
 * @param parts the message's parts
 * @returns the msgpack envelope, as {@linkcode decodeReferenceKvEvents} takes it
 * @throws {ProtocolError} a message of another shape
 */
export function referenceZmqEnvelope(parts: readonly Uint8Array[]): Uint8Array {
  const payload = parts.at(-1);
  if (parts.length !== 4 || !payload || payload.length < 5 || payload[0] !== 1) {
    throw new ProtocolError(`a ZeroMQ kv-events message of ${parts.length} parts is not one`);
  }
  const length = new DataView(payload.buffer, payload.byteOffset, 5).getUint32(1);
  if (length !== payload.length - 5) {
    throw new ProtocolError(
      `ZeroMQ kv-events payload says ${length} bytes, has ${payload.length - 5}`,
    );
  }
  return payload.subarray(5);
}

/** One KV event of a reference worker, as ours: its worker (hex id) and what happened. */
export interface ReferenceKvEvent {
  /** The worker's instance id, lowercase hex. */
  workerId: string;
  /** Stored blocks, removed blocks, or the cache cleared. */
  data: KvCacheEventData;
  /** The event's id on its worker (ids increase by one; a jump is a gap), where it has one. */
  eventId?: number;
  /**
   * Where the blocks are (`storage_tier`; `device` where the event does not say); null for a
   * tier this router does not know, whose events it skips.
   */
  tier: StorageTier | null;
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
    envelope = msgpackDecode(bytes, true);
    if (!isObject(envelope) || !(envelope.payload instanceof Uint8Array)) {
      throw new ProtocolError("the envelope has no binary payload");
    }
    events = msgpackDecode(envelope.payload, true);
  } catch (err) {
    if (err instanceof ProtocolError) throw err;
    throw new ProtocolError(`not msgpack: ${(err as Error).message}`, { cause: err });
  }
  return decodeReferenceRouterEvents(events);
}

/**
 * Decodes a list of the reference's router events (as a kv-events payload or a KV-state query
 * answer carries them, msgpack-decoded with 64-bit integers as bigint).
 *
 * @param events the decoded list
 * @returns the events, in order
 * @throws {ProtocolError} a value that is not such a list
 */
export function decodeReferenceRouterEvents(events: unknown): ReferenceKvEvent[] {
  if (!Array.isArray(events)) throw new ProtocolError("the payload is not a list of events");
  return events.map((e, i): ReferenceKvEvent => {
    const at = `event ${i}`;
    if (!isObject(e) || !isObject(e.event)) throw new ProtocolError(`${at} is not a router event`);
    const workerId = hash(e.worker_id, `${at}.worker_id`).toString(16);
    const named = e.storage_tier;
    if (named !== undefined && named !== null && typeof named !== "string") {
      throw new ProtocolError(`${at}.storage_tier is not a string`);
    }
    const tier = named === undefined || named === null
      ? "device"
      : (STORAGE_TIERS as readonly string[]).includes(named)
      ? named as StorageTier
      : null;
    const id = e.event.event_id;
    const eventId = typeof id === "number" || typeof id === "bigint" ? Number(id) : undefined;
    const data = e.event.data;
    if (data === "cleared" || (isObject(data) && "cleared" in data)) {
      return { workerId, eventId, tier, data: "cleared" };
    }
    if (isObject(data) && isObject(data.stored)) {
      const { parent_hash: parent, blocks } = data.stored;
      if (!Array.isArray(blocks)) throw new ProtocolError(`${at}: stored blocks is not a list`);
      return {
        workerId,
        eventId,
        tier,
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
        eventId,
        tier,
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

/**
 * How much a block held below the device counts against one on it, per tier: the defaults of
 * the reference router's `--router-host-cache-hit-weight` (0.75) and
 * `--router-disk-cache-hit-weight` (0.25). A copy up costs less than computing the block, but
 * more than nothing, and these workers do not say how much.
 */
export const LOWER_TIER_CREDIT: Readonly<Record<Exclude<StorageTier, "device">, number>> = {
  host_pinned: 0.75,
  disk: 0.25,
};

/**
 * The blocks of a request's prefix a worker holds, each counted at its tier's credit: the
 * device prefix in full, the blocks past it in host memory at {@linkcode LOWER_TIER_CREDIT}'s
 * `host_pinned` share, the blocks past those on disk at its `disk` share (whole blocks, rounded
 * down).
 *
 * @param held per tier and worker, the prefix held in that tier or a faster one
 * @param workerId the worker
 * @returns the blocks to count as cached there
 */
export function creditedBlocks(held: TieredMatches, workerId: string): number {
  const device = held.device.get(workerId) ?? 0;
  const host = Math.max(device, held.host_pinned.get(workerId) ?? 0);
  const disk = Math.max(host, held.disk.get(workerId) ?? 0);
  return device + Math.floor(
    (host - device) * LOWER_TIER_CREDIT.host_pinned + (disk - host) * LOWER_TIER_CREDIT.disk,
  );
}

/** Longest wait of the first requests for the event channels to be followed (ms). */
const READY_MS = 3_000;

/** Options of {@linkcode ReferenceKvRouter}. */
export interface ReferenceKvRouterOptions extends RoutingPolicyOptions {
  /**
   * Where the workers record their event channels (ZeroMQ ones are dialled: KV events, and the
   * load reports that weigh in the cost); none: NATS KV events only.
   */
  discovery?: Discovery;
  /** Hears of messages that do not decode. */
  logger?: Logger;
  /** Told of each routing decision, as {@linkcode KvRouterOptions.onRoute}. */
  onRoute?: KvRouterOptions["onRoute"];
}

/**
 * Routes tokens requests to the reference worker that caches most of their prefix, by our
 * routing policy (cold prompts in turn); its load is the requests this router has in flight on
 * each worker and, where the worker reports them (its `kv_metrics` channel, ZeroMQ), the KV
 * blocks its running requests hold and the prompt tokens it has yet to prefill (not its
 * `kv_used_blocks`, which the reference's mocker reports alone). Where a worker's
 * EventSource record names a recovery target, the router asks it for its KV state (the
 * reference's `WorkerKvQueryRequest`) when it first sees the worker, so it knows what was cached
 * before it started, and again from the first missing id when the worker's event ids jump.
 */
export class ReferenceKvRouter implements TokenRouter {
  /** The workers' cached blocks, per storage tier. */
  readonly index: TieredIndex = new TieredIndex();
  readonly #client: ReferenceEndpointClient<unknown>;
  readonly #blockSize: number;
  readonly #policy: RoutingPolicy;
  readonly #sub: EventSubscription;
  readonly #consuming: Promise<void>;
  /** This router's requests in flight per worker: prefill until the first output, then blocks. */
  readonly #active: ActiveSequences;
  /** Prompts sent and not yet answered, as cached where they went (their prefill is under way). */
  readonly #pending = new PendingPrefills();
  readonly #loads = new Map<string, ReferenceLoad>();
  /** Per worker: the id of the last event applied (known once one came, or its state did). */
  readonly #lastEventId = new Map<string, number>();
  /** Per worker being recovered: the live events held back until its state is applied. */
  readonly #heldBack = new Map<string, ReferenceKvEvent[]>();
  /** Per worker: where to ask for its KV state (its EventSource's recovery target). */
  readonly #stateTargets = new Map<string, ReferenceInstance>();
  /** Resolves once the workers known at the start were asked for their state (answered or not). */
  readonly #initialRecovery = Promise.withResolvers<void>();
  #recoveries = 0;
  readonly #stop = new AbortController();
  #unknownTier = 0;
  readonly #log: Logger;
  readonly #onRoute: KvRouterOptions["onRoute"];
  #watching: Promise<void> = Promise.resolve();
  #watchingLoad: Promise<void> = Promise.resolve();
  #watchingSources: Promise<void> = Promise.resolve();
  /** Resolves once the channels known at the start were dialled (connected or not). */
  readonly #channelsDialled = Promise.withResolvers<void>();
  #ready: Promise<void> | undefined;
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
    const policy = this.#policy = new RoutingPolicy(blockSize, options);
    this.#onRoute = options.onRoute;
    this.#active = new ActiveSequences(blockSize, {
      onFirstOutput: (routedWith, ttftMs) => policy.ttftModel.observe(routedWith, ttftMs),
    });
    const sub = events.subscribe(referenceKvEventsSubject(endpoint));
    this.#sub = sub;
    const log = this.#log = options.logger ?? silentLogger;
    this.#consuming = (async () => {
      for await (const { payload } of sub) this.#apply(() => payload);
    })().catch((err) => log.warn("reference KV events ended", { error: String(err) }));
    if (options.discovery) {
      this.#watching = this.#followChannels(
        options.discovery,
        referenceKvChannelsPrefix(endpoint),
        channelSchema,
        (parts) => this.#apply(() => referenceZmqEnvelope(parts)),
        () => this.#channelsDialled.resolve(),
      );
      this.#watchingLoad = this.#followChannels(
        options.discovery,
        referenceLoadChannelsPrefix(endpoint),
        loadChannelSchema,
        (parts) => this.#applyLoad(parts),
        () => {},
      );
      this.#watchingSources = this.#followSources(options.discovery, endpoint);
    } else {
      this.#channelsDialled.resolve();
      this.#initialRecovery.resolve();
    }
  }

  #apply(envelope: () => Uint8Array): void {
    try {
      for (const e of decodeReferenceKvEvents(envelope())) this.#applyEvent(e);
    } catch (err) {
      if (this.#invalid++ === 0) {
        this.#log.warn("ignoring reference KV events that do not decode", {
          endpoint: this.#client.path,
          error: (err as Error).message,
        });
      }
    }
  }

  /**
   * Applies one live event in its worker's order: held back while the worker's state is being
   * recovered, skipped when a recovered state already holds it, and a jump in the ids (a lost
   * message) starts a recovery of the missing ones where the worker names a recovery target.
   */
  #applyEvent(e: ReferenceKvEvent): void {
    const held = this.#heldBack.get(e.workerId);
    if (held) {
      held.push(e);
      return;
    }
    const last = this.#lastEventId.get(e.workerId);
    if (e.eventId !== undefined && last !== undefined) {
      if (e.eventId <= last) return;
      if (e.eventId > last + 1 && this.#stateTargets.has(e.workerId)) {
        void this.#recover(e.workerId, last + 1, [e]);
        return;
      }
    }
    this.#applyData(e);
    if (e.eventId !== undefined) this.#lastEventId.set(e.workerId, e.eventId);
  }

  /**
   * Asks a worker for its KV state (the reference's `WorkerKvQueryRequest`): from an event id,
   * the events since; without one, all it holds (applied in place of what the tree had of it).
   */
  async #recover(workerId: string, start: number | undefined, held: ReferenceKvEvent[] = []) {
    const target = this.#stateTargets.get(workerId);
    if (!target || this.#heldBack.has(workerId)) return;
    this.#heldBack.set(workerId, held);
    let recovered = false;
    try {
      const request = {
        worker_id: BigInt(`0x${workerId}`),
        dp_rank: 0,
        start_event_id: start ?? null,
        end_event_id: null,
        supports_tree_dump_failed: true,
        kind: "recovery",
      };
      let answer: unknown;
      for await (
        const item of this.#client.referenceClient.call(target, request, {
          signal: this.#stop.signal,
          idleTimeoutMs: 10_000,
        })
      ) {
        answer ??= item.data;
      }
      const dump = isObject(answer) && isObject(answer.TreeDump) ? answer.TreeDump : undefined;
      const since = isObject(answer) && isObject(answer.Events) ? answer.Events : undefined;
      const body = dump ?? since;
      if (
        !body || typeof body.last_event_id !== "number" && typeof body.last_event_id !== "bigint"
      ) {
        throw new ProtocolError(`the worker answered ${JSON.stringify(Object.keys(answer ?? {}))}`);
      }
      const events = decodeReferenceRouterEvents(body.events);
      if (dump) {
        this.index.clearWorker(workerId);
        for (const e of events) this.#applyData(e);
      } else {
        const from = start ?? 0;
        for (const e of events) if ((e.eventId ?? from) >= from) this.#applyData(e);
      }
      this.#lastEventId.set(workerId, Number(body.last_event_id));
      this.#recoveries++;
      recovered = true;
      this.#log.debug("reference worker KV state recovered", {
        worker: workerId,
        from: start ?? "all",
        events: events.length,
      });
    } catch (err) {
      if (!this.#stop.signal.aborted) {
        this.#log.warn("reference worker KV state not recovered", {
          worker: workerId,
          error: (err as Error).message,
        });
      }
    } finally {
      const pending = this.#heldBack.get(workerId) ?? [];
      this.#heldBack.delete(workerId);
      // Not recovered: the held events apply as they are, without gap checks until the next.
      if (!recovered) this.#lastEventId.delete(workerId);
      for (const e of pending) this.#applyEvent(e);
    }
  }

  /** Applies an event's data to its tier's blocks; events of a tier not known are skipped. */
  #applyData(e: ReferenceKvEvent): void {
    if (e.tier !== null) {
      this.index.apply(e.workerId, e.data, e.tier);
    } else if (this.#unknownTier++ === 0) {
      this.#log.warn("skipping reference KV events of a storage tier this router does not know", {
        endpoint: this.#client.path,
        worker: e.workerId,
      });
    }
  }

  /** The blocks on the workers' devices (`index` has every tier). */
  get tree(): RadixTree {
    return this.index.device;
  }

  /** KV-state recoveries of reference workers answered so far. */
  get recoveries(): number {
    return this.#recoveries;
  }

  /** Follows the workers' EventSource records: each new one's worker is asked for its state. */
  async #followSources(discovery: Discovery, endpoint: EndpointId): Promise<void> {
    const known = new Set<string>();
    const learn = async (key: string, target: ReferenceEndpoint) => {
      if (known.has(key)) return;
      known.add(key);
      // The query endpoint is the publisher's own: its instance id is the worker's.
      for (let tries = 0; tries < 20 && !this.#stop.signal.aborted; tries++) {
        const instances = await listReferenceInstances(discovery, target);
        if (instances.length > 0) {
          for (const instance of instances) {
            this.#stateTargets.set(instance.instanceId, instance);
            await this.#recover(instance.instanceId, undefined);
          }
          return;
        }
        await new Promise((r) => setTimeout(r, 250));
      }
    };
    try {
      for await (
        const ev of watchPrefix(discovery, referenceKvSourcesPrefix(endpoint), {
          schema: sourceSchema,
          signal: this.#stop.signal,
          logger: this.#log,
          what: "reference kv-events source",
        })
      ) {
        if (ev.type === "synced") {
          const first = [];
          for (const [key, target] of ev.records) if (target) first.push(learn(key, target));
          void Promise.allSettled(first).then(() => this.#initialRecovery.resolve());
        } else if (ev.type === "put" && ev.value) void learn(ev.key, ev.value);
        else if (ev.type === "delete") known.delete(ev.key);
      }
    } finally {
      this.#initialRecovery.resolve();
    }
  }

  #applyLoad(parts: readonly Uint8Array[]): void {
    try {
      const { workerId, load } = decodeReferenceLoad(referenceZmqEnvelope(parts));
      this.#loads.set(workerId, load);
    } catch (err) {
      if (this.#invalid++ === 0) {
        this.#log.warn("ignoring reference load reports that do not decode", {
          endpoint: this.#client.path,
          error: (err as Error).message,
        });
      }
    }
  }

  /** The last load a worker reported (its `kv_metrics`), if any. */
  reportedLoad(workerId: string): ReferenceLoad | undefined {
    return this.#loads.get(workerId);
  }

  /** Dials each ZeroMQ channel while its record lasts (NATS ones are the subscription's). */
  async #followChannels(
    discovery: Discovery,
    prefix: string,
    schema: z.ZodType<ReferenceKvChannel, DiscoveryRecord>,
    onMessage: (parts: Uint8Array[]) => void,
    dialledAll: () => void,
  ): Promise<void> {
    const dialled = new Map<string, AbortController>();
    const stop = (key: string) => {
      dialled.get(key)?.abort();
      dialled.delete(key);
    };
    const start = (key: string, channel: ReferenceKvChannel): Promise<void> => {
      stop(key);
      if (channel.kind !== "zmq") return Promise.resolve();
      const ac = new AbortController();
      dialled.set(key, ac);
      const first = Promise.withResolvers<void>();
      this.#readZmq(channel.endpoint, ac.signal, first.resolve, onMessage).catch((err) =>
        this.#log.warn("reference KV event channel failed", { error: String(err) })
      ).finally(first.resolve);
      return first.promise;
    };
    try {
      for await (
        const ev of watchPrefix(discovery, prefix, {
          schema,
          signal: this.#stop.signal,
          logger: this.#log,
          what: "reference kv-events channel",
        })
      ) {
        if (ev.type === "synced") {
          for (const key of [...dialled.keys()]) if (!ev.records.has(key)) stop(key);
          const dials = [];
          for (const [key, channel] of ev.records) {
            if (!dialled.has(key)) dials.push(start(key, channel));
          }
          void Promise.all(dials).then(dialledAll);
        } else if (ev.type === "put") start(ev.key, ev.value);
        else stop(ev.key);
      }
    } finally {
      for (const key of [...dialled.keys()]) stop(key);
      dialledAll();
    }
  }

  /** Reads one worker's ZeroMQ channel, dialling again (with backoff) until `signal` aborts. */
  async #readZmq(
    endpoint: string,
    signal: AbortSignal,
    tried: () => void,
    onMessage: (parts: Uint8Array[]) => void,
  ): Promise<void> {
    let backoff = 250;
    while (!signal.aborted) {
      try {
        const sub = await ZmqSubscriber.connect(endpoint).finally(tried);
        this.#log.debug("reference kv event channel dialled", { channel: endpoint });
        const close = () => sub.close();
        signal.addEventListener("abort", close, { once: true });
        try {
          backoff = 250;
          for await (const parts of sub) onMessage(parts);
        } finally {
          signal.removeEventListener("abort", close);
        }
      } catch (err) {
        if (signal.aborted) return;
        this.#log.debug("reference KV event channel dropped; dialling again", {
          channel: endpoint,
          error: (err as Error).message,
        });
      }
      if (signal.aborted) return;
      await new Promise((r) => setTimeout(r, backoff));
      backoff = Math.min(backoff * 2, 5_000);
    }
  }

  /**
   * Resolves once the NATS subscription is in place and the ZeroMQ channels known at the start
   * were dialled, or after `READY_MS` (events published before that are not heard: ZeroMQ
   * publishers drop what no subscriber is connected for).
   */
  get ready(): Promise<void> {
    return this.#ready ??= (async () => {
      let timer: ReturnType<typeof setTimeout> | undefined;
      const late = new Promise<void>((resolve) => (timer = setTimeout(resolve, READY_MS)));
      const ready = Promise.all([
        this.#sub.ready,
        this.#channelsDialled.promise,
        this.#initialRecovery.promise,
      ]).then(() => {});
      await Promise.race([ready.catch(() => {}), late]);
      clearTimeout(timer);
    })();
  }

  /**
   * Sends the request to the worker the policy picks from the cached overlaps.
   * @throws {NoInstancesError} no worker is live
   */
  async generate<T extends { token_ids?: number[] }>(
    request: { token_ids: number[] },
    options: { context?: Context; instances?: InstanceIds },
  ): Promise<ResponseStream<T>> {
    await this.ready;
    const allowed = options.instances === undefined ? undefined : idSet(options.instances);
    const ids = this.#client.availableInstanceIds().filter((id) =>
      allowed === undefined || allowed.has(id)
    );
    if (ids.length === 0) return await this.#client.roundRobin<T>(request, options);
    const hashes = computeBlockHashesSync(request.token_ids, this.#blockSize);
    const held = this.index.findMatches(hashes.local);
    // Prefixes still being prefilled where this router sent them count as cached there.
    const soon = this.#pending.size === 0
      ? undefined
      : this.#pending.findMatches(hashes.sequence).scores;
    const requestBlocks = Math.ceil(request.token_ids.length / this.#blockSize);
    const candidates = ids.map((workerId) => {
      const book = this.#active.load(workerId);
      const load = this.#loads.get(workerId);
      const cached = Math.max(creditedBlocks(held, workerId), soon?.get(workerId) ?? 0);
      return {
        workerId,
        overlapBlocks: Math.min(cached, requestBlocks),
        requestBlocks,
        // What the worker reports (the reference's mocker reports only kv_used_blocks, left
        // out: BENCHMARKS.md), else this router's own book of what it sent there.
        activeBlocks: Math.max(load?.activeDecodeBlocks ?? 0, book.activeBlocks),
        prefillBlocks: Math.max(
          Math.ceil((load?.activePrefillTokens ?? 0) / this.#blockSize),
          book.prefillBlocks,
        ),
        activeRequests: book.requests,
        waitingRequests: book.waiting,
      };
    });
    const { chosen, costs } = this.#policy.decide(candidates, {
      totalRequests: this.#active.totalRequests,
    });
    this.#onRoute?.({
      instanceId: chosen.workerId,
      overlapBlocks: chosen.overlapBlocks,
      promptTokens: request.token_ids.length,
      requestBlocks: Math.floor(request.token_ids.length / this.#blockSize),
      candidates,
      costs,
    });
    const key = `${options.context?.id ?? ""}/${crypto.randomUUID()}`;
    this.#active.add(key, chosen.workerId, request.token_ids.length, chosen.overlapBlocks);
    this.#pending.add(key, chosen.workerId, hashes.sequence);
    let stream: ResponseStream<T>;
    try {
      stream = await this.#client.direct<T>(request, chosen.workerId, options);
    } catch (err) {
      this.#pending.done(key);
      this.#active.free(key);
      throw err;
    }
    return this.#booked(stream, key);
  }

  /** The stream, with the book following it: tokens as they come, out when it ends. */
  #booked<T extends { token_ids?: number[] }>(
    stream: ResponseStream<T>,
    key: string,
  ): ResponseStream<T> {
    const book = this.#active;
    const pending = this.#pending;
    return {
      context: stream.context,
      instanceId: stream.instanceId,
      async *[Symbol.asyncIterator]() {
        try {
          for await (const out of stream) {
            pending.done(key);
            book.progress(key, out?.token_ids?.length ?? 0);
            yield out;
          }
        } finally {
          pending.done(key);
          book.free(key);
        }
      },
    };
  }

  /** Ends the event subscription and the channels dialled. */
  async close(): Promise<void> {
    this.#stop.abort();
    await this.#sub.unsubscribe();
    await Promise.all([
      this.#consuming,
      this.#watching,
      this.#watchingLoad,
      this.#watchingSources,
    ]);
  }
}
