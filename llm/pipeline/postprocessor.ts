// Turns one choice's engine output stream into text deltas and a finish reason: incremental
// detokenization, hidden stop tokens and eos, stop strings across chunk boundaries,
// max_tokens and min_tokens.

import type {
  FinishReason,
  LLMEngineOutput,
  PreprocessedRequest,
  TopLogprob,
} from "../protocols.ts";
import { RequestError } from "../openai/errors.ts";
import { IncrementalDetokenizer } from "../preprocess/detokenizer.ts";
import type { Tokenizer } from "../preprocess/tokenizer.ts";

/**
 * Finds stop strings in streamed text. Text that could be the start of a stop string is
 * held back until it is known either way, so the client never sees part of a stop string.
 *
 * The sequence stops at the first point where any stop string is complete (the earliest
 * end; on a tie, the longest string), and the output is the text before that string. This
 * depends only on the text, never on how it was chunked.
 *
 * @example
 * ```ts
 * const m = new StopStringMatcher(["\n\n"]);
 * m.push("Hello\n"); // { text: "Hello", matched: false }
 * m.push("\nWorld"); // { text: "", matched: true }
 * ```
 */
export class StopStringMatcher {
  readonly #stops: readonly string[];
  readonly #longest: number;
  #held = "";
  #matched = false;

  /** @param stops Non-empty stop strings. */
  constructor(stops: readonly string[]) {
    for (const s of stops) {
      if (s === "") throw new RangeError("stop strings must not be empty");
    }
    this.#stops = [...stops];
    this.#longest = Math.max(0, ...stops.map((s) => s.length));
  }

  /** True once a stop string was found; later pushes return nothing. */
  get matched(): boolean {
    return this.#matched;
  }

  /**
   * Adds text.
   *
   * @param text The next piece of text.
   * @returns The text now safe to show, and whether a stop string completed.
   */
  push(text: string): { text: string; matched: boolean } {
    if (this.#matched) return { text: "", matched: true };
    const buf = this.#held + text;
    if (this.#stops.length === 0) return { text: buf, matched: false };
    let bestStart = -1;
    let bestEnd = Infinity;
    for (const stop of this.#stops) {
      const start = buf.indexOf(stop);
      if (start < 0) continue;
      const end = start + stop.length;
      if (end < bestEnd || (end === bestEnd && start < bestStart)) {
        bestStart = start;
        bestEnd = end;
      }
    }
    if (bestStart >= 0) {
      this.#matched = true;
      this.#held = "";
      return { text: buf.slice(0, bestStart), matched: true };
    }
    const hold = this.#partialSuffix(buf);
    this.#held = buf.slice(buf.length - hold);
    return { text: buf.slice(0, buf.length - hold), matched: false };
  }

  /**
   * Releases held-back text: the stream ended, so it was not a stop string.
   *
   * @returns The held-back text.
   */
  flush(): string {
    const held = this.#held;
    this.#held = "";
    return held;
  }

  /** Length of the longest suffix of `buf` that a stop string starts with. */
  #partialSuffix(buf: string): number {
    for (let k = Math.min(buf.length, this.#longest - 1); k > 0; k--) {
      const suffix = buf.slice(buf.length - k);
      if (this.#stops.some((s) => s.startsWith(suffix))) return k;
    }
    return 0;
  }
}

/** Options of {@linkcode OutputProcessor}. */
export interface OutputProcessorOptions {
  /** The model's tokenizer. */
  tokenizer: Tokenizer;
  /** Stop strings: output ends before the first one. */
  stopStrings?: readonly string[];
  /** Most tokens to generate; reaching it ends the choice with "length". */
  maxTokens?: number;
  /** The model's eos ids: end the choice with "stop" and are not shown (unless ignoreEos). */
  eosTokenIds?: readonly number[];
  /** More ids that end the choice with "stop" and are not shown. */
  stopTokenIdsHidden?: readonly number[];
  /** Keep going past eos (stop ids and strings still apply). */
  ignoreEos?: boolean;
  /** No eos, stop id or stop string ends the choice before this many tokens. */
  minTokens?: number;
  /** Prompt ids: the last few give the first generated tokens their decoding context. */
  promptIds?: readonly number[];
  /** Leave special tokens out of the text. Default true. */
  skipSpecialTokens?: boolean;
  /**
   * Log probabilities were asked for: an output with tokens but no `log_probs` fails the
   * request (a {@linkcode RequestError} 400 naming `model`, param `logprobs`).
   */
  requireLogprobs?: boolean;
  /** The model's name, for that error. */
  model?: string;
}

/** What one engine output adds to a choice. */
export interface OutputDelta {
  /** New text to send (possibly empty). */
  text: string;
  /** The ids consumed for this delta; ids that stopped the choice are left out. */
  tokenIds: number[];
  /** Log probabilities aligned with `tokenIds`, when the engine sent them. */
  logProbs?: number[];
  /** Each token's most likely alternatives, aligned with `tokenIds`, when the engine sent them. */
  topLogprobs?: TopLogprob[][];
  /** Set once, on the delta that ends the choice. */
  finishReason?: FinishReason;
}

/**
 * The post-processing of one choice.
 *
 * Ids are handled one at a time, so stops land on the exact token: a stop id or eos (after
 * `minTokens`) ends the choice with "stop" and is not shown; a stop string ends it with
 * "stop" and the text from the stop string on is dropped; the `maxTokens`-th token ends it
 * with "length"; otherwise the engine's own reason ends it ("eos" becomes "stop"). Tokens
 * after the end are ignored. `completionTokens` counts every generated token consumed,
 * the stopping one included (as vLLM's usage does).
 *
 * An output with `text` set (the engine decoded itself) is taken as that chunk's text; the
 * detokenizer is bypassed and stop ids then end the choice after the whole chunk.
 *
 * @example
 * ```ts ignore
 * const choice = OutputProcessor.forRequest(tokenizer, request);
 * for await (const output of engineStream) {
 *   const delta = choice.push(output);
 *   send(delta.text);
 *   if (delta.finishReason) break;
 * }
 * if (!choice.finished) send(choice.finish().text);
 * ```
 */
export class OutputProcessor {
  readonly #detok: IncrementalDetokenizer;
  readonly #matcher: StopStringMatcher;
  readonly #maxTokens: number | undefined;
  readonly #stopIds: ReadonlySet<number>;
  readonly #minTokens: number;
  readonly #requireLogprobs: boolean;
  readonly #model: string;
  #completionTokens = 0;
  #finishReason: FinishReason | undefined;
  #done = false;

  /**
   * Creates the processor of one choice's output: detokenizing and stop conditions.
   * @param options Tokenizer and stop conditions.
   * @throws {RangeError} When a stop string is empty or maxTokens is not positive.
   */
  constructor(options: OutputProcessorOptions) {
    if (options.maxTokens !== undefined && !(options.maxTokens >= 1)) {
      throw new RangeError(`maxTokens must be at least 1, got ${options.maxTokens}`);
    }
    this.#detok = new IncrementalDetokenizer(options.tokenizer, {
      promptIds: options.promptIds,
      skipSpecialTokens: options.skipSpecialTokens ?? true,
    });
    this.#matcher = new StopStringMatcher(options.stopStrings ?? []);
    this.#maxTokens = options.maxTokens;
    const stopIds = new Set(options.stopTokenIdsHidden ?? []);
    if (!options.ignoreEos) { for (const id of options.eosTokenIds ?? []) stopIds.add(id); }
    this.#stopIds = stopIds;
    this.#minTokens = options.minTokens ?? 0;
    this.#requireLogprobs = options.requireLogprobs ?? false;
    this.#model = options.model ?? "";
  }

  /**
   * A processor for one choice of a pre-processed request.
   *
   * @param tokenizer The model's tokenizer.
   * @param request The request sent to the engine.
   * @returns The processor.
   */
  static forRequest(
    tokenizer: Tokenizer,
    request: PreprocessedRequest,
    options: { skipSpecialTokens?: boolean } = {},
  ): OutputProcessor {
    const stop = request.stop_conditions;
    return new OutputProcessor({
      skipSpecialTokens: options.skipSpecialTokens,
      tokenizer,
      stopStrings: stop.stop,
      maxTokens: stop.max_tokens,
      eosTokenIds: request.eos_token_ids,
      stopTokenIdsHidden: stop.stop_token_ids_hidden,
      ignoreEos: stop.ignore_eos,
      minTokens: stop.min_tokens,
      promptIds: request.token_ids,
      requireLogprobs: typeof request.output_options?.logprobs === "number",
      model: request.model,
    });
  }

  /** Generated tokens consumed so far (`usage.completion_tokens`). */
  get completionTokens(): number {
    return this.#completionTokens;
  }

  /** Why the choice ended, once it has. */
  get finishReason(): FinishReason | undefined {
    return this.#finishReason;
  }

  /** True once the choice ended (or {@linkcode OutputProcessor.finish} was called). */
  get finished(): boolean {
    return this.#done;
  }

  /**
   * Consumes one engine output.
   *
   * @param output The engine's next output.
   * @returns The text to send, the ids consumed, and the finish reason if the choice ended.
   * @throws {RequestError} 400 when log probabilities were asked for and the output has none.
   */
  push(output: LLMEngineOutput): OutputDelta {
    if (this.#done) return { text: "", tokenIds: [] };
    const ids = output.token_ids ?? [];
    const logProbs = output.log_probs ?? undefined;
    const top = output.top_logprobs ?? undefined;
    if (this.#requireLogprobs && ids.length > 0 && logProbs === undefined) {
      throw new RequestError(
        400,
        `\`logprobs\` is not supported by the engine serving the model \`${this.#model}\`: it returned tokens without log probabilities.`,
        { param: "logprobs", code: "logprobs_unsupported" },
      );
    }
    const delta: OutputDelta = { text: "", tokenIds: [] };
    if (logProbs !== undefined) delta.logProbs = [];
    if (top !== undefined) delta.topLogprobs = [];

    if (typeof output.text === "string") {
      this.#pushEngineText(output, delta);
    } else {
      for (let i = 0; i < ids.length; i++) {
        const id = ids[i]!;
        this.#completionTokens++;
        const pastMin = this.#completionTokens >= this.#minTokens;
        if (pastMin && this.#stopIds.has(id)) {
          this.#endWithDrain("stop", delta);
          return delta;
        }
        delta.tokenIds.push(id);
        if (logProbs !== undefined) delta.logProbs!.push(logProbs[i] ?? NaN);
        if (top !== undefined) delta.topLogprobs!.push(top[i] ?? []);
        if (this.#emit(this.#detok.push([id]), pastMin, delta)) return delta;
        if (this.#maxTokens !== undefined && this.#completionTokens >= this.#maxTokens) {
          this.#endWithDrain("length", delta);
          return delta;
        }
      }
    }
    if (output.finish_reason) {
      this.#endWithDrain(output.finish_reason === "eos" ? "stop" : output.finish_reason, delta);
    }
    return delta;
  }

  /**
   * Ends a stream that stopped without a finish reason: releases held-back text.
   *
   * @returns The remaining text; `finishReason` is "stop" if that text completed a stop string.
   */
  finish(): OutputDelta {
    if (this.#done) return { text: "", tokenIds: [] };
    const delta: OutputDelta = { text: "", tokenIds: [] };
    delta.text = this.#drain(this.#completionTokens >= this.#minTokens);
    if (this.#matcher.matched) this.#end("stop", delta);
    this.#done = true;
    return delta;
  }

  #pushEngineText(output: LLMEngineOutput, delta: OutputDelta): void {
    const ids = output.token_ids ?? [];
    let stopped = false;
    ids.forEach((id, i) => {
      if (stopped) return;
      this.#completionTokens++;
      if (this.#completionTokens >= this.#minTokens && this.#stopIds.has(id)) {
        stopped = true;
        return;
      }
      delta.tokenIds.push(id);
      if (delta.logProbs !== undefined) delta.logProbs.push(output.log_probs?.[i] ?? NaN);
      if (delta.topLogprobs !== undefined) delta.topLogprobs.push(output.top_logprobs?.[i] ?? []);
    });
    const pastMin = this.#completionTokens >= this.#minTokens;
    if (this.#emit(output.text ?? "", pastMin, delta)) return;
    if (stopped) {
      this.#endWithDrain("stop", delta);
    } else if (this.#maxTokens !== undefined && this.#completionTokens >= this.#maxTokens) {
      this.#endWithDrain("length", delta);
    }
  }

  /** Passes text through the stop-string matcher; true when that ended the choice. */
  #emit(text: string, pastMin: boolean, delta: OutputDelta): boolean {
    if (!pastMin) {
      delta.text += text;
      return false;
    }
    const r = this.#matcher.push(text);
    delta.text += r.text;
    if (r.matched) this.#end("stop", delta);
    return r.matched;
  }

  /** Ends the choice, emitting held-back text unless it completes a stop string. */
  #endWithDrain(reason: FinishReason, delta: OutputDelta): void {
    const pastMin = this.#completionTokens >= this.#minTokens;
    delta.text += this.#drain(pastMin);
    this.#end(this.#matcher.matched ? "stop" : reason, delta);
  }

  /** Everything held back (partial characters, partial stop strings), stop-checked. */
  #drain(pastMin: boolean): string {
    const tail = this.#detok.flush();
    if (!pastMin) return tail;
    const r = this.#matcher.push(tail);
    return r.matched ? r.text : r.text + this.#matcher.flush();
  }

  #end(reason: FinishReason, delta: OutputDelta): void {
    this.#done = true;
    this.#finishReason = reason;
    delta.finishReason = reason;
  }
}
