// Per-request context: identity and cancellation shared by caller and handler.
// Stop asks for a graceful finish; kill ends at once. Both abort `signal`.

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
  #controller = new AbortController();
  #killed = false;
  #listeners = new Set<(reason: StopReason) => void>();
  #stopped: Promise<void>;
  #resolveStopped!: () => void;

  /** @param id request id (default: a random UUID) */
  constructor(id: string = crypto.randomUUID()) {
    this.id = id;
    this.#stopped = new Promise((resolve) => (this.#resolveStopped = resolve));
  }

  /** Aborts when the context is stopped or killed. */
  get signal(): AbortSignal {
    return this.#controller.signal;
  }

  /** True once stopGenerating() or kill() was called (here or on the other side). */
  isStopped(): boolean {
    return this.#controller.signal.aborted;
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
    return this.#stopped;
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
    this.#listeners.add(fn);
    return () => this.#listeners.delete(fn);
  }

  #end(reason: StopReason): void {
    const wasStopped = this.isStopped();
    if (reason === "kill") {
      if (this.#killed) return;
      this.#killed = true;
    } else if (wasStopped) {
      return;
    }
    if (!wasStopped) {
      // One shared reason per kind: a DOMException per request costs a stack trace.
      this.#controller.abort(reason === "kill" ? KILLED : STOPPED);
      this.#resolveStopped();
    }
    for (const fn of [...this.#listeners]) fn(reason);
  }
}
