// Byte plumbing shared by the request connection and the call-home server: whole writes, and
// reads of two-part messages with a deadline on every wait.

import { TimeoutError } from "../errors.ts";
import { addDeadline, removeDeadline } from "../transport/_deadlines.ts";
import {
  ReferenceWireError,
  TWO_PART_PREFIX,
  twoPartFrameLength,
  type TwoPartMessage,
} from "../transport/reference_wire.ts";

/** Writes every byte of `bytes` (a `write` may take fewer). */
export async function writeAll(conn: Deno.Conn, bytes: Uint8Array): Promise<void> {
  let at = 0;
  while (at < bytes.length) at += await conn.write(bytes.subarray(at));
}

/** Room a read gets at least: below it, the reader moves to a fresh chunk. */
const MIN_READ = 2 * 1024;
/** A reader's first chunk: most response streams are a few short items. */
const FIRST_CHUNK = 8 * 1024;
/** Bytes of each later chunk the connection is read into (more for a message that needs more). */
const CHUNK = 64 * 1024;

/**
 * Reads two-part messages from a connection, one at a time, each within a deadline.
 *
 * The bytes are read into a chunk that is never reused, and each message's header and body are
 * views of it, not copies: a response stream's items cost no allocation of their own (a copy
 * per read and per part was a fifth of the frontend's garbage-collection work). A chunk goes
 * when the messages viewing it are dropped.
 */
export class TwoPartReader {
  readonly #conn: Deno.Conn;
  readonly #ready: TwoPartMessage[] = [];
  #chunk: Uint8Array = new Uint8Array(FIRST_CHUNK);
  /** Where the bytes not yet part of a message start in the chunk. */
  #start = 0;
  /** How far the chunk is filled. */
  #end = 0;
  /** Bytes of the stream before `#chunk[#start]`. */
  #consumed = 0;
  #failure: ReferenceWireError | undefined;
  /** Set when a deadline passed (and the connection was closed to end the read waiting). */
  #timedOut: TimeoutError | undefined;
  // One deadline per reader, re-armed for each wait: on the shared coarse timer, not a timer
  // (or a Promise.race) per read.
  readonly #deadline = {
    at: 0,
    message: "",
    fire: () => {
      this.#timedOut = new TimeoutError(this.#deadline.message);
      try {
        this.#conn.close(); // the read waiting fails at once (Interrupted)
      } catch { /* already closed */ }
    },
  };

  /** @param conn the connection to read */
  constructor(conn: Deno.Conn) {
    this.#conn = conn;
  }

  /**
   * The next message, or undefined at a clean end of the connection.
   *
   * @param timeoutMs longest wait for more bytes; past it the connection is closed
   * @param what what is awaited, for the timeout's message
   * @throws {TimeoutError} no whole message within `timeoutMs`
   * @throws {import("../transport/reference_wire.ts").ReferenceWireError} a malformed frame
   */
  async next(timeoutMs: number, what: string): Promise<TwoPartMessage | undefined> {
    if (this.#ready.length > 0) return this.#ready.shift();
    if (this.#timedOut) throw this.#timedOut;
    let need = this.#take();
    if (this.#ready.length > 0) return this.#ready.shift();
    const deadline = this.#deadline;
    deadline.at = performance.now() + timeoutMs;
    deadline.message = `${what}: nothing within ${timeoutMs} ms`;
    addDeadline(deadline);
    try {
      for (;;) {
        if (this.#chunk.length - this.#end < Math.max(MIN_READ, need - (this.#end - this.#start))) {
          this.#moveTo(new Uint8Array(Math.max(CHUNK, need + MIN_READ)));
        }
        let n: number | null;
        try {
          n = await this.#conn.read(this.#chunk.subarray(this.#end));
        } catch (err) {
          throw this.#timedOut ?? err;
        }
        if (this.#timedOut) throw this.#timedOut;
        if (n === null) return undefined;
        this.#end += n;
        need = this.#take();
        if (this.#ready.length > 0) return this.#ready.shift();
      }
    } finally {
      removeDeadline(deadline);
    }
  }

  /** Bytes received that do not yet make a whole message (nonzero at EOF: a cut frame). */
  get pending(): number {
    return this.#end - this.#start;
  }

  /**
   * Moves the whole messages received to the ready list (views of the chunk).
   *
   * @returns the whole length of the message begun, once its prefix is in; else 0
   * @throws {ReferenceWireError} a malformed frame with no whole message before it
   */
  #take(): number {
    if (this.#failure) throw this.#failure;
    const chunk = this.#chunk;
    for (;;) {
      let length: number;
      try {
        length = twoPartFrameLength(chunk, this.#start, this.#end, this.#consumed);
      } catch (err) {
        if (!(err instanceof ReferenceWireError)) throw err;
        // Messages whole before the bad one are still delivered; the error comes after them.
        this.#failure = err;
        if (this.#ready.length === 0) throw err;
        return 0;
      }
      if (length < 0) return 0;
      if (this.#end - this.#start < length) return length;
      const at = this.#start;
      const end = at + length;
      const headerEnd = at + TWO_PART_PREFIX +
        new DataView(chunk.buffer, chunk.byteOffset + at + 4, 4).getUint32(0);
      this.#ready.push({
        header: chunk.subarray(at + TWO_PART_PREFIX, headerEnd),
        body: chunk.subarray(headerEnd, end),
      });
      this.#consumed += length;
      this.#start = end;
    }
  }

  /** Continues in `chunk`: the bytes not yet part of a message are copied to its start. */
  #moveTo(chunk: Uint8Array): void {
    chunk.set(this.#chunk.subarray(this.#start, this.#end));
    this.#end -= this.#start;
    this.#start = 0;
    this.#chunk = chunk;
  }
}
