// The request plane on NATS core: one subject per instance, the worker acknowledges each
// request at once, and streams its answer over TCP to the caller's listener.

import { type ConnectionOptions, ErrorCode, type NatsConnection, NatsError } from "nats";
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
} from "./mod.ts";
import { encodeRequest } from "./mod.ts";
import { dialTcp, TcpResponseServer, type TcpResponseServerOptions } from "./tcp_stream.ts";

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
 * credentials) and drops the socket, the transport removes every socket listener and
 * destroys it, and Deno's node:net can still deliver the pending read's ECONNRESET as an
 * "error" event: with no listener left it is an uncaught error that kills the process
 * before the real reason ("Authorization Violation") is reported. A listener that outlives
 * the close swallows that late event; the transport has already recorded the close.
 */
class DenoSafeTransport extends NodeTransport {}
{
  // `_closed` is private in the typings; both close paths (ours and the socket's) end in it.
  type Closer = { socket?: NodeTransport["socket"]; _closed(...args: unknown[]): Promise<void> };
  const base = (NodeTransport.prototype as unknown as Closer)._closed;
  const ignore = () => {};
  (DenoSafeTransport.prototype as unknown as Closer)._closed = function (
    this: Closer,
    ...args: unknown[]
  ) {
    const socket = this.socket;
    return base.apply(this, args).finally(() => socket?.on("error", ignore));
  };
}

/** `connect()` of nats.js, on {@linkcode DenoSafeTransport}. */
function natsConnect(opts: ConnectionOptions): Promise<NatsConnection> {
  // nats.js keeps one global transport factory; its own `connect()` sets the stock one
  // before each connection, this sets ours (reconnects use whichever was set last).
  setTransportFactory({ factory: () => new DenoSafeTransport(), dnsResolveFn: nodeResolveHost });
  return NatsConnectionImpl.connect(opts);
}

/** Server URLs for messages, with any `user:password@` in them masked. */
function redactUrls(servers: string | string[]): string {
  return (Array.isArray(servers) ? servers : [servers])
    .map((s) => s.replace(/\/\/[^/@]*@/, "//***@"))
    .join(",");
}

/** Requests over NATS core, response streams over TCP call-home. */
export class NatsRequestPlane implements RequestPlane {
  readonly kind = "nats";
  readonly nc: NatsConnection;
  readonly #tcpOptions: TcpResponseServerOptions;
  #server: TcpResponseServer | undefined;
  /** Set while the connection is lost and nats.js reconnects. */
  #disconnected = false;

  private constructor(nc: NatsConnection, tcp: TcpResponseServerOptions) {
    this.nc = nc;
    this.#tcpOptions = tcp;
    void this.#watchStatus();
  }

  async #watchStatus(): Promise<void> {
    try {
      for await (const s of this.nc.status()) {
        if (s.type === "disconnect" || s.type === "reconnecting") this.#disconnected = true;
        else if (s.type === "reconnect") this.#disconnected = false;
      }
    } catch {
      // the connection closed
    }
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

  serve(subject: string, handler: RawRequestHandler): Promise<Subscription> {
    const sub = this.nc.subscribe(subject, {
      callback: (err, msg) => {
        if (err) return;
        msg.respond(EMPTY);
        handler(msg.data);
      },
    });
    return Promise.resolve({
      unsubscribe: async () => {
        sub.unsubscribe();
        // Make sure the server knows before callers are told the instance is gone.
        await this.nc.flush().catch(() => {});
      },
    });
  }

  async request(
    subject: string,
    message: RequestPayload,
    options: RequestOptions = {},
  ): Promise<void> {
    const payload = message instanceof Uint8Array
      ? message
      : encodeRequest(message.header, message.body);
    options.signal?.throwIfAborted();
    // While reconnecting, nats.js would buffer the request and send it once back, when the
    // worker may not have subscribed again: the caller would wait out the whole timeout.
    // Failing at once lets it retry (or migrate) on a live connection instead.
    if (this.#disconnected) {
      throw new DynamoError(
        `request to ${subject} not sent: the NATS connection is down (reconnecting)`,
      );
    }
    const timeout = options.timeoutMs ?? 5000;
    try {
      await this.nc.request(subject, payload, { timeout });
    } catch (err) {
      if (err instanceof NatsError) {
        if (err.code === ErrorCode.NoResponders) throw new NoInstancesError(subject);
        if (err.code === ErrorCode.Timeout) {
          throw new TimeoutError(`no acknowledgement from ${subject} within ${timeout} ms`, {
            cause: err,
          });
        }
      }
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
    return dialTcp(info, this.#tcpOptions.handshakeTimeoutMs);
  }

  async close(): Promise<void> {
    this.#server?.close();
    if (!this.nc.isClosed()) await this.nc.drain().catch(() => this.nc.close());
  }
}
