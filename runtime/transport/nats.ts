// The request plane on NATS core: one subject per instance, the worker acknowledges each
// request at once, and streams its answer over TCP to the caller's listener.

import { connect, type ConnectionOptions, ErrorCode, type NatsConnection, NatsError } from "nats";
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
      nc = await connect(opts);
    } catch (err) {
      throw new DynamoError(
        `cannot connect to NATS at ${String(options.servers)}: ${(err as Error).message}`,
        {
          cause: err,
        },
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
