// Warming the frontend's per-request code before it listens. V8 runs a function in its
// interpreter until the function has been called (or looped) enough, so a fresh frontend's
// first requests pay for that: with a 6,758-token prompt the first request spent ~17 ms in
// body parsing, validation, block hashing and the reference wire's encoding that take ~2 ms
// once compiled (BENCHMARKS.md, bench:versus). `warmRequestPath` runs those steps on synthetic
// requests, in memory, before the first real one: no request reaches a worker, no router,
// metric or cache sees them.

import { parseRequest } from "../pipeline/parse.ts";
import { computeBlockHashesSync } from "../kv_router/hashing.ts";
import { choiceJson } from "./sse_choice.ts";
import { toReferenceRequest } from "../model/reference_models.ts";
import { warmReferenceWire } from "../../runtime/reference/warm.ts";
import { encodeReferenceKvMessage } from "../../runtime/reference/kv_events.ts";
import {
  decodeReferenceLoad,
  encodeReferenceLoadMessage,
} from "../../runtime/reference/load_metrics.ts";
import { decodeReferenceKvEvents, referenceZmqEnvelope } from "../model/reference_kv.ts";
import type { PreprocessedRequest } from "../protocols.ts";

/** Options of {@linkcode warmRequestPath}. */
export interface WarmOptions {
  /** Synthetic requests of each kind (default 10: enough for V8 to compile the steps). */
  rounds?: number;
  /** Length of the synthetic token prompt (default 2,048). */
  promptTokens?: number;
}

/** What a warm-up did. */
export interface WarmReport {
  /** Synthetic requests run through each step. */
  rounds: number;
  /** Time it took (ms). */
  ms: number;
}

/**
 * Runs the frontend's per-request steps (request body reading and validation for chat and
 * completions, KV block hashing, the reference wire's request and answer coding, SSE chunk
 * encoding) on synthetic requests, so a fresh process does not serve its first requests
 * interpreted.
 *
 * @param options how many rounds, how long a prompt
 * @returns rounds run and the time taken
 * @throws {Error} a step failed on its synthetic input (a bug: these inputs are valid)
 */
export async function warmRequestPath(options: WarmOptions = {}): Promise<WarmReport> {
  const rounds = options.rounds ?? 10;
  const promptTokens = options.promptTokens ?? 2048;
  const started = performance.now();
  for (let round = 0; round < rounds; round++) {
    // Different ids each round, as real prompts are (no cache inside a step sees them twice).
    const tokens = Array.from(
      { length: promptTokens },
      (_, i) => 1 + ((i * 7919 + round * 104_729) % 100_000),
    );
    const completion = await parseRequest(
      jsonRequest({ model: "warm-up", prompt: tokens, max_tokens: 16, stream: true }),
      "completion",
      Number.MAX_SAFE_INTEGER,
    );
    await parseRequest(
      jsonRequest({
        model: "warm-up",
        messages: [
          { role: "system", content: "You are a helpful assistant." },
          { role: "user", content: `Question ${round}: what is the warm-up for?` },
        ],
        max_tokens: 16,
        temperature: 0.7,
        stream: true,
        stream_options: { include_usage: true },
      }),
      "chat",
      Number.MAX_SAFE_INTEGER,
    );
    const ids = (completion as { prompt: number[] }).prompt;
    // Blocks of 16, 32 and 64 tokens take xxh3's three input-length paths.
    let stored: bigint[] = [];
    for (const blockSize of [16, 32, 64]) stored = computeBlockHashesSync(ids, blockSize).local;
    const request: PreprocessedRequest = {
      model: "warm-up",
      token_ids: ids,
      stop_conditions: { max_tokens: 16 },
      sampling_options: { temperature: 0.7 },
      eos_token_ids: [2],
    };
    warmReferenceWire(toReferenceRequest(request));
    // A worker's answer to it: the blocks it stored, its load.
    const kv = encodeReferenceKvMessage({
      publisherId: 1n,
      sequence: BigInt(round),
      publishedAt: 0n,
      workerId: 1n,
      eventId: round + 1,
      data: {
        stored: {
          parent_hash: null,
          blocks: stored.map((hash) => ({ block_hash: hash, tokens_hash: hash })),
        },
      },
    });
    decodeReferenceKvEvents(referenceZmqEnvelope(kv));
    decodeReferenceLoad(referenceZmqEnvelope(encodeReferenceLoadMessage({
      publisherId: 1n,
      sequence: BigInt(round),
      publishedAt: 0n,
      workerId: 1n,
      load: { activeDecodeBlocks: round, activePrefillTokens: promptTokens, kvUsedBlocks: round },
    })));
    for (let k = 0; k < 4; k++) {
      choiceJson(true, 0, `word ${k}`, k === 3 ? "stop" : null, k === 0);
      choiceJson(false, 0, `word ${k}`, k === 3 ? "length" : null, k === 0);
    }
  }
  return { rounds, ms: performance.now() - started };
}

function jsonRequest(body: unknown): Request {
  const text = JSON.stringify(body);
  return new Request("http://warm-up.invalid/v1", {
    method: "POST",
    body: text,
    headers: { "content-type": "application/json", "content-length": String(text.length) },
  });
}
