// Calls to an endpoint served in this same process, on the in-process request plane: the
// caller runs the endpoint's handler itself and takes its items from one bounded queue,
// without the frames, the call-back connection and the control reading of a response stream
// (./stream.ts and ./serve_request.ts). What the caller sees is the same: openStream's
// ResponseStream, given once the handler got to its first item; a handler's error thrown as
// the caller's RemoteError; a stop, a kill, a break and an abort reaching the handler's
// context as their frames would; a stream its worker ended without finishing it (killed at
// shutdown) a StreamIncompleteError, which migration takes elsewhere.
//
// `dynamo run` serves its engine in the frontend's process (as the reference's runner does):
// every request takes this path there. Traced requests keep the frame path (its spans).

import { AsyncQueue } from "./_queue.ts";
import { toRemoteError, wireError } from "./_stream_wire.ts";
import { Context, type StopReason } from "./context.ts";
import { CancelledError, StreamIncompleteError } from "./errors.ts";
import type { Logger } from "./logger.ts";
import type { RequestTally } from "./metrics/runtime_metrics.ts";
import { type Handler, runHandler } from "./serve_request.ts";
import { contextToSend, type OpenStreamOptions, type ResponseStream } from "./stream.ts";
import type { LocalRequestBus } from "./transport/local.ts";

/** Items a call holds before its handler waits for the caller (as an in-process stream). */
const CAPACITY = 256;

/** An endpoint served in this process, as its callers in the process reach it. */
export interface LocalEndpoint {
  readonly handler: Handler;
  /**
   * A request starts, with the handler's context (tracked for shutdown); the function it
   * returns is called once the handler is done with it.
   */
  begin(ctx: Context): (tally: RequestTally) => void;
  /** Where a handler's failure is logged (at debug, as the frame path does). */
  readonly logger?: Logger;
}

/** The endpoints served in process, per cluster (its shared bus), by subject. */
const served = new WeakMap<LocalRequestBus, Map<string, LocalEndpoint>>();

/**
 * Offers `endpoint` to the callers on `bus` under `subject` (the endpoint serves it on the
 * bus's request plane too: callers that trace, and raw plane users, take that way).
 * @returns the function that withdraws it
 */
export function serveLocal(
  bus: LocalRequestBus,
  subject: string,
  endpoint: LocalEndpoint,
): () => void {
  const map = served.get(bus) ?? new Map<string, LocalEndpoint>();
  served.set(bus, map);
  map.set(subject, endpoint);
  return () => {
    if (map.get(subject) === endpoint) map.delete(subject);
  };
}

/** The endpoint served under `subject` on `bus`, if one is. */
export function localEndpoint(bus: LocalRequestBus, subject: string): LocalEndpoint | undefined {
  return served.get(bus)?.get(subject);
}

/**
 * Calls `endpoint` with `body`: resolves once its handler got to its first item (or
 * finished), as {@linkcode openStream} does; a handler that fails before that rejects here.
 *
 * @param endpoint from {@linkcode localEndpoint}
 * @param subject the endpoint's subject (in error messages)
 * @param instanceId the serving instance (the stream's `instanceId`)
 * @param body the request, handed over as it is (the handler must not change it)
 * @param options context, signal and `onEnd`, as openStream takes them (deadlines do not
 * apply: nothing in between can be lost)
 * @throws {CancelledError} the context was stopped or the signal aborted before the first item
 * @throws {RemoteError} the handler failed before its first item
 */
export async function callLocal<T>(
  endpoint: LocalEndpoint,
  subject: string,
  instanceId: string,
  body: unknown,
  options: OpenStreamOptions = {},
): Promise<ResponseStream<T>> {
  const ctx = contextToSend(options);
  const call = new LocalCall<T>(endpoint, subject, ctx, options.signal, options.onEnd);
  await call.start(body);
  return { context: ctx, instanceId, [Symbol.asyncIterator]: () => call };
}

const DONE: IteratorReturnResult<undefined> = Object.freeze({ value: undefined, done: true });

/** What the worker's side closes the queue with when it stopped without finishing. */
const UNFINISHED = Symbol("unfinished");

/**
 * Both ends of one call: the worker's (the handler, run into the queue) and the caller's (the
 * iterator over the queue, with `poll` as ItemReceiver has it).
 */
class LocalCall<T> implements AsyncIterableIterator<T> {
  readonly #endpoint: LocalEndpoint;
  readonly #subject: string;
  /** The caller's context. */
  readonly #ctx: Context;
  /** The handler's own context (as a worker makes one per request). */
  readonly #worker: Context;
  readonly #signal: AbortSignal | undefined;
  readonly #onEnd: (() => void) | undefined;
  readonly #queue = new AsyncQueue<T>({ capacity: CAPACITY });
  readonly #first = Promise.withResolvers<void>();
  /** The handler got to its first item (or finished): the caller has the stream. */
  #started = false;
  /** The handler finished (what the sentinel says on the frame path). */
  #complete = false;
  /** The caller hung up: nobody reads what the handler would produce. */
  #gone = false;
  /** The caller's side is over. */
  #over = false;
  #cancelled = false;
  #received = 0;
  #offStop: (() => void) | undefined;
  readonly #onStop = (reason: StopReason): void => {
    if (!this.#started) {
      this.#refuse();
      return;
    }
    if (reason === "kill") {
      this.#worker.kill();
      this.#hangUp();
    } else this.#worker.stopGenerating();
  };
  readonly #onAbort = (): void => {
    if (!this.#started) {
      this.#refuse();
      return;
    }
    this.#cancelled = true;
    this.#ctx.stopGenerating();
    this.#hangUp(new CancelledError(`request ${this.#ctx.id} cancelled`));
  };
  readonly #took = (r: IteratorResult<T>): IteratorResult<T> => this.#step(r);
  readonly #failed = (err: unknown): IteratorResult<T> => this.#failure(err);

  constructor(
    endpoint: LocalEndpoint,
    subject: string,
    ctx: Context,
    signal: AbortSignal | undefined,
    onEnd: (() => void) | undefined,
  ) {
    this.#endpoint = endpoint;
    this.#subject = subject;
    this.#ctx = ctx;
    this.#worker = new Context(ctx.id);
    this.#signal = signal;
    this.#onEnd = onEnd;
  }

  /** Runs the handler; resolves at its first item (see {@linkcode callLocal}). */
  async start(body: unknown): Promise<void> {
    this.#offStop = this.#ctx.onStop(this.#onStop);
    this.#signal?.addEventListener("abort", this.#onAbort, { once: true });
    void this.#serve(body);
    try {
      await this.#first.promise;
    } catch (err) {
      this.#detach();
      throw err;
    }
  }

  [Symbol.asyncIterator](): AsyncIterableIterator<T> {
    return this;
  }

  next(): Promise<IteratorResult<T>> {
    if (this.#over) return Promise.resolve(DONE);
    try {
      const ready = this.poll();
      if (ready !== undefined) return Promise.resolve(ready);
    } catch (err) {
      return Promise.reject(err);
    }
    return this.#queue.next().then(this.#took, this.#failed);
  }

  /**
   * The next item if it is already queued, without a promise: undefined when none is.
   * Throws what {@linkcode next} would reject with.
   */
  poll(): IteratorResult<T> | undefined {
    if (this.#over) return undefined;
    let r: IteratorResult<T> | undefined;
    try {
      r = this.#queue.poll();
    } catch (err) {
      return this.#failure(err);
    }
    return r === undefined ? undefined : this.#step(r);
  }

  /** The consumer broke out: the handler is stopped, unless it had finished already. */
  return(): Promise<IteratorResult<T>> {
    if (!this.#over) this.#end(this.#complete);
    return Promise.resolve(DONE);
  }

  #step(r: IteratorResult<T>): IteratorResult<T> {
    if (this.#over) return DONE; // ended (return()) while this item was on its way
    if (r.done) {
      this.#end(true);
      return DONE;
    }
    this.#received++;
    return r;
  }

  #failure(err: unknown): IteratorResult<T> {
    if (this.#over) return DONE;
    if (err === UNFINISHED) {
      // The worker stopped without finishing: killed by this caller (the stream simply
      // ends), or at its own end (the caller may take the request elsewhere).
      if (this.#ctx.isKilled()) {
        this.#end(true);
        return DONE;
      }
      this.#end(false);
      throw new StreamIncompleteError(
        `stream from ${this.#subject} for request ${this.#ctx.id} ended without its sentinel after ${this.#received} items`,
        this.#received,
      );
    }
    this.#end(!(this.#cancelled && err instanceof CancelledError));
    throw err;
  }

  /** The caller's side is over; `finished`: the handler had finished (or failed). */
  #end(finished: boolean): void {
    this.#over = true;
    this.#onEnd?.();
    this.#detach();
    if (!finished) {
      if (!this.#ctx.isStopped()) this.#ctx.stopGenerating();
      this.#worker.stopGenerating();
    }
    this.#hangUp();
  }

  #detach(): void {
    this.#offStop?.();
    this.#offStop = undefined;
    this.#signal?.removeEventListener("abort", this.#onAbort);
  }

  /** Interrupted before the first item: the call fails and the handler is killed. */
  #refuse(): void {
    this.#first.reject(new CancelledError(`request ${this.#ctx.id} cancelled`));
    this.#hangUp();
  }

  /** Nobody reads any more: the handler is killed unless it finished; queued items dropped. */
  #hangUp(error?: unknown): void {
    if (!this.#complete && !this.#gone) {
      this.#gone = true;
      this.#worker.kill();
    }
    this.#queue.clear(error);
  }

  /** The worker's side: the handler's items into the queue, as serveRequest sends them. */
  async #serve(body: unknown): Promise<void> {
    const worker = this.#worker;
    const queue = this.#queue;
    const tally: RequestTally = { responseBytes: 0 };
    const ended = this.#endpoint.begin(worker);
    let iterator: AsyncIterator<unknown> | Iterator<unknown> | undefined;
    let step: IteratorResult<unknown> = DONE;
    try {
      try {
        const started = runHandler(this.#endpoint.handler, body, worker);
        iterator = started instanceof Promise ? await started : started;
        step = await iterator.next();
      } catch (err) {
        tally.error = "generate";
        this.#complete = true;
        this.#first.reject(toRemoteError(wireError(err)));
        return;
      }
      this.#started = true;
      this.#first.resolve();
      while (!step.done) {
        if (worker.isKilled()) break;
        if (this.#gone) {
          worker.kill();
          break;
        }
        const pushed = queue.push(step.value as T);
        if (typeof pushed !== "boolean") await pushed;
        step = await iterator.next();
      }
      if (step.done && !worker.isKilled()) {
        this.#complete = true;
        queue.close();
      } else queue.close(UNFINISHED);
    } catch (err) {
      if (this.#gone) worker.kill();
      else {
        this.#endpoint.logger?.debug("handler failed mid-stream", {
          request: worker.id,
          error: String(err),
        });
        tally.error = "generate";
        this.#complete = true;
        queue.close(toRemoteError(wireError(err)));
      }
      step = DONE;
    } finally {
      if (!step.done) {
        try {
          await iterator?.return?.();
        } catch {
          // the handler's cleanup failed; the call is over either way
        }
      }
      ended(tally);
    }
  }
}
