// The llama.cpp engine: a GGUF model in this process (node-llama-cpp's prebuilt binaries), one
// context holding several sequences; requests evaluating at once share each decode batch.

import {
  getLlama,
  type LlamaContext,
  type LlamaContextSequence,
  type LlamaEmbeddingContext,
  type LlamaGrammar,
  LlamaGrammarEvaluationState,
  LlamaLogLevel,
  type LlamaModel,
  type SequenceEvaluateOptions,
  type Token,
} from "node-llama-cpp";
import type { Context } from "../../../runtime/context.ts";
import { InvalidArgumentError } from "../../../runtime/errors.ts";
import type { Logger } from "../../../runtime/logger.ts";
import { GgufError, readGgufMetadata } from "../../model/gguf.ts";
import type { ForwardPassMetrics, KvCacheEventData } from "../../kv_router/protocols.ts";
import type {
  EmbeddingsEngineOutput,
  LLMEngineOutput,
  PreprocessedEmbeddingRequest,
  PreprocessedRequest,
  SamplingOptions,
  TopLogprob,
} from "../../protocols.ts";
import { grammarSchema, UnsupportedSchemaError } from "../../openai/json_schema.ts";
import { LlamaCppLoadError, LlamaCppRequestError } from "./errors.ts";
import { KvBlockTracker } from "./kv_blocks.ts";

/** Options of {@linkcode LlamaCppEngine.load}. */
export interface LlamaCppEngineOptions {
  /** Layers offloaded to the GPU (default 0: CPU only, the only build loaded here). */
  nGpuLayers?: number;
  /** Sequences in the context: requests served at once, the rest wait (default 4). */
  maxNumSeqs?: number;
  /** Tokens per sequence (default: the model's training context, at most 4096). */
  contextLength?: number;
  /**
   * CPU threads for a decode (default: the cores this process may use, less one for the event
   * loop). llama.cpp's own default counts the machine's cores: in a CPU-limited container it ran
   * ~30x slower; and with every core decoding, the JS thread that asks for the next token waits
   * behind llama.cpp's spinning workers (2 cores here: 1 thread gave ~119 tok/s, 2 gave ~59).
   */
  threads?: number;
  /** Where llama.cpp's own messages go (warnings and errors only); default nowhere. */
  logger?: Logger;
  /** Tokens per KV block in the events and metrics (the card's block size; default 16). */
  kvBlockSize?: number;
  /**
   * Receives the KV cache's events: blocks stored when a sequence's evaluated tokens fill them,
   * removed when no sequence holds them any more (hashed as the KV router hashes prompts).
   */
  onKvEvent?: (data: KvCacheEventData) => void;
  /** Receives the engine's load whenever a request starts, waits or ends. */
  onMetrics?: (metrics: ForwardPassMetrics) => void;
}

/**
 * The handler shape of a Tokens-input engine: a generation request yields token outputs; an
 * embedding request (`token_ids` a list of token lists) yields one {@linkcode EmbeddingsEngineOutput}.
 */
export type LlamaCppHandler = (
  request: PreprocessedRequest | PreprocessedEmbeddingRequest,
  context?: Context,
) => AsyncGenerator<LLMEngineOutput | EmbeddingsEngineOutput>;

/**
 * Readies a sequence for a prompt before generation: leaves the KV of the prompt's first
 * tokens in it and returns how many (generation evaluates the rest). The default keeps a
 * shared prefix ({@linkcode reusePrefix}); disaggregated decode imports a prefilled state.
 */
export type SequencePrepare = (
  seq: LlamaContextSequence,
  prompt: readonly number[],
) => Promise<number>;

/**
 * A loaded GGUF model serving the project's Tokens protocol.
 *
 * @example
 * ```ts ignore
 * const engine = await LlamaCppEngine.load("SmolLM2-135M-Instruct.Q4_1.gguf");
 * await endpoint.serveEndpoint(engine.handler);
 * ```
 */
export class LlamaCppEngine {
  /** The file it was loaded from. */
  readonly path: string;
  /** The underlying node-llama-cpp model (the library called directly, for baselines). */
  readonly model: LlamaModel;
  /** Tokens per sequence. */
  readonly contextLength: number;
  /** The Tokens-protocol handler, for `endpoint.serveEndpoint`. */
  readonly handler: LlamaCppHandler;
  readonly #context: LlamaContext;
  readonly #free: LlamaContextSequence[];
  readonly #all: readonly LlamaContextSequence[];
  readonly #waiters: Array<(seq: LlamaContextSequence) => void> = [];
  readonly #blocks: KvBlockTracker<LlamaContextSequence>;
  /** Whether KV events or metrics are wanted (otherwise the blocks are not tracked). */
  readonly #tracking: boolean;
  readonly #onMetrics: ((metrics: ForwardPassMetrics) => void) | undefined;
  #promptTokens = 0;
  #cachedTokens = 0;
  #closed = false;
  /** Grammars of the JSON schemas seen lately, by their JSON text (compiling one costs). */
  readonly #grammars = new Map<string, Promise<LlamaGrammar>>();
  #embedding: Promise<LlamaEmbeddingContext> | undefined;
  readonly #threads: number;

  private constructor(
    path: string,
    model: LlamaModel,
    context: LlamaContext,
    sequences: LlamaContextSequence[],
    options: LlamaCppEngineOptions,
  ) {
    this.path = path;
    this.model = model;
    this.#context = context;
    this.contextLength = context.contextSize;
    this.#free = sequences;
    this.#all = [...sequences];
    const onKvEvent = options.onKvEvent;
    this.#blocks = new KvBlockTracker(options.kvBlockSize ?? 16, (data) => onKvEvent?.(data));
    this.#onMetrics = options.onMetrics;
    this.#tracking = options.onKvEvent !== undefined || options.onMetrics !== undefined;
    this.#threads = options.threads ?? defaultThreads();
    this.handler = (request, ctx) =>
      isEmbeddingRequest(request)
        ? this.embed(request)
        : this.generate(request as PreprocessedRequest, ctx);
  }

  /** Tokens per KV block in events and metrics. */
  get kvBlockSize(): number {
    return this.#blocks.blockSize;
  }

  /**
   * The sequence hashes of the KV blocks the context holds now (what the events said; empty
   * when the engine was loaded without `onKvEvent` or `onMetrics`).
   */
  heldBlocks(): bigint[] {
    return this.#blocks.blocks();
  }

  /**
   * The tokens whose KV each sequence of the context holds now, as llama.cpp evaluated them
   * (sequences holding nothing left out): what the KV events describe.
   */
  cachedSequences(): number[][] {
    return this.#all.map((seq) => [...seq.contextTokens]).filter((t) => t.length > 0);
  }

  /** The engine's load now, in the KV router's terms. */
  metrics(): ForwardPassMetrics {
    const total = this.#context.totalSequences;
    const kvTotal = total * Math.floor(this.contextLength / this.kvBlockSize);
    const kvActive = this.#blocks.blockCount;
    return {
      request_active_slots: this.activeSequences,
      request_total_slots: total,
      kv_active_blocks: kvActive,
      kv_total_blocks: kvTotal,
      num_requests_waiting: this.#waiters.length,
      gpu_cache_usage_perc: kvTotal > 0 ? Math.min(1, kvActive / kvTotal) : 0,
      gpu_prefix_cache_hit_rate: this.#promptTokens > 0
        ? this.#cachedTokens / this.#promptTokens
        : 0,
    };
  }

  /**
   * Loads a GGUF model. The file is checked first (present, GGUF magic, readable metadata), so
   * a bad file fails with its reason instead of a llama.cpp message.
   *
   * @param path the `.gguf` file
   * @param options sequences, context length, GPU layers, threads, logger
   * @returns the engine, ready to serve
   * @throws {LlamaCppLoadError} missing, not a GGUF, truncated or refused by llama.cpp
   * @throws {InvalidArgumentError} an option out of range
   */
  static async load(path: string, options: LlamaCppEngineOptions = {}): Promise<LlamaCppEngine> {
    const maxNumSeqs = options.maxNumSeqs ?? 4;
    const nGpuLayers = options.nGpuLayers ?? 0;
    if (!Number.isInteger(maxNumSeqs) || maxNumSeqs < 1) {
      throw new InvalidArgumentError(`maxNumSeqs must be a whole number >= 1, got ${maxNumSeqs}`);
    }
    if (!Number.isInteger(nGpuLayers) || nGpuLayers < 0) {
      throw new InvalidArgumentError(`nGpuLayers must be a whole number >= 0, got ${nGpuLayers}`);
    }
    const kvBlockSize = options.kvBlockSize ?? 16;
    if (!Number.isInteger(kvBlockSize) || kvBlockSize < 1) {
      throw new InvalidArgumentError(`kvBlockSize must be a whole number >= 1, got ${kvBlockSize}`);
    }
    const architecture = await checkFile(path, nGpuLayers);
    const logger = options.logger;
    // llama.cpp says why a load failed only in its log: keep the last lines for the error.
    const recent: string[] = [];
    let loading = true;
    // getLlama hands out one shared instance per set of options: never disposed here.
    const llama = await getLlama({
      gpu: nGpuLayers > 0 ? "auto" : false,
      build: "never",
      logLevel: LlamaLogLevel.warn,
      logger: (level, message) => {
        const text = oneLine(message);
        if (text === "") return;
        recent.push(text);
        if (recent.length > 4) recent.shift();
        // While loading, the reason goes into the load error instead (one line, not three).
        if (loading) return;
        if (level === LlamaLogLevel.error || level === LlamaLogLevel.fatal) {
          logger?.error("llama.cpp", { message: text });
        } else logger?.warn("llama.cpp", { message: text });
      },
    });
    let model: LlamaModel;
    try {
      recent.length = 0;
      model = await llama.loadModel({ modelPath: path, gpuLayers: nGpuLayers });
      loading = false;
    } catch (err) {
      const why = err instanceof Error ? err.message : String(err);
      const detail = recent.filter((l) => !l.includes("failed to load model")).at(-1);
      throw new LlamaCppLoadError(
        path,
        `llama.cpp refused it (architecture ${architecture}): ${oneLine(why)}` +
          (detail ? ` (${detail})` : ""),
        { cause: err },
      );
    }
    try {
      const train = model.trainContextSize;
      const contextLength = options.contextLength ?? Math.min(train, 4096);
      if (!Number.isInteger(contextLength) || contextLength < 16) {
        throw new InvalidArgumentError(
          `contextLength must be a whole number >= 16, got ${contextLength}`,
        );
      }
      const context = await model.createContext({
        sequences: maxNumSeqs,
        contextSize: contextLength,
        threads: options.threads ?? defaultThreads(),
      });
      const sequences = Array.from({ length: maxNumSeqs }, () => context.getSequence());
      return new LlamaCppEngine(path, model, context, sequences, options);
    } catch (err) {
      await model.dispose().catch(() => {});
      throw err;
    }
  }

  /**
   * Serves one pre-processed request: evaluates its prompt, then samples token by token until an
   * eos or stop token, `max_tokens`, the end of the context, or the caller stops the context.
   * With `sampling_options.guided_decoding.json` (a JSON schema) sampling follows the schema's
   * grammar and ends (`stop`) once the output is a complete JSON value.
   *
   * @param request `{token_ids, stop_conditions, sampling_options, eos_token_ids}`
   * @param ctx the request's context; stopping it ends generation within one decode step
   * @param prepare readies the sequence (default: keep the prefix it shares with the prompt)
   * @returns the generated tokens, one output per token, the last with `finish_reason`
   * @throws {LlamaCppRequestError} no prompt tokens, a prompt that fills the context, or a
   *   guided-decoding schema outside the subset a grammar enforces
   */
  async *generate(
    request: PreprocessedRequest,
    ctx?: Context,
    prepare: SequencePrepare = reusePrefix,
  ): AsyncGenerator<LLMEngineOutput> {
    const prompt = request?.token_ids;
    if (!Array.isArray(prompt) || prompt.length === 0) {
      throw new LlamaCppRequestError("llamacpp engine needs a request with non-empty token_ids");
    }
    if (prompt.length >= this.contextLength) {
      throw new LlamaCppRequestError(
        `prompt of ${prompt.length} tokens does not fit the context of ${this.contextLength}`,
      );
    }
    const stop = request.stop_conditions ?? {};
    const room = this.contextLength - prompt.length;
    const maxTokens = Math.min(stop.max_tokens ?? room, room);
    const minTokens = stop.min_tokens ?? 0;
    const eos = new Set(stop.ignore_eos ? [] : request.eos_token_ids ?? []);
    const hidden = new Set(stop.stop_token_ids_hidden ?? []);
    if (maxTokens <= 0) {
      yield { token_ids: [], finish_reason: "length" };
      return;
    }
    const schema = request.sampling_options?.guided_decoding?.json;
    const grammar = schema === undefined ? undefined : await this.#grammar(schema);

    const seq = await this.#acquire(prompt, ctx?.signal);
    if (seq === undefined) {
      yield { token_ids: [], finish_reason: "cancelled" };
      return;
    }
    const generated: Token[] = [];
    try {
      // The sequence still holds the KV of its last request: by default keep the prefix this
      // prompt shares with it and evaluate only the rest.
      const cached = await prepare(seq, prompt);
      this.#promptTokens += prompt.length;
      this.#cachedTokens += cached;
      this.#sync(seq);
      let evaluated = false;
      // The first output says how much of the prompt came from the kept KV (usage reports it).
      let head: { cached_tokens?: number } = cached > 0 ? { cached_tokens: cached } : {};
      const firstOut = (out: LLMEngineOutput): LLMEngineOutput => {
        if (head.cached_tokens === undefined) return out;
        const withHead = { ...out, ...head };
        head = {};
        return withHead;
      };
      const options = evaluateOptions(request.sampling_options ?? {}, generated);
      if (grammar !== undefined) {
        options.grammarEvaluationState = new LlamaGrammarEvaluationState({
          model: this.model,
          grammar,
        });
      }
      // node-llama-cpp ends at the model's end-of-generation tokens unless told to yield them:
      // the request's ids decide here (ignore_eos, min_tokens, the frontend's eos list).
      const top = request.output_options?.logprobs;
      const steps = typeof top === "number"
        ? withLogprobs(seq, prompt.slice(cached) as Token[], options, top)
        : seq.evaluate(prompt.slice(cached) as Token[], options);
      for await (const step of steps) {
        // The fast path yields bare tokens; with log probabilities, a token and its numbers.
        const token = typeof step === "number" ? step : step.token;
        const lp = typeof step === "number" ? undefined : step;
        const first = lp === undefined
          ? firstOut
          : (out: LLMEngineOutput) =>
            firstOut({ ...out, log_probs: [lp.logprob], top_logprobs: [lp.top] });
        generated.push(token);
        if (!evaluated) {
          // The prompt's KV is in: the router may send requests sharing it here from now.
          evaluated = true;
          this.#sync(seq);
        }
        const n = generated.length;
        // The grammar allows only whitespace after the JSON value: end once it is complete
        // (a small model would otherwise pad it with whitespace up to max_tokens).
        if (grammar !== undefined && this.#jsonComplete(generated, token)) {
          yield first({ token_ids: [token], finish_reason: "stop" });
          return;
        }
        const ends = n >= minTokens && (eos.has(token) || hidden.has(token));
        if (ends) {
          yield first({ token_ids: [token], finish_reason: "stop" });
          return;
        }
        if (n >= maxTokens) {
          yield first({ token_ids: [token], finish_reason: "length" });
          return;
        }
        if (ctx?.isStopped()) {
          yield first({ token_ids: [token], finish_reason: "cancelled" });
          return;
        }
        yield first({ token_ids: [token] });
        // A consumer that stopped while this token was in flight: no further decode step.
        if (ctx?.isStopped()) {
          yield { token_ids: [], finish_reason: "cancelled" };
          return;
        }
      }
      yield { token_ids: [], finish_reason: "length" };
    } finally {
      this.#release(seq);
    }
  }

  /**
   * Embeds each input (its token ids) with the model: the L2-normalised vector llama.cpp's
   * embedding context gives (the model's pooling; the last token's state for models without
   * one). An embedding context is created at the first request and kept.
   *
   * @param request `{token_ids: number[][]}`, one token list per input
   * @returns one output with a vector per input and the tokens read
   * @throws {LlamaCppRequestError} an empty input list, an empty input, or one that does not fit
   *   the context
   */
  async *embed(request: PreprocessedEmbeddingRequest): AsyncGenerator<EmbeddingsEngineOutput> {
    const inputs = request?.token_ids;
    if (!Array.isArray(inputs) || inputs.length === 0) {
      throw new LlamaCppRequestError("an embedding request needs at least one input");
    }
    inputs.forEach((ids, i) => {
      if (!Array.isArray(ids) || ids.length === 0) {
        throw new LlamaCppRequestError(`embedding input ${i} has no tokens`);
      }
      if (ids.length > this.contextLength) {
        throw new LlamaCppRequestError(
          `embedding input ${i} has ${ids.length} tokens, more than the context of ${this.contextLength}`,
        );
      }
    });
    this.#embedding ??= this.model.createEmbeddingContext({
      contextSize: this.contextLength,
      threads: this.#threads,
    });
    const context = await this.#embedding;
    const embeddings: number[][] = [];
    let tokens = 0;
    for (const ids of inputs) {
      const { vector } = await context.getEmbeddingFor(ids as Token[]);
      embeddings.push(normalize(vector));
      tokens += ids.length;
    }
    yield { embeddings, prompt_tokens: tokens, total_tokens: tokens };
  }

  /** The grammar of a JSON schema (cached by its text; the last 32 kept). */
  #grammar(schema: unknown): Promise<LlamaGrammar> {
    const key = JSON.stringify(schema);
    const cached = this.#grammars.get(key);
    if (cached !== undefined) {
      // Most recently used last.
      this.#grammars.delete(key);
      this.#grammars.set(key, cached);
      return cached;
    }
    let converted: Record<string, unknown>;
    try {
      converted = grammarSchema(schema);
    } catch (err) {
      if (!(err instanceof UnsupportedSchemaError)) throw err;
      return Promise.reject(
        new LlamaCppRequestError(`guided_decoding.json is not supported: ${err.message}`),
      );
    }
    // The schema's type is only known at run time: the library's generic signature is bypassed.
    const llama = this.model.llama;
    const create = llama.createGrammarForJsonSchema as (s: unknown) => Promise<LlamaGrammar>;
    const grammar = create.call(llama, converted);
    this.#grammars.set(key, grammar);
    grammar.catch(() => this.#grammars.delete(key));
    if (this.#grammars.size > 32) this.#grammars.delete(this.#grammars.keys().next().value!);
    return grammar;
  }

  /** Whether the generated text is a complete JSON value (checked when a token may close one). */
  #jsonComplete(generated: Token[], last: Token): boolean {
    const piece = this.model.detokenize([last]);
    if (!piece.includes("}") && !piece.includes("]")) return false;
    try {
      JSON.parse(this.model.detokenize(generated));
      return true;
    } catch {
      return false;
    }
  }

  /**
   * Runs `fn` on a free sequence (the one holding the longest prefix of `prompt`), waiting
   * for one if all are taken; the sequence keeps its KV afterwards, for prefix reuse.
   *
   * @param prompt the tokens `fn` will work on (picks the sequence)
   * @param fn the work, e.g. prefilling and exporting the sequence's state
   * @param signal stops the wait for a sequence
   * @returns what `fn` returns
   * @throws {DOMException} `signal` aborted while waiting (its reason)
   */
  async withSequence<T>(
    prompt: readonly number[],
    fn: (seq: LlamaContextSequence) => Promise<T>,
    signal?: AbortSignal,
  ): Promise<T> {
    const seq = await this.#acquire(prompt, signal);
    if (seq === undefined) {
      signal?.throwIfAborted();
      throw new LlamaCppRequestError("no sequence: the wait for one was stopped");
    }
    try {
      return await fn(seq);
    } finally {
      this.#release(seq);
    }
  }

  /** Sequences in the context: requests served at once. */
  get maxNumSeqs(): number {
    return this.#context.totalSequences;
  }

  /** Requests running now (sequences taken). */
  get activeSequences(): number {
    return this.#context.totalSequences - this.#free.length;
  }

  /** Frees the context and the model. Requests still running fail. */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    const embedding = await this.#embedding?.catch(() => undefined);
    await embedding?.dispose();
    await this.#context.dispose();
    await this.model.dispose();
  }

  /** A free sequence (the one holding the longest prefix of `prompt`), or waits for one. */
  #acquire(
    prompt: readonly number[],
    signal: AbortSignal | undefined,
  ): Promise<LlamaContextSequence | undefined> {
    if (signal?.aborted) return Promise.resolve(undefined);
    if (this.#free.length > 0) {
      let best = 0;
      let bestShared = -1;
      this.#free.forEach((seq, i) => {
        const shared = sharedPrefix(seq.contextTokens, prompt);
        if (shared > bestShared) [best, bestShared] = [i, shared];
      });
      const seq = this.#free.splice(best, 1)[0];
      this.#publishMetrics();
      return Promise.resolve(seq);
    }
    const { promise, resolve } = Promise.withResolvers<LlamaContextSequence | undefined>();
    const waiter = (seq: LlamaContextSequence) => {
      signal?.removeEventListener("abort", onAbort);
      resolve(seq);
    };
    const onAbort = () => {
      const i = this.#waiters.indexOf(waiter);
      if (i >= 0) this.#waiters.splice(i, 1);
      resolve(undefined);
    };
    signal?.addEventListener("abort", onAbort, { once: true });
    this.#waiters.push(waiter);
    this.#publishMetrics();
    return promise;
  }

  #release(seq: LlamaContextSequence): void {
    // The sequence keeps its KV: the next request that shares its prefix reuses it.
    if (!this.#closed) this.#sync(seq);
    const next = this.#waiters.shift();
    if (next) next(seq);
    else this.#free.push(seq);
    this.#publishMetrics();
  }

  /** Tells the events what `seq` holds now. */
  #sync(seq: LlamaContextSequence): void {
    // Hashing the context costs per request: only when someone listens.
    if (!this.#tracking) return;
    this.#blocks.update(seq, seq.contextTokens);
  }

  #publishMetrics(): void {
    if (this.#onMetrics && !this.#closed) this.#onMetrics(this.metrics());
  }
}

/**
 * Shorter shared prefixes are evaluated again rather than reused: they save little (a chat
 * template's system part), and a prompt evaluated whole gives exactly the tokens the library
 * gives on a fresh sequence.
 */
export const MIN_REUSED_PREFIX = 64;

/** How many leading tokens `held` and `prompt` share. */
function sharedPrefix(held: readonly number[], prompt: readonly number[]): number {
  const n = Math.min(held.length, prompt.length);
  let i = 0;
  while (i < n && held[i] === prompt[i]) i++;
  return i;
}

/**
 * Aligns a sequence with a new prompt: keeps the KV of the prefix they share (at least
 * {@linkcode MIN_REUSED_PREFIX} tokens, and never the whole prompt: its last token is evaluated
 * to sample from) and erases the rest. The engine's default {@linkcode SequencePrepare}.
 *
 * @param seq a free sequence, holding whatever its last request left
 * @param prompt the new prompt
 * @returns how many prompt tokens are served from the kept KV
 */
export async function reusePrefix(
  seq: LlamaContextSequence,
  prompt: readonly number[],
): Promise<number> {
  const held = seq.nextTokenIndex;
  if (held === 0) return 0;
  const shared = Math.min(sharedPrefix(seq.contextTokens, prompt), prompt.length - 1);
  if (shared < MIN_REUSED_PREFIX) {
    await seq.clearHistory();
    return 0;
  }
  if (shared < held) await seq.eraseContextTokenRanges([{ start: shared, end: held }]);
  return shared;
}

/** Log probabilities below this are written as it (OpenAI's "very unlikely", and finite). */
const MIN_LOGPROB = -9999;

/** A generated token with its log probability and the `top` most likely tokens. */
interface TokenWithLogprobs {
  token: Token;
  logprob: number;
  top: TopLogprob[];
}

/**
 * Generation with log probabilities (the slow path, only when a request asks for them). The
 * probabilities are node-llama-cpp's: the softmax over the candidates the sampler chain
 * left (after the logit bias and repetition penalties and, when sampling, after top-k,
 * top-p, min-p and the temperature), that is, the distribution the token was drawn from;
 * greedy decoding (temperature 0) filters nothing, so they are the model's own, penalties
 * applied. With no alternatives asked for, only the chosen token's probability is read.
 */
async function* withLogprobs(
  seq: LlamaContextSequence,
  tokens: Token[],
  options: SequenceEvaluateOptions,
  top: number,
): AsyncGenerator<TokenWithLogprobs> {
  const toLog = (p: number) => Math.min(0, Math.max(MIN_LOGPROB, Math.log(p)));
  if (top <= 0) {
    for await (const out of seq.evaluateWithMetadata(tokens, { confidence: true }, options)) {
      yield { token: out.token, logprob: toLog(out.confidence), top: [] };
    }
    return;
  }
  for await (const out of seq.evaluateWithMetadata(tokens, { probabilities: true }, options)) {
    const alternatives: TopLogprob[] = [];
    // The map is sorted, most likely first.
    for (const [token_id, p] of out.probabilities) {
      if (alternatives.length >= top) break;
      alternatives.push({ rank: alternatives.length + 1, token_id, logprob: toLog(p) });
    }
    const chosen = out.probabilities.get(out.token);
    yield {
      token: out.token,
      logprob: chosen === undefined ? MIN_LOGPROB : toLog(chosen),
      top: alternatives,
    };
  }
}

/** The request's sampling options in node-llama-cpp's terms (temperature 0 = greedy). */
function evaluateOptions(s: SamplingOptions, generated: Token[]): SequenceEvaluateOptions {
  const options: SequenceEvaluateOptions = { temperature: s.temperature ?? 1, yieldEogToken: true };
  if (s.top_k !== undefined && s.top_k > 0) options.topK = s.top_k;
  if (s.top_p !== undefined && s.top_p < 1) options.topP = s.top_p;
  if (s.min_p !== undefined && s.min_p > 0) options.minP = s.min_p;
  if (s.seed !== undefined) options.seed = s.seed;
  const penalty = s.repetition_penalty ?? 1;
  const frequency = s.frequency_penalty ?? 0;
  const presence = s.presence_penalty ?? 0;
  if (penalty !== 1 || frequency !== 0 || presence !== 0) {
    // Penalties apply to the tokens generated so far (vLLM's presence/frequency semantics).
    options.repeatPenalty = {
      punishTokens: () => generated,
      maxPunishTokens: Number.MAX_SAFE_INTEGER,
      penalty,
      frequencyPenalty: frequency,
      presencePenalty: presence,
    };
  }
  return options;
}

/** Checks the file before llama.cpp sees it; returns its architecture. */
async function checkFile(path: string, nGpuLayers: number): Promise<string> {
  let size = 0;
  try {
    const stat = await Deno.stat(path);
    if (!stat.isFile) throw new LlamaCppLoadError(path, "not a file");
    size = stat.size;
  } catch (err) {
    if (err instanceof LlamaCppLoadError) throw err;
    if (err instanceof Deno.errors.NotFound) throw new LlamaCppLoadError(path, "no such file");
    throw new LlamaCppLoadError(path, err instanceof Error ? err.message : String(err), {
      cause: err,
    });
  }
  try {
    const metadata = await readGgufMetadata(path);
    const arch = metadata.metadata["general.architecture"];
    // llama.cpp maps the weights: on the CPU, a model larger than the machine's memory would
    // load, then page from disk on every token. Say so now instead.
    const memory = Deno.systemMemoryInfo();
    const room = memory.total + memory.swapTotal;
    if (nGpuLayers === 0 && size > room) {
      throw new LlamaCppLoadError(
        path,
        `the model is ${gib(size)} GiB, more than this machine's memory (${gib(room)} GiB)`,
      );
    }
    return typeof arch === "string" ? arch : "unknown";
  } catch (err) {
    if (err instanceof LlamaCppLoadError) throw err;
    if (err instanceof GgufError) {
      const at = err.message.startsWith(`${path}: `) ? err.message.slice(path.length + 2) : err
        .message;
      throw new LlamaCppLoadError(path, at, { cause: err });
    }
    throw err;
  }
}

/** Threads for a decode: the cores this process may use, less one for the event loop. */
export function defaultThreads(): number {
  return Math.max(1, navigator.hardwareConcurrency - 1);
}

function gib(bytes: number): string {
  return (bytes / 2 ** 30).toFixed(1);
}

function oneLine(text: string): string {
  return text.replace(/\s+/g, " ").trim();
}

/** Whether a request is an embedding request: its `token_ids` a list of token lists. */
function isEmbeddingRequest(
  request: PreprocessedRequest | PreprocessedEmbeddingRequest,
): request is PreprocessedEmbeddingRequest {
  const ids = (request as { token_ids?: unknown } | null)?.token_ids;
  return Array.isArray(ids) && ids.length > 0 && Array.isArray(ids[0]);
}

/** `v` scaled to length 1 (a zero vector stays zero). */
function normalize(v: readonly number[]): number[] {
  let sum = 0;
  for (const x of v) sum += x * x;
  const norm = Math.sqrt(sum);
  return norm === 0 ? [...v] : v.map((x) => x / norm);
}
