// The request plane through the hub: requests travel caller -> hub -> serving process,
// which acknowledges at once; the answer streams over TCP call-home, as on NATS.

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
} from "../transport/types.ts";
import { encodeRequest } from "../transport/wire.ts";
import {
  CallHomePool,
  TcpResponseServer,
  type TcpResponseServerOptions,
} from "../transport/tcp_stream.ts";
import { HubConnection, type HubConnectionOptions, HubRemoteError } from "./connection.ts";

/** Options of {@linkcode HubRequestPlane}. */
export interface HubRequestPlaneOptions {
  /** Where the response-stream listener binds and what it advertises. */
  tcp?: TcpResponseServerOptions;
}

/**
 * A {@linkcode RequestPlane} whose subjects live on the hub: a request goes to one
 * process serving its subject, or fails at once with {@linkcode NoInstancesError} when
 * none does. Subscriptions are restored when the connection to the hub is re-established.
 * One request plane per {@linkcode HubConnection}.
 *
 * @example
 * ```ts
 * const plane = await HubRequestPlane.connect("127.0.0.1:4300");
 * const sub = await plane.serve("ns_backend.generate-1", (payload) => {});
 * ```
 */
export class HubRequestPlane implements RequestPlane {
  readonly kind = "hub";
  readonly hub: HubConnection;
  readonly #tcpOptions: TcpResponseServerOptions;
  readonly #handlers = new Map<number, { subject: string; handler: RawRequestHandler }>();
  readonly #offMsg: () => void;
  readonly #offSession: () => void;
  #server: TcpResponseServer | undefined;
  /** Worker side: pooled connections to the callers, response streams multiplexed on them. */
  #callHome: CallHomePool | undefined;
  #closed = false;

  /** @param hub the process's hub connection (a reference is held until close) */
  constructor(hub: HubConnection, options: HubRequestPlaneOptions = {}) {
    this.hub = hub;
    this.#tcpOptions = options.tcp ?? {};
    hub.acquire();
    this.#offMsg = hub.on("msg", (msg, bytes, session) => {
      const entry = this.#handlers.get(msg.sid as number);
      if (!entry) {
        session.send({ op: "nack", rid: msg.rid });
        return;
      }
      session.send({ op: "ack", rid: msg.rid });
      entry.handler(bytes);
    });
    this.#offSession = hub.onSession((session) => {
      for (const [sid, { subject }] of this.#handlers) session.send({ op: "serve", sid, subject });
    });
  }

  /**
   * Connects to the hub at `address` and returns a request plane that owns the connection.
   * @throws {HubConnectionError} the hub cannot be reached or refused the token
   */
  static async connect(
    address: string,
    options: HubConnectionOptions & HubRequestPlaneOptions = {},
  ): Promise<HubRequestPlane> {
    return new HubRequestPlane(await HubConnection.connect(address, options), options);
  }

  async serve(subject: string, handler: RawRequestHandler): Promise<Subscription> {
    this.#open();
    const sid = this.hub.nextId();
    this.#handlers.set(sid, { subject, handler });
    try {
      await this.hub.call({ op: "serve", sid, subject });
    } catch (err) {
      this.#handlers.delete(sid);
      throw err;
    }
    return {
      unsubscribe: async () => {
        if (!this.#handlers.delete(sid)) return;
        // Awaited, so callers learn the instance is gone only once the hub stopped routing here.
        if (this.hub.connected) await this.hub.call({ op: "unserve", sid }).catch(() => {});
      },
    };
  }

  async request(
    subject: string,
    message: RequestPayload,
    options: RequestOptions = {},
  ): Promise<void> {
    this.#open();
    const payload = message instanceof Uint8Array
      ? message
      : encodeRequest(message.header, message.body);
    options.signal?.throwIfAborted();
    const timeoutMs = options.timeoutMs ?? 5000;
    try {
      await this.hub.call({ op: "req", subject }, payload, { timeoutMs });
    } catch (err) {
      if (err instanceof HubRemoteError && err.code === "no_responders") {
        throw new NoInstancesError(subject);
      }
      if (err instanceof TimeoutError) {
        throw new TimeoutError(`no acknowledgement from ${subject} within ${timeoutMs} ms`, {
          cause: err,
        });
      }
      throw err;
    }
  }

  expectStream(streamId: string): PendingStream {
    this.#open();
    this.#server ??= TcpResponseServer.listen(this.#tcpOptions);
    return this.#server.expect(streamId);
  }

  dial(info: ConnectionInfo): Promise<FrameConn> {
    this.#callHome ??= new CallHomePool(this.#tcpOptions.handshakeTimeoutMs);
    return this.#callHome.dial(info);
  }

  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    this.#callHome?.close();
    const sids = [...this.#handlers.keys()];
    this.#handlers.clear();
    if (this.hub.connected) {
      await Promise.allSettled(sids.map((sid) => this.hub.call({ op: "unserve", sid })));
    }
    this.#offMsg();
    this.#offSession();
    this.#server?.close();
    await this.hub.release();
  }

  #open(): void {
    if (this.#closed) throw new DynamoError("hub request plane is closed");
  }
}
