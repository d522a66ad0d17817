// Mooncake-format traces for `dynamo bench`: loading, prompt token synthesis, and the
// prefix-reuse ceiling of the requests replayed.
//
// Each line: {"timestamp": ms, "input_length": n, "output_length": m, "hash_ids": [...]};
// one hash id per 512-token block of the prompt (or per `block_tokens`, when a line says). Equal ids at the same position mean a
// shared prefix, so each id gets a fixed pseudo-random run of 512 tokens (the last block
// cut to fit input_length): equal ids give equal token blocks at any KV block size.

import { InvalidArgumentError } from "../../runtime/errors.ts";

/** Tokens per trace block (the hash_ids granularity of the Mooncake release). */
export const TRACE_BLOCK_TOKENS = 512;

/** One request of a trace. */
export interface TraceRequest {
  /** Arrival, ms from the start. */
  timestamp: number;
  inputLength: number;
  outputLength: number;
  hashIds: number[];
  /** Tokens per hash id (default {@linkcode TRACE_BLOCK_TOKENS}; synthetic traces use finer). */
  blockTokens?: number;
}

/** Tokens per hash id of a request. */
export function blockTokensOf(req: TraceRequest): number {
  return req.blockTokens ?? TRACE_BLOCK_TOKENS;
}

/** Options of {@linkcode loadTrace}. */
export interface LoadTraceOptions {
  /** Keep at most this many requests (from the start). */
  maxRequests?: number;
  /** Keep requests arriving in the first this-many ms. */
  maxTimestampMs?: number;
}

/**
 * Parses a Mooncake-format trace.
 * @throws {InvalidArgumentError} a line that is not a trace request (names the line)
 */
export function parseTrace(text: string, options: LoadTraceOptions = {}): TraceRequest[] {
  const out: TraceRequest[] = [];
  const lines = text.split("\n");
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i]!.trim();
    if (line === "") continue;
    if (options.maxRequests !== undefined && out.length >= options.maxRequests) break;
    let raw: Record<string, unknown>;
    try {
      raw = JSON.parse(line);
    } catch {
      throw new InvalidArgumentError(`trace line ${i + 1} is not JSON: ${line.slice(0, 80)}`);
    }
    const { timestamp, input_length, output_length, hash_ids, block_tokens } = raw;
    const block = block_tokens ?? TRACE_BLOCK_TOKENS;
    const ok = Number.isFinite(timestamp) && Number.isInteger(input_length) &&
      (input_length as number) > 0 && Number.isInteger(output_length) &&
      (output_length as number) > 0 && Number.isInteger(block) && (block as number) > 0 &&
      Array.isArray(hash_ids) &&
      hash_ids.length === Math.ceil((input_length as number) / (block as number)) &&
      hash_ids.every((h) => Number.isInteger(h));
    if (!ok) {
      throw new InvalidArgumentError(
        `trace line ${i + 1} needs timestamp, input_length > 0, output_length > 0 and ` +
          `ceil(input_length/${block}) integer hash_ids: ${line.slice(0, 120)}`,
      );
    }
    if (options.maxTimestampMs !== undefined && (timestamp as number) > options.maxTimestampMs) {
      break;
    }
    out.push({
      timestamp: timestamp as number,
      inputLength: input_length as number,
      outputLength: output_length as number,
      hashIds: hash_ids as number[],
      ...(block_tokens === undefined ? {} : { blockTokens: block as number }),
    });
  }
  return out;
}

/** The requests `options` keep: the first `maxRequests`, arriving by `maxTimestampMs`. */
export function limitTrace(
  requests: readonly TraceRequest[],
  options: LoadTraceOptions,
): TraceRequest[] {
  const kept = requests.filter((r) =>
    options.maxTimestampMs === undefined || r.timestamp <= options.maxTimestampMs
  );
  return kept.slice(0, options.maxRequests ?? kept.length);
}

/** Reads and parses a trace file. */
export async function loadTrace(
  path: string,
  options: LoadTraceOptions = {},
): Promise<TraceRequest[]> {
  return parseTrace(await Deno.readTextFile(path), options);
}

// Token ids drawn from a range clear of the test model's special tokens.
const TOKEN_MIN = 10;
const TOKEN_SPAN = 150_000;

/** The prompt of a trace request: each hash id's fixed block of tokens. */
export function promptTokens(req: TraceRequest): number[] {
  const out = new Array<number>(req.inputLength);
  const block = blockTokensOf(req);
  let at = 0;
  for (const id of req.hashIds) {
    // splitmix32-style generator seeded by the id: same id, same tokens.
    let state = (id * 0x9e3779b9 + 0x7f4a7c15) | 0;
    const end = Math.min(at + block, req.inputLength);
    for (; at < end; at++) {
      state = (state + 0x9e3779b9) | 0;
      let z = state;
      z = Math.imul(z ^ (z >>> 16), 0x85ebca6b);
      z = Math.imul(z ^ (z >>> 13), 0xc2b2ae35);
      z = (z ^ (z >>> 16)) >>> 0;
      out[at] = TOKEN_MIN + (z % TOKEN_SPAN);
    }
  }
  return out;
}

/** How much of the replayed prompts an unbounded, perfect prefix cache would hit. */
export interface PrefixCeiling {
  /** Share of trace blocks whose whole prefix came before. */
  blocks: number;
  /** The same, weighted by tokens (the last block of a prompt is usually short). */
  tokens: number;
}

/** The prefix-reuse ceiling of a list of requests, replayed in order. */
export function prefixCeiling(requests: readonly TraceRequest[]): PrefixCeiling {
  let hitBlocks = 0;
  let blocks = 0;
  let hitTokens = 0;
  let tokens = 0;
  for (const r of walkCeiling(requests)) {
    hitBlocks += r.hitBlocks;
    blocks += r.blocks;
    hitTokens += r.hitTokens;
    tokens += r.tokens;
  }
  return { blocks: blocks ? hitBlocks / blocks : 0, tokens: tokens ? hitTokens / tokens : 0 };
}

/**
 * Per request, the prompt tokens the ceiling counts as cached: those of its trace blocks whose
 * whole prefix an earlier request (in trace order) had.
 *
 * @param requests the trace, in arrival order
 * @returns one count per request, in the same order
 */
export function ceilingHitTokens(requests: readonly TraceRequest[]): number[] {
  return walkCeiling(requests).map((r) => r.hitTokens);
}

function walkCeiling(
  requests: readonly TraceRequest[],
): Array<{ hitBlocks: number; blocks: number; hitTokens: number; tokens: number }> {
  const seen = new Set<string>();
  return requests.map((r) => {
    const out = { hitBlocks: 0, blocks: 0, hitTokens: 0, tokens: 0 };
    let key = "";
    const block = blockTokensOf(r);
    r.hashIds.forEach((id, i) => {
      key += `${id},`;
      const len = Math.min(block, r.inputLength - i * block);
      out.blocks++;
      out.tokens += len;
      if (seen.has(key)) {
        out.hitBlocks++;
        out.hitTokens += len;
      } else {
        seen.add(key);
      }
    });
    return out;
  });
}
