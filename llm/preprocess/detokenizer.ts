// An incremental detokenizer for streams: token ids in, complete characters out.

import type { Tokenizer } from "./tokenizer.ts";

/** Options of {@linkcode IncrementalDetokenizer}. */
export interface IncrementalDetokenizerOptions {
  /**
   * Ids that precede the generated ones (usually the prompt). The last few give the first
   * generated tokens their context, so a leading space decodes as it would mid-text.
   */
  promptIds?: readonly number[];
  /** Leave special tokens out of the text. Default true. */
  skipSpecialTokens?: boolean;
}

/** How many trailing prompt ids give context to the first generated token (as vLLM). */
const PROMPT_CONTEXT_IDS = 5;

const REPLACEMENT_CHAR = "\uFFFD";

/**
 * Turns a stream of token ids into a stream of text, emitting each character once and
 * only when it is complete.
 *
 * A token need not end on a character boundary (byte-level BPE splits multi-byte UTF-8
 * characters), and a token's text can depend on its neighbours (SentencePiece's leading
 * space). So, as vLLM's `detokenize_incrementally`, it decodes a sliding window of ids: from
 * `prefixOffset` (context already emitted) to the end, and emits what goes past the text of
 * the window's emitted part. Text ending in U+FFFD is held back until the next id completes
 * the character; {@linkcode IncrementalDetokenizer.flush} releases it at the end.
 *
 * Space clean-up (`clean_up_tokenization_spaces`) is never applied: it rewrites text
 * already emitted.
 *
 * @example
 * ```ts ignore
 * const detok = new IncrementalDetokenizer(tokenizer);
 * let text = "";
 * for await (const ids of stream) text += detok.push(ids);
 * text += detok.flush();
 * ```
 */
export class IncrementalDetokenizer {
  readonly #tokenizer: Tokenizer;
  readonly #skipSpecialTokens: boolean;
  readonly #ids: number[];
  /** Start of the decoded window. */
  #prefixOffset: number;
  /** End of the window part whose text was fully emitted at the last clean boundary. */
  #readOffset: number;
  /** Length of decode(ids[prefixOffset, readOffset)). */
  #prefixLength: number;
  /** Characters emitted beyond #prefixLength while a trailing partial character is held. */
  #extraEmitted = 0;
  /**
   * Byte-level tokenizers: ids map to fixed bytes, so a streaming UTF-8 decoder does the
   * whole job (it holds back partial characters itself) at a fraction of the window cost.
   */
  readonly #utf8: TextDecoder | undefined;

  /**
   * Creates a detokenizer for one sequence.
   *
   * @param tokenizer The model's tokenizer.
   * @param options Prompt context and special-token handling.
   */
  constructor(tokenizer: Tokenizer, options: IncrementalDetokenizerOptions = {}) {
    this.#tokenizer = tokenizer;
    this.#skipSpecialTokens = options.skipSpecialTokens ?? true;
    this.#utf8 = tokenizer.byteLevel ? new TextDecoder("utf-8") : undefined;
    const prompt = options.promptIds ?? [];
    this.#ids = prompt.slice(Math.max(0, prompt.length - PROMPT_CONTEXT_IDS));
    this.#prefixOffset = 0;
    this.#readOffset = this.#ids.length;
    // The byte-level path needs no window (and decoding the context costs a full decode).
    this.#prefixLength = this.#utf8 ? 0 : this.#decode(0, this.#readOffset).length;
  }

  /**
   * Adds generated ids.
   *
   * @param ids The next token ids (any number, including none).
   * @returns The text they complete, possibly empty.
   */
  push(ids: readonly number[]): string {
    if (this.#utf8) return this.#pushBytes(ids, this.#utf8);
    for (const id of ids) this.#ids.push(id);
    if (ids.length === 0) return "";
    const text = this.#decode(this.#prefixOffset, this.#ids.length);
    const start = this.#prefixLength + this.#extraEmitted;
    if (text.endsWith(REPLACEMENT_CHAR)) {
      // The tail may be a character still missing bytes: emit only what comes before it.
      let end = text.length;
      while (end > start && text[end - 1] === REPLACEMENT_CHAR) end--;
      if (end <= start) return "";
      this.#extraEmitted += end - start;
      return text.slice(start, end);
    }
    const out = text.length > start ? text.slice(start) : "";
    this.#advance();
    return out;
  }

  /**
   * Releases held-back text (an incomplete character at the very end decodes to U+FFFD).
   *
   * @returns The held-back text, possibly empty.
   */
  flush(): string {
    if (this.#utf8) return this.#utf8.decode();
    if (this.#readOffset === this.#ids.length) return "";
    const text = this.#decode(this.#prefixOffset, this.#ids.length);
    const start = this.#prefixLength + this.#extraEmitted;
    const out = text.length > start ? text.slice(start) : "";
    this.#advance();
    return out;
  }

  #pushBytes(ids: readonly number[], utf8: TextDecoder): string {
    let out = "";
    for (const id of ids) {
      const piece = this.#tokenizer.tokenPiece(id, this.#skipSpecialTokens);
      if (piece === null) continue;
      // Added tokens are text of their own: bytes before them end there (as in decode()).
      if (typeof piece === "string") out += utf8.decode() + piece;
      else out += utf8.decode(piece, { stream: true });
    }
    return out;
  }

  /** Everything decoded cleanly: the ids just emitted become the next window's context. */
  #advance(): void {
    this.#prefixOffset = this.#readOffset;
    this.#readOffset = this.#ids.length;
    this.#extraEmitted = 0;
    this.#prefixLength = this.#decode(this.#prefixOffset, this.#readOffset).length;
    // Drop ids that will never be decoded again.
    if (this.#prefixOffset > 0) {
      this.#ids.splice(0, this.#prefixOffset);
      this.#readOffset -= this.#prefixOffset;
      this.#prefixOffset = 0;
    }
  }

  #decode(from: number, to: number): string {
    if (to <= from) return "";
    return this.#tokenizer.decode(this.#ids.slice(from, to), {
      skipSpecialTokens: this.#skipSpecialTokens,
      cleanUpTokenizationSpaces: false,
    });
  }
}
