// The worker's end of a response stream: runs a handler for one request, streams its items
// as frames (a heartbeat while it is silent), and maps the caller's stop/kill frames and a
// vanished caller onto the request's context.

import { Context } from "./context.ts";
import {
  type BeatingStream,
  beatStream,
  DEFAULT_HEARTBEAT_MS,
  livenessClock,
  livenessTicks,
  stopBeating,
} from "./liveness.ts";
import type { Logger } from "./logger.ts";
import type { RequestTally } from "./metrics/runtime_metrics.ts";
import { parseTraceparent } from "./tracing/traceparent.ts";
import type { Tracing } from "./tracing/types.ts";
import {
  EMPTY,
  encoder,
  HEARTBEAT,
  PROLOGUE_OK,
  PROLOGUE_OK_VALUE,
  SENTINEL,
  wireError,
} from "./_stream_wire.ts";
import {
  type Frame,
  type FrameConn,
  FrameType,
  jsonFrame,
  parseFrame,
  type RequestHeader,
} from "./transport/mod.ts";

/**
 * A request handler: takes the request (and optionally its context) and yields items.
 * Handlers that take no context are called the same way; the extra argument is ignored.
 */
export type Handler<Req = unknown, Resp = unknown> = (
  request: Req,
  context: Context,
) => AsyncIterable<Resp> | Iterable<Resp> | Promise<AsyncIterable<Resp> | Iterable<Resp>>;

/** Options of {@linkcode serveRequest}. */
export interface ServeRequestOptions {
  logger?: Logger;
  /** Called with the request's context as soon as it exists (for shutdown tracking). */
  onContext?: (ctx: Context) => void;
  /**
   * A stream that sent nothing for this long sends a heartbeat, so that its caller can tell a
   * slow handler from a hung worker (ms, default 1000).
   */
  heartbeatMs?: number;
  /** Filled in with the bytes of items sent and whether the handler failed (for metrics). */
  tally?: RequestTally;
  /**
   * Traces the request (an "engine" span, the child of the caller's span when the request
   * carries one); its context's `trace` is that span. A traced request's log lines ("request
   * received", "request completed", at info) carry `trace_id` and `span_id` (and `parent_id`,
   * the caller's span); without tracing here, a request that carries a trace context still
   * logs them, naming the caller's trace and span.
   */
  tracing?: Tracing;
}

/**
 * Worker side of one request: runs `handler`, streams its items over `conn`, and maps
 * control frames and a vanished caller onto the request's context.
 */
export function serveRequest(
  conn: FrameConn,
  header: RequestHeader,
  body: unknown,
  handler: Handler,
  options: ServeRequestOptions = {},
): Promise<void> {
  // Not an async function: the request's one promise is serveItems's (one step fewer).
  try {
    const ctx = new Context(header.id);
    const traced = options.tracing !== undefined || header.headers !== undefined;
    if (traced) options = tracedOptions(ctx, header, options);
    options.onContext?.(ctx);
    const state = { complete: false };
    readControls(conn, ctx, state);
    // In process the caller is never hung apart from us: no heartbeats there.
    const beat: BeatingStream | undefined = conn.carriesValues ? undefined : {
      lastSent: 0,
      beatTicks: livenessTicks(options.heartbeatMs ?? DEFAULT_HEARTBEAT_MS),
      beat: () => {
        if (!conn.closed) void conn.send(HEARTBEAT);
      },
    };
    if (beat) beatStream(beat);
    return serveItems(conn, ctx, state, handler, body, header, options, beat, traced);
  } catch (err) {
    return Promise.reject(err);
  }
}

/**
 * A traced request's options: its span started (as the context's `trace`) and its logger
 * naming the trace and span (the caller's, when this worker does not trace).
 */
function tracedOptions(
  ctx: Context,
  header: RequestHeader,
  options: ServeRequestOptions,
): ServeRequestOptions {
  // Untrusted: anything but strings is ignored, and a malformed traceparent starts a new trace.
  const given = header.headers;
  const traceparent = typeof given?.traceparent === "string" ? given.traceparent : undefined;
  const tracestate = typeof given?.tracestate === "string" && given.tracestate.length <= 512
    ? given.tracestate
    : undefined;
  let ids: { trace_id: string; span_id: string; parent_id?: string } | undefined;
  if (options.tracing !== undefined) {
    const span = options.tracing.startSpan("engine", {
      kind: "server",
      traceparent,
      tracestate,
      attributes: { "dynamo.request_id": header.id },
    });
    ctx.trace = span;
    const parent = parseTraceparent(traceparent);
    ids = parent === undefined || parent.traceId !== span.traceId
      ? { trace_id: span.traceId, span_id: span.spanId }
      : { trace_id: span.traceId, span_id: span.spanId, parent_id: parent.spanId };
  } else {
    const parent = parseTraceparent(traceparent);
    if (parent !== undefined) ids = { trace_id: parent.traceId, span_id: parent.spanId };
  }
  if (ids === undefined || options.logger === undefined) return options;
  const logger = options.logger.child(ids);
  // The reference's worker logs the same two lines, with the same trace fields.
  logger.info("request received", { request: header.id });
  return { ...options, logger };
}

async function serveItems(
  conn: FrameConn,
  ctx: Context,
  state: { complete: boolean },
  handler: Handler,
  body: unknown,
  header: RequestHeader,
  options: ServeRequestOptions,
  beat: BeatingStream | undefined,
  traced: boolean,
): Promise<void> {
  try {
    let iterator: AsyncIterator<unknown> | Iterator<unknown> | undefined;
    let step: IteratorResult<unknown>;
    try {
      const started = runHandler(handler, body, ctx);
      iterator = started instanceof Promise ? await started : started;
      step = await iterator.next();
    } catch (err) {
      state.complete = true;
      if (options.tally) options.tally.error = "generate";
      if (beat) stopBeating(beat);
      ctx.trace?.fail(err);
      await sendFinal(conn, jsonFrame(FrameType.Prologue, { error: wireError(err) }));
      return;
    }
    try {
      const byValue = conn.carriesValues === true;
      const sendText = typeof conn.sendDataText === "function";
      // Bytes are counted where items are serialized (in process they are not).
      const tally = options.tally ?? { responseBytes: 0 };
      const p = conn.send(byValue ? PROLOGUE_OK_VALUE : PROLOGUE_OK);
      if (p) await p;
      while (!step.done) {
        if (ctx.isKilled()) break;
        if (conn.closed) {
          ctx.kill(); // the caller hung up (checked here: a throw per abandoned stream is costly)
          break;
        }
        let sent;
        if (byValue) {
          sent = conn.send({ type: FrameType.Data, payload: EMPTY, value: step.value ?? null });
        } else if (sendText) {
          const text = JSON.stringify(step.value ?? null);
          tally.responseBytes += text.length; // UTF-16 units: bytes for the ASCII of JSON
          sent = conn.sendDataText!(text);
        } else {
          const payload = encoder.encode(JSON.stringify(step.value ?? null));
          tally.responseBytes += payload.byteLength;
          sent = conn.send({ type: FrameType.Data, payload });
        }
        if (beat) beat.lastSent = livenessClock.tick;
        if (sent) await sent;
        step = await iterator.next();
      }
      if (step.done && !ctx.isKilled()) {
        state.complete = true;
        if (beat) stopBeating(beat);
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
        if (options.tally) options.tally.error = "generate";
        if (beat) stopBeating(beat);
        ctx.trace?.fail(err);
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
  } finally {
    if (beat) stopBeating(beat);
    if (traced) {
      options.logger?.info("request completed", { request: header.id });
      ctx.trace?.end();
    }
  }
}

async function sendFinal(conn: FrameConn, frame: Frame): Promise<void> {
  try {
    const sent = conn.send(frame);
    if (sent) await sent; // most sends only queue: no turn of the microtask queue for those
    await conn.end();
  } catch {
    conn.close();
  }
}

/**
 * Maps the caller's frames onto `ctx`: a stop or kill frame, or the caller gone before the
 * end. Callbacks on `receive()` rather than an async loop: most requests get no frame at all,
 * and this then costs one pending promise, not an async function's besides.
 */
function readControls(
  conn: FrameConn,
  ctx: Context,
  state: { complete: boolean },
): void {
  const gone = (): void => {
    // The caller is gone before the end: nobody reads what we would produce.
    if (!state.complete) ctx.kill();
  };
  const onFrame = (frame: Frame | null): void => {
    if (frame === null) return gone();
    if (frame.type === FrameType.Control) {
      let what: unknown;
      try {
        what = parseFrame(frame);
      } catch {
        return gone();
      }
      if (what === "kill") ctx.kill();
      else ctx.stopGenerating();
    }
    next();
  };
  const next = (): void => {
    try {
      conn.receive().then(onFrame, gone);
    } catch {
      gone();
    }
  };
  next();
}

/** A handler's items: the iterator of what it returns (a promise of it for async handlers). */
export function runHandler(
  handler: Handler,
  body: unknown,
  ctx: Context,
):
  | AsyncIterator<unknown>
  | Iterator<unknown>
  | Promise<AsyncIterator<unknown> | Iterator<unknown>> {
  const result = handler(body, ctx);
  // Most handlers are generators: no wait (a turn of the microtask queue) for those.
  return typeof (result as Partial<PromiseLike<unknown>>).then === "function"
    ? Promise.resolve(result).then(iteratorOf)
    : iteratorOf(result as AsyncIterable<unknown> | Iterable<unknown>);
}

function iteratorOf(
  produced: AsyncIterable<unknown> | Iterable<unknown>,
): AsyncIterator<unknown> | Iterator<unknown> {
  return isAsyncIterable(produced) ? produced[Symbol.asyncIterator]() : produced[Symbol.iterator]();
}

function isAsyncIterable(x: unknown): x is AsyncIterable<unknown> {
  return typeof x === "object" && x !== null && Symbol.asyncIterator in x;
}
