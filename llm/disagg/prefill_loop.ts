// The loop every prefill worker runs over its queue: dequeue, check at the door, handle,
// ack. Shared by the block-writing worker (the mocker's KV blocks) and the state-writing
// one (an engine's serialized sequence state), which differ only in what they check and do.

import type { Logger } from "../../runtime/logger.ts";
import { InvalidPrefillRequestError } from "./prefill_request.ts";
import type { PrefillQueue, QueuedItem } from "./queue.ts";

/** Options of {@linkcode runPrefillLoop}. */
export interface PrefillLoopOptions<T, R> {
  /** Ends the loop. */
  signal: AbortSignal;
  /** Longest single wait on the queue in ms; default 1000. */
  pollMs?: number;
  /** The door: the item as it came off the queue, typed (throws for an invalid one). */
  check: (data: unknown) => T;
  /** Handles one checked request. */
  handle: (request: T) => Promise<R>;
  /** The request's id, for logs and `onStart`. */
  requestId: (request: T) => string;
  /** Called when a request is taken off the queue (after the door). */
  onStart?: (requestId: string) => void;
  /** Called when a request was handled and acked. */
  onResult?: (result: R) => void;
  /** Where the loop logs dropped items and failures. */
  logger?: Logger;
}

/**
 * Serves `queue` until `signal` aborts: dequeue, check, handle, ack. An item the door
 * refuses (or whose handling throws {@linkcode InvalidPrefillRequestError}) is acked and
 * dropped with a log line, since it would fail again; any other failure leaves it un-acked,
 * so the queue redelivers it.
 *
 * @param queue the prefill queue
 * @param options the door, the handler, the signal that ends the loop
 * @returns when `signal` aborts
 */
export async function runPrefillLoop<Q, T, R>(
  queue: PrefillQueue<Q>,
  options: PrefillLoopOptions<T, R>,
): Promise<void> {
  const { signal, logger } = options;
  while (!signal.aborted) {
    let item: QueuedItem<Q> | undefined;
    try {
      item = await queue.dequeue({ timeoutMs: options.pollMs ?? 1000, signal });
    } catch (e) {
      if (signal.aborted) return;
      // A queue host that went away: try again shortly (another may serve).
      logger?.warn("dequeue failed", { error: errorText(e) });
      await new Promise((r) => setTimeout(r, 100));
      continue;
    }
    if (!item) continue;
    let req: T;
    try {
      req = options.check(item.data);
    } catch (e) {
      await drop(item, e, logger);
      continue;
    }
    const id = options.requestId(req);
    options.onStart?.(id);
    try {
      const r = await options.handle(req);
      await item.ack();
      options.onResult?.(r);
    } catch (e) {
      if (e instanceof InvalidPrefillRequestError) {
        await drop(item, e, logger);
        continue;
      }
      logger?.error("remote prefill failed", { request_id: id, error: errorText(e) });
    }
  }
}

/** Acks an invalid item so that it is not redelivered: it would fail the same way. */
async function drop(
  item: { ack(): Promise<boolean> },
  e: unknown,
  logger: Logger | undefined,
): Promise<void> {
  logger?.warn("dropping an invalid remote prefill request", { error: errorText(e) });
  try {
    await item.ack();
  } catch (err) {
    logger?.warn("cannot ack an invalid remote prefill request", { error: errorText(err) });
  }
}

function errorText(e: unknown): string {
  return e instanceof Error ? e.message : String(e);
}
