// A lower bound on the TTFT any router could give a trace on mocker workers: each request alone
// on a worker of its own (no queue, no pass in flight, no decode beside it) that already holds
// every prefix the trace's ceiling counts as cached for it. What is left is the prefill of its
// uncached tokens, in the fewest and cheapest passes the mocker's time model allows.

import { prefillTimeMs } from "../../llm/engines/mocker/timing.ts";
import { ceilingHitTokens, type TraceRequest } from "./trace.ts";

/**
 * The least time, in ms, that prefilling `tokens` uncached prompt tokens takes on a mocker
 * worker with nothing else to do: split evenly over `k` passes of at most `maxBatchedTokens`
 * tokens each (the best split for a given `k`, as the pass time is convex in its tokens), with
 * the best `k`.
 *
 * @param tokens uncached prompt tokens (at least 1: the mocker always computes the last one)
 * @param maxBatchedTokens tokens per forward pass at most (the mocker's default 8192)
 * @returns milliseconds at speedup 1
 */
export function isolatedPrefillMs(tokens: number, maxBatchedTokens = 8192): number {
  const least = Math.max(1, Math.ceil(tokens / maxBatchedTokens));
  let best = Infinity;
  // k * prefillTimeMs(tokens / k) is convex in k: scan from the fewest passes until it rises.
  for (let k = least;; k++) {
    const ms = k * prefillTimeMs(tokens / k);
    if (ms >= best) break;
    best = ms;
  }
  return best;
}

/**
 * Per request, a lower bound on its TTFT under any routing of `requests` to mocker workers with
 * `blockSize`-token KV blocks: {@linkcode isolatedPrefillMs} of the tokens the prefix ceiling
 * does not count as cached (at least those after the prompt's last whole block but one, which the
 * mocker always computes). A request's real TTFT adds the wait for passes in flight, the other
 * work in its passes and any cache miss. (Of the requests sharing a new prefix the ceiling makes
 * the first to arrive pay for it; a replay may make another pay, which shifts the bound by at
 * most that prefix's prefill between two requests.)
 *
 * @param requests the trace, in arrival order
 * @param blockSize tokens per KV block of the workers
 * @param maxBatchedTokens tokens per forward pass at most
 * @returns one bound in ms per request, in the same order
 */
export function ttftLowerBounds(
  requests: readonly TraceRequest[],
  blockSize: number,
  maxBatchedTokens = 8192,
): number[] {
  const hits = ceilingHitTokens(requests);
  return requests.map((r, i) => {
    const len = r.inputLength;
    const mustCompute = len - Math.floor((len - 1) / blockSize) * blockSize;
    return isolatedPrefillMs(Math.max(len - hits[i]!, mustCompute), maxBatchedTokens);
  });
}
