// Our workers' KV events in the reference's (ai-dynamo 1.6.1) own format, on its own event plane,
// so its KV router can route by them: a ZeroMQ publisher (zmq_pub.ts) named in etcd by an
// EventChannel record (`v1/event_channels/.../topic/kv-events/<id>`), each message the four
// parts its workers send (topic, publisher id, sequence, a versioned msgpack envelope around a
// msgpack list of router events), as captured in tests/golden/reference_1.6.1/kv_events.json.
// It also answers the reference router's KV-state query (`worker_kv_query_source_<id>`, named as
// the recovery target of the EventSource record): the router asks it when it starts following a
// worker or sees a gap in its event ids, and gets the buffered events since an id, or a dump of
// the blocks the worker holds (tests/golden/reference_1.6.1/kv_state.json).

import { msgpackEncode } from "./_msgpack.ts";
import { InvalidArgumentError } from "../errors.ts";
import type { Logger } from "../logger.ts";
import {
  ID_SLOT,
  type ReferenceEndpointServer,
  type ReferenceRuntime,
  serveReferenceEndpoint,
  withExactId,
} from "./worker.ts";
import { encodeEventPlaneMessage } from "./load_metrics.ts";
import { ZmqPublisher } from "./zmq_pub.ts";

/**
 * Where a worker holds the blocks of an event (the reference's `storage_tier`; `StorageTier` of
 * llm/kv_router).
 */
export type ReferenceStorageTier = "device" | "host_pinned" | "disk";

const TIERS: readonly ReferenceStorageTier[] = ["device", "host_pinned", "disk"];

/** A KV event's data, as our engines report it (`KvCacheEventData` of llm/kv_router). */
export type ReferenceKvEventData =
  | {
    stored: {
      parent_hash: bigint | null;
      blocks: readonly { block_hash: bigint; tokens_hash: bigint }[];
    };
  }
  | { removed: { block_hashes: readonly bigint[] } }
  | "cleared";

/** Options of {@linkcode ReferenceKvEventPublisher.start}. */
export interface ReferenceKvEventPublisherOptions {
  /** The worker's runtime: its lease id is the events' worker id and holds the record. */
  runtime: ReferenceRuntime;
  /** The endpoint whose KV events these are. */
  namespace: string;
  /** The endpoint's component. */
  component: string;
  /** The endpoint's name. */
  endpoint: string;
  /** Address the publisher listens on and advertises (default `DYN_EVENT_PLANE_HOST`, else 127.0.0.1). */
  hostname?: string;
  /** Hears of subscribers refused or dropped. */
  logger?: Logger;
  /** Serve the KV-state query and name it as the recovery target (default true). */
  serveQuery?: boolean;
  /** Events kept to answer a query from an event id (default 1,024, as the reference's). */
  bufferSize?: number;
}

/** One router event as the reference's messages and query answers carry it. */
interface RouterEventRecord {
  eventId: number;
  data: ReferenceKvEventData;
  tier: ReferenceStorageTier;
}

/** A block the worker holds: its parent and its tokens' hash. */
interface HeldBlock {
  parent: bigint | null;
  tokensHash: bigint;
  /** Bits of the tiers holding it (bit i: `TIERS[i]`). */
  tiers: number;
}

/** Publishes one worker's KV events as the reference's workers do. */
export class ReferenceKvEventPublisher {
  /** The publisher id the messages and the record carry. */
  readonly publisherId: bigint;
  readonly #pub: ZmqPublisher;
  readonly #workerId: bigint;
  readonly #unregister: () => Promise<void>;
  readonly #state: ReferenceKvState;
  #query?: ReferenceEndpointServer;
  #queries = 0;
  #lastQuery: Record<string, unknown> | undefined;
  #sequence = 0n;

  private constructor(
    pub: ZmqPublisher,
    publisherId: bigint,
    workerId: bigint,
    unregister: () => Promise<void>,
    bufferSize: number,
  ) {
    this.#pub = pub;
    this.publisherId = publisherId;
    this.#workerId = workerId;
    this.#unregister = unregister;
    this.#state = new ReferenceKvState(workerId, bufferSize);
  }

  /**
   * Starts the publisher and records its channel in etcd under the runtime's lease.
   *
   * @param options the runtime, the endpoint, the listen address
   * @returns the publisher (close it before the runtime shuts down)
   */
  static async start(
    options: ReferenceKvEventPublisherOptions,
  ): Promise<ReferenceKvEventPublisher> {
    const { runtime, namespace, component, endpoint } = options;
    const hostname = options.hostname ?? Deno.env.get("DYN_EVENT_PLANE_HOST") ?? "127.0.0.1";
    const pub = ZmqPublisher.listen({ hostname, logger: options.logger });
    // 52 random bits, as the reference's ids are (they also fit a JSON number exactly).
    const random = crypto.getRandomValues(new Uint32Array(2));
    const publisherId = (BigInt(random[0]! & 0xfffff) << 32n) | BigInt(random[1]!);
    const hexId = publisherId.toString(16);
    const key = `v1/event_channels/namespace/${namespace}/component/${component}/endpoint/` +
      `${endpoint}/topic/kv-events/${hexId}`;
    const record = {
      type: "EventChannel",
      scope: { kind: "endpoint", endpoint: { namespace, component, name: endpoint } },
      topic: "kv-events",
      instance_id: Number(publisherId),
      transport: { kind: "Zmq", config: { endpoint: pub.endpoint } },
    };
    const workerId = BigInt(`0x${runtime.leaseId}`);
    const workerDecimal = workerId.toString();
    const scope = { namespace, component, name: endpoint };
    const sourceKey = `v1/event_sources/namespace/${namespace}/component/${component}/endpoint/` +
      `${endpoint}/topic/kv-events/${hexId}`;
    const self = new ReferenceKvEventPublisher(
      pub,
      publisherId,
      workerId,
      async () => {
        await runtime.internals.unregisterKey(sourceKey);
        await runtime.internals.unregisterKey(key);
        await self.#query?.close();
      },
      options.bufferSize ?? 1024,
    );
    try {
      // The recovery target: the endpoint the reference's router asks for this worker's KV
      // state, named after the publisher, recorded as an instance of its own.
      let recoveryTarget: Record<string, unknown> | undefined;
      if (options.serveQuery ?? true) {
        const queryEndpoint = `worker_kv_query_source_${hexId}`;
        self.#query = await serveReferenceEndpoint({
          runtime,
          namespace,
          component,
          endpoint: queryEndpoint,
          raw: true,
          hostname: options.hostname,
          logger: options.logger,
          handler: async function* (request) {
            self.#queries++;
            self.#lastQuery = request;
            yield self.answerQuery(request);
          },
        });
        recoveryTarget = {
          component,
          endpoint: queryEndpoint,
          namespace,
          instance_id: ID_SLOT,
          transport: {
            tcp: `${self.#query.address}/${runtime.leaseId}/${namespace}/${component}/` +
              queryEndpoint,
          },
          device_type: "cpu",
          request_plane_codec: "msgpack",
        };
      }
      // The EventSource record ties the channel to its worker (the reference's router applies a
      // channel's events only once it has one) and names where to recover its state.
      const source = withExactId({
        type: "EventSource",
        scope: { kind: "endpoint", endpoint: scope },
        topic: "kv-events",
        publisher_id: Number(publisherId),
        metadata: {
          kv_state_endpoint: scope,
          worker: { worker_id: ID_SLOT, dp_rank: 0 },
          publisher_id: Number(publisherId),
          ...(recoveryTarget ? { recovery_target: recoveryTarget } : {}),
        },
      }, workerDecimal);
      await runtime.internals.registerKey(key, JSON.stringify(record));
      await runtime.internals.registerKey(sourceKey, source);
    } catch (err) {
      await runtime.internals.unregisterKey(key).catch(() => {});
      await self.#query?.close();
      await pub.close();
      throw err;
    }
    return self;
  }

  /** Subscribers following the channel now. */
  get subscribers(): number {
    return this.#pub.subscribers;
  }

  /** KV-state queries answered so far. */
  get queriesServed(): number {
    return this.#queries;
  }

  /** The last KV-state query answered, as decoded (u64 fields as bigint). */
  get lastQuery(): Record<string, unknown> | undefined {
    return this.#lastQuery;
  }

  /** Blocks the worker holds now, by its events. */
  get heldBlocks(): number {
    return this.#state.heldBlocks;
  }

  /** The id of the last event published (0 before the first). */
  get lastEventId(): number {
    return this.#state.lastEventId;
  }

  /**
   * Publishes one event of `tier` (default the device; ids increase by one from 1, per worker)
   * and keeps it for queries.
   */
  publish(data: ReferenceKvEventData, tier: ReferenceStorageTier = "device"): void {
    const eventId = this.#state.record(data, tier);
    // Kept for queries either way; encoded only for someone to hear (a router that comes later
    // recovers the state through the query).
    if (this.#pub.subscribers === 0) {
      this.#sequence++;
      return;
    }
    this.#pub.publish(encodeReferenceKvMessage({
      publisherId: this.publisherId,
      sequence: this.#sequence++,
      publishedAt: BigInt(Date.now()),
      workerId: this.#workerId,
      eventId,
      data,
      tier,
    }));
  }

  /**
   * Skips an event id without sending it, as a lost message would: the reference router sees a
   * gap and recovers through the query. For tests of that recovery.
   *
   * @param data what happened (kept for queries, not sent)
   * @param tier where (default the device)
   */
  publishLost(data: ReferenceKvEventData, tier: ReferenceStorageTier = "device"): void {
    this.#state.record(data, tier);
    this.#sequence++;
  }

  /**
   * The answer to one KV-state query, from the events published so far (see
   * {@linkcode ReferenceKvState.answerQuery}).
   *
   * @param request the decoded `WorkerKvQueryRequest`
   * @returns the `WorkerKvQueryResponse`
   */
  answerQuery(request: Record<string, unknown>): Record<string, unknown> {
    return this.#state.answerQuery(request);
  }

  /** Removes the record and stops the publisher. */
  async close(): Promise<void> {
    await this.#unregister().catch(() => {});
    await this.#pub.close();
  }
}

/**
 * One worker's KV state as its KV-state query serves it: the last events (with their ids) and
 * the blocks it holds, kept from the events it publishes.
 */
export class ReferenceKvState {
  /** The worker's instance id. */
  readonly workerId: bigint;
  readonly #bufferSize: number;
  readonly #buffer: RouterEventRecord[] = [];
  readonly #blocks = new Map<bigint, HeldBlock>();
  #eventId = 0;

  /**
   * An empty state (no event yet).
   *
   * @param workerId the worker's instance id (the events' worker id)
   * @param bufferSize events kept to answer from an id (default 1,024, as the reference's)
   */
  constructor(workerId: bigint, bufferSize = 1024) {
    this.workerId = workerId;
    this.#bufferSize = bufferSize;
  }

  /** The id of the last event (0 before the first). */
  get lastEventId(): number {
    return this.#eventId;
  }

  /** Blocks the worker holds now, in any tier. */
  get heldBlocks(): number {
    return this.#blocks.size;
  }

  /**
   * Takes the next event.
   *
   * @param data what happened
   * @param tier where (default the device)
   * @returns its id (one more than the last)
   * @throws {InvalidArgumentError} an unknown tier (nothing recorded)
   */
  record(data: ReferenceKvEventData, tier: ReferenceStorageTier = "device"): number {
    if (!TIERS.includes(tier)) {
      throw new InvalidArgumentError(`unknown storage tier ${JSON.stringify(tier)}`);
    }
    const eventId = ++this.#eventId;
    this.#remember({ eventId, data, tier });
    return eventId;
  }

  /**
   * The answer to one KV-state query (`WorkerKvQueryRequest` in, `WorkerKvQueryResponse` out),
   * as the reference's workers give it: the buffered events from `start_event_id` on, a dump of
   * the held blocks (no start, or a start older than the buffer), `TooNew` past the last event,
   * `InvalidRange` for an end before the start, `Error` for another worker or rank.
   *
   * @param request the decoded request
   * @returns the response, externally tagged
   */
  answerQuery(request: Record<string, unknown>): Record<string, unknown> {
    const workerId = request.worker_id;
    if (BigInt(workerId as bigint ?? -1) !== this.workerId) {
      return {
        Error: `worker_id mismatch: request.worker_id=${workerId} this.worker_id=${this.workerId}`,
      };
    }
    if (Number(request.dp_rank ?? 0) !== 0) {
      return { Error: `dp_rank mismatch: request.dp_rank=${request.dp_rank} this.dp_rank=0` };
    }
    const id = (v: unknown) => v === null || v === undefined ? undefined : Number(v);
    const start = id(request.start_event_id);
    const end = id(request.end_event_id);
    const last = this.#eventId;
    if (start !== undefined && end !== undefined && end < start) {
      return { InvalidRange: { start_id: start, end_id: end } };
    }
    if (start !== undefined && start > last) {
      return {
        TooNew: { requested_start: start, requested_end: end ?? last, newest_available: last },
      };
    }
    const oldest = this.#buffer[0]?.eventId ?? last + 1;
    if (start !== undefined && start >= oldest) {
      const events = this.#buffer.filter((e) => e.eventId >= start).map((e) =>
        referenceRouterEvent(this.workerId, e.eventId, e.data, e.tier)
      );
      return { Events: { events, last_event_id: last } };
    }
    return {
      TreeDump: {
        events: this.#dump().map(([data, tier], i) =>
          referenceRouterEvent(this.workerId, i, data, tier)
        ),
        last_event_id: last,
        reset_scope: "all",
      },
    };
  }

  #remember(event: RouterEventRecord): void {
    this.#buffer.push(event);
    if (this.#buffer.length > this.#bufferSize) this.#buffer.shift();
    const { data } = event;
    const bit = 1 << TIERS.indexOf(event.tier);
    const drop = (h: bigint) => {
      const b = this.#blocks.get(h);
      if (!b) return;
      b.tiers &= ~bit;
      if (b.tiers === 0) this.#blocks.delete(h);
    };
    if (data === "cleared") {
      for (const h of [...this.#blocks.keys()]) drop(h);
    } else if ("removed" in data) {
      for (const h of data.removed.block_hashes) drop(h);
    } else {
      let parent = data.stored.parent_hash;
      for (const b of data.stored.blocks) {
        const tiers = (this.#blocks.get(b.block_hash)?.tiers ?? 0) | bit;
        this.#blocks.set(b.block_hash, { parent, tokensHash: b.tokens_hash, tiers });
        parent = b.block_hash;
      }
    }
  }

  /**
   * The held blocks as stored events, parents first: from each root, one event per run of
   * blocks that do not branch (as the reference's dump gives them) and tier holding them (a
   * run's blocks in one tier, under the block before them, whichever tier holds that); blocks
   * whose parent is gone are left out (no prompt can reach them).
   */
  #dump(): Array<[ReferenceKvEventData, ReferenceStorageTier]> {
    const children = new Map<bigint | null, bigint[]>();
    for (const [hash, b] of this.#blocks) {
      const list = children.get(b.parent);
      if (list) list.push(hash);
      else children.set(b.parent, [hash]);
    }
    const out: Array<[ReferenceKvEventData, ReferenceStorageTier]> = [];
    const starts: [bigint | null, bigint][] = (children.get(null) ?? []).map((h) => [null, h]);
    while (starts.length > 0) {
      const [parent, first] = starts.shift()!;
      const run: bigint[] = [];
      for (let at: bigint | undefined = first; at !== undefined;) {
        run.push(at);
        const next: bigint[] = children.get(at) ?? [];
        if (next.length === 1) at = next[0];
        else {
          for (const c of next) starts.push([at, c]);
          at = undefined;
        }
      }
      // Per tier, its stretches of the run; each goes out after the one holding its parent (in
      // order of where they start: the block before a stretch is in one that starts earlier).
      const stretches: Array<{ start: number; tier: ReferenceStorageTier; hashes: bigint[] }> = [];
      TIERS.forEach((tier, k) => {
        let open: bigint[] | undefined;
        run.forEach((h, i) => {
          if ((this.#blocks.get(h)!.tiers & (1 << k)) === 0) open = undefined;
          else if (open) open.push(h);
          else stretches.push({ start: i, tier, hashes: open = [h] });
        });
      });
      stretches.sort((a, b) => a.start - b.start);
      for (const s of stretches) {
        const blocks = s.hashes.map((h) => ({
          block_hash: h,
          tokens_hash: this.#blocks.get(h)!.tokensHash,
        }));
        out.push([
          { stored: { parent_hash: s.start === 0 ? parent : run[s.start - 1]!, blocks } },
          s.tier,
        ]);
      }
    }
    return out;
  }
}

/** What {@linkcode encodeReferenceKvMessage} encodes. */
export interface ReferenceKvMessageInit {
  /** The publisher's id (part 2 and the envelope). */
  publisherId: bigint;
  /** The message's number on this publisher, from 0. */
  sequence: bigint;
  /** ms since the epoch. */
  publishedAt: bigint;
  /** The worker's instance id. */
  workerId: bigint;
  /** The event's id on this worker, from 1. */
  eventId: number;
  /** What happened. */
  data: ReferenceKvEventData;
  /** Where (default the device). */
  tier?: ReferenceStorageTier;
}

/**
 * One KV event as the four parts of a reference worker's ZeroMQ message: the topic, the
 * publisher id and sequence (u64 big-endian), and the payload (version byte 1, u32 big-endian
 * length, the msgpack envelope `{publisher_id, sequence, published_at, topic, payload}` whose
 * payload is the msgpack list of router events).
 *
 * @param m ids, sequence, time and the event
 * @returns the message's parts
 */
export function encodeReferenceKvMessage(m: ReferenceKvMessageInit): Uint8Array[] {
  const event = referenceRouterEvent(m.workerId, m.eventId, m.data, m.tier ?? "device");
  return encodeEventPlaneMessage(
    "kv-events",
    m.publisherId,
    m.sequence,
    m.publishedAt,
    msgpackEncode([event], true),
  );
}

/** One RouterEvent as the reference's messages and query answers carry it. */
function referenceRouterEvent(
  workerId: bigint,
  eventId: number,
  data: ReferenceKvEventData,
  tier: ReferenceStorageTier,
): Record<string, unknown> {
  return {
    worker_id: workerId,
    storage_tier: tier,
    residency_domain: "worker",
    event: { event_id: eventId, data: referenceEventData(data), dp_rank: 0 },
  };
}

function referenceEventData(data: ReferenceKvEventData): unknown {
  if (data === "cleared") return "cleared";
  if ("removed" in data) return { removed: { block_hashes: [...data.removed.block_hashes] } };
  return {
    stored: {
      parent_hash: data.stored.parent_hash,
      start_position: null,
      blocks: data.stored.blocks.map((b) => ({
        block_hash: b.block_hash,
        tokens_hash: b.tokens_hash,
        mm_extra_info: null,
      })),
    },
  };
}
