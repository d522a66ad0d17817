// The response-stream protocol over a FrameConn, both ends: the caller's ResponseStream
// (prologue, ordered items, sentinel, stop/kill upstream) and the worker's request loop.

import { Context } from "./context.ts";
import {
  CancelledError,
  DynamoError,
  EngineShutdownError,
  RemoteError,
  StreamIncompleteError,
  TimeoutError,
} from "./errors.ts";
import type { Logger } from "./logger.ts";
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

const encoder = new TextEncoder();
const decoder = new TextDecoder();
const EMPTY = new Uint8Array(0);
const SENTINEL: Frame = { type: FrameType.Sentinel, payload: EMPTY };

/** A handler's error as it travels: message and class name. */
interface WireError {
  message: string;
  name: string;
}

/**
 * A request handler: takes the request (and optionally its context) and yields items.
 * Handlers that take no context are called the same way; the extra argument is ignored.
 */
export type Handler<Req = unknown, Resp = unknown> = (
  request: Req,
  context: Context,
) => AsyncIterable<Resp> | Iterable<Resp> | Promise<AsyncIterable<Resp> | Iterable<Resp>>;

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
}

function toRemoteError(err: WireError): Error {
  if (err.name === "EngineShutdownError") return new EngineShutdownError(err.message);
  return new RemoteError(err.message, err.name);
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
  const ctx = options.context ?? new Context();
  signal?.throwIfAborted();
  if (ctx.isStopped()) throw new CancelledError(`request ${ctx.id} was stopped before it was sent`);
  const timeoutMs = options.connectTimeoutMs ?? 5000;
  const pending = plane.expectStream(crypto.randomUUID());
  const header: RequestHeader = {
    id: ctx.id,
    request_type: "single_in",
    response_type: "many_out",
    connection_info: pending.connectionInfo,
  };
  const payload = plane.carriesValues ? { header, body } : encodeRequest(header, body);

  // Everything before the prologue races against cancellation and deadlines.
  let conn: FrameConn | undefined;
  let timer: ReturnType<typeof setTimeout> | undefined;
  let settled = false;
  let connected = false;
  let rejectWait!: (err: unknown) => void;
  const interrupted = new Promise<never>((_, reject) => (rejectWait = reject));
  interrupted.catch(() => {});
  const onAbort = () => rejectWait(new CancelledError(`request ${ctx.id} cancelled`));
  signal?.addEventListener("abort", onAbort, { once: true });
  const offStop = ctx.onStop(onAbort);
  try {
    const acked = plane.request(subject, payload, { timeoutMs, signal }).then(() => {
      // The ack may come after the stream already opened (or failed): then no deadline.
      if (settled || connected) return;
      timer = setTimeout(
        () =>
          rejectWait(
            new TimeoutError(
              `${subject} accepted request ${ctx.id} but did not connect within ${timeoutMs} ms`,
            ),
          ),
        timeoutMs,
      );
    });
    acked.catch(rejectWait);
    const connection = pending.connection.then((c) => (conn = c));
    await Promise.race([connection, interrupted]);
    // Connected: the worker is alive. Its first item may take as long as the engine needs
    // (a queue, a long prefill); a worker that dies meanwhile closes the connection.
    connected = true;
    clearTimeout(timer);
    const prologue = await Promise.race([conn!.receive(), interrupted]);
    if (prologue === null) {
      throw new StreamIncompleteError(`${subject} closed request ${ctx.id} before its prologue`);
    }
    if (prologue.type !== FrameType.Prologue) {
      throw new DynamoError(`${subject} sent frame type ${prologue.type} instead of a prologue`);
    }
    const p = parseFrame(prologue) as { error?: WireError };
    if (p.error) throw toRemoteError(p.error);
  } catch (err) {
    pending.cancel();
    if (conn) {
      if (err instanceof CancelledError) sendControl(conn, ctx.isKilled() ? "kill" : "stop");
      conn.close();
    }
    throw err;
  } finally {
    settled = true;
    clearTimeout(timer);
    signal?.removeEventListener("abort", onAbort);
    offStop();
  }
  return {
    context: ctx,
    instanceId,
    [Symbol.asyncIterator]: () => receiveItems<T>(conn!, ctx, subject, signal),
  };
}

function sendControl(conn: FrameConn, what: "stop" | "kill"): void {
  if (conn.closed) return;
  try {
    void conn.send(jsonFrame(FrameType.Control, what));
  } catch {
    // connection already gone: the worker sees the close instead
  }
}

async function* receiveItems<T>(
  conn: FrameConn,
  ctx: Context,
  subject: string,
  signal: AbortSignal | undefined,
): AsyncGenerator<T> {
  let received = 0;
  let finished = false;
  let cancelled = false;
  const offStop = ctx.onStop((reason) => {
    sendControl(conn, reason);
    if (reason === "kill") conn.close();
  });
  const onAbort = () => {
    cancelled = true;
    ctx.stopGenerating();
    conn.close();
  };
  if (signal?.aborted) onAbort();
  else signal?.addEventListener("abort", onAbort, { once: true });
  try {
    for (;;) {
      const frame = await conn.receive();
      if (frame === null) {
        if (cancelled) throw new CancelledError(`request ${ctx.id} cancelled`);
        if (ctx.isKilled()) {
          finished = true;
          return;
        }
        throw new StreamIncompleteError(
          `stream from ${subject} for request ${ctx.id} ended without its sentinel after ${received} items`,
          received,
        );
      }
      switch (frame.type) {
        case FrameType.Data:
          received++;
          yield ("value" in frame ? frame.value : JSON.parse(decoder.decode(frame.payload))) as T;
          break;
        case FrameType.Sentinel:
          finished = true;
          return;
        case FrameType.Error:
          finished = true;
          throw toRemoteError(parseFrame(frame) as WireError);
        default:
          throw new DynamoError(`unexpected frame type ${frame.type} on stream from ${subject}`);
      }
    }
  } finally {
    offStop();
    signal?.removeEventListener("abort", onAbort);
    // The consumer broke out (or we failed): tell the worker to stop, then hang up.
    if (!finished && !ctx.isStopped()) ctx.stopGenerating();
    if (!finished) sendControl(conn, "stop");
    conn.close();
  }
}

/** Options of {@linkcode serveRequest}. */
export interface ServeRequestOptions {
  logger?: Logger;
  /** Called with the request's context as soon as it exists (for shutdown tracking). */
  onContext?: (ctx: Context) => void;
}

/**
 * Worker side of one request: runs `handler`, streams its items over `conn`, and maps
 * control frames and a vanished caller onto the request's context.
 */
export async function serveRequest(
  conn: FrameConn,
  header: RequestHeader,
  body: unknown,
  handler: Handler,
  options: ServeRequestOptions = {},
): Promise<void> {
  const ctx = new Context(header.id);
  options.onContext?.(ctx);
  const state = { complete: false };
  void readControls(conn, ctx, state);
  let iterator: AsyncIterator<unknown> | Iterator<unknown> | undefined;
  let step: IteratorResult<unknown>;
  try {
    const produced = await handler(body, ctx);
    iterator = isAsyncIterable(produced)
      ? produced[Symbol.asyncIterator]()
      : produced[Symbol.iterator]();
    step = await iterator.next();
  } catch (err) {
    state.complete = true;
    await sendFinal(conn, jsonFrame(FrameType.Prologue, { error: wireError(err) }));
    return;
  }
  try {
    const p = conn.send(jsonFrame(FrameType.Prologue, {}));
    if (p) await p;
    const byValue = conn.carriesValues === true;
    while (!step.done) {
      if (ctx.isKilled()) break;
      if (conn.closed) {
        ctx.kill(); // the caller hung up (checked here: a throw per abandoned stream is costly)
        break;
      }
      const sent = conn.send(
        byValue
          ? { type: FrameType.Data, payload: EMPTY, value: step.value ?? null }
          : { type: FrameType.Data, payload: encoder.encode(JSON.stringify(step.value ?? null)) },
      );
      if (sent) await sent;
      step = await iterator.next();
    }
    if (step.done && !ctx.isKilled()) {
      state.complete = true;
      await sendFinal(conn, SENTINEL);
    }
  } catch (err) {
    if (conn.closed) {
      ctx.kill(); // the caller hung up
    } else {
      options.logger?.debug("handler failed mid-stream", {
        request: header.id,
        error: String(err),
      });
      state.complete = true;
      await sendFinal(conn, jsonFrame(FrameType.Error, wireError(err)));
      step = { done: true, value: undefined };
    }
  } finally {
    if (!step!.done) {
      try {
        await iterator.return?.();
      } catch {
        // the handler's cleanup failed; the stream is over either way
      }
    }
    conn.close();
  }
}

async function sendFinal(conn: FrameConn, frame: Frame): Promise<void> {
  try {
    await conn.send(frame);
    await conn.end();
  } catch {
    conn.close();
  }
}

async function readControls(
  conn: FrameConn,
  ctx: Context,
  state: { complete: boolean },
): Promise<void> {
  try {
    for (;;) {
      const frame = await conn.receive();
      if (frame === null) {
        // The caller is gone before the end: nobody reads what we would produce.
        if (!state.complete) ctx.kill();
        return;
      }
      if (frame.type !== FrameType.Control) continue;
      const what = parseFrame(frame);
      if (what === "kill") ctx.kill();
      else ctx.stopGenerating();
    }
  } catch {
    if (!state.complete) ctx.kill();
  }
}

function wireError(err: unknown): WireError {
  if (err instanceof Error) return { message: err.message, name: err.name };
  return { message: String(err), name: "Error" };
}

function isAsyncIterable(x: unknown): x is AsyncIterable<unknown> {
  return typeof x === "object" && x !== null && Symbol.asyncIterator in x;
}
