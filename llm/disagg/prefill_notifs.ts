// Waiting on a decode worker's transfer agent for prefill workers' notifications (done or
// skipped, per request id). Notifications arrive by polling `getNewNotifs`; both decode
// memories (the mocker's KV blocks and the llama.cpp state inbox) wait through this.

import type { TransferAgent } from "../../native/mod.ts";
import { DynamoError, TimeoutError } from "../../runtime/errors.ts";
import { parsePrefillNotif } from "./protocol.ts";

/** Notifications nobody waits for (late ones) kept at most; the oldest go first. */
export const MAX_LATE_NOTIFS = 4096;
/** Longest request id a notification may name (longer ones are ignored). */
const MAX_NOTIF_ID = 1024;

/** The prefill worker skipped the request (it had expired, or it could not prefill it). */
export class PrefillSkippedError extends DynamoError {}

/** Options of {@linkcode PrefillNotifs.waitPrefilled}. */
export interface WaitPrefilledOptions {
  /** Longest wait in ms. */
  timeoutMs: number;
  /** Stops the wait. */
  signal?: AbortSignal;
}

/** Options of {@linkcode PrefillNotifs}. */
export interface PrefillNotifsOptions {
  /** Notification poll period in ms while someone waits; default 2. */
  pollMs?: number;
}

/**
 * The prefill notifications of one transfer agent: waits per request id, and keeps (a
 * bounded number of) those that arrive before anyone waits or after the waiter gave up.
 *
 * @example
 * ```ts ignore
 * const notifs = new PrefillNotifs(agent);
 * await notifs.waitPrefilled("req-1", { timeoutMs: 5000 });
 * ```
 */
export class PrefillNotifs {
  readonly #agent: TransferAgent;
  readonly #waiters = new Map<string, (done: boolean) => void>();
  // Notifications nobody waited for yet: request id -> done (false: skipped).
  readonly #arrived = new Map<string, boolean>();
  readonly #pollMs: number;
  #timer: ReturnType<typeof setInterval> | undefined;

  /**
   * Creates the waiter; it drains `agent`'s notifications (nothing else should).
   *
   * @param agent the decode worker's transfer agent
   * @param options the poll period
   */
  constructor(agent: TransferAgent, options: PrefillNotifsOptions = {}) {
    this.#agent = agent;
    this.#pollMs = options.pollMs ?? 2;
  }

  /**
   * Waits for a prefill worker's done-notification for `requestId`.
   *
   * @param requestId the request's id
   * @param options deadline and cancellation
   * @throws {TimeoutError} none came within `timeoutMs`
   * @throws {PrefillSkippedError} the prefill worker said it skipped the request
   */
  async waitPrefilled(requestId: string, options: WaitPrefilledOptions): Promise<void> {
    options.signal?.throwIfAborted();
    this.#poll();
    const early = this.#arrived.get(requestId);
    if (early !== undefined) {
      this.#arrived.delete(requestId);
      if (early) return;
      throw new PrefillSkippedError(`the prefill worker skipped ${requestId}`);
    }
    let timer: ReturnType<typeof setTimeout> | undefined;
    let onAbort: (() => void) | undefined;
    try {
      await new Promise<void>((resolve, reject) => {
        this.#waiters.set(
          requestId,
          (done) =>
            done
              ? resolve()
              : reject(new PrefillSkippedError(`the prefill worker skipped ${requestId}`)),
        );
        this.#startPolling();
        timer = setTimeout(
          () =>
            reject(
              new TimeoutError(
                `no prefill-done notification for ${requestId} within ${options.timeoutMs} ms`,
              ),
            ),
          options.timeoutMs,
        );
        if (options.signal) {
          const signal = options.signal;
          onAbort = () => reject(signal.reason);
          signal.addEventListener("abort", onAbort, { once: true });
        }
      });
    } finally {
      clearTimeout(timer);
      if (onAbort) options.signal?.removeEventListener("abort", onAbort);
      this.#waiters.delete(requestId);
      this.#stopPollingIfIdle();
    }
  }

  /**
   * Whether a (done or skipped) notification arrived for a request nobody waits for (a
   * late one); consumes it.
   *
   * @param requestId the request's id
   * @returns true when one had arrived
   */
  takeLate(requestId: string): boolean {
    this.#poll();
    return this.#arrived.delete(requestId);
  }

  /** Stops polling (the agent stays open). */
  close(): void {
    clearInterval(this.#timer);
    this.#timer = undefined;
  }

  // Notifications come from other processes (any agent that has our metadata can send):
  // bodies that are not prefill notifications are ignored, and those nobody waits for are
  // kept only up to MAX_LATE_NOTIFS (oldest dropped), so a flood of forged ids cannot grow
  // memory or touch a request someone else waits for in any way but finishing it early.
  #poll(): void {
    for (const bodies of this.#agent.getNewNotifs().values()) {
      for (const body of bodies) {
        const n = parsePrefillNotif(body);
        if (n === undefined || n.requestId === "" || n.requestId.length > MAX_NOTIF_ID) continue;
        const w = this.#waiters.get(n.requestId);
        if (w) w(n.done);
        else {
          this.#arrived.delete(n.requestId);
          this.#arrived.set(n.requestId, n.done);
          if (this.#arrived.size > MAX_LATE_NOTIFS) {
            this.#arrived.delete(this.#arrived.keys().next().value!);
          }
        }
      }
    }
  }

  #startPolling(): void {
    this.#timer ??= setInterval(() => this.#poll(), this.#pollMs);
  }

  #stopPollingIfIdle(): void {
    if (this.#waiters.size === 0 && this.#timer !== undefined) {
      clearInterval(this.#timer);
      this.#timer = undefined;
    }
  }
}
