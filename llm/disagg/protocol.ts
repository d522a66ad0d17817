// Wire types between decode and prefill workers (snake_case: they cross processes).

import type { XferDescList } from "../../native/mod.ts";

/** A remote prefill request, as queued by the decode worker. */
export interface RemotePrefillRequest {
  /** The request id (the decode worker waits for its notification). */
  request_id: string;
  /** The prompt. */
  token_ids: number[];
  /** Tokens per KV block. */
  block_size: number;
  /** The decode worker's transfer agent (its memory is published under this name). */
  engine_agent: string;
  /**
   * Prompt blocks before this one are in the decode worker's prefix cache: write only the
   * blocks from here on (the prompt is still whole, the blocks' bytes depend on their
   * position). 0 when nothing was cached.
   */
  first_block: number;
  /**
   * Indices into the decode worker's published descriptor list, one per prompt block from
   * `first_block` on.
   */
  block_ids: number[];
  /** Epoch ms after which the decode worker no longer waits (the prefill skips it). */
  expires_at: number;
}

/** What a decode worker publishes once: how to reach its KV memory. */
export interface DecodeMemoryInfo {
  /** The decode worker's transfer agent name. */
  agent_name: string;
  /** `TransferAgent.getAgentMetadata()` as UTF-8 JSON text. */
  metadata: string;
  /** One descriptor per KV block. */
  descs: XferDescList;
  /** Bytes per KV block. */
  block_bytes: number;
}

/** The notification body a prefill worker sends after writing a request's blocks. */
export function prefillDoneNotif(requestId: string): string {
  return `prefill_done:${requestId}`;
}

/** The notification body a prefill worker sends when it skipped an expired request. */
export function prefillSkippedNotif(requestId: string): string {
  return `prefill_skipped:${requestId}`;
}

/**
 * Parses a prefill notification body.
 *
 * @param body a notification body
 * @returns the request id and outcome of a prefill notification, else undefined
 */
export function parsePrefillNotif(
  body: string,
): { requestId: string; done: boolean } | undefined {
  for (const [prefix, done] of [["prefill_done:", true], ["prefill_skipped:", false]] as const) {
    if (body.startsWith(prefix)) return { requestId: body.slice(prefix.length), done };
  }
  return undefined;
}

/**
 * A remote prefill request answered with one opaque blob (an engine's serialized sequence
 * state, e.g. llama.cpp's) instead of KV blocks: the prefill worker writes the blob, framed
 * by {@linkcode STATE_FRAME_BYTES} bytes of length, into consecutive chunks of the decode
 * worker's published memory (its {@linkcode DecodeMemoryInfo}, `block_bytes` being the
 * chunk size), then sends {@linkcode prefillDoneNotif}; or {@linkcode prefillSkippedNotif}
 * when it expired or could not be prefilled.
 */
export interface RemoteStatePrefillRequest {
  /** The request id (the decode worker waits for its notification). */
  request_id: string;
  /**
   * The whole prompt. Which part the prefill computes is the engine's contract (llama.cpp:
   * all but the last token, which the decode worker evaluates to get the first logits).
   */
  token_ids: number[];
  /** The decode worker's transfer agent (its memory is published under this name). */
  engine_agent: string;
  /** First chunk of the slot the blob goes to: an index into the published list. */
  first_chunk: number;
  /** Chunks in the slot: the framed blob must fit in `chunk_count * block_bytes`. */
  chunk_count: number;
  /** Epoch ms after which the decode worker no longer waits (the prefill skips it). */
  expires_at: number;
}

/** Bytes before a state blob in its slot: its length, u32 little-endian. */
export const STATE_FRAME_BYTES = 4;
