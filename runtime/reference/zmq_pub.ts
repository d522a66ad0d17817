// A ZeroMQ PUB socket on one TCP listener, enough for the reference's (ai-dynamo 1.6.1) routers
// to read our workers' event channels: ZMTP 3.0 with the NULL mechanism; subscribers greet, send
// READY and subscribe (a ZMTP 3.0 subscription message or a 3.1 SUBSCRIBE command); each
// multipart message goes to the subscribers whose topic prefix its first part starts with. As a
// ZeroMQ publisher does, it drops what no subscriber wants and what a subscriber too far behind
// cannot take.

import { ProtocolError, TimeoutError } from "../errors.ts";
import type { Logger } from "../logger.ts";
import { writeAll } from "./_io.ts";
import {
  FLAG_COMMAND,
  FLAG_LONG,
  FLAG_MORE,
  frame,
  greeting,
  Reader,
  readyCommand,
} from "./_zmtp.ts";

/** Options of {@linkcode ZmqPublisher.listen}. */
export interface ZmqPublisherOptions {
  /** Address to listen on and advertise (default 127.0.0.1). */
  hostname?: string;
  /** Port (default 0: any free one). */
  port?: number;
  /** Deadline of a subscriber's greeting and READY (ms, default 5,000). */
  handshakeTimeoutMs?: number;
  /** Bytes queued for one subscriber past which it is dropped (default 64 MiB). */
  maxQueuedBytes?: number;
  /** Hears of subscribers refused or dropped. */
  logger?: Logger;
}

interface Peer {
  conn: Deno.Conn;
  topics: Uint8Array[];
  queued: number;
  writing: Promise<void>;
}

const SUBSCRIBE = new TextEncoder().encode("\x09SUBSCRIBE");
const CANCEL = new TextEncoder().encode("\x06CANCEL");

/** A ZeroMQ publisher: `publish` a multipart message to every matching subscriber. */
export class ZmqPublisher {
  readonly #listener: Deno.Listener;
  readonly #peers = new Set<Peer>();
  readonly #options: ZmqPublisherOptions;
  readonly #accepting: Promise<void>;
  #closed = false;

  private constructor(listener: Deno.Listener, options: ZmqPublisherOptions) {
    this.#listener = listener;
    this.#options = options;
    this.#accepting = this.#accept();
  }

  /**
   * Starts listening.
   *
   * @param options address, port, deadlines, queue limit
   * @returns the publisher
   * @example
   * ```ts ignore
   * const pub = ZmqPublisher.listen();
   * pub.publish([new TextEncoder().encode("kv-events"), payload]);
   * ```
   */
  static listen(options: ZmqPublisherOptions = {}): ZmqPublisher {
    const listener = Deno.listen({
      hostname: options.hostname ?? "127.0.0.1",
      port: options.port ?? 0,
      transport: "tcp",
    });
    return new ZmqPublisher(listener, options);
  }

  /** `tcp://host:port`, as an event channel record names it. */
  get endpoint(): string {
    const addr = this.#listener.addr as Deno.NetAddr;
    const host = addr.hostname.includes(":") ? `[${addr.hostname}]` : addr.hostname;
    return `tcp://${host}:${addr.port}`;
  }

  /** Subscribers with at least one subscription. */
  get subscribers(): number {
    let n = 0;
    for (const p of this.#peers) if (p.topics.length > 0) n++;
    return n;
  }

  /**
   * Sends a multipart message to every subscriber whose topic prefix `parts[0]` starts with.
   *
   * @param parts the message's parts (at least one)
   */
  publish(parts: readonly Uint8Array[]): void {
    if (this.#closed || parts.length === 0) return;
    let bytes: Uint8Array | undefined;
    for (const peer of this.#peers) {
      if (!peer.topics.some((t) => startsWith(parts[0]!, t))) continue;
      bytes ??= encodeMessage(parts);
      const limit = this.#options.maxQueuedBytes ?? 64 << 20;
      if (peer.queued + bytes.length > limit) {
        this.#options.logger?.warn("zeromq subscriber too far behind: dropped");
        this.#drop(peer);
        continue;
      }
      peer.queued += bytes.length;
      const out = bytes;
      peer.writing = peer.writing.then(() => writeAll(peer.conn, out)).then(
        () => void (peer.queued -= out.length),
        () => this.#drop(peer),
      );
    }
  }

  /** Stops listening and drops every subscriber. */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    this.#listener.close();
    for (const p of [...this.#peers]) this.#drop(p);
    await this.#accepting;
  }

  #drop(peer: Peer): void {
    if (!this.#peers.delete(peer)) return;
    try {
      peer.conn.close();
    } catch { /* closed */ }
  }

  async #accept(): Promise<void> {
    try {
      for await (const conn of this.#listener) {
        void this.#serve(conn).catch((err) => {
          this.#options.logger?.debug("zeromq subscriber refused or gone", {
            error: (err as Error).message,
          });
          try {
            conn.close();
          } catch { /* closed */ }
        });
      }
    } catch (err) {
      if (!this.#closed) throw err;
    }
  }

  async #serve(conn: Deno.Conn): Promise<void> {
    // As libzmq does: a message goes out whole at once, so Nagle's algorithm would only hold a
    // small event back behind the last one's acknowledgement (the subscriber's kernel delays it
    // up to ~40 ms).
    (conn as Deno.TcpConn).setNoDelay(true);
    const reader = new Reader(conn);
    const ms = this.#options.handshakeTimeoutMs ?? 5_000;
    let timer: ReturnType<typeof setTimeout> | undefined;
    const deadline = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new TimeoutError(`no ZMTP handshake within ${ms} ms`)), ms);
    });
    try {
      await Promise.race([
        (async () => {
          await writeAll(conn, greeting());
          const peer = await reader.take(64);
          if (!peer || peer[0] !== 0xff || peer[9] !== 0x7f || peer[10]! < 3) {
            throw new ProtocolError("the subscriber did not greet with ZMTP 3");
          }
          const mechanism = new TextDecoder().decode(peer.subarray(12, 32)).replace(/\0+$/, "");
          if (mechanism !== "NULL") {
            throw new ProtocolError(`the subscriber asks for ${mechanism}, not NULL`);
          }
          await writeAll(conn, readyCommand("PUB"));
        })(),
        deadline,
      ]);
    } finally {
      clearTimeout(timer);
    }
    const peer: Peer = { conn, topics: [], queued: 0, writing: Promise.resolve() };
    this.#peers.add(peer);
    try {
      for (;;) {
        const head = await reader.take(2);
        if (!head) return;
        const flags = head[0]!;
        let size = head[1]!;
        if (flags & FLAG_LONG) {
          const rest = await reader.take(7);
          if (!rest) return;
          const b = new Uint8Array(8);
          b[0] = head[1]!;
          b.set(rest, 1);
          const big = new DataView(b.buffer).getBigUint64(0);
          if (big > 1n << 20n) throw new ProtocolError("a subscriber frame over 1 MiB");
          size = Number(big);
        }
        const body = size === 0 ? new Uint8Array(0) : await reader.take(size);
        if (!body) return;
        if (flags & FLAG_COMMAND) {
          if (startsWith(body, SUBSCRIBE)) subscribe(peer, body.slice(SUBSCRIBE.length), true);
          else if (startsWith(body, CANCEL)) subscribe(peer, body.slice(CANCEL.length), false);
          continue; // READY, PING and the like
        }
        if (flags & FLAG_MORE) continue;
        // ZMTP 3.0: a message whose first byte is 1 subscribes, 0 cancels, to the rest.
        if (body[0] === 1) subscribe(peer, body.slice(1), true);
        else if (body[0] === 0) subscribe(peer, body.slice(1), false);
      }
    } finally {
      this.#drop(peer);
    }
  }
}

function subscribe(peer: Peer, topic: Uint8Array, on: boolean): void {
  const at = peer.topics.findIndex((t) => equal(t, topic));
  if (on && at < 0) peer.topics.push(topic);
  if (!on && at >= 0) peer.topics.splice(at, 1);
}

function encodeMessage(parts: readonly Uint8Array[]): Uint8Array {
  const frames = parts.map((p, i) => frame(i < parts.length - 1 ? FLAG_MORE : 0, p));
  const out = new Uint8Array(frames.reduce((n, f) => n + f.length, 0));
  let at = 0;
  for (const f of frames) out.set(f, at), at += f.length;
  return out;
}

function startsWith(bytes: Uint8Array, prefix: Uint8Array): boolean {
  if (prefix.length > bytes.length) return false;
  for (let i = 0; i < prefix.length; i++) if (bytes[i] !== prefix[i]) return false;
  return true;
}

function equal(a: Uint8Array, b: Uint8Array): boolean {
  return a.length === b.length && startsWith(a, b);
}
