// Log probabilities for engines without a model (echo, mocker): a fixed function of the
// token, so tests can state exact values. The generated token is always the most likely.

import type { LLMEngineOutput, TopLogprob } from "../protocols.ts";

/**
 * The made-up log probability of token `id`: `-(id % 8) / 8`.
 *
 * @param id a token id
 * @returns a number in [-0.875, 0]
 */
export function syntheticLogprob(id: number): number {
  return 0 - (id % 8) / 8; // never -0
}

/**
 * The made-up `n` most likely tokens where `id` was generated: `id` itself first, then
 * `id - 1, id - 2, ...` (or `id + k` once below 0), the k-th alternative `k` less likely.
 *
 * @param id the generated token
 * @param n how many (0 gives none)
 * @returns the alternatives, ranked from 1
 */
export function syntheticTopLogprobs(id: number, n: number): TopLogprob[] {
  const lp = syntheticLogprob(id);
  const out: TopLogprob[] = [];
  for (let k = 0; k < n; k++) {
    out.push({
      rank: k + 1,
      token_id: k === 0 ? id : id - k >= 0 ? id - k : id + k,
      logprob: lp - k,
    });
  }
  return out;
}

/**
 * Adds the made-up log probabilities to an output when the request asked (`top` is
 * `output_options.logprobs`), leaving it alone otherwise.
 *
 * @param out an engine output
 * @param top how many alternatives, or undefined/null when none were asked for
 * @returns the same output
 * @example
 * ```ts
 * withSyntheticLogprobs({ token_ids: [9] }, 1);
 * // { token_ids: [9], log_probs: [-0.125], top_logprobs: [[{ rank: 1, token_id: 9, logprob: -0.125 }]] }
 * ```
 */
export function withSyntheticLogprobs(
  out: LLMEngineOutput,
  top: number | null | undefined,
): LLMEngineOutput {
  if (typeof top !== "number") return out;
  out.log_probs = out.token_ids.map(syntheticLogprob);
  out.top_logprobs = out.token_ids.map((id) => syntheticTopLogprobs(id, top));
  return out;
}
