// The decode worker's handler for disaggregated serving with the llama.cpp engine: per
// request, prefill locally or have a prefill worker write the prompt's state into a slot of
// the decode worker's transfer memory (StateInbox, StatePrefillWorker), then import it and
// generate. Every failure of the remote path falls back to local prefill.

import type { Context } from "../../../runtime/context.ts";
import { TimeoutError } from "../../../runtime/errors.ts";
import type { Logger } from "../../../runtime/logger.ts";
import type { TokensEngine } from "../../disagg/decode.ts";
import { PrefillSkippedError } from "../../disagg/prefill_notifs.ts";
import type { RemoteStatePrefillRequest } from "../../disagg/protocol.ts";
import type { PrefillQueue } from "../../disagg/queue.ts";
import type { DisaggRouter } from "../../disagg/router.ts";
import type { StateInbox } from "../../disagg/state_inbox.ts";
import type { LLMEngineOutput, PreprocessedRequest } from "../../protocols.ts";
import type { LlamaCppDisagg } from "./disagg.ts";
import type { CheckedKvState } from "./kv_state.ts";
import { LlamaCppStateError } from "./errors.ts";

/** Options of {@linkcode llamaCppDisaggDecode}. */
export interface LlamaCppDecodeOptions {
  /** The decode engine's disaggregation side. */
  disagg: LlamaCppDisagg;
  /** Where prefill workers write states. */
  inbox: StateInbox;
  /** Where remote prefill requests go. */
  queue: PrefillQueue<RemoteStatePrefillRequest>;
  /** Decides per request whether to prefill remotely. */
  router: DisaggRouter;
  /** Whether a prefill worker is there now (e.g. discovery); default always. */
  remoteAvailable?: () => boolean;
  /** Longest wait for a remote prefill before prefilling locally; default 10 000 ms. */
  remoteTimeoutMs?: number;
  /** Called once per request when it is known how its prompt was prefilled. */
  onPrefill?: (report: LlamaCppPrefillReport) => void;
  /** Where the handler logs fallbacks. */
  logger?: Logger;
}

/** How one request's prompt was prefilled. */
export interface LlamaCppPrefillReport {
  /** The request id. */
  requestId: string;
  /** Where the KV of the prompt came from. */
  mode: "local" | "remote";
  /** Remote was chosen but failed (timeout, skipped, refused state); prefilled locally. */
  fellBack: boolean;
  /**
   * Why it fell back, or why it stayed local when remote was wanted (no free slot, or a
   * prompt whose state would not fit one).
   */
  reason?: string;
  /** Tokens in the prompt. */
  promptTokens: number;
  /** Bytes of state read from the inbox (what the transfer delivered; 0 when none was). */
  stateBytes: number;
  /** Prompt tokens the prefill engine kept from its own cache. */
  cachedTokens: number;
}

/**
 * The decode worker's handler: per request, prefill locally or queue a remote prefill into
 * a slot of `inbox`, wait for it, check and import the state, and generate. Every failure of
 * the remote path (no slot, timeout, skipped, a refused state) falls back to local prefill,
 * so a bad or absent prefill worker fails no request.
 *
 * @param options engine, inbox, queue and router
 * @returns the handler, for `endpoint.serveEndpoint`
 * @example
 * ```ts ignore
 * const handler = llamaCppDisaggDecode({ disagg, inbox, queue, router });
 * await endpoint.serveEndpoint(handler);
 * ```
 */
export function llamaCppDisaggDecode(options: LlamaCppDecodeOptions): TokensEngine {
  const { disagg, inbox, queue } = options;
  const timeoutMs = options.remoteTimeoutMs ?? 10_000;
  const engine = disagg.engine;
  return async function* decode(req: PreprocessedRequest, ctx: Context) {
    const prompt = req?.token_ids;
    const report = (r: Omit<LlamaCppPrefillReport, "requestId" | "promptTokens">) =>
      options.onPrefill?.({
        requestId: ctx.id,
        promptTokens: Array.isArray(prompt) ? prompt.length : 0,
        ...r,
      });
    const local = (reason?: string) => {
      report({
        mode: "local",
        fellBack: reason !== undefined && reason !== NO_SLOT && reason !== TOO_LONG,
        reason,
        stateBytes: 0,
        cachedTokens: 0,
      });
      return engine.generate(req, ctx);
    };
    // Too short to split, or invalid (the engine says why): served locally.
    if (!Array.isArray(prompt) || prompt.length < 2 || prompt.length >= engine.contextLength) {
      yield* local();
      return;
    }
    if (!await wantsRemote(options, prompt.length)) {
      yield* local();
      return;
    }
    // A state too large for a slot would be computed only to be skipped.
    if (disagg.maxStateBytes(prompt.length) > inbox.slotBytes) {
      yield* local(TOO_LONG);
      return;
    }
    const slot = inbox.takeSlot();
    if (slot === undefined) {
      yield* local(NO_SLOT);
      return;
    }
    const rid = ctx.id;
    let blob: Uint8Array | undefined;
    let reason: string | undefined;
    // Whether no write into the slot can come any more (else it waits for the late one).
    let settled = true;
    try {
      await queue.enqueue({
        request_id: rid,
        token_ids: prompt,
        engine_agent: inbox.agent.name,
        first_chunk: slot.firstChunk,
        chunk_count: slot.chunkCount,
        expires_at: Date.now() + timeoutMs,
      });
      settled = false;
      await inbox.waitWritten(rid, { timeoutMs, signal: ctx.signal });
      settled = true;
      blob = inbox.read(slot);
    } catch (e) {
      if (e instanceof PrefillSkippedError) settled = true;
      reason = e instanceof TimeoutError
        ? `no prefilled state within ${timeoutMs} ms`
        : e instanceof Error
        ? e.message
        : String(e);
    } finally {
      if (settled) inbox.releaseSlot(slot);
      else inbox.abandon(slot, rid);
    }
    ctx.signal.throwIfAborted();
    let checked: CheckedKvState | undefined;
    if (blob !== undefined) {
      try {
        checked = await disagg.checkState(blob, prompt);
      } catch (e) {
        if (!(e instanceof LlamaCppStateError)) throw e;
        reason = e.message;
      }
    }
    if (checked === undefined) {
      options.logger?.warn("remote prefill failed; prefilling locally", {
        request_id: rid,
        reason,
      });
      yield* local(reason ?? "no state");
      return;
    }
    const outputs = disagg.generateFromState(req, checked, ctx);
    let first: IteratorResult<LLMEngineOutput>;
    try {
      first = await outputs.next();
    } catch (e) {
      if (!(e instanceof LlamaCppStateError)) throw e;
      options.logger?.warn("prefilled state refused; prefilling locally", {
        request_id: rid,
        reason: e.message,
      });
      yield* local(e.message);
      return;
    }
    report({
      mode: "remote",
      fellBack: false,
      stateBytes: blob!.length,
      cachedTokens: checked.header.cached_tokens,
    });
    try {
      if (first.done) return;
      yield first.value;
      yield* outputs;
    } finally {
      await outputs.return(undefined);
    }
  };
}

const NO_SLOT = "no free state slot";
const TOO_LONG = "the prompt's state would not fit a state slot";

async function wantsRemote(options: LlamaCppDecodeOptions, length: number): Promise<boolean> {
  if (!(options.remoteAvailable?.() ?? true)) return false;
  let queueSize: number;
  try {
    queueSize = await options.queue.size();
  } catch (e) {
    options.logger?.warn("prefill queue unavailable; prefilling locally", {
      error: e instanceof Error ? e.message : String(e),
    });
    return false;
  }
  return options.router.shouldPrefillRemote({
    prefillLength: length,
    prefixHitLength: 0,
    queueSize,
  });
}
