// The caller's side of the reference's response plane: a TCP listener ("tcp_server" in the
// request's connection info) that a worker dials to stream its response back. Each connection
// opens with a handshake frame naming the subject it answers; the server hands the connection
// to whoever registered that subject, or closes it.

import { InvalidArgumentError, ProtocolError, TimeoutError } from "../errors.ts";
import type { Logger } from "../logger.ts";
import type { TwoPartMessage } from "../transport/reference_wire.ts";
import { TwoPartReader } from "./_io.ts";

/** A worker's response connection, matched to its subject; the handshake already read. */
export interface CallHomeConnection {
  /** The connection (the caller closes it when the stream ends). */
  conn: Deno.Conn;
  /** Reads the frames after the handshake. */
  reader: TwoPartSource;
}

/** Two-part messages read one at a time, each within a deadline. */
export interface TwoPartSource {
  /**
   * The next message, or undefined at a clean end of the connection.
   * @param timeoutMs longest wait
   * @param what what is awaited, for the timeout's message
   */
  next(timeoutMs: number, what: string): Promise<TwoPartMessage | undefined>;
}

/** Options of {@linkcode CallHomeServer.listen}. */
export interface CallHomeServerOptions {
  /** Address to listen on; the default, 127.0.0.1, keeps traffic on loopback. */
  hostname?: string;
  /** Port (default 0: any free one). */
  port?: number;
  /** How long a dialled-in connection may take to send its handshake (ms, default 5,000). */
  handshakeTimeoutMs?: number;
  /** Hears of connections refused (bad or unknown handshakes). */
  logger?: Logger;
}

interface Waiter {
  resolve(c: CallHomeConnection): void;
  reject(err: Error): void;
}

/** Accepts workers' response connections and matches them to registered subjects. */
export class CallHomeServer {
  readonly #listener: Deno.Listener;
  readonly #waiters = new Map<string, Waiter>();
  readonly #handshakeTimeoutMs: number;
  readonly #logger: Logger | undefined;
  readonly #accepting: Promise<void>;
  readonly #handshaking = new Set<Deno.Conn>();
  #closed = false;

  private constructor(listener: Deno.Listener, options: CallHomeServerOptions) {
    this.#listener = listener;
    this.#handshakeTimeoutMs = options.handshakeTimeoutMs ?? 5_000;
    this.#logger = options.logger;
    this.#accepting = this.#accept();
  }

  /**
   * Starts listening.
   *
   * @param options address, port, handshake deadline, logger
   * @returns the running server
   *
   * @example
   * ```ts
   * const server = CallHomeServer.listen();
   * console.log(server.address); // 127.0.0.1:<port>, what goes into connection_info
   * await server.close();
   * ```
   */
  static listen(options: CallHomeServerOptions = {}): CallHomeServer {
    const listener = Deno.listen({
      hostname: options.hostname ?? "127.0.0.1",
      port: options.port ?? 0,
      transport: "tcp",
    });
    return new CallHomeServer(listener, options);
  }

  /** `host:port` workers dial, as the request's connection info names it. */
  get address(): string {
    const addr = this.#listener.addr as Deno.NetAddr;
    return `${addr.hostname}:${addr.port}`;
  }

  /**
   * Waits for the worker's connection for `subject`.
   *
   * @param subject the subject the request's connection info carries
   * @param timeoutMs how long to wait for the worker to dial in
   * @param signal stops waiting
   * @returns the matched connection
   * @throws {TimeoutError} no worker dialled in within `timeoutMs`
   * @throws {InvalidArgumentError} the subject is already awaited
   */
  expect(subject: string, timeoutMs: number, signal?: AbortSignal): Promise<CallHomeConnection> {
    if (this.#closed) return Promise.reject(new ProtocolError("the call-home server is closed"));
    if (this.#waiters.has(subject)) {
      return Promise.reject(new InvalidArgumentError(`subject ${subject} is already awaited`));
    }
    return new Promise<CallHomeConnection>((resolve, reject) => {
      const done = () => {
        clearTimeout(timer);
        signal?.removeEventListener("abort", onAbort);
        this.#waiters.delete(subject);
      };
      const onAbort = () => {
        done();
        reject(signal!.reason);
      };
      const timer = setTimeout(() => {
        done();
        reject(
          new TimeoutError(`no worker called home for subject ${subject} within ${timeoutMs} ms`),
        );
      }, timeoutMs);
      signal?.addEventListener("abort", onAbort, { once: true });
      this.#waiters.set(subject, {
        resolve: (c) => (done(), resolve(c)),
        reject: (e) => (done(), reject(e)),
      });
    });
  }

  /** Stops listening; subjects still awaited fail. */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    for (const w of [...this.#waiters.values()]) {
      w.reject(new ProtocolError("the call-home server closed"));
    }
    this.#listener.close();
    for (const conn of this.#handshaking) {
      try {
        conn.close();
      } catch { /* already closed */ }
    }
    await this.#accepting;
  }

  async #accept(): Promise<void> {
    try {
      for await (const conn of this.#listener) {
        this.#handshaking.add(conn);
        this.#handshake(conn).catch((err) => {
          this.#logger?.warn("reference call-home connection refused", {
            error: (err as Error).message,
          });
          try {
            conn.close();
          } catch { /* already closed */ }
        }).finally(() => this.#handshaking.delete(conn));
      }
    } catch (err) {
      if (!this.#closed) throw err;
    }
  }

  async #handshake(conn: Deno.Conn): Promise<void> {
    const reader = new TwoPartReader(conn);
    const first = await reader.next(this.#handshakeTimeoutMs, "call-home handshake");
    if (!first) throw new ProtocolError("connection closed before its handshake");
    let hello: unknown;
    try {
      hello = JSON.parse(new TextDecoder().decode(first.header));
    } catch {
      throw new ProtocolError("handshake header is not JSON");
    }
    const h = hello as { subject?: unknown; stream_type?: unknown } | null;
    if (typeof h?.subject !== "string" || h.stream_type !== "response") {
      throw new ProtocolError(`handshake is not {subject, stream_type: "response"}`);
    }
    const waiter = this.#waiters.get(h.subject);
    if (!waiter) throw new ProtocolError(`no stream awaits subject ${h.subject}`);
    waiter.resolve({ conn, reader });
  }
}
