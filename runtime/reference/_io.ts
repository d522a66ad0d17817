// Byte plumbing shared by the request connection and the call-home server: whole writes, and
// reads of two-part messages with a deadline on every wait.

import { withDeadline } from "../_deadline.ts";
import { TimeoutError } from "../errors.ts";
import { TwoPartDecoder, type TwoPartMessage } from "../transport/reference_wire.ts";

/** Writes every byte of `bytes` (a `write` may take fewer). */
export async function writeAll(conn: Deno.Conn, bytes: Uint8Array): Promise<void> {
  let at = 0;
  while (at < bytes.length) at += await conn.write(bytes.subarray(at));
}

/** Reads two-part messages from a connection, one at a time, each within a deadline. */
export class TwoPartReader {
  readonly #conn: Deno.Conn;
  readonly #decoder = new TwoPartDecoder();
  readonly #ready: TwoPartMessage[] = [];
  readonly #buf = new Uint8Array(64 * 1024);

  /** @param conn the connection to read */
  constructor(conn: Deno.Conn) {
    this.#conn = conn;
  }

  /**
   * The next message, or undefined at a clean end of the connection.
   *
   * @param timeoutMs longest wait for more bytes
   * @param what what is awaited, for the timeout's message
   * @throws {TimeoutError} no whole message within `timeoutMs`
   * @throws {import("../transport/reference_wire.ts").ReferenceWireError} a malformed frame
   */
  async next(timeoutMs: number, what: string): Promise<TwoPartMessage | undefined> {
    const deadline = Date.now() + timeoutMs;
    while (this.#ready.length === 0) {
      if (this.#decoder.failure) throw this.#decoder.failure;
      const left = deadline - Date.now();
      const n = await withDeadline(
        this.#conn.read(this.#buf),
        Math.max(0, left),
        () => new TimeoutError(`${what}: nothing within ${timeoutMs} ms`),
      );
      if (n === null) return undefined;
      this.#ready.push(...this.#decoder.push(this.#buf.slice(0, n)));
    }
    return this.#ready.shift();
  }

  /** Bytes received that do not yet make a whole message (nonzero at EOF: a cut frame). */
  get pending(): number {
    return this.#decoder.pending;
  }
}
