// Baseline plumbing for the runtime benchmark: length-prefixed frames on plain Deno TCP
// (u32 BE length of type + payload, u8 type, payload: the runtime's own frame layout),
// without any runtime code, so the figures show what the socket and nats.js can do.

/** Frame types used by the baselines (same numbers as the runtime's). */
export const RawType = {
  Handshake: 1,
  Prologue: 2,
  Data: 3,
  Sentinel: 4,
  /** caller -> raw stream server: `{n, mode}`. */
  Request: 7,
  /** caller -> echo server: answered with the server's clock (ms since the epoch, text). */
  Clock: 8,
} as const;

/** Wall-clock ms with sub-ms resolution, comparable between processes on one machine. */
export function clockNow(): number {
  return performance.timeOrigin + performance.now();
}

const encoder = new TextEncoder();

/** Encodes one frame. */
export function rawFrame(type: number, payload: Uint8Array): Uint8Array {
  const out = new Uint8Array(5 + payload.length);
  new DataView(out.buffer).setUint32(0, payload.length + 1);
  out[4] = type;
  out.set(payload, 5);
  return out;
}

/** Encodes a JSON frame. */
export function rawJsonFrame(type: number, value: unknown): Uint8Array {
  return rawFrame(type, encoder.encode(JSON.stringify(value)));
}

/** Writes all of `buf`. */
export async function writeAll(conn: Deno.Conn, buf: Uint8Array): Promise<void> {
  let off = 0;
  while (off < buf.length) off += await conn.write(buf.subarray(off));
}

/** Reads frames off a connection. Payloads are views, valid until the next call. */
export class RawFrameReader {
  readonly #conn: Deno.Conn;
  #buf = new Uint8Array(64 * 1024);
  #start = 0;
  #end = 0;

  constructor(conn: Deno.Conn) {
    this.#conn = conn;
  }

  /** The next frame, or null at end of stream. */
  async next(): Promise<{ type: number; payload: Uint8Array } | null> {
    for (;;) {
      const avail = this.#end - this.#start;
      if (avail >= 5) {
        const b = this.#buf;
        const s = this.#start;
        const len = ((b[s]! << 24) | (b[s + 1]! << 16) | (b[s + 2]! << 8) | b[s + 3]!) >>> 0;
        if (len < 1 || len > 64 * 1024 * 1024) throw new Error(`bad frame length ${len}`);
        if (avail >= 4 + len) {
          this.#start += 4 + len;
          return { type: b[s + 4]!, payload: b.subarray(s + 5, s + 4 + len) };
        }
        this.#room(4 + len);
      } else {
        this.#room(5);
      }
      const n = await this.#conn.read(this.#buf.subarray(this.#end));
      if (n === null) return null;
      this.#end += n;
    }
  }

  #room(need: number): void {
    const used = this.#end - this.#start;
    const want = Math.max(need, used + 4096);
    if (this.#start + want <= this.#buf.length) return;
    if (want <= this.#buf.length) {
      this.#buf.copyWithin(0, this.#start, this.#end);
    } else {
      const next = new Uint8Array(Math.max(want, this.#buf.length * 2));
      next.set(this.#buf.subarray(this.#start, this.#end));
      this.#buf = next;
    }
    this.#start = 0;
    this.#end = used;
  }
}

/** Batches frames into large writes (what a tuned sender does). */
export class RawFrameWriter {
  readonly #conn: Deno.Conn;
  readonly #buf = new Uint8Array(64 * 1024);
  readonly #view = new DataView(this.#buf.buffer);
  #len = 0;

  constructor(conn: Deno.Conn) {
    this.#conn = conn;
  }

  /** Appends a frame whose payload is the UTF-8 of `text`; flushes when the batch is full. */
  async pushText(type: number, text: string): Promise<void> {
    // Small payloads: worst case 3 bytes per UTF-16 unit.
    if (this.#len + 5 + text.length * 3 > this.#buf.length) await this.flush();
    const { written } = encoder.encodeInto(text, this.#buf.subarray(this.#len + 5));
    this.#view.setUint32(this.#len, written + 1);
    this.#buf[this.#len + 4] = type;
    this.#len += 5 + written;
  }

  /** Writes out the batch. */
  async flush(): Promise<void> {
    if (this.#len === 0) return;
    await writeAll(this.#conn, this.#buf.subarray(0, this.#len));
    this.#len = 0;
  }
}
