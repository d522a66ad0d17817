// Request migration (DESIGN.md §4): when a worker dies or asks to be left
// (EngineShutdownError), re-send the request to another instance with the tokens already
// streamed appended, so the caller sees one seamless stream. Cancellation never migrates.

import { Context } from "../../runtime/context.ts";
import {
  CancelledError,
  DynamoError,
  EngineShutdownError,
  NoInstancesError,
  StreamIncompleteError,
  TimeoutError,
} from "../../runtime/errors.ts";
import type { Logger } from "../../runtime/logger.ts";
import type { ResponseStream } from "../../runtime/stream.ts";
import type { LLMEngineOutput, PreprocessedRequest } from "../protocols.ts";

/** Sends one attempt of a request with the given context. */
export type SendTokens = (
  request: PreprocessedRequest,
  context: Context,
) => Promise<ResponseStream<LLMEngineOutput>>;

/** Options of {@linkcode openMigrating}. */
export interface MigrationOptions {
  /** How many times the request may move to another instance (the card's migration_limit). */
  limit: number;
  /** Called before each migration (for metrics and logs). */
  onMigrate?: (attempt: number, cause: unknown) => void;
  /**
   * Called when an attempt's stream broke in a way that says its instance is dead or
   * leaving (the stream ended without its sentinel, a deadline passed, the engine shut
   * down), so that routing can skip that instance before discovery drops it.
   */
  onInstanceFailed?: (instanceId: string, cause: unknown) => void;
  /**
   * Checks each item as it arrives from a worker, before anything reads it; throws to fail
   * the request (the door for untrusted worker output: see ./engine_output.ts).
   */
  check?: (item: unknown, instanceId: string) => LLMEngineOutput;
  /** Where migrations are logged (default: silent). */
  logger?: Logger;
}

/** The error when a request still fails after `limit` migrations. */
export class MigrationExhaustedError extends DynamoError {
  /** Migrations made before giving up (the limit). */
  readonly attempts: number;
  /** Creates the error for a request that failed after `limit` migrations. */
  constructor(limit: number, cause: unknown) {
    super(
      limit === 0
        ? `the worker failed mid-request and migration is disabled (migration_limit 0): ${
          errorText(cause)
        }`
        : `migration limit exhausted after ${limit} migration(s): ${errorText(cause)}`,
      { cause },
    );
    this.attempts = limit;
  }
}

function errorText(e: unknown): string {
  return e instanceof Error ? `${e.name}: ${e.message}` : String(e);
}

/** True for failures that another instance may not have: the worker, not the request. */
export function isMigratable(err: unknown): boolean {
  if (err instanceof CancelledError) return false;
  if (err instanceof StreamIncompleteError || err instanceof EngineShutdownError) return true;
  if (err instanceof NoInstancesError) return err.instanceId !== undefined;
  if (err instanceof TimeoutError) return true;
  // Transport failures (connection refused, NATS gone) are DynamoErrors of the plane.
  return err instanceof DynamoError && err.constructor === DynamoError;
}

/**
 * Opens a request that migrates on worker failure. Resolves once the first attempt is
 * accepted (errors before that, such as no instances at all, reject here).
 *
 * @param parent the request's context: stopping it stops whichever attempt runs
 */
export async function openMigrating(
  send: SendTokens,
  request: PreprocessedRequest,
  parent: Context,
  options: MigrationOptions,
): Promise<AsyncIterable<LLMEngineOutput>> {
  const generated: number[] = [];
  let migrations = 0;
  const maxTokens = request.stop_conditions.max_tokens;

  const attempt = (): Promise<ResponseStream<LLMEngineOutput>> => {
    const ctx = new Context(parent.id);
    ctx.trace = parent.trace;
    const unlink = parent.linkChild(ctx);
    const req: PreprocessedRequest = generated.length === 0 ? request : {
      ...request,
      token_ids: [...request.token_ids, ...generated],
      stop_conditions: {
        ...request.stop_conditions,
        ...(maxTokens === undefined ? {} : { max_tokens: maxTokens - generated.length }),
      },
      migrated_tokens: generated.length,
    };
    return send(req, ctx).finally(unlink);
  };

  /** Rethrows what must not migrate; otherwise counts one migration. */
  const migrateOrThrow = (err: unknown) => {
    if (parent.isStopped() || !isMigratable(err)) throw err;
    if (migrations >= options.limit) throw new MigrationExhaustedError(options.limit, err);
    migrations++;
    options.onMigrate?.(migrations, err);
    options.logger?.warn("migrating request", {
      request: parent.id,
      attempt: migrations,
      generated: generated.length,
      cause: errorText(err),
    });
  };

  // Opening may itself hit a dead instance (it died after discovery listed it).
  const open = async (): Promise<ResponseStream<LLMEngineOutput>> => {
    for (;;) {
      try {
        return await attempt();
      } catch (err) {
        migrateOrThrow(err);
      }
    }
  };

  const stream = await open();
  const failed = (stream: ResponseStream<LLMEngineOutput>, err: unknown) => {
    if (parent.isStopped()) return;
    if (
      err instanceof StreamIncompleteError || err instanceof TimeoutError ||
      err instanceof EngineShutdownError
    ) {
      options.onInstanceFailed?.(stream.instanceId, err);
    }
  };
  return {
    [Symbol.asyncIterator]: () =>
      new MigratingIterator(
        stream,
        open,
        migrateOrThrow,
        failed,
        generated,
        parent,
        maxTokens,
        options.check,
      ),
  };
}

/** Options of {@linkcode openFailover}. */
export interface FailoverOptions {
  /** How many times opening may move to another instance (the card's migration_limit). */
  limit: number;
  /** Called before each retry (for metrics). */
  onMigrate?: (attempt: number, cause: unknown) => void;
}

/**
 * Opens a request that cannot be resumed (text in, text out): it fails over to another
 * instance only while opening, before its first item. When the retries run out, the last
 * failure is thrown as it was.
 *
 * @param send sends one attempt (with the request's own context)
 * @param parent the request's context
 * @example
 * ```ts ignore
 * const stream = await openFailover((c) => model.generate(req, c), ctx, { limit: 3 });
 * ```
 */
export async function openFailover<T>(
  send: (context: Context) => Promise<ResponseStream<T>>,
  parent: Context,
  options: FailoverOptions,
): Promise<ResponseStream<T>> {
  let attempts = 0;
  for (;;) {
    try {
      return await send(parent);
    } catch (err) {
      if (!isMigratable(err) || parent.isStopped() || attempts >= options.limit) throw err;
      attempts++;
      options.onMigrate?.(attempts, err);
    }
  }
}

const DONE: IteratorReturnResult<undefined> = Object.freeze({ value: undefined, done: true });

/** An iterator that can hand over an item that is already there without a promise. */
export interface Pollable<T> {
  /** The next item if it is already there, else undefined; throws what `next` would reject with. */
  poll(): IteratorResult<T> | undefined;
}

/**
 * The items of the current attempt, re-opened on another instance when it fails. A plain
 * iterator rather than an async generator: it adds one promise per item to the stream's own,
 * instead of a generator's resumptions.
 */
class MigratingIterator implements AsyncIterableIterator<LLMEngineOutput> {
  #stream: ResponseStream<LLMEngineOutput>;
  #inner: AsyncIterator<LLMEngineOutput> | undefined;
  #done = false;
  /** A failure poll() took from the attempt, for next() to handle. */
  #held: { err: unknown } | undefined;
  readonly #open: () => Promise<ResponseStream<LLMEngineOutput>>;
  readonly #migrateOrThrow: (err: unknown) => void;
  readonly #failed: (stream: ResponseStream<LLMEngineOutput>, err: unknown) => void;
  readonly #generated: number[];
  readonly #parent: Context;
  readonly #maxTokens: number | undefined;
  readonly #check: ((item: unknown, instanceId: string) => LLMEngineOutput) | undefined;
  readonly #onItem = (r: IteratorResult<LLMEngineOutput>): IteratorResult<LLMEngineOutput> => {
    if (r.done) {
      this.#done = true;
      return DONE;
    }
    let out = r.value;
    if (this.#check) {
      try {
        out = this.#check(out, this.#stream.instanceId);
      } catch (err) {
        // Not the instance's death: this request fails, the worker keeps its place.
        this.#done = true;
        this.#closeInner();
        throw err;
      }
    }
    const ids = out.token_ids;
    for (let i = 0; i < ids.length; i++) this.#generated.push(ids[i]!);
    if (out.finish_reason) {
      // The sequence is over: the stream's own end (its sentinel) is not waited for.
      this.#done = true;
      this.#closeInner();
    }
    return r;
  };
  readonly #onError = (
    err: unknown,
  ): Promise<IteratorResult<LLMEngineOutput>> | IteratorResult<LLMEngineOutput> => {
    this.#inner = undefined;
    if (this.#done) return DONE; // return() was called meanwhile
    this.#failed(this.#stream, err);
    if (
      !this.#parent.isStopped() && isMigratable(err) && this.#maxTokens !== undefined &&
      this.#generated.length >= this.#maxTokens
    ) {
      this.#done = true;
      return { value: { token_ids: [], finish_reason: "length" }, done: false };
    }
    try {
      this.#migrateOrThrow(err);
    } catch (e) {
      this.#done = true;
      throw e;
    }
    return this.#open().then((stream) => {
      this.#stream = stream;
      if (this.#done) {
        this.#closeInner();
        return DONE;
      }
      return this.next();
    }, (e) => {
      this.#done = true;
      throw e;
    });
  };

  constructor(
    stream: ResponseStream<LLMEngineOutput>,
    open: () => Promise<ResponseStream<LLMEngineOutput>>,
    migrateOrThrow: (err: unknown) => void,
    failed: (stream: ResponseStream<LLMEngineOutput>, err: unknown) => void,
    generated: number[],
    parent: Context,
    maxTokens: number | undefined,
    check?: (item: unknown, instanceId: string) => LLMEngineOutput,
  ) {
    this.#check = check;
    this.#stream = stream;
    this.#open = open;
    this.#migrateOrThrow = migrateOrThrow;
    this.#failed = failed;
    this.#generated = generated;
    this.#parent = parent;
    this.#maxTokens = maxTokens;
  }

  [Symbol.asyncIterator](): AsyncIterableIterator<LLMEngineOutput> {
    return this;
  }

  next(): Promise<IteratorResult<LLMEngineOutput>> {
    if (this.#done) return Promise.resolve(DONE);
    const held = this.#held;
    if (held !== undefined) {
      // poll() met the attempt's failure: it takes the usual way (migration or the error).
      this.#held = undefined;
      return Promise.resolve(held.err).then(this.#onError);
    }
    const inner = this.#inner ??= this.#stream[Symbol.asyncIterator]();
    return inner.next().then(this.#onItem, this.#onError);
  }

  /**
   * The next item if the current attempt already has it (see `ItemReceiver.poll`), checked
   * as {@linkcode next} checks it (an item that fails the check throws, as `next` would
   * reject); undefined when none is there yet. The attempt's failure is kept for the next
   * call of {@linkcode next}, which migrates or throws as usual.
   */
  poll(): IteratorResult<LLMEngineOutput> | undefined {
    if (this.#done || this.#held !== undefined) return undefined;
    const inner = this.#inner ??= this.#stream[Symbol.asyncIterator]();
    const poll = (inner as Partial<Pollable<LLMEngineOutput>>).poll;
    if (poll === undefined) return undefined;
    let r: IteratorResult<LLMEngineOutput> | undefined;
    try {
      r = poll.call(inner);
    } catch (err) {
      this.#held = { err };
      return undefined;
    }
    return r === undefined ? undefined : this.#onItem(r);
  }

  /** The consumer is done: stop the current attempt's stream. */
  return(): Promise<IteratorResult<LLMEngineOutput>> {
    if (!this.#done) {
      this.#done = true;
      const closing = this.#closeInner();
      if (closing) return closing.then(() => DONE, () => DONE);
    }
    return Promise.resolve(DONE);
  }

  #closeInner(): Promise<unknown> | undefined {
    const inner = this.#inner ?? this.#stream[Symbol.asyncIterator]();
    this.#inner = undefined;
    const closing = inner.return?.();
    closing?.catch(() => {});
    return closing;
  }
}
