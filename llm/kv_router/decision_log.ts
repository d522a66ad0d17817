/**
 * The KV router's decision log: one JSON line per routing decision, with every candidate the
 * router weighed (its cached overlap, its load as the router saw it, its cost), so that "why
 * did this request go there?" has an answer after the fact. `dynamo frontend
 * --router-decision-log PATH` writes one; `bench:versus` reads its own to tell what the
 * slowest requests were routed by.
 *
 * @module
 */

import type { RouteDecisionRecord } from "./router.ts";

/** One candidate of a logged decision. */
export interface LoggedCandidate {
  /** The worker's instance id. */
  instance: string;
  /** Blocks of the prompt the worker was seen to hold (cached, or being prefilled there). */
  overlap_blocks: number;
  /** Prompt blocks queued for prefill there (requests without a first token). */
  prefill_blocks: number;
  /** KV blocks its running requests hold. */
  active_blocks: number;
  /** Requests in flight there (this router's). */
  active_requests: number;
  /** Requests there still waiting for their first token, where known. */
  waiting_requests?: number;
  /** Its cost (lower is better); absent when the busy checks or the load bound left it out. */
  cost?: number;
}

/** One logged decision: a line of the log, parsed. */
export interface LoggedDecision {
  /** Wall-clock time of the decision in ms (fractional; comparable across processes). */
  time_ms: number;
  /** The worker chosen. */
  instance: string;
  /** Tokens of the prompt, where the router was told. */
  prompt_tokens?: number;
  /** Full KV blocks of the prompt. */
  request_blocks: number;
  /** Blocks of the prompt the chosen worker holds. */
  overlap_blocks: number;
  /** Every worker weighed. */
  candidates: LoggedCandidate[];
}

/**
 * A decision as its log line's object.
 *
 * @param d the decision the router reported
 * @param timeMs when it was made (ms since the epoch)
 * @returns the object one line of the log holds
 * @example
 * ```ts
 * const line = JSON.stringify(loggedDecision({
 *   instanceId: "a", overlapBlocks: 2, requestBlocks: 4,
 *   candidates: [{ workerId: "a", overlapBlocks: 2, requestBlocks: 4, activeBlocks: 0,
 *     prefillBlocks: 0, activeRequests: 0 }],
 *   costs: new Map([["a", 1.5]]),
 * }, Date.now()));
 * ```
 */
export function loggedDecision(d: RouteDecisionRecord, timeMs: number): LoggedDecision {
  return {
    time_ms: timeMs,
    instance: d.instanceId,
    ...(d.promptTokens === undefined ? {} : { prompt_tokens: d.promptTokens }),
    request_blocks: d.requestBlocks,
    overlap_blocks: d.overlapBlocks,
    candidates: d.candidates.map((c) => {
      const cost = d.costs?.get(c.workerId);
      return {
        instance: c.workerId,
        overlap_blocks: c.overlapBlocks,
        prefill_blocks: c.prefillBlocks,
        active_blocks: c.activeBlocks,
        active_requests: c.activeRequests,
        ...(c.waitingRequests === undefined ? {} : { waiting_requests: c.waitingRequests }),
        ...(cost === undefined ? {} : { cost: Math.round(cost * 1000) / 1000 }),
      };
    }),
  };
}

/** A decision log being written. */
export interface DecisionLog {
  /** Appends one decision (synchronously; a failed write is reported once and then dropped). */
  write(d: RouteDecisionRecord): void;
  /** Closes the file. */
  close(): void;
}

/**
 * Opens `path` for appending decisions, one JSON line each.
 *
 * @param path the log file (created if missing, appended to if not)
 * @param onError told once of the first write that fails (later decisions are not logged)
 * @returns the log
 * @throws {Deno.errors.NotFound} the file's folder does not exist (and other open errors)
 */
export function openDecisionLog(path: string, onError: (err: unknown) => void): DecisionLog {
  const file = Deno.openSync(path, { append: true, create: true });
  const encoder = new TextEncoder();
  let broken = false;
  return {
    write(d) {
      if (broken) return;
      try {
        const bytes = encoder.encode(
          JSON.stringify(loggedDecision(d, performance.timeOrigin + performance.now())) + "\n",
        );
        let at = 0;
        while (at < bytes.length) at += file.writeSync(bytes.subarray(at));
      } catch (err) {
        broken = true;
        onError(err);
      }
    },
    close() {
      broken = true;
      try {
        file.close();
      } catch {
        // closed already
      }
    },
  };
}

/**
 * Reads a decision log, skipping lines that are not whole decisions (a line cut by a crash).
 *
 * @param text the file's contents
 * @returns the decisions in the order they were written
 */
export function parseDecisionLog(text: string): LoggedDecision[] {
  const out: LoggedDecision[] = [];
  for (const line of text.split("\n")) {
    if (line.trim() === "") continue;
    try {
      const d = JSON.parse(line) as LoggedDecision;
      if (
        typeof d.time_ms === "number" && typeof d.instance === "string" &&
        typeof d.request_blocks === "number" && Array.isArray(d.candidates)
      ) out.push(d);
    } catch {
      // a cut line
    }
  }
  return out;
}
