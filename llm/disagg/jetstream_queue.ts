// The prefill queue on a NATS JetStream work-queue stream (seed 000's production setup):
// one durable pull consumer shared by all prefill workers, explicit acks, redelivery by
// the server after `ackWaitMs`.

import {
  AckPolicy,
  type Consumer,
  type JetStreamClient,
  type JetStreamManager,
  nanos,
  type NatsConnection,
  RetentionPolicy,
} from "nats";
import { InvalidArgumentError } from "../../runtime/errors.ts";
import type { DequeueOptions, PrefillQueue, QueuedItem } from "./queue.ts";

/** Options of {@linkcode JetStreamPrefillQueue.open}. */
export interface JetStreamPrefillQueueOptions {
  /** Stream name; default "dynamo_prefill_queue". */
  stream?: string;
  /** Subject the items are published on; default `${stream}.requests`. */
  subject?: string;
  /** Durable consumer shared by the prefill workers; default "prefill_workers". */
  consumer?: string;
  /** Redelivery deadline of an un-acked item; default 30 000 ms. */
  ackWaitMs?: number;
}

const enc = new TextEncoder();
const dec = new TextDecoder();

/**
 * A {@linkcode PrefillQueue} on JetStream. Items are JSON. `dequeue` waits at least one
 * second when the queue is empty (JetStream's shortest pull expiry).
 *
 * @example
 * ```ts
 * const q = await JetStreamPrefillQueue.open<RemotePrefillRequest>(nc, { ackWaitMs: 10_000 });
 * await q.enqueue(request);
 * const item = await q.dequeue({ timeoutMs: 1000 });
 * await item?.ack();
 * ```
 */
export class JetStreamPrefillQueue<T> implements PrefillQueue<T> {
  readonly #js: JetStreamClient;
  readonly #jsm: JetStreamManager;
  readonly #stream: string;
  readonly #subject: string;
  readonly #consumerName: string;
  #consumer: Consumer | undefined;

  private constructor(
    js: JetStreamClient,
    jsm: JetStreamManager,
    stream: string,
    subject: string,
    consumer: string,
  ) {
    this.#js = js;
    this.#jsm = jsm;
    this.#stream = stream;
    this.#subject = subject;
    this.#consumerName = consumer;
  }

  /**
   * Creates (or reuses) the stream and the durable consumer.
   *
   * @param nc a connection to a server with JetStream enabled
   * @param options names and the ack deadline
   * @returns the queue
   * @throws {InvalidArgumentError} a bad `ackWaitMs`
   */
  static async open<T>(
    nc: NatsConnection,
    options: JetStreamPrefillQueueOptions = {},
  ): Promise<JetStreamPrefillQueue<T>> {
    const stream = options.stream ?? "dynamo_prefill_queue";
    const subject = options.subject ?? `${stream}.requests`;
    const consumer = options.consumer ?? "prefill_workers";
    const ackWaitMs = options.ackWaitMs ?? 30_000;
    if (typeof ackWaitMs !== "number" || !(ackWaitMs > 0)) {
      throw new InvalidArgumentError(`ackWaitMs must be a number > 0, got ${ackWaitMs}`);
    }
    const jsm = await nc.jetstreamManager();
    try {
      await jsm.streams.info(stream);
    } catch {
      await jsm.streams.add({
        name: stream,
        subjects: [subject],
        retention: RetentionPolicy.Workqueue,
      });
    }
    await jsm.consumers.add(stream, {
      durable_name: consumer,
      ack_policy: AckPolicy.Explicit,
      ack_wait: nanos(ackWaitMs),
    });
    return new JetStreamPrefillQueue<T>(nc.jetstream(), jsm, stream, subject, consumer);
  }

  async enqueue(data: T): Promise<void> {
    await this.#js.publish(this.#subject, enc.encode(JSON.stringify(data)));
  }

  async dequeue(options: DequeueOptions = {}): Promise<QueuedItem<T> | undefined> {
    options.signal?.throwIfAborted();
    this.#consumer ??= await this.#js.consumers.get(this.#stream, this.#consumerName);
    const m = await this.#consumer.next({ expires: Math.max(1000, options.timeoutMs ?? 30_000) });
    if (!m) return undefined;
    return {
      id: String(m.seq),
      data: JSON.parse(dec.decode(m.data)) as T,
      deliveries: m.info.redeliveryCount,
      ack: () => m.ackAck(),
    };
  }

  async size(): Promise<number> {
    const info = await this.#jsm.consumers.info(this.#stream, this.#consumerName);
    return info.num_pending;
  }

  /** Leaves the stream and consumer on the server (other workers share them). */
  close(): Promise<void> {
    return Promise.resolve();
  }
}
