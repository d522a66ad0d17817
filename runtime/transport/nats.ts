// The request plane on NATS core: one subject per instance, the worker acknowledges each
// request at once, and streams its answer over TCP to the caller's listener (on a pooled
// connection per caller that carries many streams).

import { type ConnectionOptions, createInbox, ErrorCode, type Msg, NatsError } from "nats";
import type { NatsConnection } from "../nats_connection.ts";
import * as tls from "node:tls";
import type { Duplex } from "node:stream";
import { NatsConnectionImpl, setTransportFactory } from "nats/lib/src/nats-base-client.js";
import { nodeResolveHost, NodeTransport } from "nats/lib/src/node_transport.js";
import { DynamoError, NoInstancesError, TimeoutError } from "../errors.ts";
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
import { encodeRequest } from "./wire.ts";
import { withDeadline } from "../_deadline.ts";
import { addDeadline, type Deadline, removeDeadline } from "./_deadlines.ts";
import { CallHomePool, TcpResponseServer, type TcpResponseServerOptions } from "./tcp_stream.ts";

/** Options of {@linkcode NatsRequestPlane.connect}. */
export interface NatsRequestPlaneOptions {
  /** Server URLs or host:port, e.g. "nats://127.0.0.1:4222". */
  servers: string | string[];
  /** Client name shown by the server. */
  name?: string;
  user?: string;
  pass?: string;
  token?: string;
  /** TLS options passed to nats.js (`{ caFile }` and friends). */
  tls?: ConnectionOptions["tls"];
  /** Deadline of the initial connection in ms (default 5000). */
  timeoutMs?: number;
  /** Where the response-stream listener binds and what it advertises. */
  tcp?: TcpResponseServerOptions;
}

const EMPTY = new Uint8Array(0);

/**
 * nats.js's Node transport with one fix for Deno. When the server refuses a client (bad
 * credentials, or a TLS alert such as a missing client certificate) and drops the socket,
 * the transport removes every socket listener and destroys it, and Deno's node:net / tls
 * can still deliver the pending read's error as an "error" event: with no listener left it
 * is an uncaught error that kills the process before the real reason ("Authorization
 * Violation", "BadCertificate") is reported. Every socket the transport uses keeps a
 * listener that swallows such late events, even across `removeAllListeners()`; the
 * transport's own listeners still see every error while they are attached.
 */
class DenoSafeTransport extends NodeTransport {
  /** The first error a socket of this transport reported (for a connect that times out). */
  socketError: Error | undefined;
}
{
  type Socket = NonNullable<NodeTransport["socket"]>;
  // `dial`, `startTLS` and `_closed` are private in the typings.
  type Internals = {
    socket?: Socket;
    dial(...args: unknown[]): Promise<Socket>;
    startTLS(...args: unknown[]): Promise<Socket>;
    _closed(...args: unknown[]): Promise<void>;
  };
  const guarded = new WeakSet<Socket>();
  const guard = (transport: unknown, socket: Socket | undefined): void => {
    if (socket === undefined || guarded.has(socket)) return;
    guarded.add(socket);
    const record = (err: Error) => {
      // The first says why (a TLS alert), unless it is a write that failed because the
      // server had already hung up: then what follows is the reason.
      const t = transport as DenoSafeTransport;
      const code = (t.socketError as { code?: string } | undefined)?.code;
      if (t.socketError === undefined || code === "EPIPE" || code === "ECONNRESET") {
        t.socketError = err;
      }
    };
    const removeAll = socket.removeAllListeners;
    socket.removeAllListeners = function (this: Socket, ...args: unknown[]) {
      const out = removeAll.apply(this, args as [string?]);
      this.on("error", record);
      return out;
    } as Socket["removeAllListeners"];
    socket.on("error", record);
  };
  const base = NodeTransport.prototype as unknown as Internals;
  const safe = DenoSafeTransport.prototype as unknown as Internals;
  safe.dial = async function (this: Internals, ...args: unknown[]) {
    const socket = await base.dial.apply(this, args);
    guard(this, socket);
    return socket;
  };
  // nats.js's startTLS, with the TLS socket guarded from its creation on: a TLS alert (the
  // server refusing the client's certificate) can arrive right after the handshake
  // callback removed every listener.
  safe.startTLS = async function (
    this: Internals & Pick<NodeTransport, "tlsName" | "options" | "loadClientCerts">,
  ) {
    let options: tls.ConnectionOptions = {
      socket: this.socket as unknown as Duplex,
      servername: this.tlsName,
      rejectUnauthorized: true,
    };
    if (typeof this.options.tls === "object" && this.options.tls !== null) {
      try {
        const certs = (await this.loadClientCerts()) ?? {};
        options = { ...options, ...this.options.tls, ...certs } as tls.ConnectionOptions;
      } catch (err) {
        throw new NatsError((err as Error).message, ErrorCode.Tls, err as Error);
      }
    }
    return await new Promise<Socket>((resolve, reject) => {
      let failure: Error | undefined;
      const socket = tls.connect(options, () => {
        socket.removeAllListeners();
        resolve(socket as unknown as Socket);
      });
      guard(this, socket as unknown as Socket);
      socket.on("error", (err) => {
        failure = err;
      });
      socket.on("secureConnect", () => {
        if (options.rejectUnauthorized !== false && !socket.authorized) {
          failure = socket.authorizationError;
          socket.destroy(failure);
        }
      });
      socket.on("close", () => {
        reject(failure);
        socket.removeAllListeners();
      });
    });
  };
  safe._closed = function (this: Internals, ...args: unknown[]) {
    // A socket that failed before dial() resolved was never guarded.
    guard(this, this.socket);
    return base._closed.apply(this, args);
  };
}

/**
 * `connect()` of nats.js, on {@linkcode DenoSafeTransport}. nats.js retries a refused
 * first connection until its timeout and then says only "TIMEOUT": the first socket error
 * of the last attempt (a TLS alert, a reset) is added to that message.
 */
async function natsConnect(opts: ConnectionOptions): Promise<NatsConnection> {
  let last: DenoSafeTransport | undefined;
  // nats.js keeps one global transport factory; its own `connect()` sets the stock one
  // before each connection, this sets ours (reconnects use whichever was set last).
  setTransportFactory({
    factory: () => (last = new DenoSafeTransport()),
    dnsResolveFn: nodeResolveHost,
  });
  try {
    return await NatsConnectionImpl.connect(opts);
  } catch (err) {
    const socketError = last?.socketError;
    if (err instanceof NatsError && err.code === ErrorCode.Timeout && socketError) {
      throw new NatsError(
        `${err.message} (socket error: ${socketError.message})`,
        err.code,
        err,
      );
    }
    throw err;
  }
}

/** Server URLs for messages, with any `user:password@` in them masked. */
function redactUrls(servers: string | string[]): string {
  return (Array.isArray(servers) ? servers : [servers])
    .map((s) => s.replace(/\/\/[^/@]*@/, "//***@"))
    .join(",");
}

/** After a reconnect, how long "no responders" may mean "not subscribed again yet" (ms). */
const RESUBSCRIBE_GRACE_MS = 3000;
/** Pause between tries of a request while the connection or its subscribers come back (ms). */
const RETRY_MS = 50;

/** How a request's wait for its acknowledgement ended. */
const enum Ack {
  /** The worker acknowledged it. */
  Ok,
  /** The connection dropped before the acknowledgement: send it again once back. */
  Dropped,
  /** The deadline passed. */
  TimedOut,
  /** No subscriber on the subject (the server's 503). */
  NoResponders,
  /** The connection closed, or the reply subscription failed (`error` says why). */
  Failed,
}

/**
 * One request waiting for its acknowledgement, and its deadline on the shared coarse timer:
 * one object and one promise per request, where nats.js's `request()` takes a timer, a
 * deferred, a subscription token and (on every answer) an error object with a stack trace.
 */
class AckWait implements Deadline {
  readonly at: number;
  readonly #waits: Map<string, AckWait>;
  readonly #token: string;
  #settle!: (how: Ack) => void;
  /** Settles once with how the wait ended. */
  readonly done: Promise<Ack>;
  /** Why it failed ({@linkcode Ack.Failed}). */
  error: unknown;

  constructor(waits: Map<string, AckWait>, token: string, at: number) {
    this.#waits = waits;
    this.#token = token;
    this.at = at;
    this.done = new Promise<Ack>((resolve) => (this.#settle = resolve));
    waits.set(token, this);
  }

  /** Ends the wait (the first call counts). */
  end(how: Ack, error?: unknown): void {
    if (!this.#waits.delete(this.#token)) return;
    removeDeadline(this);
    this.error = error;
    this.#settle(how);
  }

  fire(): void {
    this.end(Ack.TimedOut);
  }
}

/** Longest wait in `serve` for the server to confirm a new subscription (ms). */
const SERVE_FLUSH_MS = 5_000;

/** Requests over NATS core, response streams over TCP call-home. */
export class NatsRequestPlane implements RequestPlane {
  readonly kind = "nats";
  /** The connection requests travel on (owned by the plane: closing the plane drains it). */
  readonly nc: NatsConnection;
  readonly #tcpOptions: TcpResponseServerOptions;
  #server: TcpResponseServer | undefined;
  /** Worker side: pooled connections to the callers, response streams multiplexed on them. */
  readonly #callHome: CallHomePool;
  /** Set while the connection is lost and nats.js reconnects. */
  #disconnected = false;
  /** When the connection last came back (ms, performance.now()). */
  #reconnectedAt = -Infinity;
  /** Requests waiting for the connection to come back. */
  readonly #reconnectWaiters = new Set<() => void>();
  /** Requests waiting for their acknowledgement, by the last token of their reply subject. */
  readonly #acks = new Map<string, AckWait>();
  /** `<inbox>.`: the prefix of every reply subject; the plane's one subscription takes `<inbox>.*`. */
  #replyPrefix: string | undefined;
  /** The token of the next request's reply subject. */
  #nextToken = 0;

  private constructor(nc: NatsConnection, tcp: TcpResponseServerOptions) {
    this.nc = nc;
    this.#tcpOptions = tcp;
    this.#callHome = new CallHomePool(tcp.handshakeTimeoutMs);
    void this.#watchStatus();
    // Requests waiting when the connection closes (this plane closed, or nats.js gave up) fail.
    void nc.closed().then(() => {
      const closed = new DynamoError("the NATS connection closed");
      for (const w of [...this.#acks.values()]) w.end(Ack.Failed, closed);
    });
  }

  async #watchStatus(): Promise<void> {
    try {
      for await (const s of this.nc.status()) {
        if (s.type === "disconnect" || s.type === "reconnecting") {
          this.#disconnected = true;
          // A request in flight when the connection drops never gets its answer.
          for (const w of [...this.#acks.values()]) w.end(Ack.Dropped);
        } else if (s.type === "reconnect") {
          this.#disconnected = false;
          this.#reconnectedAt = performance.now();
          for (const wake of [...this.#reconnectWaiters]) wake();
        }
      }
    } catch {
      // the connection closed
    }
    for (const wake of [...this.#reconnectWaiters]) wake();
  }

  /**
   * The reply subject prefix, subscribing on first use: one wildcard subscription takes every
   * acknowledgement, matched to its request by the subject's last token.
   */
  #replies(): string {
    if (this.#replyPrefix !== undefined) return this.#replyPrefix;
    const prefix = `${createInbox()}.`;
    const skip = prefix.length;
    this.nc.subscribe(`${prefix}*`, {
      callback: (err: NatsError | null, msg: Msg) => {
        if (err) {
          // The subscription is gone (a permissions violation): the next request subscribes again.
          if (this.#replyPrefix === prefix) this.#replyPrefix = undefined;
          for (const w of [...this.#acks.values()]) w.end(Ack.Failed, err);
          return;
        }
        const w = this.#acks.get(msg.subject.slice(skip));
        if (w === undefined) return; // late: timed out or dropped already
        // NATS core's "no responders" is an empty message with a 503 status header.
        w.end(msg.data.length === 0 && msg.headers?.code === 503 ? Ack.NoResponders : Ack.Ok);
      },
    });
    return this.#replyPrefix = prefix;
  }

  /** Waits until the connection is back, the deadline passes or `signal` aborts. */
  async #whileDisconnected(deadline: number, signal: AbortSignal | undefined): Promise<void> {
    while (this.#disconnected && !this.nc.isClosed()) {
      const left = deadline - performance.now();
      if (left <= 0) return;
      signal?.throwIfAborted();
      let wake!: () => void;
      const back = new Promise<void>((resolve) => (wake = resolve));
      this.#reconnectWaiters.add(wake);
      const timer = setTimeout(wake, left);
      const onAbort = () => wake();
      signal?.addEventListener("abort", onAbort, { once: true });
      try {
        await back;
      } finally {
        clearTimeout(timer);
        this.#reconnectWaiters.delete(wake);
        signal?.removeEventListener("abort", onAbort);
      }
    }
    signal?.throwIfAborted();
  }

  /** Connects to NATS; reconnects on its own after a server restart. */
  static async connect(options: NatsRequestPlaneOptions): Promise<NatsRequestPlane> {
    const opts: ConnectionOptions = {
      servers: options.servers,
      name: options.name ?? "dynamo",
      timeout: options.timeoutMs ?? 5000,
      maxReconnectAttempts: -1,
      reconnectTimeWait: 250,
      pingInterval: 10_000,
      // nats.js otherwise captures a stack trace on every request: half its per-call cost.
      noAsyncTraces: true,
    };
    if (options.user !== undefined) opts.user = options.user;
    if (options.pass !== undefined) opts.pass = options.pass;
    if (options.token !== undefined) opts.token = options.token;
    if (options.tls !== undefined) opts.tls = options.tls;
    let nc: NatsConnection;
    try {
      nc = await natsConnect(opts);
    } catch (err) {
      throw new DynamoError(
        `cannot connect to NATS at ${redactUrls(options.servers)}: ${(err as Error).message}`,
        { cause: err },
      );
    }
    return new NatsRequestPlane(nc, options.tcp ?? {});
  }

  async serve(subject: string, handler: RawRequestHandler): Promise<Subscription> {
    const sub = this.nc.subscribe(subject, {
      callback: (err, msg) => {
        if (err) return;
        msg.respond(EMPTY);
        handler(msg.data);
      },
    });
    // The server has the subscription before the caller is told it is served: a worker
    // registers its instance right after, and a request that reached the server before the
    // subscription got "no responders" (seen as a flaky NoInstancesError in CI). A server that
    // does not answer in time (reconnecting) is not waited for longer: the client subscribes
    // again when it is back, as it would have without the wait.
    try {
      await withDeadline(
        this.nc.flush(),
        SERVE_FLUSH_MS,
        () => new TimeoutError(`NATS did not confirm ${subject} within ${SERVE_FLUSH_MS} ms`),
      );
    } catch (err) {
      if (!(err instanceof TimeoutError)) {
        sub.unsubscribe();
        throw err;
      }
    }
    return {
      unsubscribe: async () => {
        sub.unsubscribe();
        // Make sure the server knows before callers are told the instance is gone.
        await this.nc.flush().catch(() => {});
      },
    };
  }

  async request(
    subject: string,
    message: RequestPayload,
    options: RequestOptions = {},
  ): Promise<void> {
    const payload = message instanceof Uint8Array
      ? message
      : encodeRequest(message.header, message.body);
    const signal = options.signal;
    signal?.throwIfAborted();
    const timeout = options.timeoutMs ?? 5000;
    const deadline = performance.now() + timeout;
    for (;;) {
      // A short outage (a server restart) must not fail requests: wait for the connection
      // within the request's deadline instead of letting nats.js buffer the request blindly.
      if (this.#disconnected) await this.#whileDisconnected(deadline, signal);
      if (this.#disconnected) {
        throw new DynamoError(
          `request to ${subject} not sent: the NATS connection was down for ${timeout} ms`,
        );
      }
      const replies = this.#replies();
      const token = (this.#nextToken++).toString(36);
      const wait = new AckWait(this.#acks, token, deadline);
      addDeadline(wait);
      try {
        this.nc.publish(subject, payload, { reply: replies + token });
      } catch (err) {
        wait.end(Ack.Failed, err);
      }
      const how = await wait.done;
      if (how === Ack.Ok) return;
      if (how === Ack.Dropped) continue;
      if (how === Ack.NoResponders) {
        // Just after a reconnect the workers' subscriptions are still being restored.
        const settling = performance.now() - this.#reconnectedAt < RESUBSCRIBE_GRACE_MS;
        if ((settling || this.#disconnected) && performance.now() + RETRY_MS < deadline) {
          await new Promise((r) => setTimeout(r, RETRY_MS));
          signal?.throwIfAborted();
          continue;
        }
        throw new NoInstancesError(subject);
      }
      if (how === Ack.TimedOut) {
        throw new TimeoutError(`no acknowledgement from ${subject} within ${timeout} ms`);
      }
      if (this.#disconnected && performance.now() < deadline) continue; // lost meanwhile
      const err = wait.error;
      throw new DynamoError(`request to ${subject} failed: ${(err as Error).message}`, {
        cause: err,
      });
    }
  }

  expectStream(streamId: string): PendingStream {
    this.#server ??= TcpResponseServer.listen(this.#tcpOptions);
    return this.#server.expect(streamId);
  }

  dial(info: ConnectionInfo): Promise<FrameConn> {
    return this.#callHome.dial(info);
  }

  async close(): Promise<void> {
    this.#server?.close();
    this.#callHome.close();
    if (!this.nc.isClosed()) await this.nc.drain().catch(() => this.nc.close());
  }
}
