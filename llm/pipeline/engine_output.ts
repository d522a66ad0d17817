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
  if (logProbs !== undefined) {
    if (!Array.isArray(logProbs) || logProbs.length > ids.length) {
      return `log_probs must be an array of at most one number per token, got ${
        describe(logProbs)
      }`;
    }
    for (const p of logProbs) {
      if (typeof p !== "number" || Number.isNaN(p) || p > 0) {
        return `log_probs must hold numbers <= 0, got ${describe(p)}`;
      }
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
