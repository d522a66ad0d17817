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

/** Buffered reads of exact byte counts from a connection. */
export class Reader {
  readonly #conn: Deno.Conn;
  #buf = new Uint8Array(0);
  /** Where reads land (reused: a fresh 64 KiB per read cost more than the frames in it). */
  #chunk = new Uint8Array(65536);
  #eof = false;

  constructor(conn: Deno.Conn) {
    this.#conn = conn;
  }

  /** `n` bytes, or undefined at a clean end of stream before any of them. */
  async take(n: number): Promise<Uint8Array | undefined> {
    while (this.#buf.length < n) {
      if (this.#eof) {
        if (this.#buf.length === 0) return undefined;
        throw new ProtocolError(`the peer closed mid-frame (${this.#buf.length} of ${n})`);
      }
      if (this.#chunk.length < n - this.#buf.length) {
        this.#chunk = new Uint8Array(n - this.#buf.length);
      }
      const got = await this.#conn.read(this.#chunk);
      if (got === null) {
        this.#eof = true;
        continue;
      }
      const next = new Uint8Array(this.#buf.length + got);
      next.set(this.#buf);
      next.set(this.#chunk.subarray(0, got), this.#buf.length);
      this.#buf = next;
    }
    const out = this.#buf.slice(0, n);
    this.#buf = this.#buf.subarray(n);
    return out;
  }
}
