// What the slowest requests of a replay were routed by: each request is matched to the KV
// router's logged decision for it (`--router-decision-log`), and the requests at or over the
// replay's p90 TTFT are sorted by what their worker looked like when it was chosen. Tells a
// tail the router could have shortened (a worker with less queued, or holding more of the
// prompt) from one it could not (long prompts nobody caches, on workers with nothing queued).

import type { LoggedDecision } from "../../llm/kv_router/decision_log.ts";
import { percentile } from "./report.ts";
import type { RequestResult } from "./replay.ts";

/** How the requests at or over the p90 TTFT were routed. */
export interface TailAttribution {
  /** The p90 TTFT (ms) of the requests that succeeded. */
  p90Ms: number;
  /** Requests at or over it. */
  tail: number;
  /** Of those, the ones matched to a logged decision (the rest are left out below). */
  matched: number;
  /** Sent to a worker holding the most of their prompt of all candidates. */
  toLongestPrefix: number;
  /** Sent to a worker with the fewest prompt blocks queued for prefill of all candidates. */
  toFewestQueued: number;
  /** Sent to a worker with nothing queued for prefill. */
  toNoneQueued: number;
  /** Both of the first two: the router had no worker both closer to the prompt and freer. */
  toBest: number;
  /** Median tokens of their prompts that the engine did not find cached (when it reports them). */
  medianUncachedTokens?: number;
  /** Requests over the whole replay sent to a worker holding less of their prompt than another. */
  offLongestPrefix: number;
}

/**
 * Matches requests to decisions: in the order the requests were sent, each takes the first
 * decision not yet taken, among the next `window` in logged order, for a prompt of its length
 * (a request's decision comes right after it is sent, in the same order as the others' but for
 * the requests overtaking each other in the frontend).
 *
 * @param results the replay's requests (with `startMs`)
 * @param decisions the log, in the order written
 * @returns the decision of each request, by index into `results` (undefined: none found)
 */
export function matchDecisions(
  results: readonly RequestResult[],
  decisions: readonly LoggedDecision[],
  window = 64,
): (LoggedDecision | undefined)[] {
  const order = results.map((_, i) => i).sort((a, b) =>
    (results[a]!.startMs ?? 0) - (results[b]!.startMs ?? 0)
  );
  const taken = new Uint8Array(decisions.length);
  const out: (LoggedDecision | undefined)[] = results.map(() => undefined);
  let first = 0;
  for (const i of order) {
    while (first < decisions.length && taken[first]) first++;
    const tokens = results[i]!.promptTokens;
    for (let k = first; k < Math.min(decisions.length, first + window); k++) {
      if (!taken[k] && decisions[k]!.prompt_tokens === tokens) {
        taken[k] = 1;
        out[i] = decisions[k];
        break;
      }
    }
  }
  return out;
}

/**
 * How the requests at or over the p90 TTFT were routed (see {@linkcode TailAttribution}).
 *
 * @param results the replay's requests
 * @param decisions the frontend's decision log over that replay
 * @returns the counts, or undefined when no request succeeded
 */
export function attributeTail(
  results: readonly RequestResult[],
  decisions: readonly LoggedDecision[],
): TailAttribution | undefined {
  const ttfts = results.filter((r) => r.ok && r.ttftMs !== undefined).map((r) => r.ttftMs!);
  if (ttfts.length === 0) return undefined;
  const p90Ms = percentile(ttfts, 90);
  const matched = matchDecisions(results, decisions);
  const a: TailAttribution = {
    p90Ms,
    tail: 0,
    matched: 0,
    toLongestPrefix: 0,
    toFewestQueued: 0,
    toNoneQueued: 0,
    toBest: 0,
    offLongestPrefix: 0,
  };
  const uncached: number[] = [];
  results.forEach((r, i) => {
    const d = matched[i];
    const chosen = d?.candidates.find((c) => c.instance === d.instance);
    const longest = chosen !== undefined &&
      d!.candidates.every((c) => c.overlap_blocks <= chosen.overlap_blocks);
    if (chosen !== undefined && !longest) a.offLongestPrefix++;
    if (!(r.ok && r.ttftMs !== undefined && r.ttftMs >= p90Ms)) return;
    a.tail++;
    if (r.cachedTokens !== undefined) uncached.push(r.promptTokens - r.cachedTokens);
    if (chosen === undefined) return;
    a.matched++;
    const fewest = d!.candidates.every((c) => c.prefill_blocks >= chosen.prefill_blocks);
    if (longest) a.toLongestPrefix++;
    if (fewest) a.toFewestQueued++;
    if (chosen.prefill_blocks === 0) a.toNoneQueued++;
    if (longest && fewest) a.toBest++;
  });
  if (uncached.length > 0) a.medianUncachedTokens = percentile(uncached, 50);
  return a;
}

/**
 * One line for a report.
 *
 * @example
 * ```ts
 * formatTail({ p90Ms: 60, tail: 61, matched: 61, toLongestPrefix: 58, toFewestQueued: 51,
 *   toNoneQueued: 39, toBest: 49, offLongestPrefix: 27, medianUncachedTokens: 25_646 });
 * ```
 */
export function formatTail(a: TailAttribution): string {
  return `${a.tail} requests at or over the p90 (${a.p90Ms.toFixed(1)} ms), ${a.matched} ` +
    `matched to their routing decision: ${a.toLongestPrefix} went to a worker holding the ` +
    `most of their prompt, ${a.toFewestQueued} to one with the fewest prompt blocks queued ` +
    `(${a.toNoneQueued} with none), ${a.toBest} to one that was both` +
    (a.medianUncachedTokens === undefined
      ? ""
      : `; median uncached prompt ${Math.round(a.medianUncachedTokens)} tokens`) +
    `. Over the whole replay, ${a.offLongestPrefix} went to a worker holding less of their ` +
    `prompt than another.`;
}
