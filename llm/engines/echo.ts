// The echo engine: tokens in, the prompt's tokens back, one per step, with a configurable
// delay. Log probabilities, when asked for, are synthetic_logprobs.ts's fixed values.
// Deterministic and migration-consistent: a migrated request (the tokens already
// streamed appended to the prompt, `migrated_tokens` set) continues where it left off.

import type { Context } from "../../runtime/context.ts";
import { InvalidArgumentError } from "../../runtime/errors.ts";
import type { LLMEngineOutput, PreprocessedRequest } from "../protocols.ts";
import { withSyntheticLogprobs } from "./synthetic_logprobs.ts";

/** Options of {@linkcode echoEngine}. */
export interface EchoEngineOptions {
  /** Pause before each token in ms (default 0). */
  delayMs?: number;
}

/**
 * Builds an echo handler for `endpoint.serveEndpoint`.
 *
 * @example
 * ```ts ignore
 * await endpoint.serveEndpoint(echoEngine({ delayMs: 10 }));
 * ```
 */
export function echoEngine(
  options: EchoEngineOptions = {},
): (req: PreprocessedRequest, ctx: Context) => AsyncGenerator<LLMEngineOutput> {
  const delayMs = options.delayMs ?? 0;
  if (!(delayMs >= 0)) throw new InvalidArgumentError(`echo delayMs must be >= 0, got ${delayMs}`);
  return async function* echo(req: PreprocessedRequest, ctx: Context) {
    if (!Array.isArray(req?.token_ids)) {
      throw new InvalidArgumentError("echo engine needs a pre-processed request with token_ids");
    }
    const done = req.migrated_tokens ?? 0;
    const prompt = req.token_ids.slice(0, req.token_ids.length - done);
    const max = req.stop_conditions?.max_tokens ?? Infinity;
    const top = req.output_options?.logprobs;
    let emitted = 0;
    for (let i = done; i < prompt.length; i++) {
      if (ctx.isStopped()) {
        yield { token_ids: [], finish_reason: "cancelled" };
        return;
      }
      if (delayMs > 0) await sleep(delayMs, ctx.signal);
      emitted++;
      const last = i === prompt.length - 1;
      const out = withSyntheticLogprobs({ token_ids: [prompt[i]!] }, top);
      if (emitted >= max && !last) {
        yield { ...out, finish_reason: "length" };
        return;
      }
      yield last ? { ...out, finish_reason: "stop" } : out;
    }
    if (done >= prompt.length) yield { token_ids: [], finish_reason: "stop" };
  };
}

function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const timer = setTimeout(done, ms);
    function done() {
      clearTimeout(timer);
      signal.removeEventListener("abort", done);
      resolve();
    }
    signal.addEventListener("abort", done, { once: true });
  });
}
