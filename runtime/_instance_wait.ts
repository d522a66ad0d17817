// Waiting for a client's instance list to reach a count: shared by the runtime's Client and the
// reference workers' client, which keep their ids and wake their waiters the same way.

import { RuntimeShutdownError, TimeoutError } from "./errors.ts";

/** What {@linkcode waitForInstanceCount} reads of its client. */
export interface InstanceWaitSource {
  /** The endpoint path, for messages. */
  path: string;
  /** What the instances are called in the timeout message ("instance(s)"). */
  noun: string;
  /** The ids known now. */
  ids(): readonly string[];
  /** Called back (each check) whenever the ids change or the client closes. */
  waiters: Set<() => void>;
  /** Aborted once the client is closed. */
  closed: AbortSignal;
}

/** How long and for how many to wait (the clients' `waitForInstances` options). */
export interface InstanceWaitOptions {
  signal?: AbortSignal;
  timeoutMs?: number;
  count?: number;
  among?: readonly string[];
}

/**
 * Resolves with the ids once at least `count` (default 1, among `among` when given) are known.
 *
 * @throws {TimeoutError} `timeoutMs` passed first
 * @throws {RuntimeShutdownError} the client closed
 */
export function waitForInstanceCount(
  source: InstanceWaitSource,
  options: InstanceWaitOptions,
): Promise<string[]> {
  const { signal, timeoutMs, count = 1 } = options;
  const among = options.among === undefined ? undefined : new Set(options.among);
  const known = () =>
    among === undefined ? source.ids().length : source.ids().filter((id) => among.has(id)).length;
  const closed = () => new RuntimeShutdownError(`client of ${source.path} is closed`);
  signal?.throwIfAborted();
  if (source.closed.aborted) return Promise.reject(closed());
  if (known() >= count) return Promise.resolve([...source.ids()]);
  return new Promise((resolve, reject) => {
    let timer: ReturnType<typeof setTimeout> | undefined;
    const done = () => {
      source.waiters.delete(check);
      signal?.removeEventListener("abort", onAbort);
      clearTimeout(timer);
    };
    const check = () => {
      if (source.closed.aborted) {
        done();
        reject(closed());
      } else if (known() >= count) {
        done();
        resolve([...source.ids()]);
      }
    };
    const onAbort = () => {
      done();
      reject(signal!.reason);
    };
    source.waiters.add(check);
    signal?.addEventListener("abort", onAbort, { once: true });
    if (timeoutMs !== undefined) {
      timer = setTimeout(() => {
        done();
        reject(
          new TimeoutError(
            `no ${count} ${source.noun} of ${source.path} within ${timeoutMs} ms (have ${known()})`,
          ),
        );
      }, timeoutMs);
    }
  });
}
