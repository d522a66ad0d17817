// A process's connection to the hub: one TCP connection multiplexing calls (with
// deadlines) and pushed messages, pings both ways, and a fresh connection on the next
// call after the old one broke.

import { DynamoError, InvalidArgumentError, TimeoutError } from "../errors.ts";
import type { Logger } from "../logger.ts";
import { silentLogger } from "../logger.ts";
import { TcpFrameConn } from "../transport/tcp_stream.ts";
import {
  type Decoded,
  decodeMessage,
  encodeMessage,
  HUB_PROTOCOL_VERSION,
  HubAuthError,
  HubConnectionError,
  type HubMessage,
  HubProtocolError,
  parseHubAddress,
  type WireError,
} from "./protocol.ts";

/** Options of {@linkcode HubConnection.connect}. */
export interface HubConnectionOptions {
  /** The hub's shared token, when it has one. */
  token?: string;
  /** Deadline of connecting (TCP + handshake) and the default deadline of each call, in ms (default 5000). */
  timeoutMs?: number;
  /** A name for this client in the hub's logs. */
  name?: string;
  logger?: Logger;
}

/** The hub answered a call with an error. */
export class HubRemoteError extends DynamoError {
  /** The hub's classification ("no_responders", "not_found", "error", ...). */
  readonly code: WireError["code"];
  constructor(error: WireError) {
    super(error.message);
    this.code = error.code;
  }
}

/** Handles a message the hub pushed (`ev`), on the session that received it. */
export type PushHandler = (msg: HubMessage, bytes: Uint8Array, session: HubSession) => void;

/** Options of {@linkcode HubSession.call}. */
export interface HubCallOptions {
  /** Deadline in ms (default: the connection's `timeoutMs`). */
  timeoutMs?: number;
}

/** One TCP connection to the hub, from handshake to close. */
export class HubSession {
  readonly address: string;
  readonly #conn: TcpFrameConn;
  readonly #timeoutMs: number;
  readonly #calls = new Map<
    number,
    {
      resolve: (d: Decoded) => void;
      reject: (e: unknown) => void;
      timer: ReturnType<typeof setTimeout>;
    }
  >();
  readonly #dispatch: (msg: HubMessage, bytes: Uint8Array, session: HubSession) => void;
  readonly #onEnd: (session: HubSession, err: Error) => void;
  #nextId = 1;
  #lastSeen = Date.now();
  #pinger: ReturnType<typeof setInterval> | undefined;
  #alive = true;
  /** Resolves once the read loop ended. */
  readonly done: Promise<void>;

  /** @internal use {@linkcode HubConnection} */
  constructor(
    address: string,
    conn: TcpFrameConn,
    pingMs: number,
    timeoutMs: number,
    dispatch: (msg: HubMessage, bytes: Uint8Array, session: HubSession) => void,
    onEnd: (session: HubSession, err: Error) => void,
  ) {
    this.address = address;
    this.#conn = conn;
    this.#timeoutMs = timeoutMs;
    this.#dispatch = dispatch;
    this.#onEnd = onEnd;
    // The hub answers pings; silence for 4 ping periods means it hangs or the link is gone.
    // A tick that comes late means this process was blocked: what the hub sent meanwhile
    // is still unread, so the silence proves nothing.
    let lastTick = Date.now();
    this.#pinger = setInterval(() => {
      const now = Date.now();
      if (now - lastTick > pingMs * 2) this.#lastSeen = now;
      lastTick = now;
      if (now - this.#lastSeen > pingMs * 4) {
        this.#end(new HubConnectionError(`the hub at ${address} stopped answering`));
      } else this.send({ op: "ping" });
    }, pingMs);
    this.done = this.#loop();
  }

  /** False once the connection closed or broke. */
  get alive(): boolean {
    return this.#alive;
  }

  async #loop(): Promise<void> {
    let error: Error | undefined;
    try {
      for (;;) {
        const frame = await this.#conn.receive();
        if (frame === null) break;
        this.#lastSeen = Date.now();
        const { msg, bytes } = decodeMessage(frame);
        if (typeof msg.re === "number") {
          const call = this.#calls.get(msg.re);
          if (!call) continue; // timed out already
          this.#calls.delete(msg.re);
          clearTimeout(call.timer);
          if (msg.error) call.reject(wireToError(msg.error));
          else call.resolve({ msg, bytes });
        } else if (typeof msg.ev === "string") {
          this.#dispatch(msg, bytes, this);
        }
      }
    } catch (err) {
      error = err instanceof Error ? err : new HubProtocolError(String(err));
    }
    this.#end(
      error ?? new HubConnectionError(`the connection to the hub at ${this.address} closed`),
    );
  }

  /** Queues a message that expects no answer; dropped when the connection is gone. */
  send(msg: HubMessage, bytes?: Uint8Array): void {
    if (!this.#alive) return;
    try {
      const p = this.#conn.send(encodeMessage(msg, bytes));
      if (p) p.catch(() => {});
    } catch {
      // closed under us: the read loop reports it
    }
  }

  /**
   * Sends `msg` and resolves with the hub's answer.
   * @throws {TimeoutError} no answer within the deadline
   * @throws {HubConnectionError} the connection broke first
   * @throws {HubRemoteError} the hub answered with an error
   */
  call(msg: HubMessage, bytes?: Uint8Array, options: HubCallOptions = {}): Promise<Decoded> {
    if (!this.#alive) {
      return Promise.reject(new HubConnectionError(`not connected to the hub at ${this.address}`));
    }
    const id = this.#nextId++;
    const timeoutMs = options.timeoutMs ?? this.#timeoutMs;
    return new Promise<Decoded>((resolve, reject) => {
      const timer = setTimeout(() => {
        this.#calls.delete(id);
        reject(
          new TimeoutError(
            `the hub at ${this.address} did not answer "${msg.op}" within ${timeoutMs} ms`,
          ),
        );
      }, timeoutMs);
      this.#calls.set(id, { resolve, reject, timer });
      this.send({ ...msg, id }, bytes);
    });
  }

  /** Closes the connection; pending calls fail with `reason`. */
  close(reason?: Error): Promise<void> {
    this.#end(reason ?? new HubConnectionError(`the connection to the hub was closed`), true);
    return this.done;
  }

  #end(err: Error, quiet = false): void {
    if (!this.#alive) return;
    this.#alive = false;
    clearInterval(this.#pinger);
    this.#conn.close();
    for (const call of this.#calls.values()) {
      clearTimeout(call.timer);
      call.reject(err);
    }
    this.#calls.clear();
    if (!quiet) this.#onEnd(this, err);
  }
}

function wireToError(error: WireError): Error {
  if (error.code === "invalid_argument") return new InvalidArgumentError(error.message);
  if (error.code === "unauthorized") return new HubAuthError(error.message);
  return new HubRemoteError(error);
}

/**
 * A client's link to the hub, shared by its discovery, request plane, object store and
 * event plane. Holds at most one TCP connection ({@linkcode HubSession}); after it breaks,
 * the next call connects again. Users hold a reference (`acquire`/`release`); the
 * connection closes when the last one is released.
 *
 * @example
 * ```ts
 * const hub = await HubConnection.connect("127.0.0.1:4300", { token: "secret" });
 * const discovery = new HubDiscovery(hub);
 * ```
 */
export class HubConnection {
  readonly address: string;
  readonly #options: HubConnectionOptions;
  readonly #logger: Logger;
  readonly #push = new Map<string, Set<PushHandler>>();
  readonly #sessionHooks = new Set<(s: HubSession) => void>();
  readonly #lostHooks = new Set<(s: HubSession, err: Error) => void>();
  #session: HubSession | undefined;
  #connecting: Promise<HubSession> | undefined;
  #refs = 0;
  #closed = false;
  #reconnecting: Promise<void> | undefined;
  #wake: (() => void) | undefined;
  #nextId = 1;

  private constructor(address: string, options: HubConnectionOptions) {
    parseHubAddress(address);
    this.address = address;
    this.#options = options;
    this.#logger = options.logger ?? silentLogger;
  }

  /**
   * Connects to the hub at `address` (`host:port`) and completes the handshake.
   * @throws {InvalidArgumentError} a malformed address
   * @throws {HubAuthError} the hub refused the token
   * @throws {HubConnectionError} the hub cannot be reached
   */
  static async connect(
    address: string,
    options: HubConnectionOptions = {},
  ): Promise<HubConnection> {
    const hub = new HubConnection(address, options);
    await hub.session();
    return hub;
  }

  /** Default deadline of calls, in ms. */
  get timeoutMs(): number {
    return this.#options.timeoutMs ?? 5000;
  }

  /** True while a connection is up. */
  get connected(): boolean {
    return this.#session?.alive ?? false;
  }

  /** A number unique on this connection (subscription and watch ids). */
  nextId(): number {
    return this.#nextId++;
  }

  /** Routes pushed messages of kind `ev` to `handler`. @returns a function that removes it */
  on(ev: string, handler: PushHandler): () => void {
    let set = this.#push.get(ev);
    if (!set) this.#push.set(ev, set = new Set());
    set.add(handler);
    return () => set.delete(handler);
  }

  /**
   * Runs `hook` on every new connection before anything else is sent on it (to restore
   * subscriptions). @returns a function that removes the hook
   */
  onSession(hook: (s: HubSession) => void): () => void {
    this.#sessionHooks.add(hook);
    return () => this.#sessionHooks.delete(hook);
  }

  /** Runs `hook` when a connection breaks (not when it is closed on purpose). */
  onLost(hook: (s: HubSession, err: Error) => void): () => void {
    this.#lostHooks.add(hook);
    return () => this.#lostHooks.delete(hook);
  }

  /**
   * The live connection, connecting first when there is none.
   * @throws {HubConnectionError} closed, or the hub cannot be reached
   */
  session(): Promise<HubSession> {
    if (this.#closed) {
      return Promise.reject(new HubConnectionError(`the connection to the hub is closed`));
    }
    if (this.#session?.alive) return Promise.resolve(this.#session);
    this.#connecting ??= this.#open().then((s) => {
      if (this.#closed) {
        void s.close();
        throw new HubConnectionError(`the connection to the hub is closed`);
      }
      this.#session = s;
      for (const hook of this.#sessionHooks) hook(s);
      return s;
    }).finally(() => (this.#connecting = undefined));
    return this.#connecting;
  }

  /** Sends `msg` on the live connection (connecting first) and resolves with the answer. */
  async call(msg: HubMessage, bytes?: Uint8Array, options?: HubCallOptions): Promise<Decoded> {
    return await (await this.session()).call(msg, bytes, options);
  }

  async #open(): Promise<HubSession> {
    const { hostname, port } = parseHubAddress(this.address);
    const timeoutMs = this.timeoutMs;
    let timer: ReturnType<typeof setTimeout> | undefined;
    const expired = new Promise<"timeout">((
      r,
    ) => (timer = setTimeout(() => r("timeout"), timeoutMs)));
    let conn: TcpFrameConn | undefined;
    try {
      const connecting = Deno.connect({ hostname, port, transport: "tcp" });
      const raw = await Promise.race([connecting, expired]).catch((err: unknown) => {
        throw new HubConnectionError(
          `cannot reach the hub at ${this.address}: ${(err as Error).message}` +
            " (is `dynamo hub` or `dynamo serve` running, and DYN_HUB right?)",
          { cause: err },
        );
      });
      if (raw === "timeout") {
        connecting.then((c) => c.close(), () => {});
        throw new HubConnectionError(
          `cannot reach the hub at ${this.address} within ${timeoutMs} ms`,
        );
      }
      conn = new TcpFrameConn(raw);
      await conn.send(encodeMessage({
        op: "hello",
        v: HUB_PROTOCOL_VERSION,
        ...(this.#options.token !== undefined ? { token: this.#options.token } : {}),
        name: this.#options.name ?? `pid ${Deno.pid}`,
      }));
      const first = await Promise.race([conn.receive(), expired]);
      if (first === "timeout") {
        throw new HubConnectionError(
          `the hub at ${this.address} did not complete the handshake within ${timeoutMs} ms`,
        );
      }
      if (first === null) {
        throw new HubConnectionError(
          `the hub at ${this.address} closed the connection during the handshake`,
        );
      }
      const { msg } = decodeMessage(first);
      if (msg.ev === "bye" && msg.error) {
        const err = msg.error.code === "unauthorized"
          ? new HubAuthError(`the hub at ${this.address} refused us: ${msg.error.message}`)
          : new HubConnectionError(`the hub at ${this.address} refused us: ${msg.error.message}`);
        throw err;
      }
      if (msg.ev !== "welcome") {
        throw new HubProtocolError(`the hub at ${this.address} sent "${msg.ev}" before welcome`);
      }
      const pingMs = typeof msg.ping_ms === "number" && msg.ping_ms > 0 ? msg.ping_ms : 2500;
      const session = new HubSession(
        this.address,
        conn,
        pingMs,
        timeoutMs,
        (m, b, s) => this.#dispatch(m, b, s),
        (s, err) => this.#lost(s, err),
      );
      this.#logger.debug("connected to the hub", { address: this.address });
      return session;
    } catch (err) {
      conn?.close();
      throw err;
    } finally {
      clearTimeout(timer);
    }
  }

  #dispatch(msg: HubMessage, bytes: Uint8Array, session: HubSession): void {
    if (msg.ev === "pong") return;
    const handlers = this.#push.get(msg.ev!);
    if (!handlers || handlers.size === 0) {
      this.#logger.debug("ignoring a hub message nobody handles", { ev: msg.ev });
      return;
    }
    for (const handler of handlers) {
      try {
        handler(msg, bytes, session);
      } catch (err) {
        this.#logger.warn("hub message handler failed", { ev: msg.ev, error: String(err) });
      }
    }
  }

  #lost(session: HubSession, err: Error): void {
    if (this.#closed) return;
    this.#logger.warn("lost the connection to the hub", {
      address: this.address,
      error: err.message,
    });
    for (const hook of this.#lostHooks) {
      try {
        hook(session, err);
      } catch (e) {
        this.#logger.warn("hub connection-loss hook failed", { error: String(e) });
      }
    }
    this.#reconnecting ??= this.#reconnect().finally(() => (this.#reconnecting = undefined));
  }

  /** Connects again in the background, so subscriptions come back without waiting for a call. */
  async #reconnect(): Promise<void> {
    let delay = 100;
    while (!this.#closed && !this.connected) {
      await new Promise<void>((resolve) => {
        const timer = setTimeout(done, delay);
        this.#wake = done;
        function done() {
          clearTimeout(timer);
          resolve();
        }
      });
      this.#wake = undefined;
      if (this.#closed) return;
      try {
        await this.session();
        this.#logger.info("reconnected to the hub", { address: this.address });
      } catch (err) {
        this.#logger.debug("hub not back yet", { address: this.address, error: String(err) });
        delay = Math.min(delay * 2, 2000);
      }
    }
  }

  /** Takes a reference: the connection stays open until every reference is released. */
  acquire(): void {
    this.#refs++;
  }

  /** Drops a reference; closes the connection when it was the last. */
  async release(): Promise<void> {
    if (this.#refs > 0 && --this.#refs === 0) await this.close();
  }

  /** Closes the connection now, whatever the references. */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    this.#wake?.();
    await this.#reconnecting;
    await this.#connecting?.catch(() => {});
    await this.#session?.close();
  }
}
