// Per-request context: identity and cancellation shared by caller and handler.
// Stop asks for a graceful finish; kill ends at once. Both abort `signal`.

import type { TraceSpan } from "./tracing/types.ts";

/** Why a context ended. */
export type StopReason = "stop" | "kill";

const STOPPED = new DOMException("context stopped", "AbortError");
const KILLED = new DOMException("context killed", "AbortError");

/**
 * The context of one request. The caller's context and the worker's context of the same
 * request are linked through the response stream: stopping one stops the other.
 *
 * @example
 * ```ts
 * const ctx = new Context();
 * ctx.signal.addEventListener("abort", () => console.log("stopped"), { once: true });
 * ctx.stopGenerating();
 * ```
 */
export class Context {
  /** Request id; the same on the caller and on the worker. */
  readonly id: string;
  /**
   * The request's current span when tracing is on (undefined otherwise): each stage starts its
   * span as a child of it, and the request plane sends it to the worker as the W3C parent.
   */
  trace: TraceSpan | undefined = undefined;
  // Most requests end without anyone reading `signal` or awaiting `stopped()`: the
  // AbortController and the promise are made on first use (an AbortController is costly).
  #controller: AbortController | undefined;
  #stopReason: StopReason | undefined;
  #killed = false;
  /**
   * The stop listeners, in the order they were added: the first in `#listener` while it is
   * the only one (a request usually has one at a time: no Set for it), else all in `#listeners`.
   */
  #listener: ((reason: StopReason) => void) | undefined;
  #listeners: Set<(reason: StopReason) => void> | undefined;
  #stopped: PromiseWithResolvers<void> | undefined;

  /**
   * Creates the context of one request.
   * @param id request id (default: a random UUID)
   */
  constructor(id: string = crypto.randomUUID()) {
    this.id = id;
  }

  /** Aborts when the context is stopped or killed. */
  get signal(): AbortSignal {
    let controller = this.#controller;
    if (controller === undefined) {
      controller = this.#controller = new AbortController();
      const reason = this.#stopReason;
      if (reason !== undefined) controller.abort(reason === "kill" ? KILLED : STOPPED);
    }
    return controller.signal;
  }

  /** True once stopGenerating() or kill() was called (here or on the other side). */
  isStopped(): boolean {
    return this.#stopReason !== undefined;
  }

  /** True once kill() was called (here or on the other side). */
  isKilled(): boolean {
    return this.#killed;
  }

  /** Asks the handler to finish gracefully; it may still yield what it has. */
  stopGenerating(): void {
    this.#end("stop");
  }

  /** Ends the request at once. */
  kill(): void {
    this.#end("kill");
  }

  /** Resolves when the context is stopped or killed. */
  stopped(): Promise<void> {
    if (this.#stopped === undefined) {
      this.#stopped = Promise.withResolvers<void>();
      if (this.#stopReason !== undefined) this.#stopped.resolve();
    }
    return this.#stopped.promise;
  }

  /**
   * Links `child` so that stopping or killing this context does the same to it.
   * A child linked to an already stopped context is stopped at once.
   * @returns a function that undoes the link
   */
  linkChild(child: Context): () => void {
    const forward = (reason: StopReason) =>
      reason === "kill" ? child.kill() : child.stopGenerating();
    if (this.isStopped()) {
      forward(this.#killed ? "kill" : "stop");
      return () => {};
    }
    return this.onStop(forward);
  }

  /**
   * Calls `fn` once when the context stops (and again with "kill" if it is later killed).
   * @returns a function that removes the listener
   */
  onStop(fn: (reason: StopReason) => void): () => void {
    if (
      this.#listener === undefined && (this.#listeners === undefined || this.#listeners.size === 0)
    ) {
      this.#listener = fn;
    } else {
      const listeners = this.#listeners ??= new Set();
      if (this.#listener !== undefined) {
        listeners.add(this.#listener);
        this.#listener = undefined;
      }
      listeners.add(fn);
    }
    return () => {
      if (this.#listener === fn) this.#listener = undefined;
      else this.#listeners?.delete(fn);
    };
  }

  #end(reason: StopReason): void {
    const wasStopped = this.#stopReason !== undefined;
    if (reason === "kill") {
      if (this.#killed) return;
      this.#killed = true;
    } else if (wasStopped) {
      return;
    }
    if (!wasStopped) {
      this.#stopReason = reason;
      // One shared reason per kind: a DOMException per request costs a stack trace.
      this.#controller?.abort(reason === "kill" ? KILLED : STOPPED);
      this.#stopped?.resolve();
    }
    const only = this.#listener;
    if (only !== undefined) {
      only(reason);
      return;
    }
    const listeners = this.#listeners;
    if (listeners === undefined || listeners.size === 0) return;
    for (const fn of [...listeners]) fn(reason);
  }
}
