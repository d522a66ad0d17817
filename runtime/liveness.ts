// Liveness of response streams. A worker that stops without dying (SIGSTOP, a GC or swap
// pause, a deadlocked engine, a network partition) leaves its streams open, and nothing would
// ever end them. So a worker sends a heartbeat frame on every stream that sent nothing for a
// beat, and a caller that waits longer than the idle deadline for its next frame fails the
// stream. One coarse timer per process drives both sides, not one timer per stream: the hot
// path only copies a tick counter. The timer stops at the first tick that finds no stream
// watched, not when the last one is unwatched: with one request at a time that armed and
// cleared a timer (a Node-style Timeout in Deno 2.9) per request on both sides, about a tenth
// of a TCP hop's CPU in its profile.

/** How often a worker's silent stream sends a heartbeat (ms). */
export const DEFAULT_HEARTBEAT_MS = 1000;
/**
 * How long a caller waits for the next frame of a stream before it calls the worker hung
 * (ms). Ten heartbeats: a worker whose event loop stalls that long is not serving anyway.
 */
export const DEFAULT_STREAM_IDLE_TIMEOUT_MS = 10_000;
/** Resolution of the liveness clock (ms). */
const TICK_MS = 250;

/** The liveness clock: `tick` advances every {@link TICK_MS} while any stream is watched. */
export const livenessClock = { tick: 0 };

/** Caller side: a stream that may be waiting for its next frame. */
export interface WaitingStream {
  /** The tick its current wait started, or -1 while it is not waiting. */
  waitingSince: number;
  /** Ticks of waiting after which it is stalled. */
  readonly idleTicks: number;
  /** Called once when the wait passed its deadline (`waitingSince` is then -1). */
  stall(): void;
}

/** Worker side: a stream that should not stay silent. */
export interface BeatingStream {
  /** The tick of its last frame. */
  lastSent: number;
  /** Ticks of silence after which it sends a heartbeat. */
  readonly beatTicks: number;
  /** Sends a heartbeat (called with `lastSent` already updated). */
  beat(): void;
}

const waiting = new Set<WaitingStream>();
const beating = new Set<BeatingStream>();
let timer: ReturnType<typeof setInterval> | undefined;

/**
 * Converts a duration to liveness ticks (at least one).
 *
 * @param ms a duration in ms
 * @returns whole ticks, rounded up
 */
export function livenessTicks(ms: number): number {
  return Math.max(1, Math.ceil(ms / TICK_MS));
}

/**
 * Starts watching a caller's stream for stalls.
 *
 * @param stream the stream
 */
export function watchStream(stream: WaitingStream): void {
  waiting.add(stream);
  start();
}

/**
 * Stops watching a caller's stream.
 *
 * @param stream the stream
 */
export function unwatchStream(stream: WaitingStream): void {
  waiting.delete(stream);
}

/**
 * Starts sending heartbeats on a worker's stream while it is silent.
 *
 * @param stream the stream
 */
export function beatStream(stream: BeatingStream): void {
  stream.lastSent = livenessClock.tick;
  beating.add(stream);
  start();
}

/**
 * Stops the heartbeats of a worker's stream.
 *
 * @param stream the stream
 */
export function stopBeating(stream: BeatingStream): void {
  beating.delete(stream);
}

/** Whether the liveness timer is running (for tests). */
export function livenessTimerRunning(): boolean {
  return timer !== undefined;
}

function start(): void {
  if (timer !== undefined) return;
  // Not unref'd: a caller waiting on a hung stream must stay alive to fail it. The timer
  // stops at the first tick with no stream watched (an idle process keeps it one tick longer).
  timer = setInterval(onTick, TICK_MS);
}

function onTick(): void {
  if (waiting.size === 0 && beating.size === 0) {
    clearInterval(timer);
    timer = undefined;
    return;
  }
  const now = ++livenessClock.tick;
  for (const w of waiting) {
    if (w.waitingSince >= 0 && now - w.waitingSince >= w.idleTicks) {
      w.waitingSince = -1;
      try {
        w.stall();
      } catch { /* a stream's failure to end is its own */ }
    }
  }
  for (const b of beating) {
    if (now - b.lastSent >= b.beatTicks) {
      b.lastSent = now;
      try {
        b.beat();
      } catch { /* the connection is gone: the stream ends on its own */ }
    }
  }
}
