// A caller of reference (ai-dynamo 1.6.1) workers: sends a PreprocessedRequest over a worker's
// TCP request plane (one persistent connection per worker address, the reference's framing, a
// msgpack body) or its NATS request plane (the same two-part message on its subject), and streams the answer the worker sends back by dialling this client's
// call-home server. Every wait has a deadline; a stream the caller leaves early is stopped with
// the reference's own control message.

import { msgpackDecode, msgpackEncode } from "./_msgpack.ts";
import {
  CancelledError,
  InvalidArgumentError,
  ProtocolError,
  RemoteError,
  StreamIncompleteError,
  TimeoutError,
} from "../errors.ts";
import { ErrorCode, headers as natsHeaders, type Msg, NatsError } from "nats";
import type { Logger } from "../logger.ts";
import type { NatsConnection } from "../nats_connection.ts";
import { parseTraceparent } from "../tracing/traceparent.ts";
import { encodeTwoPart, ReferenceWireError } from "../transport/reference_wire.ts";
import { writeAll } from "./_io.ts";
import { ReferenceWorkerRefusedError } from "./errors.ts";
import { type CallHomeConnection, CallHomeServer } from "./call_home.ts";
import type { ReferenceInstance } from "./instances.ts";
import { RequestConnection } from "./request_connection.ts";
import {
  parseReferenceStreamItem,
  type ReferenceEngineOutput,
  type ReferencePreprocessedRequest,
} from "./request.ts";

/** Options of {@linkcode ReferenceClient.create}. */
export interface ReferenceClientOptions {
  /** Address the call-home server listens on and advertises (default 127.0.0.1). */
  callHomeHostname?: string;
  /** Deadline to dial a worker (ms, default 5,000). */
  connectTimeoutMs?: number;
  /** Deadline for a worker to acknowledge a request (ms, default 5,000, as the reference's). */
  ackTimeoutMs?: number;
  /** Deadline for a worker to dial back once it took a request (ms, default 10,000). */
  callHomeTimeoutMs?: number;
  /** Longest silence within a response stream (ms, default 60,000). */
  idleTimeoutMs?: number;
  /** Hears of refused call-home connections. */
  logger?: Logger;
  /**
   * The NATS connection requests to workers on the reference's NATS request plane go out on
   * (`{nats_tcp: subject}` records); without one such workers are refused with a reason.
   */
  nats?: NatsConnection;
}

/** Options of {@linkcode ReferenceClient.generate}. */
export interface ReferenceGenerateOptions {
  /** Cancels the request: the worker is told to stop and the stream throws CancelledError. */
  signal?: AbortSignal;
  /** Longest silence within this stream (ms; the client's default otherwise). */
  idleTimeoutMs?: number;
  /**
   * The caller's span as a W3C `traceparent` value: sent in the request's headers, where the
   * reference's own frontend puts it, so that the worker's spans and log lines join the trace.
   */
  traceparent?: string;
  /** The W3C `tracestate` sent with `traceparent`. */
  tracestate?: string;
}

const CONTROL_STOP = new TextEncoder().encode(JSON.stringify("stop"));

/** Talks to reference workers found by {@linkcode listReferenceInstances}. */
export class ReferenceClient {
  readonly #server: CallHomeServer;
  readonly #connections = new Map<string, Promise<RequestConnection>>();
  readonly #connectTimeoutMs: number;
  readonly #ackTimeoutMs: number;
  readonly #callHomeTimeoutMs: number;
  readonly #idleTimeoutMs: number;
  readonly #nats: NatsConnection | undefined;
  #closed = false;

  private constructor(options: ReferenceClientOptions) {
    this.#server = CallHomeServer.listen({
      hostname: options.callHomeHostname ?? "127.0.0.1",
      logger: options.logger,
    });
    this.#connectTimeoutMs = options.connectTimeoutMs ?? 5_000;
    this.#ackTimeoutMs = options.ackTimeoutMs ?? 5_000;
    this.#callHomeTimeoutMs = options.callHomeTimeoutMs ?? 10_000;
    this.#idleTimeoutMs = options.idleTimeoutMs ?? 60_000;
    this.#nats = options.nats;
  }

  /**
   * Starts a client and its call-home server.
   *
   * @param options deadlines, call-home address, logger
   * @returns the client (close it when done)
   *
   * @example
   * ```ts ignore
   * const client = ReferenceClient.create();
   * const [worker] = await waitForReferenceInstances(discovery, {
   *   namespace: "dynamo", component: "backend", endpoint: "generate",
   * });
   * const request = referenceTokensRequest({ model: "Qwen3-0.6B", tokenIds: [9707], maxTokens: 4 });
   * for await (const out of client.generate(worker!, request)) console.log(out.token_ids);
   * await client.close();
   * ```
   */
  static create(options: ReferenceClientOptions = {}): ReferenceClient {
    return new ReferenceClient(options);
  }

  /** The call-home address workers dial (`host:port`). */
  get callHomeAddress(): string {
    return this.#server.address;
  }

  /**
   * Sends a request to one reference worker and streams its engine outputs.
   *
   * The stream ends cleanly after the worker's final item and sentinel. Leaving it early (a
   * `break`, or `signal` aborting) sends the worker the reference's `"stop"` control message on
   * the response connection and closes it.
   *
   * @param instance the worker's endpoint (from {@linkcode listReferenceInstances})
   * @param request the PreprocessedRequest
   * @param options signal, idle deadline
   * @returns the outputs, in order
   * @throws {ReferenceWorkerRefusedError} the worker could not be reached or refused the request
   * @throws {TimeoutError} no ack, no call-home or a silent stream past its deadline
   * @throws {StreamIncompleteError} the response connection ended before the sentinel
   * @throws {RemoteError} the worker reported an error (in its prologue or an item)
   * @throws {ProtocolError} a malformed frame or item
   * @throws {CancelledError} `signal` aborted
   */
  generate(
    instance: ReferenceInstance,
    request: ReferencePreprocessedRequest,
    options: ReferenceGenerateOptions = {},
  ): AsyncGenerator<ReferenceEngineOutput, void, undefined> {
    return this.#request(instance, request, options, parseReferenceStreamItem);
  }

  /**
   * Sends any request body to a reference endpoint that is not an LLM engine (e.g. a worker's
   * KV-state query, `worker_kv_query_source_<id>`) and streams each item's `data` as decoded
   * (msgpack with 64-bit integers as bigint, or JSON), with the framing, deadlines and
   * cancellation of {@linkcode ReferenceClient.generate}.
   *
   * @param instance the endpoint's instance
   * @param request the request body (encoded with the instance's codec)
   * @param options signal, idle deadline
   * @returns each item's data and its bytes as received, in order
   * @throws the errors of {@linkcode ReferenceClient.generate}
   */
  call(
    instance: ReferenceInstance,
    request: unknown,
    options: ReferenceGenerateOptions = {},
  ): AsyncGenerator<ReferenceCallItem, void, undefined> {
    return this.#request(instance, request, options, parseRawStreamItem, true);
  }

  async *#request<T>(
    instance: ReferenceInstance,
    request: unknown,
    options: ReferenceGenerateOptions,
    parse: (body: unknown, bytes: Uint8Array) => RawItem<T>,
    bigints = false,
  ): AsyncGenerator<T, void, undefined> {
    const { signal } = options;
    signal?.throwIfAborted();
    if (this.#closed) throw new ProtocolError("the reference client is closed");
    const trace = traceHeaders(options);
    const idleMs = options.idleTimeoutMs ?? this.#idleTimeoutMs;
    const id = crypto.randomUUID();
    const subject = crypto.randomUUID();
    // Waiting for the call home starts before the request goes, so a fast worker is not missed.
    const stopWaiting = new AbortController();
    const waitSignal = signal ? AbortSignal.any([signal, stopWaiting.signal]) : stopWaiting.signal;
    const callHome = this.#server.expect(subject, this.#callHomeTimeoutMs, waitSignal);
    callHome.catch(() => {}); // awaited below, or abandoned when the send fails
    let response: CallHomeConnection;
    try {
      const header = {
        id,
        request_type: "single_in",
        response_type: "many_out",
        payload_codec: instance.codec,
        connection_info: {
          transport: "tcp_server",
          info: JSON.stringify({
            address: this.#server.address,
            subject,
            context: id,
            stream_type: "response",
          }),
        },
      };
      const body = instance.codec === "msgpack"
        ? msgpackEncode(request, bigints)
        : new TextEncoder().encode(JSON.stringify(request));
      const payload = encodeTwoPart({
        header: new TextEncoder().encode(JSON.stringify(header)),
        body,
      });
      const accepted = instance.natsSubject !== undefined
        ? this.#sendNats(instance.natsSubject, payload, { "request-id": id, ...trace }, signal)
        : this.#connection(instance).then((conn) =>
          conn.send(
            {
              endpointPath: instance.endpointPath,
              headers: { "request-id": id, "x-endpoint-path": instance.endpointPath, ...trace },
              payload,
            },
            this.#ackTimeoutMs,
            signal,
          )
        );
      accepted.catch(() => {}); // raced below; a late failure after the call home is moot
      // The stream starts at the call home, which proves the worker took the request as well as
      // its acknowledgement does, and can come first: a worker's TCP server writes its acks
      // without TCP_NODELAY, so an ack that follows another still unacknowledged by our kernel
      // waits for our next request or the delayed-ACK timer (up to ~40 ms on Linux), while the
      // answer is already on its own connection. A refusal or a lost ack still ends the wait.
      response = await Promise.race([callHome, accepted.then(() => callHome)]);
    } catch (err) {
      stopWaiting.abort();
      if (signal?.aborted) throw new CancelledError("request cancelled", { cause: err });
      throw err;
    }
    yield* this.#stream(response, instance, idleMs, signal, parse, bigints);
  }

  async *#stream<T>(
    { conn, reader }: CallHomeConnection,
    instance: ReferenceInstance,
    idleMs: number,
    signal: AbortSignal | undefined,
    parse: (body: unknown, bytes: Uint8Array) => RawItem<T>,
    bigints: boolean,
  ): AsyncGenerator<T, void, undefined> {
    const where = `reference worker ${instance.instanceId} at ` +
      (instance.natsSubject !== undefined
        ? `nats:${instance.natsSubject}`
        : `${instance.hostname}:${instance.port}`);
    let finished = false;
    let items = 0;
    const stop = () => {
      // Best effort: the worker may already be gone; the connection closes right after.
      writeAll(conn, encodeTwoPart({ header: CONTROL_STOP, body: new Uint8Array(0) }))
        .catch(() => {})
        .finally(() => {
          try {
            conn.close();
          } catch { /* already closed */ }
        });
    };
    const onAbort = () => {
      if (!finished) finished = true, stop();
    };
    signal?.addEventListener("abort", onAbort, { once: true });
    const decoder = new TextDecoder();
    const decodeBody = (b: Uint8Array) =>
      instance.codec === "msgpack" ? msgpackDecode(b, bigints) : JSON.parse(decoder.decode(b));
    try {
      const next = async (what: string) => {
        try {
          return await reader.next(idleMs, `${where}: ${what}`);
        } catch (err) {
          if (signal?.aborted) throw new CancelledError("request cancelled", { cause: err });
          if (err instanceof TimeoutError || err instanceof ProtocolError) throw err;
          if (err instanceof ReferenceWireError) {
            throw new ProtocolError(`${where}: malformed frame: ${err.message}`, { cause: err });
          }
          throw new StreamIncompleteError(
            `${where}: response connection broke: ${(err as Error).message}`,
            items,
            { cause: err },
          );
        }
      };
      const prologue = await next("prologue");
      if (!prologue) {
        throw new StreamIncompleteError(`${where}: response connection closed before its prologue`);
      }
      const pro = parseJson(prologue.header, "prologue") as { error?: unknown } | null;
      if (typeof pro !== "object" || pro === null || !("error" in pro)) {
        throw new ProtocolError(`${where}: prologue is not {error}`);
      }
      if (pro.error !== null) {
        finished = true;
        throw new RemoteError(`${where}: ${String(pro.error)}`, "ReferenceWorkerError");
      }
      let final = false;
      for (;;) {
        const frame = await next("response item");
        if (!frame) {
          if (signal?.aborted) throw new CancelledError();
          throw new StreamIncompleteError(
            `${where}: response stream ended before its sentinel (${items} items received)`,
            items,
          );
        }
        if (frame.header.length > 0) {
          const control = parseJson(frame.header, "control message");
          if (control !== "sentinel" || frame.body.length > 0) {
            throw new ProtocolError(
              `${where}: unexpected control frame ${JSON.stringify(control)}`,
            );
          }
          finished = true;
          if (!final) {
            throw new StreamIncompleteError(
              `${where}: sentinel before the final item (${items} items received)`,
              items,
            );
          }
          return;
        }
        let body: unknown;
        try {
          body = decodeBody(frame.body);
        } catch (err) {
          throw new ProtocolError(`${where}: response item does not decode`, { cause: err });
        }
        const item = parse(body, frame.body);
        if (item.kind === "final") final = true;
        else if (item.kind === "error") {
          throw new RemoteError(`${where}: ${item.message}`, "ReferenceWorkerError");
        } else {
          items++;
          // The worker's last output: a consumer that stops here (having the whole answer)
          // leaves a worker with nothing to stop, so the connection just closes.
          if ((item.output as { finish_reason?: unknown }).finish_reason) finished = true;
          yield item.output;
        }
      }
    } finally {
      signal?.removeEventListener("abort", onAbort);
      if (!finished) {
        finished = true;
        stop();
      } else {
        try {
          conn.close();
        } catch { /* already closed */ }
      }
    }
  }

  /** Closes the call-home server and every request connection. */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    for (const c of this.#connections.values()) c.then((conn) => conn.close(), () => {});
    await Promise.allSettled([...this.#connections.values()]);
    this.#connections.clear();
    await this.#server.close();
  }

  /**
   * Sends a request on the reference's NATS request plane: the two-part message to the worker's
   * subject, its headers as NATS headers; the worker's reply is the acknowledgement (empty).
   */
  async #sendNats(
    subject: string,
    payload: Uint8Array,
    headers: Record<string, string>,
    signal: AbortSignal | undefined,
  ): Promise<void> {
    const nc = this.#nats;
    if (!nc) {
      throw new ReferenceWorkerRefusedError(
        `nats:${subject}`,
        "the worker takes requests on NATS and this caller has no NATS connection",
      );
    }
    const h = natsHeaders();
    for (const [k, v] of Object.entries(headers)) h.set(k, v);
    let reply: Msg;
    try {
      const sent = nc.request(subject, payload, { timeout: this.#ackTimeoutMs, headers: h });
      reply = signal ? await abortable(sent, signal) : await sent;
    } catch (err) {
      if (signal?.aborted) throw err;
      if (err instanceof NatsError && err.code === ErrorCode.NoResponders) {
        throw new ReferenceWorkerRefusedError(`nats:${subject}`, "no worker listens", {
          cause: err,
        });
      }
      if (err instanceof NatsError && err.code === ErrorCode.Timeout) {
        throw new TimeoutError(
          `no acknowledgement from the reference worker at nats:${subject} within ` +
            `${this.#ackTimeoutMs} ms`,
          { cause: err },
        );
      }
      throw new ReferenceWorkerRefusedError(`nats:${subject}`, (err as Error).message, {
        cause: err,
      });
    }
    if (reply.data.length > 0) {
      const text = new TextDecoder().decode(reply.data.subarray(0, 4096));
      throw new ReferenceWorkerRefusedError(`nats:${subject}`, text);
    }
  }

  async #connection(instance: ReferenceInstance): Promise<RequestConnection> {
    const key = `${instance.hostname}:${instance.port}`;
    const existing = this.#connections.get(key);
    if (existing) {
      const conn = await existing.catch(() => undefined);
      if (conn?.open) return conn;
      if (this.#connections.get(key) !== existing) return this.#connection(instance);
    }
    const dialing = RequestConnection.connect(
      instance.hostname,
      instance.port,
      this.#connectTimeoutMs,
    );
    this.#connections.set(key, dialing);
    dialing.catch(() => {
      if (this.#connections.get(key) === dialing) this.#connections.delete(key);
    });
    return await dialing;
  }
}

type RawItem<T> =
  | { kind: "output"; output: T }
  | { kind: "final" }
  | { kind: "error"; message: string };

/** One item of {@linkcode ReferenceClient.call}. */
export interface ReferenceCallItem {
  /** The item's data, decoded. */
  data: unknown;
  /** The item's body as it came (the whole `{data, complete_final}` wrapper, encoded). */
  bytes: Uint8Array;
}

/** A stream item whose data is not an engine output: `{data?, complete_final}`. */
function parseRawStreamItem(body: unknown, bytes: Uint8Array): RawItem<ReferenceCallItem> {
  if (typeof body !== "object" || body === null || Array.isArray(body)) {
    throw new ProtocolError("response item is not an object");
  }
  const { data, complete_final: final } = body as { data?: unknown; complete_final?: unknown };
  if (typeof final !== "boolean") throw new ProtocolError("response item lacks complete_final");
  if (final) return { kind: "final" };
  return { kind: "output", output: { data: data ?? null, bytes } };
}

function parseJson(bytes: Uint8Array, what: string): unknown {
  try {
    return JSON.parse(new TextDecoder().decode(bytes));
  } catch (err) {
    throw new ProtocolError(`${what} is not JSON`, { cause: err });
  }
}

/**
 * The trace headers of a request, as the reference's frontend sends them.
 * @throws {InvalidArgumentError} a malformed traceparent, or a tracestate without one
 */
function traceHeaders(options: ReferenceGenerateOptions): Record<string, string> | undefined {
  const { traceparent, tracestate } = options;
  if (traceparent === undefined) {
    if (tracestate !== undefined) {
      throw new InvalidArgumentError("tracestate was given without a traceparent");
    }
    return undefined;
  }
  if (parseTraceparent(traceparent) === undefined) {
    throw new InvalidArgumentError(
      `traceparent must be a W3C traceparent (00-<32 hex>-<16 hex>-<2 hex>), got ${
        JSON.stringify(traceparent)
      }`,
    );
  }
  return tracestate === undefined ? { traceparent } : { traceparent, tracestate };
}

/** `promise`, or a rejection with the signal's reason once it aborts. */
function abortable<T>(promise: Promise<T>, signal: AbortSignal): Promise<T> {
  signal.throwIfAborted();
  return new Promise<T>((resolve, reject) => {
    const onAbort = () => reject(signal.reason);
    signal.addEventListener("abort", onAbort, { once: true });
    promise.then(resolve, reject).finally(() => signal.removeEventListener("abort", onAbort));
  });
}
