// The request plane on TCP: every worker listens; a caller keeps a persistent connection to
// each worker it talks to and multiplexes its requests and their response streams over it
// (./mux.ts). An instance record names the worker as `host:port/<endpoint path>`.
//
// The worker's one listener also takes the reference system's (ai-dynamo 1.6.1) request
// connections: their first bytes tell the two apart. Ours opens with the mux handshake, a
// two-part message whose u64 header length starts with four zero bytes; the reference's opens
// with a request whose u16 endpoint path length is nonzero (a path is never empty). Reference
// requests are decoded here (./reference_wire.ts), handed to the handler served for their path
// with `serveReference`, and acknowledged in order on their connection, as the reference does.

import type { NatsConnection } from "../nats_connection.ts";
import {
  DynamoError,
  InvalidArgumentError,
  NoInstancesError,
  ProtocolError,
  TimeoutError,
} from "../errors.ts";
import {
  encodeMuxHandshake,
  MuxConnection,
  MuxKind,
  type MuxStream,
  muxStreamId,
  readMuxHandshake,
  sameStreamId,
} from "./mux.ts";
import { NatsRequestPlane } from "./nats.ts";
import { type ReferenceTcpRequest, TcpRequestDecoder } from "./reference_wire.ts";
import { type Logger, silentLogger } from "../logger.ts";
import type {
  ConnectionInfo,
  FrameConn,
  PendingStream,
  RawRequestHandler,
  RequestOptions,
  RequestPayload,
  RequestPlane,
  Subscription,
} from "./types.ts";
import { utf8Text } from "./wire.ts";
import { addDeadline, type Deadline, removeDeadline } from "./_deadlines.ts";

const encoder = new TextEncoder();
const HANDSHAKE = encodeMuxHandshake({ kind: "request_mux", version: 1 });
const NO_HEADERS = encoder.encode("{}");
/** Longest endpoint path a request may name. */
const MAX_PATH = 1024;
/** Parsed targets kept by a caller. */
const MAX_TARGETS = 1024;

/** Options of {@linkcode TcpRequestPlane}. */
export interface TcpRequestPlaneOptions {
  /** Interface the worker's listener binds (default "127.0.0.1"). */
  hostname?: string;
  /** Port of the worker's listener (default 0: any free port). */
  port?: number;
  /** Host callers should dial (default: `hostname`, or loopback when bound to all interfaces). */
  advertiseHost?: string;
  /** Deadline of a connection's set-up (dial, or an accepted peer's handshake) in ms (default 5000). */
  connectTimeoutMs?: number;
  /**
   * A NATS connection the plane owns and closes with it, for the event plane and the object
   * store of an etcd + NATS deployment whose requests go over TCP.
   */
  nats?: NatsRequestPlane;
  /** Where the listener reports connections it drops (default: silent). */
  logger?: Logger;
}

/**
 * Takes one request that arrived in the reference's framing for the path it was served on.
 * Returns once the request is accepted (its response goes back on the caller's call-home
 * connection, which the handler dials); throws to refuse it, the message going back in the
 * acknowledgement.
 */
export type ReferenceRequestHandler = (request: ReferenceTcpRequest) => void;

/** Longest acknowledgement message sent back to a reference caller. */
const MAX_ACK_TEXT = 4096;

/**
 * Encodes a request as the reference's TCP request message: u16 BE endpoint path length,
 * the path, u16 BE headers length, headers JSON, u32 BE payload length, the payload.
 */
export function encodeMuxRequest(path: string, payload: Uint8Array): Uint8Array {
  return muxRequest(encoder.encode(path), payload);
}

function muxRequest(p: Uint8Array, payload: Uint8Array): Uint8Array {
  const out = new Uint8Array(2 + p.length + 2 + NO_HEADERS.length + 4 + payload.length);
  const view = new DataView(out.buffer);
  view.setUint16(0, p.length);
  out.set(p, 2);
  let at = 2 + p.length;
  view.setUint16(at, NO_HEADERS.length);
  out.set(NO_HEADERS, at + 2);
  at += 2 + NO_HEADERS.length;
  view.setUint32(at, payload.length);
  out.set(payload, at + 4);
  return out;
}

/**
 * Decodes {@linkcode encodeMuxRequest}'s output (the headers are skipped).
 * @throws {ProtocolError} lengths that do not fit the message
 */
export function decodeMuxRequest(msg: Uint8Array): { path: string; payload: Uint8Array } {
  const view = new DataView(msg.buffer, msg.byteOffset, msg.byteLength);
  if (msg.length < 2) throw new ProtocolError("request message too short");
  const pathLen = view.getUint16(0);
  if (pathLen > MAX_PATH || msg.length < 2 + pathLen + 2) {
    throw new ProtocolError(`bad endpoint path length ${pathLen}`);
  }
  const path = utf8Text(msg.subarray(2, 2 + pathLen));
  let at = 2 + pathLen;
  const headersLen = view.getUint16(at);
  at += 2 + headersLen;
  if (msg.length < at + 4) throw new ProtocolError(`bad headers length ${headersLen}`);
  const len = view.getUint32(at);
  if (msg.length !== at + 4 + len) throw new ProtocolError(`bad payload length ${len}`);
  return { path, payload: msg.subarray(at + 4) };
}

/** `host:port/path` of an instance record, split; undefined when it is not one. */
export function parseTcpTarget(target: string): { address: string; path: string } | undefined {
  const m = /^(\[[0-9a-fA-F:.]+\]|[^/:\[\]]+):(\d{1,5})\/(.+)$/.exec(target);
  if (!m) return undefined;
  return { address: `${m[1]}:${m[2]}`, path: m[3]! };
}

function hostPort(address: string): { hostname: string; port: number } {
  const m = /^\[?([^\]]+?)\]?:(\d+)$/.exec(address);
  if (!m) throw new InvalidArgumentError(`bad address "${address}"`);
  return { hostname: m[1]!, port: Number(m[2]) };
}

/** A reserved stream: attached to a connection when its request is sent. */
interface Reserved {
  /** The stream id as the caller named it. */
  name: string;
  key: string;
  bytes: Uint8Array;
  stream?: MuxStream;
  deliver(conn: FrameConn): void;
  cancelled: boolean;
}

/** Requests and their response streams on persistent, multiplexed TCP connections. */
export class TcpRequestPlane implements RequestPlane {
  readonly kind = "tcp";
  readonly encodesRequests = true;
  readonly #options: TcpRequestPlaneOptions;
  readonly #timeoutMs: number;
  readonly #nats: NatsRequestPlane | undefined;
  // Worker side.
  #listener: Deno.TcpListener | undefined;
  #address: string | undefined;
  readonly #handlers = new Map<string, RawRequestHandler>();
  readonly #referenceHandlers = new Map<string, ReferenceRequestHandler>();
  readonly #served = new Set<MuxConnection>();
  readonly #referenceConns = new Set<Deno.Conn>();
  readonly #log: Logger;
  /** The stream of the request being handed to its handler now (claimed by `dial`). */
  #current: MuxStream | undefined;
  // Caller side.
  readonly #pool = new Map<string, Promise<MuxConnection>>();
  /** Reserved streams by the id their caller gave. */
  readonly #reserved = new Map<string, Reserved>();
  /** Connections of `#pool` once established. */
  readonly #ready = new Map<string, MuxConnection>();
  readonly #targets = new Map<string, { address: string; pathBytes: Uint8Array }>();
  #closed = false;

  /** Creates the plane; the worker's listener opens with the first `serve`. */
  constructor(options: TcpRequestPlaneOptions = {}) {
    this.#options = options;
    this.#timeoutMs = options.connectTimeoutMs ?? 5000;
    this.#nats = options.nats;
    this.#log = options.logger ?? silentLogger;
  }

  /** The NATS connection given in the options (events and objects travel there), if any. */
  get nc(): NatsConnection | undefined {
    return this.#nats?.nc;
  }

  /** `host:port` of the worker's listener, once something is served. */
  get address(): string | undefined {
    return this.#address;
  }

  #listen(): string {
    if (this.#address !== undefined) return this.#address;
    const hostname = this.#options.hostname ?? "127.0.0.1";
    const listener = Deno.listen({ hostname, port: this.#options.port ?? 0, transport: "tcp" });
    const advertise = this.#options.advertiseHost ??
      (hostname === "0.0.0.0" ? "127.0.0.1" : hostname === "::" ? "::1" : hostname);
    this.#listener = listener;
    const port = (listener.addr as Deno.NetAddr).port;
    this.#address = `${advertise.includes(":") ? `[${advertise}]` : advertise}:${port}`;
    void this.#acceptLoop(listener);
    return this.#address;
  }

  async #acceptLoop(listener: Deno.TcpListener): Promise<void> {
    try {
      for await (const conn of listener) void this.#accept(conn);
    } catch {
      // listener closed
    }
  }

  async #accept(raw: Deno.Conn): Promise<void> {
    let timer: ReturnType<typeof setTimeout> | undefined;
    let first: Awaited<ReturnType<typeof readMuxHandshake>>;
    try {
      const timeout = new Promise<never>((_, reject) =>
        timer = setTimeout(() => reject(new TimeoutError("handshake timed out")), this.#timeoutMs)
      );
      first = await Promise.race([readMuxHandshake(raw), timeout]);
      if ("handshake" in first && first.handshake.kind !== "request_mux") {
        throw new ProtocolError(
          `expected a request_mux handshake, got ${JSON.stringify(first.handshake.kind)}`,
        );
      }
    } catch (err) {
      this.#log.warn("request connection dropped: bad first frame", {
        peer: peerOf(raw),
        error: (err as Error).message,
      });
      closeQuietly(raw);
      return;
    } finally {
      clearTimeout(timer);
    }
    if (this.#closed) return closeQuietly(raw);
    if ("legacy" in first) {
      // Not our handshake: a reference request connection (its first request's bytes).
      void this.#serveReference(raw, first.legacy);
      return;
    }
    const mux = new MuxConnection(raw, {
      onUnknown: (c, kind, key, id, payload) => this.#onRequest(c, kind, key, id, payload),
      onClose: (c) => this.#served.delete(c),
    });
    this.#served.add(mux);
  }

  /**
   * Worker side: a connection in the reference's request framing. Each request is handed to
   * the handler of its path and acknowledged in order (u32 BE length, then the error text;
   * empty when accepted). A malformed frame is answered with an acknowledgement naming the
   * problem and closes this connection only.
   */
  async #serveReference(conn: Deno.Conn, initial: Uint8Array): Promise<void> {
    this.#referenceConns.add(conn);
    (conn as Deno.TcpConn).setNoDelay?.(true);
    const decoder = new TcpRequestDecoder();
    const buf = new Uint8Array(64 * 1024);
    let writing = Promise.resolve();
    const ack = (error: string) => {
      const text = encoder.encode(error.slice(0, MAX_ACK_TEXT));
      const frame = new Uint8Array(4 + text.length);
      new DataView(frame.buffer).setUint32(0, text.length);
      frame.set(text, 4);
      writing = writing.then(() => writeAll(conn, frame)).catch(() => {});
    };
    let chunk: Uint8Array | null = initial;
    try {
      while (chunk !== null) {
        let requests: ReferenceTcpRequest[];
        try {
          requests = decoder.push(chunk);
        } catch (err) {
          const message = `malformed request frame: ${(err as Error).message}`;
          this.#log.warn("reference request connection dropped", {
            peer: peerOf(conn),
            error: message,
          });
          ack(message);
          break;
        }
        for (const request of requests) {
          const handler = this.#referenceHandlers.get(request.endpointPath);
          if (this.#closed || handler === undefined) {
            ack(`no endpoint ${request.endpointPath} here`);
            continue;
          }
          try {
            handler(request);
          } catch (err) {
            ack((err as Error).message || "request refused");
            continue;
          }
          ack("");
        }
        const n = await conn.read(buf);
        chunk = n === null ? null : buf.slice(0, n);
      }
    } catch (err) {
      if (!this.#closed) {
        this.#log.debug("reference request connection ended", { error: String(err) });
      }
    } finally {
      this.#referenceConns.delete(conn);
      await writing;
      closeQuietly(conn);
    }
  }

  /** Worker side: a frame for a stream not open here, a new request if it is one. */
  #onRequest(
    mux: MuxConnection,
    kind: number,
    key: string,
    id: Uint8Array,
    payload: Uint8Array,
  ): void {
    if (kind !== MuxKind.Request) return; // a late frame of a stream already over
    let path: string;
    let body: Uint8Array;
    try {
      ({ path, payload: body } = decodeMuxRequest(payload));
    } catch (err) {
      void mux.sendFrame(MuxKind.Refused, id, encoder.encode((err as Error).message));
      return;
    }
    const handler = this.#handlers.get(path);
    if (handler === undefined) {
      void mux.sendFrame(MuxKind.Refused, id, encoder.encode(`no endpoint ${path} here`));
      return;
    }
    const stream = mux.openStream(key, id);
    stream.sendRaw(MuxKind.Accepted);
    this.#current = stream;
    try {
      handler(body);
    } finally {
      this.#current = undefined;
    }
    // A request its handler never claimed (malformed): the caller hears the stream is gone.
    if (!claimed.has(stream)) stream.close();
    claimed.delete(stream);
  }

  serve(subject: string, handler: RawRequestHandler): Promise<Subscription & { address: string }> {
    this.#open();
    const address = this.#listen();
    this.#handlers.set(subject, handler);
    return Promise.resolve({
      address,
      unsubscribe: () => {
        if (this.#handlers.get(subject) === handler) this.#handlers.delete(subject);
        return Promise.resolve();
      },
    });
  }

  /**
   * Serves `handler` for requests in the reference's framing naming `path`, on the same
   * listener (and port) as `serve`'s.
   *
   * @param path the endpoint path those requests name (`<instance id hex>/ns/component/endpoint`)
   * @param handler takes each request; throws to refuse it
   * @returns the listener's `host:port`, and the way to stop serving the path
   */
  serveReference(
    path: string,
    handler: ReferenceRequestHandler,
  ): Promise<Subscription & { address: string }> {
    this.#open();
    const address = this.#listen();
    this.#referenceHandlers.set(path, handler);
    return Promise.resolve({
      address,
      unsubscribe: () => {
        if (this.#referenceHandlers.get(path) === handler) this.#referenceHandlers.delete(path);
        return Promise.resolve();
      },
    });
  }

  /** Caller side: the pooled connection to `address`, dialled on first use. */
  #connection(address: string, deadline: number): Promise<MuxConnection> {
    let conn = this.#pool.get(address);
    if (conn === undefined) {
      conn = this.#dial(address, deadline);
      this.#pool.set(address, conn);
      conn.catch(() => {
        if (this.#pool.get(address) === conn) this.#pool.delete(address);
      });
    }
    return conn;
  }

  async #dial(address: string, deadline: number): Promise<MuxConnection> {
    const { hostname, port } = hostPort(address);
    let timer: ReturnType<typeof setTimeout> | undefined;
    const connecting = Deno.connect({ hostname, port, transport: "tcp" });
    let raw: Deno.TcpConn;
    try {
      raw = await Promise.race([
        connecting,
        new Promise<never>((_, reject) =>
          timer = setTimeout(
            () => reject(new TimeoutError(`connecting to ${address} took too long`)),
            Math.max(1, deadline - performance.now()),
          )
        ),
      ]);
    } catch (err) {
      connecting.then((c) => c.close(), () => {});
      throw err;
    } finally {
      clearTimeout(timer);
    }
    let off = 0;
    while (off < HANDSHAKE.length) off += await raw.write(HANDSHAKE.subarray(off));
    const mux = new MuxConnection(raw, {
      onClose: (c) => {
        if (this.#ready.get(address) === c) this.#ready.delete(address);
        const pooled = this.#pool.get(address);
        void pooled?.then((p) => {
          if (p === c && this.#pool.get(address) === pooled) this.#pool.delete(address);
        }, () => {});
      },
    });
    if (this.#closed) mux.close();
    else this.#ready.set(address, mux);
    return mux;
  }

  async request(
    target: string,
    message: RequestPayload,
    options: RequestOptions = {},
  ): Promise<void> {
    this.#open();
    const { signal } = options;
    signal?.throwIfAborted();
    const parsed = this.#target(target);
    // A message is encoded now, before any wait: what the caller changes later stays out.
    let header: string | undefined;
    let body: string | undefined;
    if (!(message instanceof Uint8Array)) {
      header = JSON.stringify(message.header);
      body = JSON.stringify(message.body ?? null);
    }
    const timeoutMs = options.timeoutMs ?? 5000;
    const deadline = performance.now() + timeoutMs;
    const reserved = options.streamId === undefined
      ? undefined
      : this.#reserved.get(options.streamId);
    let mux: MuxConnection;
    try {
      const pooled = this.#ready.get(parsed.address);
      mux = pooled !== undefined && !pooled.closed
        ? pooled
        : await this.#connection(parsed.address, deadline);
    } catch (err) {
      if (err instanceof TimeoutError) throw err;
      // Refused or unreachable: nobody serves there (a worker gone before discovery noticed).
      throw new NoInstancesError(target);
    }
    if (mux.closed) throw new NoInstancesError(target);
    const ids = reserved ?? { ...muxStreamId(crypto.randomUUID())!, cancelled: false };
    if (reserved?.cancelled) throw new DynamoError(`stream ${options.streamId} was given up`);
    const stream = mux.openStream(ids.key, ids.bytes);
    if (reserved) reserved.stream = stream;
    // One promise per request: the answer, the deadline (on the shared coarse timer) and the
    // signal all settle it.
    const answer = Promise.withResolvers<number>();
    stream.onAnswer = answer.resolve;
    if (header === undefined) {
      stream.sendRaw(MuxKind.Request, muxRequest(parsed.pathBytes, message as Uint8Array));
    } else {
      // Encoded straight into the connection's output buffer, as encodeMuxRequest(path,
      // encodeRequest(header, body)) would lay it out.
      stream.sendRequest(parsed.pathBytes, NO_HEADERS, header, body!);
    }
    const timeout: Deadline = {
      at: deadline,
      fire: () =>
        answer.reject(new TimeoutError(`no acknowledgement from ${target} within ${timeoutMs} ms`)),
    };
    addDeadline(timeout);
    let onAbort: (() => void) | undefined;
    if (signal) {
      onAbort = () => answer.reject(signal.reason);
      signal.addEventListener("abort", onAbort, { once: true });
    }
    try {
      const kind = await answer.promise;
      if (kind === MuxKind.Refused || kind === MuxKind.Reset) throw new NoInstancesError(target);
      stream.onAnswer = undefined;
      if (reserved) {
        this.#reserved.delete(reserved.name);
        reserved.deliver(stream);
      } else {
        stream.close();
      }
    } catch (err) {
      stream.onAnswer = undefined;
      stream.close();
      throw err;
    } finally {
      removeDeadline(timeout);
      if (onAbort) signal?.removeEventListener("abort", onAbort);
    }
  }

  /** A target's address and encoded path, parsed once per target. */
  #target(target: string): { address: string; pathBytes: Uint8Array } {
    let t = this.#targets.get(target);
    if (t === undefined) {
      const parsed = parseTcpTarget(target);
      if (parsed === undefined) throw new NoInstancesError(target);
      const pathBytes = encoder.encode(parsed.path);
      if (pathBytes.length > 0xffff) throw new InvalidArgumentError("endpoint path too long");
      t = { address: parsed.address, pathBytes };
      // Bounded: instance records come and go over a long-lived caller.
      if (this.#targets.size >= MAX_TARGETS) this.#targets.clear();
      this.#targets.set(target, t);
    }
    return t;
  }

  expectStream(streamId: string): PendingStream {
    this.#open();
    const ids = muxStreamId(streamId);
    if (ids === undefined) {
      throw new InvalidArgumentError(`a TCP-plane stream id must be a UUID, got "${streamId}"`);
    }
    let deliver!: (conn: FrameConn) => void;
    const connection = new Promise<FrameConn>((resolve) => (deliver = resolve));
    const reserved: Reserved = { ...ids, name: streamId, deliver, cancelled: false };
    this.#reserved.set(streamId, reserved);
    return {
      connectionInfo: { mux: { stream_id: streamId } },
      connection,
      cancel: () => {
        reserved.cancelled = true;
        if (this.#reserved.get(streamId) === reserved) this.#reserved.delete(streamId);
        reserved.stream?.close();
      },
    };
  }

  dial(info: ConnectionInfo): Promise<FrameConn> {
    const current = this.#current;
    if (!("mux" in info) || current === undefined) {
      return Promise.reject(
        new InvalidArgumentError(
          `not the stream of the request being served: ${JSON.stringify(info)}`,
        ),
      );
    }
    if (!sameStreamId(info.mux.stream_id, current.key)) {
      return Promise.reject(
        new ProtocolError(`request names stream ${info.mux.stream_id}, not its own`),
      );
    }
    claimed.add(current);
    return Promise.resolve(current);
  }

  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    try {
      this.#listener?.close();
    } catch {
      // already closed
    }
    this.#handlers.clear();
    this.#referenceHandlers.clear();
    for (const c of [...this.#served]) c.close();
    for (const c of [...this.#referenceConns]) closeQuietly(c);
    for (const p of [...this.#pool.values()]) void p.then((c) => c.close(), () => {});
    this.#pool.clear();
    this.#ready.clear();
    for (const r of this.#reserved.values()) r.stream?.close();
    this.#reserved.clear();
    await this.#nats?.close();
  }

  #open(): void {
    if (this.#closed) throw new DynamoError("TCP request plane is closed");
  }
}

function closeQuietly(conn: Deno.Conn): void {
  try {
    conn.close();
  } catch {
    // already closed
  }
}

function peerOf(conn: Deno.Conn): string {
  const a = conn.remoteAddr as Deno.NetAddr;
  return `${a.hostname}:${a.port}`;
}

async function writeAll(conn: Deno.Conn, bytes: Uint8Array): Promise<void> {
  let at = 0;
  while (at < bytes.length) at += await conn.write(bytes.subarray(at));
}

/** Streams their request's handler claimed with `dial` (checked right after the handler). */
const claimed = new WeakSet<MuxStream>();

/**
 * The NATS connection behind a request plane: the NATS plane's own, or the one a TCP plane
 * was given for events and objects; undefined on the other planes.
 */
export function natsConnectionOf(plane: RequestPlane): NatsConnection | undefined {
  if (plane instanceof NatsRequestPlane) return plane.nc;
  if (plane instanceof TcpRequestPlane) return plane.nc;
  return undefined;
}
