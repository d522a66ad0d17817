// Deadlines of many short waits on one coarse timer: a request plane's wait for each
// request's acknowledgement would otherwise arm and clear a timer per request, which shows at
// tens of thousands of requests a second. A deadline fires at most GRAIN_MS late.

/** Resolution of the shared timer (ms). */
const GRAIN_MS = 10;

/** One wait's deadline. */
export interface Deadline {
  /** `performance.now()` at which it passes. */
  readonly at: number;
  /** Called once when it passed (unless removed first). */
  fire(): void;
}

const pending = new Set<Deadline>();
let timer: ReturnType<typeof setInterval> | undefined;

/**
 * Arms a deadline.
 *
 * @param d the deadline
 */
export function addDeadline(d: Deadline): void {
  pending.add(d);
  // Not unref'd: like a timer of its own, a pending deadline keeps the process alive.
  timer ??= setInterval(sweep, GRAIN_MS);
}

/**
 * Disarms a deadline (a no-op once it fired).
 *
 * @param d the deadline
 */
export function removeDeadline(d: Deadline): void {
  if (!pending.delete(d) || pending.size > 0 || timer === undefined) return;
  clearInterval(timer);
  timer = undefined;
}

function sweep(): void {
  const now = performance.now();
  for (const d of pending) {
    if (now < d.at) continue;
    pending.delete(d);
    try {
      d.fire();
    } catch { /* a waiter's failure is its own */ }
  }
  if (pending.size === 0 && timer !== undefined) {
    clearInterval(timer);
    timer = undefined;
  }
}
