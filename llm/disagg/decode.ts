// The decode side of disaggregated serving: per request, hold the longest prefix of the
// prompt already in the KV prefix cache, then prefill the rest locally or queue a remote
// prefill of just those blocks (DisaggRouter on the uncached length), wait for the
// prefill worker's notification, check every byte of every prompt block (cached ones
// too), cache the prompt's full blocks, then generate. A remote prefill that does not
// arrive in time falls back to local prefill, so losing the prefill worker fails no
// request.

import type { Context } from "../../runtime/context.ts";
import { TimeoutError } from "../../runtime/errors.ts";
import type { Logger } from "../../runtime/logger.ts";
import { hashPromptBlocks } from "../engines/mocker/scheduler.ts";
import type { LLMEngineOutput, PreprocessedRequest } from "../protocols.ts";
import type { DecodeKvCache } from "./kv_cache.ts";
import type { RemotePrefillRequest } from "./protocol.ts";
import type { PrefillQueue } from "./queue.ts";
import type { DisaggRouter } from "./router.ts";

/** A token-generating handler (e.g. `echoEngine()`). */
export type TokensEngine = (
  req: PreprocessedRequest,
  ctx: Context,
) => AsyncIterable<LLMEngineOutput>;

/** How one request was prefilled. */
export interface PrefillReport {
  /** The request id. */
  requestId: string;
  /** Where the prompt was prefilled. */
  mode: "local" | "remote";
  /** Remote was chosen but did not arrive in time; prefilled locally instead. */
  fellBack: boolean;
  /** Leading full blocks found in the prefix cache (not prefilled again). */
  prefixHitBlocks: number;
  /** `prefixHitBlocks * blockSize`: what the router subtracted from the prompt length. */
  prefixHitLength: number;
  /** Blocks a prefill worker wrote (0 for a local prefill). */
  remoteBlocks: number;
  /** Blocks filled here. */
  localBlocks: number;
  /** Blocks checked byte for byte: all of the prompt's, cached ones included. */
  verifiedBlocks: number;
  /** Tokens in the prompt. */
  promptTokens: number;
}

/** Options of {@linkcode disaggDecodeEngine}. */
export interface DisaggDecodeOptions {
  /** Decides per request whether to prefill remotely. */
  router: DisaggRouter;
  /** Where remote prefill requests go. */
  queue: PrefillQueue<RemotePrefillRequest>;
  /** The decode worker's KV memory. */
  kv: DecodeKvCache;
  /** Generates after the prefill (e.g. `mockerDecodeEngine(mocker)` or `echoEngine()`). */
  engine: TokensEngine;
  /** Tokens per KV block (the prefix cache's hashes use it too); default 16. */
  blockSize?: number;
  /** Whether a prefill worker is there now (e.g. discovery); default always. */
  remoteAvailable?: () => boolean;
  /** Longest wait for a remote prefill before prefilling locally; default 10 000 ms. */
  remoteTimeoutMs?: number;
  /** Called once per request after its prefill was verified. */
  onPrefill?: (report: PrefillReport) => void;
  /** Where the engine logs. */
  logger?: Logger;
}

/**
 * Builds a decode handler for `endpoint.serveEndpoint`.
 *
 * @param options router, queue, KV memory and engine
 * @returns the handler
 * @example
 * ```ts ignore
 * const engine = mockerDecodeEngine(new MockerEngine({ blockSize: 16 }));
 * await endpoint.serveEndpoint(disaggDecodeEngine({ router, queue, kv, engine, blockSize: 16 }));
 * ```
 */
export function disaggDecodeEngine(options: DisaggDecodeOptions): TokensEngine {
  const blockSize = options.blockSize ?? 16;
  const timeoutMs = options.remoteTimeoutMs ?? 10_000;
  const { kv, queue, router } = options;
  // Blocks of requests given up on while a prefill worker may still write them: kept out
  // of the free list until their late notification comes (or forever, a bounded leak).
  const quarantine = new Map<string, number[]>();
  const release = () => {
    for (const [rid, ids] of quarantine) {
      if (kv.takeLate(rid)) {
        quarantine.delete(rid);
        kv.release(ids);
      }
    }
  };

  return async function* decode(req: PreprocessedRequest, ctx: Context) {
    release();
    const tokens = req.token_ids;
    const n = Math.ceil(tokens.length / blockSize);
    const hashes = hashPromptBlocks(tokens, blockSize).map((b) => b.sequenceHash);
    // Held before anything is allocated, so the allocation cannot evict them.
    const ids = kv.acquirePrefix(hashes);
    const hit = ids.length;
    try {
      ids.push(...kv.allocate(n - hit));
      let remote = false;
      if (options.remoteAvailable?.() ?? true) {
        let queueSize: number | undefined;
        try {
          queueSize = await queue.size();
        } catch (e) {
          options.logger?.warn("prefill queue unavailable; prefilling locally", {
            error: e instanceof Error ? e.message : String(e),
          });
        }
        remote = queueSize !== undefined &&
          router.shouldPrefillRemote({
            prefillLength: tokens.length,
            prefixHitLength: hit * blockSize,
            queueSize,
          });
      }
      let fellBack = false;
      if (remote) {
        const rid = ctx.id;
        try {
          await queue.enqueue({
            request_id: rid,
            token_ids: tokens,
            block_size: blockSize,
            engine_agent: kv.agent.name,
            first_block: hit,
            block_ids: ids.slice(hit),
            expires_at: Date.now() + timeoutMs,
          });
          await kv.waitPrefilled(rid, { timeoutMs, signal: ctx.signal });
        } catch (e) {
          // The remote write may still come: never hand these blocks to another request
          // before its notification does. The cached prefix is only read, so it stays.
          quarantine.set(rid, ids.splice(hit));
          if (ctx.signal.aborted) throw e;
          options.logger?.warn("remote prefill failed; prefilling locally", {
            request_id: rid,
            timed_out: e instanceof TimeoutError,
            error: e instanceof Error ? e.message : String(e),
          });
          fellBack = true;
          ids.push(...kv.allocate(n - hit));
        }
      }
      const local = !remote || fellBack;
      if (local) kv.fillLocal(ids, tokens, blockSize, hit);
      const verifiedBlocks = kv.verify(ids, tokens, blockSize);
      kv.cache(hashes, ids);
      options.onPrefill?.({
        requestId: ctx.id,
        mode: local ? "local" : "remote",
        fellBack,
        prefixHitBlocks: hit,
        prefixHitLength: hit * blockSize,
        remoteBlocks: local ? 0 : n - hit,
        localBlocks: local ? n - hit : 0,
        verifiedBlocks,
        promptTokens: tokens.length,
      });
      let first = true;
      for await (const out of options.engine(req, ctx)) {
        // The decode worker's prefix cache is what served the prompt.
        yield first ? { ...out, cached_tokens: hit * blockSize } : out;
        first = false;
      }
    } finally {
      // Tail first: a prompt's tail blocks are evicted before its prefix.
      kv.release(ids.toReversed());
    }
  };
}
