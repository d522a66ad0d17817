// The door where a worker's output enters the frontend. Items come from another process and
// are not trusted: each is checked against a schema with bounds (integer token ids inside the
// vocabulary, a known finish reason, at most so many tokens per item, strings where strings
// belong) before anything reads it. A bad item fails its own request, naming the worker;
// every check is bounded, so nothing a worker sends can hold the event loop.

import { DynamoError } from "../../runtime/errors.ts";
import type { FinishReason, LLMEngineOutput } from "../protocols.ts";

/** Most token ids one engine output may carry (engines send one or a few per step). */
export const MAX_TOKENS_PER_ITEM = 65_536;
/** Longest `text` one engine output may carry (characters). */
export const MAX_TEXT_PER_ITEM = 1 << 20;

const FINISH_REASONS: ReadonlySet<string> = new Set<FinishReason>([
  "stop",
  "length",
  "eos",
  "cancelled",
  "error",
  "content_filter",
]);

/** A worker sent an item that is not a valid engine output. Not migratable: a bug, not a death. */
export class WorkerOutputError extends DynamoError {
  /** The instance that sent it. */
  readonly instanceId: string;
  /** What was wrong with it. */
  readonly reason: string;
  constructor(instanceId: string, reason: string) {
    super(`worker ${instanceId} sent an invalid output: ${reason}`);
    this.instanceId = instanceId;
    this.reason = reason;
  }
}

/** Bounds an engine output is checked against. */
export interface EngineOutputBounds {
  /** Token ids must be below this (the model's vocabulary size). */
  vocabSize: number;
  /** Most token ids per item (default {@linkcode MAX_TOKENS_PER_ITEM}). */
  maxTokensPerItem?: number;
}

/**
 * Checks one item a worker sent as a tokens engine's output.
 *
 * @param value the item as it arrived
 * @param bounds the vocabulary size and the per-item limit
 * @returns the reason it is invalid, or undefined when it is a valid {@linkcode LLMEngineOutput}
 */
export function engineOutputProblem(
  value: unknown,
  bounds: EngineOutputBounds,
): string | undefined {
  if (typeof value !== "object" || value === null || Array.isArray(value)) {
    return `expected an object, got ${describe(value)}`;
  }
  const out = value as Record<string, unknown>;
  const ids = out.token_ids;
  if (!Array.isArray(ids)) return `token_ids must be an array, got ${describe(ids)}`;
  const maxTokens = bounds.maxTokensPerItem ?? MAX_TOKENS_PER_ITEM;
  if (ids.length > maxTokens) {
    return `token_ids has ${ids.length} ids, more than ${maxTokens} in one item`;
  }
  const vocab = bounds.vocabSize;
  for (let i = 0; i < ids.length; i++) {
    const id = ids[i];
    if (typeof id !== "number" || !Number.isInteger(id) || id < 0 || id >= vocab) {
      return `token_ids[${i}] must be an integer in [0, ${vocab}), got ${describe(id)}`;
    }
  }
  const reason = out.finish_reason;
  if (reason !== undefined && reason !== null && !FINISH_REASONS.has(reason as string)) {
    return `unknown finish_reason ${describe(reason)}`;
  }
  const text = out.text;
  if (text !== undefined && (typeof text !== "string" || text.length > MAX_TEXT_PER_ITEM)) {
    return typeof text === "string"
      ? `text has ${text.length} characters, more than ${MAX_TEXT_PER_ITEM}`
      : `text must be a string, got ${describe(text)}`;
  }
  const cached = out.cached_tokens;
  if (
    cached !== undefined && (typeof cached !== "number" || !Number.isInteger(cached) || cached < 0)
  ) {
    return `cached_tokens must be a whole number >= 0, got ${describe(cached)}`;
  }
  const logProbs = out.log_probs;
  if (logProbs !== undefined && logProbs !== null) {
    if (!Array.isArray(logProbs) || logProbs.length !== ids.length) {
      return `log_probs must be an array of one number per token (${ids.length}), got ${
        describe(logProbs)
      }`;
    }
    for (const p of logProbs) {
      if (!isLogprob(p)) return `log_probs must hold finite numbers <= 0, got ${describe(p)}`;
    }
  }
  const top = out.top_logprobs;
  if (top !== undefined && top !== null) {
    if (!Array.isArray(top) || top.length !== ids.length) {
      return `top_logprobs must be an array of one list per token (${ids.length}), got ${
        describe(top)
      }`;
    }
    for (let i = 0; i < top.length; i++) {
      const problem = topLogprobsProblem(top[i], vocab);
      if (problem !== undefined) return `top_logprobs[${i}]: ${problem}`;
    }
  }
  return undefined;
}

/**
 * A checker for one model's engine outputs: returns the item typed, or throws.
 *
 * @param bounds the model's bounds
 * @param onInvalid told of each invalid item (metrics, a log line) before it is thrown
 * @returns `(item, instanceId) => LLMEngineOutput`
 */
export function engineOutputChecker(
  bounds: EngineOutputBounds,
  onInvalid?: (err: WorkerOutputError) => void,
): (value: unknown, instanceId: string) => LLMEngineOutput {
  return (value, instanceId) => {
    const problem = engineOutputProblem(value, bounds);
    if (problem === undefined) return value as LLMEngineOutput;
    const err = new WorkerOutputError(instanceId, problem);
    onInvalid?.(err);
    throw err;
  };
}

/** Most alternatives one position may carry (OpenAI's own limit is 20). */
const MAX_TOP_LOGPROBS = 64;

function isLogprob(p: unknown): boolean {
  return typeof p === "number" && Number.isFinite(p) && p <= 0;
}

/** What is wrong with one position's alternatives, or undefined. */
function topLogprobsProblem(list: unknown, vocab: number): string | undefined {
  if (!Array.isArray(list) || list.length > MAX_TOP_LOGPROBS) {
    return `must be an array of at most ${MAX_TOP_LOGPROBS} entries, got ${describe(list)}`;
  }
  for (const e of list as unknown[]) {
    if (typeof e !== "object" || e === null) return `entries must be objects, got ${describe(e)}`;
    const { token_id, logprob, rank, token, bytes } = e as Record<string, unknown>;
    if (
      typeof token_id !== "number" || !Number.isInteger(token_id) || token_id < 0 ||
      token_id >= vocab
    ) {
      return `token_id must be an integer in [0, ${vocab}), got ${describe(token_id)}`;
    }
    if (!isLogprob(logprob)) {
      return `logprob must be a finite number <= 0, got ${describe(logprob)}`;
    }
    if (rank !== undefined && (typeof rank !== "number" || !Number.isInteger(rank) || rank < 1)) {
      return `rank must be an integer >= 1, got ${describe(rank)}`;
    }
    if (token !== undefined && token !== null && typeof token !== "string") {
      return `token must be a string, got ${describe(token)}`;
    }
    if (
      bytes !== undefined && bytes !== null &&
      (!Array.isArray(bytes) ||
        !bytes.every((b) => typeof b === "number" && Number.isInteger(b) && b >= 0 && b < 256))
    ) {
      return `bytes must be an array of bytes, got ${describe(bytes)}`;
    }
  }
  return undefined;
}

/** A short description of a value for an error message (never the whole of a big value). */
function describe(value: unknown): string {
  if (value === null) return "null";
  if (Array.isArray(value)) return `an array of ${value.length}`;
  switch (typeof value) {
    case "string":
      return JSON.stringify(value.length > 40 ? value.slice(0, 40) + "..." : value);
    case "number":
    case "boolean":
    case "undefined":
      return String(value);
    case "object":
      return "an object";
    default:
      return `a ${typeof value}`;
  }
}
