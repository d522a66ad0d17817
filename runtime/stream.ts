// The caller's end of a response stream over a FrameConn: the ResponseStream (prologue,
// ordered items, sentinel, stop/kill upstream, a deadline on silence). The worker's end is
// ./serve_request.ts.

import { Context } from "./context.ts";
import {
  CancelledError,
  DynamoError,
  ProtocolError,
  StreamIncompleteError,
  StreamStalledError,
  TimeoutError,
} from "./errors.ts";
import {
  DEFAULT_STREAM_IDLE_TIMEOUT_MS,
  livenessClock,
  livenessTicks,
  unwatchStream,
  type WaitingStream,
  watchStream,
} from "./liveness.ts";
import {
  encodeRequest,
  type Frame,
  type FrameConn,
  FrameType,
  jsonFrame,
  parseFrame,
  type RequestHeader,
  type RequestPlane,
} from "./transport/mod.ts";
import { toRemoteError, type WireError } from "./_stream_wire.ts";
import { addDeadline, type Deadline, removeDeadline } from "./transport/_deadlines.ts";
import type { TraceSpan } from "./tracing/types.ts";

/** The caller's view of one response stream. */
export interface ResponseStream<T = unknown> extends AsyncIterable<T> {
  /** The request's context: stopping or killing it reaches the worker. */
  readonly context: Context;
  /** The instance serving this stream. */
  readonly instanceId: string;
}

/** Options of {@linkcode openStream}. */
export interface OpenStreamOptions {
  context?: Context;
  signal?: AbortSignal;
  /** Deadline for the worker's acknowledgement and for its call-home connection (ms, default 5000). */
  connectTimeoutMs?: number;
  /**
   * Once connected, how long to wait for the worker's next frame (an item or a heartbeat)
   * before the stream fails with {@linkcode StreamStalledError} (ms, default 10 000).
   */
  idleTimeoutMs?: number;
  /** Called once when the stream is over (however it ended), after it was opened. */
  onEnd?: () => void;
}

/**
 * The receiver behind a stream openStream returned (for {@linkcode hurryStream}): a property
 * under a private symbol, cheaper per request than a WeakMap entry.
 */
const RECEIVER = Symbol("receiver");

/**
 * Shortens a stream's idle deadline to `ms` (never lengthens it). For an instance that left
 * discovery: a worker draining on its way out still sends items or heartbeats and finishes;
 * one that is stopped or hung (its lease expired) is failed soon instead of after the full
 * deadline.
 *
 * @param stream a stream from {@linkcode openStream}
 * @param ms the new idle deadline
 */
export function hurryStream(stream: ResponseStream<unknown>, ms: number): void {
  (stream as { [RECEIVER]?: { hurry(ms: number): void } })[RECEIVER]?.hurry(ms);
}

/**
 * The context of a request about to be sent: the given one, or a new one.
 * @throws {DOMException} the signal was aborted already
 * @throws {CancelledError} the context was stopped already
 */
export function contextToSend(options: Pick<OpenStreamOptions, "context" | "signal">): Context {
  const ctx = options.context ?? new Context();
  options.signal?.throwIfAborted();
  if (ctx.isStopped()) throw new CancelledError(`request ${ctx.id} was stopped before it was sent`);
  return ctx;
}

/**
 * Sends `body` to `subject` and resolves once the worker accepted it and its handler got
 * to its first item (or finished). A handler that throws before that rejects here.
 */
export async function openStream<T>(
  plane: RequestPlane,
  subject: string,
  instanceId: string,
  body: unknown,
  options: OpenStreamOptions = {},
): Promise<ResponseStream<T>> {
  const { signal } = options;
  const ctx = contextToSend(options);
  const timeoutMs = options.connectTimeoutMs ?? 5000;
  const idleTimeoutMs = options.idleTimeoutMs ?? DEFAULT_STREAM_IDLE_TIMEOUT_MS;
  const streamId = crypto.randomUUID();
  const pending = plane.expectStream(streamId);
  const header: RequestHeader = {
    id: ctx.id,
    request_type: "single_in",
    response_type: "many_out",
    connection_info: pending.connectionInfo,
  };
  // Tracing on: the hop is a client span, and the worker's span its child (W3C traceparent).
  let span: TraceSpan | undefined;
  if (ctx.trace !== undefined) {
    span = ctx.trace.child("request_plane", {
      kind: "client",
      attributes: { "dynamo.subject": subject, "dynamo.instance_id": instanceId },
    });
    const tracestate = span.tracestate;
    header.headers = tracestate === undefined
      ? { traceparent: span.traceparent }
      : { traceparent: span.traceparent, tracestate };
  }
  // Planes that encode a message themselves get it as it is (the TCP plane encodes it
  // straight into its connection's buffer).
  const payload = plane.carriesValues || plane.encodesRequests
    ? { header, body }
    : encodeRequest(header, body);

  // Everything before the prologue races against cancellation and deadlines.
  let conn: FrameConn | undefined;
  let connectDeadline: Deadline | undefined;
  let prologueWait: WaitingStream | undefined;
  let settled = false;
  let connected = false;
  // Until connected, an interruption rejects the wait for the connection; later (while the
  // prologue is awaited) a promise of its own.
  let rejectWait!: (err: unknown) => void;
  const connecting = new Promise<FrameConn>((resolve, reject) => {
    rejectWait = reject;
    pending.connection.then(resolve);
  });
  const onAbort = () => rejectWait(new CancelledError(`request ${ctx.id} cancelled`));
  signal?.addEventListener("abort", onAbort, { once: true });
  const offStop = ctx.onStop(onAbort);
  try {
    void plane.request(subject, payload, { timeoutMs, signal, streamId }).then(() => {
      // The ack may come after the stream already opened (or failed): then no deadline. The
      // in-process plane acks once the worker had the request, which dials back at once.
      if (settled || connected || conn !== undefined) return;
      // On the shared coarse timer, not a timer of its own per request.
      connectDeadline = {
        at: performance.now() + timeoutMs,
        fire: () =>
          rejectWait(
            new TimeoutError(
              `${subject} accepted request ${ctx.id} but did not connect within ${timeoutMs} ms`,
            ),
          ),
      };
      addDeadline(connectDeadline);
    }, rejectWait);
    conn = await connecting;
    // Connected: the worker is alive. Its first item may take as long as the engine needs
    // (a queue, a long prefill); a worker that dies meanwhile closes the connection.
    connected = true;
    if (connectDeadline !== undefined) removeDeadline(connectDeadline);
    // Usually the prologue came with the acknowledgement: then no wait (and no watch) at all.
    const poll = (conn as Partial<PollingConn>).poll;
    let prologue: Frame | null | undefined = typeof poll === "function"
      ? poll.call(conn)
      : undefined;
    if (prologue != null && prologue.type !== FrameType.Heartbeat) {
      if (signal?.aborted || ctx.isStopped()) {
        throw new CancelledError(`request ${ctx.id} cancelled`);
      }
    } else if (prologue !== null) {
      if (signal?.aborted || ctx.isStopped()) {
        throw new CancelledError(`request ${ctx.id} cancelled`);
      }
      const interrupted = new Promise<never>((_, reject) => (rejectWait = reject));
      interrupted.catch(() => {});
      if (!conn!.carriesValues) {
        // The worker heartbeats while its handler works on the first item: silence is a hang.
        prologueWait = {
          waitingSince: livenessClock.tick,
          idleTicks: livenessTicks(idleTimeoutMs),
          stall: () =>
            rejectWait(
              new StreamStalledError(
                `${subject} sent nothing for request ${ctx.id} in ${idleTimeoutMs} ms before its first item`,
                0,
                idleTimeoutMs,
              ),
            ),
        };
        watchStream(prologueWait);
      }
      do {
        prologue = await Promise.race([conn!.receive(), interrupted]);
        if (prologueWait) prologueWait.waitingSince = livenessClock.tick;
      } while (prologue?.type === FrameType.Heartbeat);
    }
    if (prologue === null) {
      throw new StreamIncompleteError(`${subject} closed request ${ctx.id} before its prologue`);
    }
    if (prologue.type !== FrameType.Prologue) {
      throw new DynamoError(`${subject} sent frame type ${prologue.type} instead of a prologue`);
    }
    const p = ("value" in prologue ? prologue.value : parseFrame(prologue)) as {
      error?: WireError;
    };
    if (typeof p !== "object" || p === null) {
      throw new ProtocolError(`${subject} sent a malformed prologue`);
    }
    if (p.error) throw toRemoteError(p.error);
  } catch (err) {
    pending.cancel();
    if (span !== undefined) {
      span.fail(err);
      span.end();
    }
    if (conn) {
      if (err instanceof CancelledError) sendControl(conn, ctx.isKilled() ? "kill" : "stop");
      conn.close();
    }
    throw err;
  } finally {
    settled = true;
    if (connectDeadline !== undefined) removeDeadline(connectDeadline);
    if (prologueWait) unwatchStream(prologueWait);
    signal?.removeEventListener("abort", onAbort);
    offStop();
  }
  // Listening from here on, not from the first read: a stop or kill before anyone reads
  // the stream still reaches the worker.
  const onEnd = span === undefined ? options.onEnd : () => {
    span.end();
    options.onEnd?.();
  };
  const items = new ItemReceiver<T>(conn!, ctx, subject, signal, idleTimeoutMs, onEnd);
  const stream: ResponseStream<T> & { [RECEIVER]: ItemReceiver<T> } = {
    context: ctx,
    instanceId,
    [Symbol.asyncIterator]: () => items,
    [RECEIVER]: items,
  };
  return stream;
}

function sendControl(conn: FrameConn, what: "stop" | "kill"): void {
  if (conn.closed) return;
  try {
    void conn.send(jsonFrame(FrameType.Control, what));
  } catch {
    // connection already gone: the worker sees the close instead
  }
}

/** A connection that can hand over an already-received frame without waiting. */
interface PollingConn extends FrameConn {
  /** The next frame if one is queued, null once closed and drained, else undefined. */
  poll(): Frame | null | undefined;
}

const DONE: IteratorReturnResult<undefined> = Object.freeze({ value: undefined, done: true });

/**
 * The caller's items of one stream: Data frames until the sentinel, an error frame thrown as
 * its error. A plain iterator rather than an async generator: one promise per item (none
 * waited on when the frame is already there), which matters at thousands of items a second.
 */
class ItemReceiver<T> implements AsyncIterableIterator<T>, WaitingStream {
  readonly #conn: FrameConn;
  /** The liveness clock's tick when the current wait for a frame began; -1: not waiting. */
  waitingSince = -1;
  idleTicks: number;
  #idleTimeoutMs: number;
  readonly #onEnd: (() => void) | undefined;
  /** Watched for stalls (connections across processes; in process, a stall is a slow handler). */
  readonly #watched: boolean;
  #stalled = false;
  /** The connection, when it can hand over a queued frame without a promise (else undefined). */
  readonly #polling: PollingConn | undefined;
  readonly #ctx: Context;
  readonly #subject: string;
  readonly #signal: AbortSignal | undefined;
  #received = 0;
  /** Over: the sentinel, an error, a hang-up or return() ended it. */
  #over = false;
  #cancelled = false;
  #offStop: (() => void) | undefined;
  #onAbort: (() => void) | undefined;
  readonly #take = (frame: Frame | null): IteratorResult<T> | Promise<IteratorResult<T>> =>
    this.#frame(frame);

  constructor(
    conn: FrameConn,
    ctx: Context,
    subject: string,
    signal: AbortSignal | undefined,
    idleTimeoutMs: number,
    onEnd?: () => void,
  ) {
    this.#conn = conn;
    this.#onEnd = onEnd;
    this.#idleTimeoutMs = idleTimeoutMs;
    this.idleTicks = livenessTicks(idleTimeoutMs);
    this.#watched = conn.carriesValues !== true;
    const poll = (conn as Partial<PollingConn>).poll;
    this.#polling = typeof poll === "function" ? conn as PollingConn : undefined;
    this.#ctx = ctx;
    this.#subject = subject;
    this.#signal = signal;
    this.#start();
  }

  [Symbol.asyncIterator](): AsyncIterableIterator<T> {
    return this;
  }

  next(): Promise<IteratorResult<T>> {
    if (this.#over) return Promise.resolve(DONE);
    const ready = this.#polling?.poll();
    if (ready === undefined) {
      this.waitingSince = livenessClock.tick;
      return this.#conn.receive().then(this.#take);
    }
    try {
      return Promise.resolve(this.#frame(ready));
    } catch (err) {
      return Promise.reject(err);
    }
  }

  /**
   * The next item if its frame has already arrived, without a promise: undefined when none
   * is queued (or the plane cannot tell). Throws what {@linkcode next} would reject with.
   */
  poll(): IteratorResult<T> | undefined {
    const polling = this.#polling;
    if (this.#over || polling === undefined) return undefined;
    for (;;) {
      const ready = polling.poll();
      if (ready === undefined) return undefined;
      if (ready !== null && ready.type === FrameType.Heartbeat) continue;
      // Every frame but a heartbeat settles at once.
      return this.#frame(ready) as IteratorResult<T>;
    }
  }

  /**
   * The consumer broke out: tell the worker to stop, then hang up; unless the worker's
   * sentinel has already arrived (it finished; a consumer that stops at the last item it
   * wanted, such as a finish reason, usually meets it), then the stream just ends.
   */
  return(): Promise<IteratorResult<T>> {
    if (!this.#over) this.#end(this.#finishedAlready());
    return Promise.resolve(DONE);
  }

  /** Whether the frames already here (read and dropped) end with the worker's sentinel. */
  #finishedAlready(): boolean {
    const polling = this.#polling;
    if (polling === undefined) return false;
    for (;;) {
      const ready = polling.poll();
      if (ready === undefined || ready === null) return false;
      if (ready.type === FrameType.Sentinel) return true;
      if (ready.type !== FrameType.Data && ready.type !== FrameType.Heartbeat) return false;
    }
  }

  /** Shortens the idle deadline (see {@linkcode hurryStream}). */
  hurry(ms: number): void {
    if (ms >= this.#idleTimeoutMs) return;
    this.#idleTimeoutMs = ms;
    this.idleTicks = livenessTicks(ms);
  }

  /** The wait for a frame passed the idle deadline: the worker is hung; hang up on it. */
  stall(): void {
    if (this.#over) return;
    this.#stalled = true;
    this.#conn.close();
  }

  #start(): void {
    const conn = this.#conn;
    const ctx = this.#ctx;
    if (this.#watched) watchStream(this);
    this.#offStop = ctx.onStop((reason) => {
      sendControl(conn, reason);
      if (reason === "kill") conn.close();
    });
    const signal = this.#signal;
    if (signal) {
      const onAbort = this.#onAbort = () => {
        this.#cancelled = true;
        ctx.stopGenerating();
        conn.close();
      };
      if (signal.aborted) onAbort();
      else signal.addEventListener("abort", onAbort, { once: true });
    }
  }

  #frame(frame: Frame | null): IteratorResult<T> | Promise<IteratorResult<T>> {
    if (this.#over) return DONE; // ended (return()) while this frame was on its way
    this.waitingSince = -1;
    const ctx = this.#ctx;
    if (frame === null) {
      if (this.#stalled) {
        this.#end(false);
        throw new StreamStalledError(
          `stream from ${this.#subject} for request ${ctx.id} sent nothing for ${this.#idleTimeoutMs} ms after ${this.#received} items (worker hung or cut off)`,
          this.#received,
          this.#idleTimeoutMs,
        );
      }
      if (this.#cancelled) {
        this.#end(false);
        throw new CancelledError(`request ${ctx.id} cancelled`);
      }
      if (ctx.isKilled()) {
        this.#end(true);
        return DONE;
      }
      this.#end(false);
      throw new StreamIncompleteError(
        `stream from ${this.#subject} for request ${ctx.id} ended without its sentinel after ${this.#received} items`,
        this.#received,
      );
    }
    switch (frame.type) {
      case FrameType.Data:
        this.#received++;
        return {
          value: ("value" in frame ? frame.value : parseFrame(frame)) as T,
          done: false,
        };
      case FrameType.Heartbeat:
        return this.next();
      case FrameType.Sentinel:
        this.#end(true);
        return DONE;
      case FrameType.Error:
        this.#end(true);
        throw toRemoteError(parseFrame(frame));
      default:
        this.#end(false);
        throw new DynamoError(
          `unexpected frame type ${frame.type} on stream from ${this.#subject}`,
        );
    }
  }

  #end(finished: boolean): void {
    this.#over = true;
    if (this.#watched) unwatchStream(this);
    this.#onEnd?.();
    this.#offStop?.();
    if (this.#onAbort) this.#signal?.removeEventListener("abort", this.#onAbort);
    const ctx = this.#ctx;
    if (!finished && !ctx.isStopped()) ctx.stopGenerating();
    if (!finished) sendControl(this.#conn, "stop");
    this.#conn.close();
  }
}
