// One persistent connection to a reference worker's TCP request plane: requests are written in
// the reference's framing, and the worker answers each, in order, with an acknowledgement (u32
// BE length, then bytes: empty when it took the request, its error message when not).

import { CancelledError, ProtocolError, TimeoutError } from "../errors.ts";
import { encodeTcpRequest, type ReferenceTcpRequest } from "../transport/reference_wire.ts";
import { addDeadline, type Deadline, removeDeadline } from "../transport/_deadlines.ts";
import { writeAll } from "./_io.ts";
import { ReferenceWorkerRefusedError } from "./errors.ts";

/** Longest acknowledgement accepted (an error message; a taken request acks with 0 bytes). */
const MAX_ACK = 64 * 1024;

interface PendingAck {
  resolve(): void;
  reject(err: Error): void;
}

/** A persistent request-plane connection to one worker address. */
export class RequestConnection {
  /** `host:port` of the worker. */
  readonly address: string;
  readonly #conn: Deno.Conn;
  readonly #pending: PendingAck[] = [];
  #writing: Promise<void> = Promise.resolve();
  #closed: Error | undefined;
  /** Resolves when the connection is closed (by either side or by a failure). */
  readonly done: Promise<void>;

  private constructor(address: string, conn: Deno.Conn) {
    this.address = address;
    this.#conn = conn;
    this.done = this.#readAcks().catch(() => {});
  }

  /**
   * Dials a worker.
   *
   * @param hostname worker host
   * @param port worker port
   * @param timeoutMs connect deadline
   * @throws {ReferenceWorkerRefusedError} the connection was refused or timed out
   */
  static async connect(
    hostname: string,
    port: number,
    timeoutMs: number,
  ): Promise<RequestConnection> {
    const address = `${hostname}:${port}`;
    const signal = AbortSignal.timeout(timeoutMs);
    try {
      const conn = await Deno.connect({ hostname, port, signal });
      conn.setNoDelay(true);
      return new RequestConnection(address, conn);
    } catch (err) {
      const reason = signal.aborted
        ? `no connection within ${timeoutMs} ms`
        : (err as Error).message;
      throw new ReferenceWorkerRefusedError(address, reason, { cause: err });
    }
  }

  /** False once the connection failed or was closed: dial a new one. */
  get open(): boolean {
    return this.#closed === undefined;
  }

  /**
   * Sends one request and waits for the worker's acknowledgement.
   *
   * @param request path, headers, payload
   * @param timeoutMs acknowledgement deadline
   * @param signal stops waiting (the request may still have reached the worker; its ack, when it
   *   comes, is consumed in turn)
   * @throws {ReferenceWorkerRefusedError} the worker acked with an error or the connection broke
   * @throws {CancelledError} `signal` aborted
   * @throws {TimeoutError} no acknowledgement within `timeoutMs` (the connection is closed: acks
   *   are matched by order, so one lost ack spoils the rest)
   */
  async send(
    request: ReferenceTcpRequest,
    timeoutMs: number,
    signal?: AbortSignal,
  ): Promise<void> {
    signal?.throwIfAborted();
    if (this.#closed) throw this.#closed;
    const frame = encodeTcpRequest(request);
    const acked = new Promise<void>((resolve, reject) => {
      this.#pending.push({ resolve, reject });
    });
    acked.catch(() => {}); // may fail while the write is still pending; awaited below
    // Writes are chained so that frames never interleave, and acks come back in write order.
    const written = this.#writing.then(() => writeAll(this.#conn, frame));
    this.#writing = written.catch(() => {});
    let onAbort: (() => void) | undefined;
    // On the shared coarse timer (runtime/transport/_deadlines.ts), not a timer per request.
    let deadline: Deadline | undefined;
    const waits: Promise<void>[] = [
      written.then(() => acked),
      new Promise<never>((_, reject) => {
        deadline = {
          at: performance.now() + timeoutMs,
          fire: () => {
            const err = new TimeoutError(
              `reference worker at ${this.address} did not acknowledge within ${timeoutMs} ms`,
            );
            this.#fail(err);
            reject(err);
          },
        };
        addDeadline(deadline);
      }),
    ];
    if (signal) {
      waits.push(
        new Promise<never>((_, reject) => {
          onAbort = () => reject(new CancelledError("request cancelled before its ack"));
          signal.addEventListener("abort", onAbort, { once: true });
        }),
      );
    }
    try {
      await Promise.race(waits);
    } catch (err) {
      if (
        err instanceof TimeoutError || err instanceof ReferenceWorkerRefusedError ||
        err instanceof CancelledError || err instanceof ProtocolError
      ) throw err;
      const failure = new ReferenceWorkerRefusedError(this.address, (err as Error).message, {
        cause: err,
      });
      this.#fail(failure);
      throw failure;
    } finally {
      removeDeadline(deadline!);
      if (onAbort) signal?.removeEventListener("abort", onAbort);
    }
  }

  /** Closes the connection; requests waiting for an ack fail. */
  close(): void {
    this.#fail(new ReferenceWorkerRefusedError(this.address, "the connection was closed"));
  }

  #fail(err: Error): void {
    if (this.#closed) return;
    this.#closed = err;
    for (const p of this.#pending.splice(0)) p.reject(err);
    try {
      this.#conn.close();
    } catch { /* already closed */ }
  }

  async #readAcks(): Promise<void> {
    const buf = new Uint8Array(64 * 1024);
    let have = new Uint8Array(0);
    const decoder = new TextDecoder();
    try {
      for (;;) {
        const n = await this.#conn.read(buf);
        if (n === null) break;
        const next = new Uint8Array(have.length + n);
        next.set(have);
        next.set(buf.subarray(0, n), have.length);
        have = next;
        while (have.length >= 4) {
          const len = new DataView(have.buffer, have.byteOffset).getUint32(0);
          if (len > MAX_ACK) {
            throw new ProtocolError(`acknowledgement of ${len} bytes from ${this.address}`);
          }
          if (have.length < 4 + len) break;
          const data = have.subarray(4, 4 + len);
          have = have.slice(4 + len);
          const waiter = this.#pending.shift();
          if (!waiter) throw new ProtocolError(`unexpected acknowledgement from ${this.address}`);
          if (len === 0) waiter.resolve();
          else waiter.reject(new ReferenceWorkerRefusedError(this.address, decoder.decode(data)));
        }
      }
      this.#fail(
        new ReferenceWorkerRefusedError(this.address, "the worker closed the request connection"),
      );
    } catch (err) {
      this.#fail(
        err instanceof ProtocolError
          ? err
          : new ReferenceWorkerRefusedError(this.address, (err as Error).message, { cause: err }),
      );
    }
  }
}
