// ZMTP 3.0 (ZeroMQ's wire protocol) pieces shared by the SUB and PUB sockets of the reference's
// event channels: the NULL-mechanism greeting, frames, the READY command, exact reads.

import { ProtocolError } from "../errors.ts";

/** Frame flags. */
export const FLAG_MORE = 1;
/** A frame whose size is a u64. */
export const FLAG_LONG = 2;
/** A command frame (READY, SUBSCRIBE, PING, ...). */
export const FLAG_COMMAND = 4;

/** Our greeting: ZMTP 3.0, NULL mechanism, not the server. */
export function greeting(): Uint8Array {
  const g = new Uint8Array(64);
  g[0] = 0xff;
  g[9] = 0x7f;
  g[10] = 3;
  g[11] = 0;
  g.set(new TextEncoder().encode("NULL"), 12);
  return g;
}

/** One frame: flags, a short or long size, the body. */
export function frame(flags: number, body: Uint8Array): Uint8Array {
  if (body.length > 255) {
    const out = new Uint8Array(9 + body.length);
    out[0] = flags | FLAG_LONG;
    new DataView(out.buffer).setBigUint64(1, BigInt(body.length));
    out.set(body, 9);
    return out;
  }
  const out = new Uint8Array(2 + body.length);
  out[0] = flags;
  out[1] = body.length;
  out.set(body, 2);
  return out;
}

/** The READY command naming our socket type. */
export function readyCommand(socketType: "SUB" | "PUB"): Uint8Array {
  const enc = new TextEncoder();
  const name = enc.encode("Socket-Type");
  const value = enc.encode(socketType);
  const body = new Uint8Array(6 + 1 + name.length + 4 + value.length);
  body[0] = 5;
  body.set(enc.encode("READY"), 1);
  let at = 6;
  body[at++] = name.length;
  body.set(name, at);
  at += name.length;
  new DataView(body.buffer).setUint32(at, value.length);
  body.set(value, at + 4);
  return frame(FLAG_COMMAND, body);
}

/** Room a read gets at least: below it, the reader moves to a fresh chunk. */
const MIN_READ = 2 * 1024;
/** A reader's first chunk (the greeting, a subscription, a few events). */
const FIRST_CHUNK = 8 * 1024;
/** Bytes of each later chunk (more for a frame that needs more). */
const CHUNK = 64 * 1024;

/**
 * Buffered reads of exact byte counts from a connection. What `take` returns is a view of a
 * chunk the reader never writes again (not a copy): a chunk goes when the views are dropped.
 */
export class Reader {
  readonly #conn: Deno.Conn;
  #chunk: Uint8Array = new Uint8Array(FIRST_CHUNK);
  /** Where the bytes not yet taken start in the chunk. */
  #start = 0;
  /** How far the chunk is filled. */
  #end = 0;
  #eof = false;

  constructor(conn: Deno.Conn) {
    this.#conn = conn;
  }

  /** `n` bytes, or undefined at a clean end of stream before any of them. */
  async take(n: number): Promise<Uint8Array | undefined> {
    while (this.#end - this.#start < n) {
      if (this.#eof) {
        if (this.#end === this.#start) return undefined;
        throw new ProtocolError(`the peer closed mid-frame (${this.#end - this.#start} of ${n})`);
      }
      const chunk = this.#chunk;
      if (chunk.length - this.#start < n || chunk.length - this.#end < MIN_READ) {
        // A fresh chunk with the bytes not yet taken at its start: the old one stays as the
        // views already handed out see it.
        const next = new Uint8Array(Math.max(CHUNK, n + MIN_READ));
        next.set(chunk.subarray(this.#start, this.#end));
        this.#end -= this.#start;
        this.#start = 0;
        this.#chunk = next;
      }
      const got = await this.#conn.read(this.#chunk.subarray(this.#end));
      if (got === null) {
        this.#eof = true;
        continue;
      }
      this.#end += got;
    }
    const out = this.#chunk.subarray(this.#start, this.#start + n);
    this.#start += n;
    return out;
  }
}
