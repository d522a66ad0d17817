// The door where a remote prefill request enters a prefill worker. Items come off a queue
// another process filled and are not trusted: each is checked (integer token ids in u32
// range, a bounded prompt, block ids that fit the staging memory, bounded strings, a finite
// deadline) before the worker reads it; the block ids are checked against the decode
// worker's descriptor list once that is known. The state variant (one blob into a slot of
// chunks) has its own check beside it. The decode worker's memory info (from
// discovery or the queue host) is checked the same way. Every check is bounded in time.

import { InvalidArgumentError } from "../../runtime/errors.ts";
import type {
  DecodeMemoryInfo,
  RemotePrefillRequest,
  RemoteStatePrefillRequest,
} from "./protocol.ts";

/** Most prompt tokens a remote prefill request may carry. */
export const MAX_PREFILL_TOKENS = 1 << 20;
/** Largest block size (tokens per KV block) a request may name. */
export const MAX_PREFILL_BLOCK_SIZE = 1 << 16;
/** Longest request id or decode agent name (characters). */
export const MAX_PREFILL_NAME = 1024;
const MAX_TOKEN_ID = 2 ** 32 - 1;

/** A remote prefill request that is not valid; the queue should drop it, not redeliver it. */
export class InvalidPrefillRequestError extends InvalidArgumentError {
  /** What was wrong with it. */
  readonly reason: string;
  /** Its request id, when it had a readable one. */
  readonly requestId: string | undefined;
  constructor(reason: string, requestId?: string) {
    super(
      `invalid remote prefill request${
        requestId === undefined ? "" : ` ${JSON.stringify(requestId.slice(0, 80))}`
      }: ${reason}`,
    );
    this.reason = reason;
    this.requestId = requestId;
  }
}

/** Bounds a prefill worker checks requests against. */
export interface PrefillRequestBounds {
  /** Blocks the worker can stage at once: a request writes at most this many. */
  maxBlocks: number;
}

const isName = (v: unknown): v is string =>
  typeof v === "string" && v.length > 0 && v.length <= MAX_PREFILL_NAME;
const isIndex = (v: unknown): v is number =>
  typeof v === "number" && Number.isSafeInteger(v) && v >= 0;

/** Both request kinds: an object naming its request and the decode worker's agent. */
function envelope(value: unknown): Record<string, unknown> | string {
  if (typeof value !== "object" || value === null || Array.isArray(value)) {
    return "expected an object";
  }
  const r = value as Record<string, unknown>;
  if (!isName(r.request_id)) {
    return `request_id must be a string of 1 to ${MAX_PREFILL_NAME} characters`;
  }
  if (!isName(r.engine_agent)) {
    return `engine_agent must be a string of 1 to ${MAX_PREFILL_NAME} characters`;
  }
  return r;
}

/**
 * Checks one dequeued item as a {@linkcode RemotePrefillRequest}.
 *
 * @param value the item as it came off the queue
 * @param bounds the worker's staging capacity
 * @returns the reason it is invalid, or undefined when it is valid
 */
export function prefillRequestProblem(
  value: unknown,
  bounds: PrefillRequestBounds,
): string | undefined {
  const r = envelope(value);
  if (typeof r === "string") return r;
  const bs = r.block_size;
  if (!isIndex(bs) || bs < 1 || bs > MAX_PREFILL_BLOCK_SIZE) {
    return `block_size must be an integer in [1, ${MAX_PREFILL_BLOCK_SIZE}]`;
  }
  const tokens = r.token_ids;
  const badTokens = tokenIdsProblem(tokens);
  if (badTokens !== undefined) return badTokens;
  const blocks = Math.ceil((tokens as unknown[]).length / bs);
  const first = r.first_block ?? 0;
  if (!isIndex(first) || first > blocks) {
    return `first_block must be an integer in [0, ${blocks}] (the prompt's blocks)`;
  }
  const count = blocks - first;
  if (count > bounds.maxBlocks) {
    return `${count} blocks to write, more than the ${bounds.maxBlocks} this worker stages`;
  }
  const ids = r.block_ids;
  if (!Array.isArray(ids) || ids.length < count || ids.length > blocks) {
    return `block_ids must hold ${count} to ${blocks} ids (one per block written)`;
  }
  for (let i = 0; i < ids.length; i++) {
    if (!isIndex(ids[i])) return `block_ids[${i}] must be an integer >= 0`;
  }
  if (typeof r.expires_at !== "number" || !Number.isFinite(r.expires_at)) {
    return "expires_at must be a finite number (epoch ms)";
  }
  return undefined;
}

/**
 * Checks an item and returns it typed.
 *
 * @throws {InvalidPrefillRequestError} it is not a valid request
 */
export function checkPrefillRequest(
  value: unknown,
  bounds: PrefillRequestBounds,
): RemotePrefillRequest {
  const problem = prefillRequestProblem(value, bounds);
  if (problem === undefined) return value as RemotePrefillRequest;
  const id = (value as { request_id?: unknown } | null)?.request_id;
  throw new InvalidPrefillRequestError(problem, typeof id === "string" ? id : undefined);
}

/**
 * Checks one dequeued item as a {@linkcode RemoteStatePrefillRequest} (the state variant:
 * one blob into a slot of chunks). The slot is checked against the decode worker's list
 * once that is known.
 *
 * @param value the item as it came off the queue
 * @returns the reason it is invalid, or undefined when it is valid
 */
export function statePrefillRequestProblem(value: unknown): string | undefined {
  const r = envelope(value);
  if (typeof r === "string") return r;
  const badTokens = tokenIdsProblem(r.token_ids);
  if (badTokens !== undefined) return badTokens;
  if ((r.token_ids as unknown[]).length === 0) return "token_ids must not be empty";
  if (!isIndex(r.first_chunk)) return "first_chunk must be an integer >= 0";
  if (!isIndex(r.chunk_count) || r.chunk_count < 1) return "chunk_count must be an integer >= 1";
  if (typeof r.expires_at !== "number" || !Number.isFinite(r.expires_at)) {
    return "expires_at must be a finite number (epoch ms)";
  }
  return undefined;
}

/**
 * Checks an item as a state prefill request and returns it typed.
 *
 * @param value the item as it came off the queue
 * @returns the request, typed
 * @throws {InvalidPrefillRequestError} it is not a valid request
 */
export function checkStatePrefillRequest(value: unknown): RemoteStatePrefillRequest {
  const problem = statePrefillRequestProblem(value);
  if (problem === undefined) return value as RemoteStatePrefillRequest;
  const id = (value as { request_id?: unknown } | null)?.request_id;
  throw new InvalidPrefillRequestError(problem, typeof id === "string" ? id : undefined);
}

function tokenIdsProblem(tokens: unknown): string | undefined {
  if (!Array.isArray(tokens) || tokens.length > MAX_PREFILL_TOKENS) {
    return `token_ids must be an array of at most ${MAX_PREFILL_TOKENS} ids`;
  }
  for (let i = 0; i < tokens.length; i++) {
    const t = tokens[i];
    if (typeof t !== "number" || !Number.isInteger(t) || t < 0 || t > MAX_TOKEN_ID) {
      return `token_ids[${i}] must be an integer in [0, 2^32)`;
    }
  }
  return undefined;
}

/** Most descriptors a decode worker's published memory may list. */
export const MAX_DECODE_DESCS = 1 << 22;
/** Longest agent metadata text a decode worker may publish (characters). */
export const MAX_METADATA_TEXT = 16 << 20;

/**
 * Checks a decode worker's memory info as a prefill worker received it.
 *
 * @param value the info as it arrived (parsed JSON)
 * @param agentName the decode agent it was asked for
 * @returns the info, typed
 * @throws {InvalidPrefillRequestError} it is malformed, or names another agent
 */
export function checkDecodeMemoryInfo(value: unknown, agentName: string): DecodeMemoryInfo {
  const bad = (why: string): never => {
    throw new InvalidPrefillRequestError(`memory info of decode ${agentName.slice(0, 80)}: ${why}`);
  };
  if (typeof value !== "object" || value === null || Array.isArray(value)) bad("not an object");
  const m = value as Record<string, unknown>;
  if (m.agent_name !== agentName) bad("it names another agent");
  if (typeof m.metadata !== "string" || m.metadata.length > MAX_METADATA_TEXT) {
    bad(`metadata must be text of at most ${MAX_METADATA_TEXT} characters`);
  }
  if (!isIndex(m.block_bytes) || m.block_bytes < 1) bad("block_bytes must be an integer >= 1");
  const d = m.descs as Record<string, unknown> | null;
  if (typeof d !== "object" || d === null || (d.mem_type !== "DRAM" && d.mem_type !== "VRAM")) {
    bad("descs must be a descriptor list with mem_type DRAM or VRAM");
  }
  const list = d!.descs;
  if (!Array.isArray(list) || list.length > MAX_DECODE_DESCS) {
    bad(`descs must list at most ${MAX_DECODE_DESCS} descriptors`);
  }
  for (const [i, x] of (list as unknown[]).entries()) {
    const e = x as Record<string, unknown> | null;
    if (
      typeof e !== "object" || e === null || typeof e.region !== "string" ||
      !isIndex(e.offset) || !isIndex(e.length) || e.length < 1
    ) {
      bad(`descriptor ${i} must be {region, offset, length} with whole numbers`);
    }
  }
  return value as DecodeMemoryInfo;
}
