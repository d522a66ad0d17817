// Byte plumbing shared by the request connection and the call-home server: whole writes, and
// reads of two-part messages with a deadline on every wait.

import { TimeoutError } from "../errors.ts";
import { addDeadline, type Deadline, removeDeadline } from "../transport/_deadlines.ts";
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
    if (this.#ready.length === 0) {
      // Usually one read per item: its deadline is on the shared coarse timer, not a timer of
      // its own (arming and clearing one per read cost more than decoding the item).
      let late!: (err: Error) => void;
      const expired = new Promise<never>((_, reject) => (late = reject));
      expired.catch(() => {});
      const deadline: Deadline = {
        at: performance.now() + timeoutMs,
        fire: () => late(new TimeoutError(`${what}: nothing within ${timeoutMs} ms`)),
      };
      addDeadline(deadline);
      try {
        while (this.#ready.length === 0) {
          if (this.#decoder.failure) throw this.#decoder.failure;
          const n = await Promise.race([this.#conn.read(this.#buf), expired]);
          if (n === null) return undefined;
          for (const m of this.#decoder.push(this.#buf.slice(0, n))) this.#ready.push(m);
        }
      } finally {
        removeDeadline(deadline);
      }
    }
    return this.#ready.shift();
  }

  /** Bytes received that do not yet make a whole message (nonzero at EOF: a cut frame). */
  get pending(): number {
    return this.#decoder.pending;
  }
}
