// Our workers' load in the reference's (ai-dynamo 1.6.1) own format, on its own event plane: a
// ZeroMQ publisher named in etcd by an EventChannel record (`.../topic/kv_metrics/<id>`), each
// message the four parts its workers send (topic, publisher id, sequence, a versioned msgpack
// envelope whose payload is the msgpack `ActiveLoad`: worker_id, dp_rank, active_decode_blocks,
// active_prefill_tokens, kv_used_blocks), as captured in
// tests/golden/reference_1.6.1/load_metrics.json. The reference's frontend reads it to tell busy
// workers (`--active-decode-blocks-threshold`, `--active-prefill-tokens-threshold`); our
// ReferenceKvRouter reads the reference workers' as load in its cost.

import { msgpackDecode, msgpackEncode } from "./_msgpack.ts";
import { ProtocolError } from "../errors.ts";
import type { Logger } from "../logger.ts";
import type { Handler } from "../serve_request.ts";
import type { Endpoint } from "../component.ts";
import { type ReferenceRuntime, referenceRuntimeOf } from "./worker.ts";
import { ZmqPublisher } from "./zmq_pub.ts";

/** One worker's load, as the reference's `ActiveLoad` carries it (null: not known). */
export interface ReferenceLoad {
  /** KV blocks the worker's running requests hold. */
  activeDecodeBlocks: number | null;
  /** Prompt tokens admitted and not yet prefilled. */
  activePrefillTokens: number | null;
  /** KV blocks in use (cached included). */
  kvUsedBlocks: number | null;
}

/** What {@linkcode encodeReferenceLoadMessage} encodes. */
export interface ReferenceLoadMessageInit {
  /** The publisher's id. */
  publisherId: bigint;
  /** The message's number on this publisher, from 0. */
  sequence: bigint;
  /** ms since the epoch. */
  publishedAt: bigint;
  /** The worker's instance id. */
  workerId: bigint;
  /** The load. */
  load: ReferenceLoad;
}

const TOPIC = "kv_metrics";

/**
 * One load report as the four parts of a reference worker's ZeroMQ `kv_metrics` message.
 *
 * @param m ids, sequence, time and the load
 * @returns the message's parts
 */
export function encodeReferenceLoadMessage(m: ReferenceLoadMessageInit): Uint8Array[] {
  const load = msgpackEncode({
    worker_id: m.workerId,
    dp_rank: 0,
    active_decode_blocks: m.load.activeDecodeBlocks,
    active_prefill_tokens: m.load.activePrefillTokens,
    kv_used_blocks: m.load.kvUsedBlocks,
  }, true);
  return encodeEventPlaneMessage(TOPIC, m.publisherId, m.sequence, m.publishedAt, load);
}

/**
 * A message of the reference's ZeroMQ event plane: the topic, the publisher id and sequence
 * (u64 big-endian), and version byte 1, a u32 big-endian length and the msgpack envelope
 * `{publisher_id, sequence, published_at, topic, payload}`.
 */
export function encodeEventPlaneMessage(
  topic: string,
  publisherId: bigint,
  sequence: bigint,
  publishedAt: bigint,
  payload: Uint8Array,
): Uint8Array[] {
  const envelope = msgpackEncode({
    publisher_id: publisherId,
    sequence: Number(sequence),
    published_at: publishedAt,
    topic,
    payload,
  }, true);
  const out = new Uint8Array(5 + envelope.length);
  out[0] = 1;
  new DataView(out.buffer).setUint32(1, envelope.length);
  out.set(envelope, 5);
  return [new TextEncoder().encode(topic), u64(publisherId), u64(sequence), out];
}

function u64(v: bigint): Uint8Array {
  const out = new Uint8Array(8);
  new DataView(out.buffer).setBigUint64(0, v);
  return out;
}

const isObject = (v: unknown): v is Record<string, unknown> =>
  typeof v === "object" && v !== null && !Array.isArray(v) && !(v instanceof Uint8Array);

/**
 * Decodes the envelope of one `kv_metrics` message (the bytes after the version and length).
 *
 * @param envelope the msgpack envelope
 * @returns the worker (lowercase hex id) and its load
 * @throws {ProtocolError} bytes that are not such a message
 */
export function decodeReferenceLoad(
  envelope: Uint8Array,
): { workerId: string; load: ReferenceLoad } {
  let outer: unknown;
  let inner: unknown;
  try {
    outer = msgpackDecode(envelope, true);
    if (!isObject(outer) || !(outer.payload instanceof Uint8Array)) {
      throw new ProtocolError("the envelope has no binary payload");
    }
    inner = msgpackDecode(outer.payload, true);
  } catch (err) {
    if (err instanceof ProtocolError) throw err;
    throw new ProtocolError(`not msgpack: ${(err as Error).message}`, { cause: err });
  }
  if (!isObject(inner)) throw new ProtocolError("the payload is not an ActiveLoad");
  const id = inner.worker_id;
  if (typeof id !== "bigint" && !(typeof id === "number" && Number.isSafeInteger(id) && id >= 0)) {
    throw new ProtocolError("ActiveLoad.worker_id is not a u64");
  }
  const count = (v: unknown, what: string): number | null => {
    if (v === null || v === undefined) return null;
    const n = Number(v);
    if (!Number.isFinite(n) || n < 0) throw new ProtocolError(`ActiveLoad.${what} is not a count`);
    return n;
  };
  return {
    workerId: BigInt.asUintN(64, BigInt(id)).toString(16),
    load: {
      activeDecodeBlocks: count(inner.active_decode_blocks, "active_decode_blocks"),
      activePrefillTokens: count(inner.active_prefill_tokens, "active_prefill_tokens"),
      kvUsedBlocks: count(inner.kv_used_blocks, "kv_used_blocks"),
    },
  };
}

/** Options of {@linkcode ReferenceLoadPublisher.start}. */
export interface ReferenceLoadPublisherOptions {
  /** The worker's runtime: its lease id is the worker id and holds the record. */
  runtime: ReferenceRuntime;
  /** The endpoint whose load this is. */
  namespace: string;
  /** The endpoint's component. */
  component: string;
  /** The endpoint's name. */
  endpoint: string;
  /** Tokens per KV block (to count a request's blocks; default 16). */
  blockSize?: number;
  /** Address the publisher listens on and advertises (default `DYN_EVENT_PLANE_HOST`, else 127.0.0.1). */
  hostname?: string;
  /** Hears of subscribers refused or dropped. */
  logger?: Logger;
}

/**
 * Publishes one worker's load as the reference's workers do. Either report the load yourself
 * ({@linkcode ReferenceLoadPublisher.publish}) or wrap the engine
 * ({@linkcode ReferenceLoadPublisher.track}): each request then counts, from its start until
 * its first output, its prompt tokens as prefill, and until its end, its prompt's and outputs'
 * blocks as decode blocks; a report goes out at each change.
 */
export class ReferenceLoadPublisher {
  /** The publisher id the messages and the record carry. */
  readonly publisherId: bigint;
  readonly #pub: ZmqPublisher;
  readonly #workerId: bigint;
  readonly #unregister: () => Promise<void>;
  readonly #blockSize: number;
  #sequence = 0n;
  #prefillTokens = 0;
  #decodeBlocks = 0;
  #last: ReferenceLoad | undefined;

  private constructor(
    pub: ZmqPublisher,
    publisherId: bigint,
    workerId: bigint,
    unregister: () => Promise<void>,
    options: ReferenceLoadPublisherOptions,
  ) {
    this.#pub = pub;
    this.publisherId = publisherId;
    this.#workerId = workerId;
    this.#unregister = unregister;
    this.#blockSize = options.blockSize ?? 16;
  }

  /**
   * Starts the publisher and records its channel in etcd under the runtime's lease.
   *
   * @param options the runtime, the endpoint, block size, listen address
   * @returns the publisher (close it before the runtime shuts down)
   */
  static async start(options: ReferenceLoadPublisherOptions): Promise<ReferenceLoadPublisher> {
    const { runtime, namespace, component, endpoint } = options;
    const pub = ZmqPublisher.listen({
      hostname: options.hostname ?? Deno.env.get("DYN_EVENT_PLANE_HOST") ?? "127.0.0.1",
      logger: options.logger,
    });
    const random = crypto.getRandomValues(new Uint32Array(2));
    const publisherId = (BigInt(random[0]! & 0xfffff) << 32n) | BigInt(random[1]!);
    const key = `v1/event_channels/namespace/${namespace}/component/${component}/endpoint/` +
      `${endpoint}/topic/${TOPIC}/${publisherId.toString(16)}`;
    const record = {
      type: "EventChannel",
      scope: { kind: "endpoint", endpoint: { namespace, component, name: endpoint } },
      topic: TOPIC,
      instance_id: Number(publisherId),
      transport: { kind: "Zmq", config: { endpoint: pub.endpoint } },
    };
    try {
      await runtime.internals.registerKey(key, JSON.stringify(record));
    } catch (err) {
      await pub.close();
      throw err;
    }
    return new ReferenceLoadPublisher(
      pub,
      publisherId,
      BigInt(`0x${runtime.leaseId}`),
      () => runtime.internals.unregisterKey(key),
      options,
    );
  }

  /** Subscribers following the channel now. */
  get subscribers(): number {
    return this.#pub.subscribers;
  }

  /** The load the tracked requests make now. */
  get load(): ReferenceLoad {
    return {
      activeDecodeBlocks: this.#decodeBlocks,
      activePrefillTokens: this.#prefillTokens,
      // As the reference's mocker reports it: the blocks its running requests use.
      kvUsedBlocks: this.#decodeBlocks,
    };
  }

  /** Publishes one load report (what {@linkcode ReferenceLoadPublisher.track} sends itself). */
  publish(load: ReferenceLoad = this.load): void {
    this.#last = { ...load };
    this.#pub.publish(encodeReferenceLoadMessage({
      publisherId: this.publisherId,
      sequence: this.#sequence++,
      publishedAt: BigInt(Date.now()),
      workerId: this.#workerId,
      load,
    }));
  }

  /**
   * The engine, its requests counted as load (see the class).
   *
   * @param handler the engine (PreprocessedRequest in, LLMEngineOutputs out)
   * @returns the same engine, counted
   */
  track<I extends { token_ids?: unknown }, O>(handler: Handler<I, O>): Handler<I, O> {
    const add = (prefillTokens: number, decodeBlocks: number) => {
      this.#prefillTokens += prefillTokens;
      this.#decodeBlocks += decodeBlocks;
      this.#changed();
    };
    const blockSize = this.#blockSize;
    return async function* (request, ctx) {
      const prompt = Array.isArray(request.token_ids) ? request.token_ids.length : 0;
      let prefill = prompt;
      let blocks = Math.ceil(prompt / blockSize);
      let tokens = prompt;
      add(prefill, blocks);
      try {
        for await (const out of await handler(request, ctx)) {
          const ids = (out as { token_ids?: unknown })?.token_ids;
          tokens += Array.isArray(ids) ? ids.length : 0;
          const now = Math.ceil(tokens / blockSize);
          add(-prefill, now - blocks);
          blocks = now;
          prefill = 0;
          yield out;
        }
      } finally {
        add(-prefill, -blocks);
      }
    };
  }

  #changed(): void {
    const last = this.#last;
    if (
      last === undefined || last.activeDecodeBlocks !== this.#decodeBlocks ||
      last.activePrefillTokens !== this.#prefillTokens
    ) this.publish();
  }

  /** Removes the record and stops the publisher. */
  async close(): Promise<void> {
    await this.#unregister().catch(() => {});
    await this.#pub.close();
  }
}

/**
 * The load of an endpoint of ours in the reference's format, for a reference frontend's busy
 * checks and routers that weigh load: started when the endpoint's runtime uses etcd discovery
 * (the reference reads nothing else), otherwise, or when it cannot start, none (logged).
 *
 * @param endpoint the endpoint whose engine's requests are counted (wrap it with `track`)
 * @param options tokens per KV block (default 16)
 * @returns the publisher, or undefined
 */
export async function referenceLoadFor(
  endpoint: Endpoint,
  options: { blockSize?: number } = {},
): Promise<ReferenceLoadPublisher | undefined> {
  const rt = endpoint.component.runtimeInternals;
  if (rt.discovery.kind !== "etcd") return undefined;
  try {
    return await ReferenceLoadPublisher.start({
      runtime: referenceRuntimeOf(rt),
      namespace: endpoint.component.namespace.name,
      component: endpoint.component.name,
      endpoint: endpoint.name,
      blockSize: options.blockSize,
      logger: rt.logger,
    });
  } catch (err) {
    if (!rt.shutdownSignal.aborted) {
      rt.logger.warn("cannot publish load in the reference's format", { error: String(err) });
    }
    return undefined;
  }
}
