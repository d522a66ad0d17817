// Malformed engine outputs, by the sampling seed that makes tests/_helpers/bad_worker.ts send them.

/** What each seed makes the worker send (as its second item, after one good token). */
export const MALFORMED: Record<number, unknown> = {
  1: { token_ids: ["12", "13"] },
  2: { token_ids: [null] }, // NaN, as JSON carries it
  3: { token_ids: [-5] },
  4: { token_ids: [1_000_000_000] }, // past any vocabulary
  5: { token_ids: [12], finish_reason: "exploded" },
  6: { token_ids: { length: 1_000_000_000 } },
  7: { token_ids: Array.from({ length: 200_000 }, () => 12) },
  8: "not an object",
  9: { token_ids: [12], text: { evil: true } },
  10: { token_ids: [12], cached_tokens: -1 },
};
