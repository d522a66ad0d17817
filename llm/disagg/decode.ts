// The decode side of disaggregated serving: per request, prefill locally or queue a
// remote prefill (DisaggRouter), wait for the prefill worker's notification, check every
// byte of the received KV blocks, then generate. A remote prefill that does not arrive in
// time falls back to local prefill, so losing the prefill worker fails no request.

import type { Context } from "../../runtime/context.ts";
import { TimeoutError } from "../../runtime/errors.ts";
import type { Logger } from "../../runtime/logger.ts";
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
  requestId: string;
  mode: "local" | "remote";
  /** Remote was chosen but did not arrive in time; prefilled locally instead. */
  fellBack: boolean;
  /** Blocks checked byte for byte. */
  verifiedBlocks: number;
  promptTokens: number;
}

/** Options of {@linkcode disaggDecodeEngine}. */
export interface DisaggDecodeOptions {
  router: DisaggRouter;
  queue: PrefillQueue<RemotePrefillRequest>;
  kv: DecodeKvCache;
  /** Generates after the prefill. */
  engine: TokensEngine;
  /** Tokens per KV block; default 16. */
  blockSize?: number;
  /** Whether a prefill worker is there now (e.g. discovery); default always. */
  remoteAvailable?: () => boolean;
  /** Longest wait for a remote prefill before prefilling locally; default 10 000 ms. */
  remoteTimeoutMs?: number;
  /** Called once per request after its prefill was verified. */
  onPrefill?: (report: PrefillReport) => void;
  logger?: Logger;
}

/**
 * Builds a decode handler for `endpoint.serveEndpoint`.
 *
 * @param options router, queue, KV memory and engine
 * @returns the handler
 * @example
 * ```ts
 * await endpoint.serveEndpoint(disaggDecodeEngine({ router, queue, kv, engine: echoEngine() }));
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
        kv.free(ids);
      }
    }
  };

  return async function* decode(req: PreprocessedRequest, ctx: Context) {
    release();
    const tokens = req.token_ids;
    const n = Math.ceil(tokens.length / blockSize);
    const ids = kv.allocate(n);
    try {
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
            prefixHitLength: 0,
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
            block_ids: ids,
            expires_at: Date.now() + timeoutMs,
          });
          await kv.waitPrefilled(rid, { timeoutMs, signal: ctx.signal });
        } catch (e) {
          // The remote write may still come: never hand these blocks to another request
          // before its notification does.
          quarantine.set(rid, ids.splice(0));
          if (ctx.signal.aborted) throw e;
          options.logger?.warn("remote prefill failed; prefilling locally", {
            request_id: rid,
            timed_out: e instanceof TimeoutError,
            error: e instanceof Error ? e.message : String(e),
          });
          fellBack = true;
          ids.push(...kv.allocate(n));
        }
      }
      if (!remote || fellBack) kv.fillLocal(ids, tokens, blockSize);
      const verifiedBlocks = kv.verify(ids, tokens, blockSize);
      options.onPrefill?.({
        requestId: ctx.id,
        mode: remote && !fellBack ? "remote" : "local",
        fellBack,
        verifiedBlocks,
        promptTokens: tokens.length,
      });
      yield* options.engine(req, ctx);
    } finally {
      kv.free(ids);
    }
  };
}
