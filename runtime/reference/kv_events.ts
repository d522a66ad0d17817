// Our workers' KV events in the reference's (ai-dynamo 1.6.1) own format, on its own event plane,
// so its KV router can route by them: a ZeroMQ publisher (zmq_pub.ts) named in etcd by an
// EventChannel record (`v1/event_channels/.../topic/kv-events/<id>`), each message the four
// parts its workers send (topic, publisher id, sequence, a versioned msgpack envelope around a
// msgpack list of router events), as captured in tests/golden/reference_1.6.1/kv_events.json.

import { encode } from "@msgpack/msgpack";
import type { DistributedRuntime } from "../distributed_runtime.ts";
import type { Logger } from "../logger.ts";
import { ID_SLOT, withExactId } from "./worker.ts";
import { ZmqPublisher } from "./zmq_pub.ts";

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
  runtime: DistributedRuntime;
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
}

const TOPIC = new TextEncoder().encode("kv-events");

/** Publishes one worker's KV events as the reference's workers do. */
export class ReferenceKvEventPublisher {
  /** The publisher id the messages and the record carry. */
  readonly publisherId: bigint;
  readonly #pub: ZmqPublisher;
  readonly #workerId: bigint;
  readonly #unregister: () => Promise<void>;
  #sequence = 0n;
  #eventId = 0;

  private constructor(
    pub: ZmqPublisher,
    publisherId: bigint,
    workerId: bigint,
    unregister: () => Promise<void>,
  ) {
    this.#pub = pub;
    this.publisherId = publisherId;
    this.#workerId = workerId;
    this.#unregister = unregister;
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
    const pub = ZmqPublisher.listen({
      hostname: options.hostname ?? Deno.env.get("DYN_EVENT_PLANE_HOST") ?? "127.0.0.1",
      logger: options.logger,
    });
    // 52 random bits, as the reference's ids are (they also fit a JSON number exactly).
    const random = crypto.getRandomValues(new Uint32Array(2));
    const publisherId = (BigInt(random[0]! & 0xfffff) << 32n) | BigInt(random[1]!);
    const key = `v1/event_channels/namespace/${namespace}/component/${component}/endpoint/` +
      `${endpoint}/topic/kv-events/${publisherId.toString(16)}`;
    const record = {
      type: "EventChannel",
      scope: { kind: "endpoint", endpoint: { namespace, component, name: endpoint } },
      topic: "kv-events",
      instance_id: Number(publisherId),
      transport: { kind: "Zmq", config: { endpoint: pub.endpoint } },
    };
    const hexId = publisherId.toString(16);
    const workerDecimal = BigInt(`0x${runtime.leaseId}`).toString();
    const scope = { namespace, component, name: endpoint };
    const sourceKey = `v1/event_sources/namespace/${namespace}/component/${component}/endpoint/` +
      `${endpoint}/topic/kv-events/${hexId}`;
    // The EventSource record ties the channel to its worker: the reference's router applies a
    // channel's events only once it has one. (Without a recovery target: with one, the router
    // first asks the worker for its KV state on that endpoint, which we do not serve yet.)
    const source = withExactId({
      type: "EventSource",
      scope: { kind: "endpoint", endpoint: scope },
      topic: "kv-events",
      publisher_id: Number(publisherId),
      metadata: {
        kv_state_endpoint: scope,
        worker: { worker_id: ID_SLOT, dp_rank: 0 },
        publisher_id: Number(publisherId),
      },
    }, workerDecimal);
    try {
      await runtime.internals.registerKey(key, JSON.stringify(record));
      await runtime.internals.registerKey(sourceKey, source);
    } catch (err) {
      await runtime.internals.unregisterKey(key).catch(() => {});
      await pub.close();
      throw err;
    }
    return new ReferenceKvEventPublisher(
      pub,
      publisherId,
      BigInt(`0x${runtime.leaseId}`),
      async () => {
        await runtime.internals.unregisterKey(sourceKey);
        await runtime.internals.unregisterKey(key);
      },
    );
  }

  /** Subscribers following the channel now. */
  get subscribers(): number {
    return this.#pub.subscribers;
  }

  /** Publishes one event (ids increase by one from 1, per worker). */
  publish(data: ReferenceKvEventData): void {
    this.#pub.publish(encodeReferenceKvMessage({
      publisherId: this.publisherId,
      sequence: this.#sequence++,
      publishedAt: BigInt(Date.now()),
      workerId: this.#workerId,
      eventId: ++this.#eventId,
      data,
    }));
  }

  /** Removes the record and stops the publisher. */
  async close(): Promise<void> {
    await this.#unregister().catch(() => {});
    await this.#pub.close();
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
  const event = {
    worker_id: m.workerId,
    storage_tier: "device",
    residency_domain: "worker",
    event: { event_id: m.eventId, data: referenceEventData(m.data), dp_rank: 0 },
  };
  const envelope = encode({
    publisher_id: m.publisherId,
    sequence: Number(m.sequence),
    published_at: m.publishedAt,
    topic: "kv-events",
    payload: encode([event], { useBigInt64: true }),
  }, { useBigInt64: true });
  const payload = new Uint8Array(5 + envelope.length);
  payload[0] = 1;
  new DataView(payload.buffer).setUint32(1, envelope.length);
  payload.set(envelope, 5);
  return [TOPIC, u64(m.publisherId), u64(m.sequence), payload];
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

function u64(v: bigint): Uint8Array {
  const out = new Uint8Array(8);
  new DataView(out.buffer).setBigUint64(0, v);
  return out;
}
