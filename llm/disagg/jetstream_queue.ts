// The prefill queue on a NATS JetStream work-queue stream (seed 000's production setup):
// one durable pull consumer shared by all prefill workers, explicit acks, redelivery by
// the server after `ackWaitMs`. Workers open it on their runtime's own NATS connection,
// so it has the runtime's credentials and TLS.

import {
  AckPolicy,
  type Consumer,
  type JetStreamClient,
  type JetStreamManager,
  nanos,
  RetentionPolicy,
} from "nats";
import type { NatsConnection } from "../../runtime/nats_connection.ts";
import { DynamoError, InvalidArgumentError } from "../../runtime/errors.ts";
import type { RequestPlane } from "../../runtime/transport/mod.ts";
import { natsConnectionOf } from "../../runtime/transport/tcp.ts";
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

/** The runtime is not on NATS, so it has no JetStream to hold the prefill queue. */
export class NatsUnavailableError extends DynamoError {
  /** The runtime's request plane ("hub", "local", ...). */
  readonly requestPlane: string;
  /** Creates the error for a runtime on another request plane. */
  constructor(requestPlane: string) {
    super(
      `the JetStream prefill queue needs the runtime on NATS (NATS_SERVER or ETCD_ENDPOINTS ` +
        `set); its request plane is "${requestPlane}"`,
    );
    this.requestPlane = requestPlane;
  }
}

/** The NATS server runs without JetStream, which the prefill queue needs. */
export class JetStreamUnavailableError extends DynamoError {
  /** Creates the error for the server's refusal (`cause`). */
  constructor(cause: unknown) {
    super(
      "the JetStream prefill queue needs a nats-server with JetStream enabled " +
        "(start it with `nats-server -js`, or `jetstream {}` in its config); " +
        "or use the hosted queue (`--queue hosted`)",
      { cause },
    );
  }
}

/** nats.js answers "503" when the server has no JetStream. */
function isNoJetStream(err: unknown): boolean {
  const code = (err as { code?: unknown } | null)?.code;
  return code === "503" || (err instanceof Error && /\b503\b/.test(err.message));
}

/**
 * The runtime's own NATS connection (its request plane's), which carries the runtime's
 * credentials (`NATS_USER`/`NATS_PASSWORD`/`NATS_TOKEN`) and TLS (`NATS_TLS_*`). The
 * runtime owns it: do not close it.
 *
 * @param runtime a runtime (or anything with its request plane)
 * @returns the connection
 * @throws {NatsUnavailableError} the runtime is on the hub or in-process
 * @example
 * ```ts ignore
 * const queue = await JetStreamPrefillQueue.open(runtimeNatsConnection(runtime));
 * ```
 */
export function runtimeNatsConnection(runtime: { readonly plane: RequestPlane }): NatsConnection {
  const plane = runtime.plane;
  const nc = natsConnectionOf(plane);
  if (nc) return nc;
  throw new NatsUnavailableError(plane.kind);
}

const enc = new TextEncoder();
const dec = new TextDecoder();

/**
 * A {@linkcode PrefillQueue} on JetStream. Items are JSON. `dequeue` waits at least one
 * second when the queue is empty (JetStream's shortest pull expiry).
 *
 * @example
 * ```ts ignore
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
   * @throws {JetStreamUnavailableError} the server runs without JetStream
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
    try {
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
    } catch (err: unknown) {
      if (isNoJetStream(err)) throw new JetStreamUnavailableError(err);
      throw err;
    }
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
      // Not trusted: a payload that is not JSON comes out as undefined, for the consumer's
      // door to refuse and ack (throwing here would redeliver it forever).
      data: parseJson(m.data) as T,
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

function parseJson(bytes: Uint8Array): unknown {
  try {
    return JSON.parse(dec.decode(bytes));
  } catch {
    return undefined;
  }
}
