// Disaggregated prefill/decode on llama.cpp's real KV state, one engine's side. The prefill
// engine computes the KV of all but the prompt's last token and exports the sequence's state
// as bytes (kv_state.ts); the decode engine checks those bytes, imports them into a free
// sequence and evaluates the last prompt token itself, so its first logits (and, greedy,
// every token after) are those of the whole prompt served in one place.

import type { LlamaContextSequence, Token } from "node-llama-cpp";
import type { Context } from "../../../runtime/context.ts";
import type { LLMEngineOutput, PreprocessedRequest } from "../../protocols.ts";
import { type LlamaCppEngine, reusePrefix, type SequencePrepare } from "./engine.ts";
import { LlamaCppRequestError, LlamaCppStateError } from "./errors.ts";
import {
  type CheckedKvState,
  decodeKvState,
  encodeKvState,
  HEADER_BYTES_FIXED,
  HEADER_BYTES_PER_TOKEN,
  MAX_STREAMS,
  type ModelIdentity,
  modelIdentity,
  prefixProblem,
  readdressStreams,
  STATE_MAGIC,
} from "./kv_state.ts";

/** Options of {@linkcode LlamaCppDisagg.create}. */
export interface LlamaCppDisaggOptions {
  /** The model's identity when known (e.g. from a manifest); default: hash the file once. */
  identity?: ModelIdentity;
  /**
   * Where the file that bridges llama.cpp's state file and bytes lives for a moment
   * (node-llama-cpp 3.21.1 saves and loads sequence state only through files); default
   * `/dev/shm` (memory) when there, else the system's temp folder.
   */
  stateDir?: string;
}

/**
 * One engine's side of disaggregated serving: exports prefilled sequence state (prefill
 * role) and checks, imports and continues from it (decode role).
 *
 * @example
 * ```ts ignore
 * const prefill = await LlamaCppDisagg.create(await LlamaCppEngine.load(path));
 * const decode = await LlamaCppDisagg.create(await LlamaCppEngine.load(path));
 * const blob = await prefill.prefill(request.token_ids); // moved by the transfer agent
 * const state = await decode.checkState(blob, request.token_ids);
 * for await (const out of decode.generateFromState(request, state)) console.log(out);
 * ```
 */
export class LlamaCppDisagg {
  /** The engine. */
  readonly engine: LlamaCppEngine;
  /** The model file's identity, written into every export and checked on every import. */
  readonly identity: ModelIdentity;
  readonly #stateDir: string | undefined;

  private constructor(engine: LlamaCppEngine, identity: ModelIdentity, stateDir?: string) {
    this.engine = engine;
    this.identity = identity;
    this.#stateDir = stateDir;
  }

  /**
   * Wraps an engine; hashes its model file unless `options.identity` is given.
   *
   * @param engine a loaded engine
   * @param options the model's identity, where the bridging file goes
   * @returns the engine's disaggregation side
   * @throws {Deno.errors.NotFound} the model file is gone
   */
  static async create(
    engine: LlamaCppEngine,
    options: LlamaCppDisaggOptions = {},
  ): Promise<LlamaCppDisagg> {
    const identity = options.identity ?? await modelIdentity(engine.path);
    return new LlamaCppDisagg(engine, identity, options.stateDir ?? defaultStateDir());
  }

  /**
   * Bytes an exported state of `tokens` tokens takes at most (to size a decode worker's
   * slots): the KV rows of every layer in f16 (node-llama-cpp's default cache type), per
   * cell metadata, and the header.
   *
   * @param tokens prompt tokens (default: the context's length)
   * @returns a bound in bytes
   */
  maxStateBytes(tokens: number = this.engine.contextLength): number {
    const meta = this.engine.model.fileInfo.architectureMetadata as ArchitectureMetadata;
    const layers = meta.block_count ?? 1;
    const embd = meta.embedding_length ?? 4096;
    const heads = perLayer(meta.attention?.head_count, layers, 1);
    const kvHeads = perLayer(meta.attention?.head_count_kv, layers, heads[0] ?? 1);
    let rowBytes = 0;
    for (let il = 0; il < layers; il++) {
      const h = heads[il] ?? 1;
      const kv = kvHeads[il] ?? h;
      const k = meta.attention?.key_length ?? Math.ceil(embd / h);
      const v = meta.attention?.value_length ?? Math.ceil(embd / h);
      rowBytes += kv * (k + v) * 2;
    }
    // Per token: its K and V rows, 12 bytes of cell metadata, its id in the file and header.
    const perToken = rowBytes + 16 + HEADER_BYTES_PER_TOKEN;
    // Per layer a few type and size fields; per KV stream (up to 4096) one cell count.
    return tokens * perToken + layers * 64 + 4 * MAX_STREAMS + HEADER_BYTES_FIXED +
      STATE_MAGIC.length + 4;
  }

  /**
   * Prefill role: computes the KV of all but the prompt's last token on a free sequence
   * (keeping a prefix it already holds, as aggregated serving does) and exports it.
   *
   * @param prompt the whole prompt (at least two tokens)
   * @param signal stops the wait for a free sequence
   * @returns the state: header and llama.cpp's sequence state, for {@linkcode checkState}
   * @throws {LlamaCppRequestError} a prompt too short to split, or too long for the context
   */
  prefill(prompt: readonly number[], signal?: AbortSignal): Promise<Uint8Array> {
    if (!Array.isArray(prompt) || prompt.length < 2) {
      return Promise.reject(
        new LlamaCppRequestError("a remote prefill needs a prompt of at least 2 tokens"),
      );
    }
    if (prompt.length >= this.engine.contextLength) {
      return Promise.reject(
        new LlamaCppRequestError(
          `prompt of ${prompt.length} tokens does not fit the context of ${this.engine.contextLength}`,
        ),
      );
    }
    const prefix = prompt.slice(0, -1);
    return this.engine.withSequence(prefix, async (seq) => {
      const cached = await reusePrefix(seq, prefix);
      await seq.evaluateWithoutGeneratingNewTokens(prefix.slice(cached) as Token[]);
      const state = await this.#save(seq);
      return await encodeKvState({
        model: this.identity,
        tokens: prefix,
        cached_tokens: cached,
        streams: seq.context.totalSequences,
      }, state);
    }, signal);
  }

  /**
   * Decode role, first half: checks an exported state against this engine and a prompt
   * before llama.cpp sees it: format, sizes, checksum, model, and that it holds exactly the
   * prompt but its last token.
   *
   * @param blob the bytes as they arrived
   * @param prompt the request's prompt
   * @returns the checked state, for {@linkcode generateFromState}
   * @throws {LlamaCppStateError} it is refused (the reason says why)
   */
  async checkState(blob: Uint8Array, prompt: readonly number[]): Promise<CheckedKvState> {
    const checked = await decodeKvState(blob, {
      maxTokens: this.engine.contextLength - 1,
      maxStateBytes: this.maxStateBytes(),
    });
    const { header } = checked;
    const m = header.model;
    if (m.sha256 !== this.identity.sha256 || m.bytes !== this.identity.bytes) {
      throw new LlamaCppStateError(
        `it was computed with another model (sha256 ${m.sha256.slice(0, 16)}..., ${m.bytes} ` +
          `bytes; this engine's is ${this.identity.sha256.slice(0, 16)}..., ` +
          `${this.identity.bytes} bytes)`,
      );
    }
    const problem = prefixProblem(header.tokens, prompt);
    if (problem !== undefined) throw new LlamaCppStateError(problem);
    if (header.streams !== this.engine.maxNumSeqs && !this.#canReaddress()) {
      throw new LlamaCppStateError(
        `it comes from a context of ${header.streams} sequences, this one has ` +
          `${this.engine.maxNumSeqs}, and this model's cache layout cannot be re-addressed ` +
          "(give both engines the same maxNumSeqs)",
      );
    }
    return checked;
  }

  /**
   * Decode role, second half: imports a checked state into a free sequence, evaluates the
   * prompt's last token and generates as {@linkcode LlamaCppEngine.generate} does. The first
   * output's `cached_tokens` is what the prefill engine kept from its own cache.
   *
   * @param request the request the state was prefilled for
   * @param state from {@linkcode checkState} for this request's prompt
   * @param ctx the request's context
   * @returns the generated tokens, one output per token
   * @throws {LlamaCppStateError} llama.cpp refused the state, or it is not for this prompt
   *   (thrown before the first output; the sequence is cleared and the engine serves on)
   */
  async *generateFromState(
    request: PreprocessedRequest,
    state: CheckedKvState,
    ctx?: Context,
  ): AsyncGenerator<LLMEngineOutput> {
    const problem = prefixProblem(state.header.tokens, request?.token_ids ?? []);
    if (problem !== undefined) throw new LlamaCppStateError(problem);
    const prepare: SequencePrepare = (seq) => this.#load(seq, state);
    let head = true;
    for await (const out of this.engine.generate(request, ctx, prepare)) {
      if (!head) {
        yield out;
        continue;
      }
      head = false;
      // The engine counts the imported tokens as cached; what was reused is the prefill's.
      const { cached_tokens: _, ...rest } = out;
      const cached = state.header.cached_tokens;
      yield cached > 0 ? { ...rest, cached_tokens: cached } : rest;
    }
  }

  async #save(seq: LlamaContextSequence): Promise<Uint8Array> {
    const file = await Deno.makeTempFile({ dir: this.#stateDir, prefix: "llamacpp-state-" });
    try {
      await seq.saveStateToFile(file);
      return await Deno.readFile(file);
    } finally {
      await Deno.remove(file).catch(() => {});
    }
  }

  async #load(seq: LlamaContextSequence, checked: CheckedKvState): Promise<number> {
    const { header } = checked;
    const streams = seq.context.totalSequences;
    const bytes = header.streams === streams
      ? checked.state
      : readdressStreams(checked.state, header.tokens.length, header.streams, streams);
    const file = await Deno.makeTempFile({ dir: this.#stateDir, prefix: "llamacpp-state-" });
    try {
      await Deno.writeFile(file, bytes);
      await seq.loadStateFromFile(file, { acceptRisk: true });
    } catch (e) {
      await seq.clearHistory().catch(() => {});
      const why = e instanceof Error ? e.message : String(e);
      throw new LlamaCppStateError(`llama.cpp cannot load it: ${why}`, { cause: e });
    } finally {
      await Deno.remove(file).catch(() => {});
    }
    if (prefixProblem(seq.contextTokens, [...header.tokens, 0]) !== undefined) {
      await seq.clearHistory().catch(() => {});
      throw new LlamaCppStateError("llama.cpp loaded other tokens than the header names");
    }
    return header.tokens.length;
  }

  // One KV cache whose per-sequence layout is [streams][cells of one stream]: the streams
  // can be re-addressed. Sliding-window (two caches), hybrid and recurrent models cannot.
  #canReaddress(): boolean {
    const insights = this.engine.model.fileInsights;
    return insights.swaSize === undefined && !insights.isHybrid && !insights.isRecurrent;
  }
}

interface ArchitectureMetadata {
  block_count?: number;
  embedding_length?: number;
  attention?: {
    head_count?: number | number[];
    head_count_kv?: number | number[];
    key_length?: number;
    value_length?: number;
  };
}

/** A GGUF per-layer value (one number for all layers, or one per layer). */
function perLayer(value: number | number[] | undefined, layers: number, fallback: number) {
  if (Array.isArray(value)) return value;
  return Array.from({ length: layers }, () => value ?? fallback);
}

function defaultStateDir(): string | undefined {
  try {
    return Deno.statSync("/dev/shm").isDirectory ? "/dev/shm" : undefined;
  } catch {
    return undefined;
  }
}
