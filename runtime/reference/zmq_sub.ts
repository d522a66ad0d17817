// A ZeroMQ SUB socket over one TCP connection, enough to read a reference (ai-dynamo 1.6.1)
// worker's event channel: ZMTP 3.0 with the NULL mechanism (greeting, READY naming the socket
// type, a subscription message), then multipart messages. Every wait has a deadline but the
// wait for the next message, which the caller bounds by closing.

import { ProtocolError, TimeoutError } from "../errors.ts";
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

/** Options of {@linkcode ZmqSubscriber.connect}. */
export interface ZmqSubscribeOptions {
  /** Topic prefix to subscribe to (default: everything). */
  topic?: Uint8Array;
  /** Deadline to connect and complete the handshake (ms, default 5,000). */
  timeoutMs?: number;
  /** Largest message part accepted (bytes, default 16 MiB). */
  maxPartBytes?: number;
}

/** A subscription to one ZeroMQ publisher: iterate it for multipart messages. */
export class ZmqSubscriber implements AsyncIterable<Uint8Array[]> {
  readonly #conn: Deno.Conn;
  readonly #reader: Reader;
  readonly #maxPart: number;
  #closed = false;

  private constructor(conn: Deno.Conn, reader: Reader, maxPart: number) {
    this.#conn = conn;
    this.#reader = reader;
    this.#maxPart = maxPart;
  }

  /**
   * Connects to a publisher (`tcp://host:port`), completes the ZMTP handshake and subscribes.
   *
   * @param endpoint the publisher's `tcp://host:port`
   * @param options topic, handshake deadline, part size limit
   * @returns the subscriber
   * @throws {ProtocolError} a bad endpoint, or a peer that does not speak ZMTP 3 NULL
   * @throws {TimeoutError} no handshake within the deadline
   *
   * @example
   * ```ts ignore
   * const sub = await ZmqSubscriber.connect("tcp://127.0.0.1:34099");
   * for await (const parts of sub) console.log(parts.length);
   * ```
   */
  static async connect(
    endpoint: string,
    options: ZmqSubscribeOptions = {},
  ): Promise<ZmqSubscriber> {
    const m = /^tcp:\/\/(\[[^\]]+\]|[^:/\s]+):(\d{1,5})$/.exec(endpoint);
    const port = Number(m?.[2]);
    if (!m || port < 1 || port > 65535) {
      throw new ProtocolError(`ZeroMQ endpoint ${JSON.stringify(endpoint)} is not tcp://host:port`);
    }
    const timeoutMs = options.timeoutMs ?? 5_000;
    const hostname = m[1]!.replace(/^\[(.*)\]$/, "$1");
    let conn: Deno.Conn | undefined;
    let timer: ReturnType<typeof setTimeout> | undefined;
    const deadline = new Promise<never>((_, reject) => {
      timer = setTimeout(() => {
        try {
          conn?.close();
        } catch { /* closed */ }
        reject(new TimeoutError(`no ZMTP handshake with ${endpoint} within ${timeoutMs} ms`));
      }, timeoutMs);
    });
    deadline.catch(() => {});
    try {
      return await Promise.race([
        (async () => {
          conn = await Deno.connect({ hostname, port });
          const reader = new Reader(conn);
          await writeAll(conn, greeting());
          const peer = await reader.take(64);
          if (!peer || peer[0] !== 0xff || peer[9] !== 0x7f || peer[10]! < 3) {
            throw new ProtocolError(`${endpoint} did not greet with ZMTP 3`);
          }
          const mechanism = new TextDecoder().decode(peer.subarray(12, 32)).replace(/\0+$/, "");
          if (mechanism !== "NULL") {
            throw new ProtocolError(`${endpoint} asks for the ${mechanism} mechanism, not NULL`);
          }
          await writeAll(conn, readyCommand("SUB"));
          const sub = new ZmqSubscriber(conn, reader, options.maxPartBytes ?? 16 << 20);
          // ZMTP 3.0 subscription: a message whose first byte is 1, then the topic prefix.
          const topic = options.topic ?? new Uint8Array(0);
          const body = new Uint8Array(1 + topic.length);
          body[0] = 1;
          body.set(topic, 1);
          await writeAll(conn, frame(0, body));
          return sub;
        })(),
        deadline,
      ]);
    } catch (err) {
      try {
        conn?.close();
      } catch { /* closed */ }
      throw err;
    } finally {
      clearTimeout(timer);
    }
  }

  /** Stops the subscription; the iteration ends. */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    try {
      this.#conn.close();
    } catch { /* closed */ }
  }

  async *[Symbol.asyncIterator](): AsyncGenerator<Uint8Array[], void, undefined> {
    let parts: Uint8Array[] = [];
    try {
      for (;;) {
        let head: Uint8Array | undefined;
        try {
          head = await this.#reader.take(2);
        } catch (err) {
          if (this.#closed) return;
          throw err;
        }
        if (!head) return;
        const flags = head[0]!;
        let size = head[1]!;
        if (flags & FLAG_LONG) {
          const rest = await this.#reader.take(7);
          if (!rest) throw new ProtocolError("the publisher closed mid-frame");
          const b = new Uint8Array(8);
          b[0] = head[1]!;
          b.set(rest, 1);
          const big = new DataView(b.buffer).getBigUint64(0);
          if (big > BigInt(this.#maxPart)) {
            throw new ProtocolError(`a message part of ${big} bytes is over the limit`);
          }
          size = Number(big);
        }
        const body = size === 0 ? new Uint8Array(0) : await this.#reader.take(size);
        if (!body) throw new ProtocolError("the publisher closed mid-frame");
        if (flags & FLAG_COMMAND) continue; // READY, PING and the like: nothing to act on
        parts.push(body);
        if (!(flags & FLAG_MORE)) {
          yield parts;
          parts = [];
        }
      }
    } finally {
      this.close();
    }
  }
}
