// Instance ids given as a list or as a set (a model's live set of instances is passed as it
// is, without a copy per request), and the wait for enough of them that the clients share.

import { RuntimeShutdownError, TimeoutError } from "./errors.ts";

/** Instance ids, as a caller may hold them. */
export type InstanceIds = readonly string[] | ReadonlySet<string>;

/** `ids` as a set: the set itself when it is one, else a new one. */
export function idSet(ids: InstanceIds): ReadonlySet<string> {
  return ids instanceof Set ? ids : new Set(ids as readonly string[]);
}

/**
 * The ids of `ids` that `allowed` holds: `ids` itself when it holds all of them (the common
 * case: every instance of the endpoint serves the model), else a new array.
 */
export function idsWithin(ids: string[], allowed: ReadonlySet<string>): string[] {
  for (let i = 0; i < ids.length; i++) {
    if (!allowed.has(ids[i]!)) return ids.filter((id) => allowed.has(id));
  }
  return ids;
}

/** Whether any of `ids` is in `among`. */
export function anyIn(ids: readonly string[], among: ReadonlySet<string>): boolean {
  for (let i = 0; i < ids.length; i++) if (among.has(ids[i]!)) return true;
  return false;
}

/** What {@linkcode waitForIds} watches: a client's list of instance ids as it changes. */
export interface IdWatch {
  /** The ids known now (read, not kept). */
  ids(): readonly string[];
  /** Called after each change of the ids and when the client closes. */
  readonly waiters: Set<() => void>;
  /** Aborted when the client closes. */
  readonly closed: AbortSignal;
  /** The endpoint's path, in errors. */
  readonly path: string;
  /** What the ids name, in errors: "instance(s)", "reference instance(s)". */
  readonly noun: string;
}

/** Options of {@linkcode waitForIds}, as a client's `waitForInstances` takes them. */
export interface WaitForIdsOptions {
  signal?: AbortSignal;
  timeoutMs?: number;
  /** How many ids to wait for (default 1). */
  count?: number;
  /** Count only these ids. */
  among?: InstanceIds;
}

/**
 * Resolves with the ids (a copy) once at least `count` of them (among `among`, when given)
 * are known.
 * @throws {TimeoutError} `timeoutMs` passed first
 * @throws {RuntimeShutdownError} the client closed first
 */
export function waitForIds(watch: IdWatch, options: WaitForIdsOptions): Promise<string[]> {
  const { signal, timeoutMs, count = 1 } = options;
  const among = options.among === undefined ? undefined : idSet(options.among);
  const known = () => {
    const ids = watch.ids();
    if (among === undefined) return ids.length;
    let n = 0;
    for (let i = 0; i < ids.length; i++) if (among.has(ids[i]!)) n++;
    return n;
  };
  const closed = () => new RuntimeShutdownError(`client of ${watch.path} is closed`);
  signal?.throwIfAborted();
  if (watch.closed.aborted) return Promise.reject(closed());
  if (known() >= count) return Promise.resolve([...watch.ids()]);
  return new Promise((resolve, reject) => {
    let timer: ReturnType<typeof setTimeout> | undefined;
    const done = () => {
      watch.waiters.delete(check);
      signal?.removeEventListener("abort", onAbort);
      clearTimeout(timer);
    };
    const check = () => {
      if (watch.closed.aborted) {
        done();
        reject(closed());
      } else if (known() >= count) {
        done();
        resolve([...watch.ids()]);
      }
    };
    const onAbort = () => {
      done();
      reject(signal!.reason);
    };
    watch.waiters.add(check);
    signal?.addEventListener("abort", onAbort, { once: true });
    if (timeoutMs !== undefined) {
      timer = setTimeout(() => {
        done();
        reject(
          new TimeoutError(
            `no ${count} ${watch.noun} of ${watch.path} within ${timeoutMs} ms (have ${known()})`,
          ),
        );
      }, timeoutMs);
    }
  });
}
