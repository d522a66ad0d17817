// The discovery watcher every consumer shares: list then watch a prefix, resync after the
// watch fails, and turn raw records into typed events through one schema (the door for
// what other processes wrote into discovery).

import type { ZodType } from "zod";
import { type Logger, silentLogger } from "../logger.ts";
import type { Discovery } from "./types.ts";

/** What a record schema parses: the key after the watched prefix and the JSON value. */
export interface DiscoveryRecord {
  /** The key without the watched prefix (e.g. `ns/backend/generate/694d`). */
  key: string;
  /** The stored value, JSON-parsed. */
  value: unknown;
}

/** A change of the typed records under a watched prefix. */
export type PrefixEvent<T> =
  /**
   * The watch (re)started and listed every record: `records` (by full key) replace what
   * the consumer held. Puts and deletes that follow are relative to it.
   */
  | { type: "synced"; records: ReadonlyMap<string, T> }
  /** A record was added or replaced; `previous` is the good value it replaced, if any. */
  | { type: "put"; key: string; value: T; previous: T | undefined }
  /** A record the consumer held is gone: deleted, or replaced by a malformed value. */
  | { type: "delete"; key: string; previous: T };

/** Options of {@linkcode watchPrefix}. */
export interface WatchPrefixOptions<T> {
  /** Parses and validates each {@linkcode DiscoveryRecord}; a failure skips the record. */
  schema: ZodType<T, DiscoveryRecord>;
  /** Ends the watch (the iteration then finishes without an error). */
  signal?: AbortSignal;
  /** Where malformed records and watch failures are reported (default: silent). */
  logger?: Logger;
  /** What the records are, for log lines (default "record"). */
  what?: string;
  /** First delay before restarting a failed watch, in ms (default 100; doubles each time). */
  initialBackoffMs?: number;
  /** Longest delay between restarts, in ms (default 2000). */
  maxBackoffMs?: number;
}

/** Longest key or reason written to a log line. */
const LOG_CLIP = 300;

/**
 * Follows the records under `prefix` as typed events. Each (re)started watch collects its
 * listing apart and hands it over whole at "synced", so a reconnect never flaps state.
 * A failed or ended watch is restarted with backoff until `signal` aborts; there is no
 * deadline. A record the schema rejects (not JSON, wrong shape, a throwing schema) is
 * reported once per key and value and skipped, and one that replaces a good record reads
 * as a delete of it: what the consumer holds always exists. The watch never stops or
 * restarts because of a record.
 *
 * @param discovery where the records live
 * @param prefix the watched key prefix (e.g. `v1/models/`)
 * @param options the record schema, a signal, a logger
 * @returns typed events: "synced" (the whole listing), then puts and deletes
 * @throws {DOMException} `signal` was already aborted
 *
 * @example
 * ```ts
 * const schema = z.object({ key: z.string(), value: z.object({ name: z.string() }) })
 *   .transform((r) => r.value.name);
 * for await (const ev of watchPrefix(discovery, "v1/models/", { schema, signal })) {
 *   if (ev.type === "synced") console.log([...ev.records.values()]);
 * }
 * ```
 */
export async function* watchPrefix<T>(
  discovery: Discovery,
  prefix: string,
  options: WatchPrefixOptions<T>,
): AsyncGenerator<PrefixEvent<T>, void, undefined> {
  const { schema, signal, logger = silentLogger, what = "record" } = options;
  signal?.throwIfAborted();
  const initialBackoff = options.initialBackoffMs ?? 100;
  const maxBackoff = options.maxBackoffMs ?? 2000;
  /** The good records the consumer holds (after the first "synced"), by key. */
  let current = new Map<string, T>();
  /** Malformed records already reported: key -> the raw value reported. */
  const reported = new Map<string, string>();

  const parse = (key: string, raw: string): { value: T } | undefined => {
    const parsed = parseRecord(schema, key.slice(prefix.length), raw);
    if ("value" in parsed) {
      reported.delete(key);
      return parsed;
    }
    if (reported.get(key) !== raw) {
      reported.set(key, raw);
      logger.warn(`ignoring a malformed ${what}`, {
        key: clip(key),
        reason: clip(parsed.reason),
      });
    }
    return undefined;
  };

  let backoff = initialBackoff;
  while (!signal?.aborted) {
    // The listing of this (re)started watch, swapped in at "synced".
    let listing: Map<string, T> | undefined = new Map();
    const badInListing = new Set<string>();
    try {
      for await (const ev of discovery.watch(prefix, { signal })) {
        backoff = initialBackoff;
        if (ev.type === "synced") {
          if (!listing) continue;
          // Malformed records deleted while the watch was down may be reported again.
          for (const key of [...reported.keys()]) {
            if (!badInListing.has(key)) reported.delete(key);
          }
          current = listing;
          listing = undefined;
          yield { type: "synced", records: new Map(current) };
        } else if (ev.type === "put") {
          const parsed = parse(ev.key, ev.value);
          if (listing) {
            if (parsed) listing.set(ev.key, parsed.value);
            else (listing.delete(ev.key), badInListing.add(ev.key));
            continue;
          }
          const previous = current.get(ev.key);
          if (parsed) {
            current.set(ev.key, parsed.value);
            yield { type: "put", key: ev.key, value: parsed.value, previous };
          } else if (current.delete(ev.key)) {
            yield { type: "delete", key: ev.key, previous: previous as T };
          }
        } else {
          reported.delete(ev.key);
          if (listing) {
            listing.delete(ev.key);
            badInListing.delete(ev.key);
            continue;
          }
          const previous = current.get(ev.key);
          if (current.delete(ev.key)) {
            yield { type: "delete", key: ev.key, previous: previous as T };
          }
        }
      }
    } catch (err) {
      if (signal?.aborted) return;
      logger.warn("discovery watch failed; retrying", {
        what,
        prefix,
        error: err instanceof Error ? err.message : String(err),
      });
    }
    if (signal?.aborted) return;
    await sleep(backoff, signal);
    backoff = Math.min(backoff * 2, maxBackoff);
  }
}

/** Runs the schema on one record; never throws (a throwing schema is a bad record). */
function parseRecord<T>(
  schema: ZodType<T, DiscoveryRecord>,
  key: string,
  raw: string,
): { value: T } | { reason: string } {
  let value: unknown;
  try {
    value = JSON.parse(raw);
  } catch (err) {
    return { reason: `not JSON: ${err instanceof Error ? err.message : String(err)}` };
  }
  try {
    const result = schema.safeParse({ key, value });
    if (result.success) return { value: result.data };
    return {
      reason: result.error.issues
        .map((i) => (i.path.length ? `${i.path.map(String).join(".")}: ${i.message}` : i.message))
        .join("; "),
    };
  } catch (err) {
    return { reason: `schema failed: ${err instanceof Error ? err.message : String(err)}` };
  }
}

function clip(s: string): string {
  return s.length > LOG_CLIP ? `${s.slice(0, LOG_CLIP)}... (${s.length} chars)` : s;
}

/** Waits `ms`, or less when `signal` aborts. */
function sleep(ms: number, signal: AbortSignal | undefined): Promise<void> {
  return new Promise((resolve) => {
    const done = () => {
      clearTimeout(timer);
      signal?.removeEventListener("abort", done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    signal?.addEventListener("abort", done, { once: true });
  });
}
