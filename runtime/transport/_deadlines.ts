// Deadlines of many short waits on one coarse timer: a request plane's wait for each
// request's acknowledgement would otherwise arm and clear a timer per request, which shows at
// tens of thousands of requests a second. A deadline fires at most GRAIN_MS late.
//
// The timer stays armed until a sweep finds nothing pending, not until the last deadline is
// removed: most deadlines are removed within a millisecond of being added, and arming and
// clearing a timer for each (a Node-style Timeout object in Deno 2.9, with an async id) cost
// the frontend 9.8 us per request in its profile, 1.4 us since.

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
  // Not unref'd: like a timer of its own, a pending deadline keeps the process alive (and an
  // idle timer at most one grain longer).
  timer ??= setInterval(sweep, GRAIN_MS);
}

/**
 * Disarms a deadline (a no-op once it fired). The timer is left to the next sweep.
 *
 * @param d the deadline
 */
export function removeDeadline(d: Deadline): void {
  pending.delete(d);
}

/** Deadlines armed and not yet fired or removed (for tests). */
export function pendingDeadlines(): number {
  return pending.size;
}

/** Whether the shared timer is armed (for tests). */
export function deadlineTimerArmed(): boolean {
  return timer !== undefined;
}

function sweep(): void {
  if (pending.size === 0) {
    clearInterval(timer);
    timer = undefined;
    return;
  }
  const now = performance.now();
  for (const d of pending) {
    if (now < d.at) continue;
    pending.delete(d);
    try {
      d.fire();
    } catch { /* a waiter's failure is its own */ }
  }
}
