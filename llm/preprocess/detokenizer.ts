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
  readonly #byteLevel: boolean;
  /** The streaming decoder, made at the first piece that is not plain ASCII. */
  #utf8: TextDecoder | undefined;
  /**
   * Continuation bytes the last character given to #utf8 still needs: while it is 0 the
   * decoder holds nothing back, and an ASCII piece is its own text (no decoder call).
   */
  #need = 0;

  /**
   * Creates a detokenizer for one sequence.
   *
   * @param tokenizer The model's tokenizer.
   * @param options Prompt context and special-token handling.
   */
  constructor(tokenizer: Tokenizer, options: IncrementalDetokenizerOptions = {}) {
    this.#tokenizer = tokenizer;
    this.#skipSpecialTokens = options.skipSpecialTokens ?? true;
    this.#byteLevel = tokenizer.byteLevel === true;
    const prompt = options.promptIds ?? [];
    this.#ids = prompt.slice(Math.max(0, prompt.length - PROMPT_CONTEXT_IDS));
    this.#prefixOffset = 0;
    this.#readOffset = this.#ids.length;
    // The byte-level path needs no window (and decoding the context costs a full decode).
    this.#prefixLength = this.#byteLevel ? 0 : this.#decode(0, this.#readOffset).length;
  }

  /**
   * Adds generated ids.
   *
   * @param ids The next token ids (any number, including none).
   * @returns The text they complete, possibly empty.
   */
  push(ids: readonly number[]): string {
    if (this.#byteLevel) return this.#pushBytes(ids);
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
    if (this.#byteLevel) return this.#endBytes();
    if (this.#readOffset === this.#ids.length) return "";
    const text = this.#decode(this.#prefixOffset, this.#ids.length);
    const start = this.#prefixLength + this.#extraEmitted;
    const out = text.length > start ? text.slice(start) : "";
    this.#advance();
    return out;
  }

  #pushBytes(ids: readonly number[]): string {
    let out = "";
    for (const id of ids) {
      const piece = this.#tokenizer.tokenPiece(id, this.#skipSpecialTokens);
      if (piece === null) continue;
      // Added tokens are text of their own: bytes before them end there (as in decode()).
      if (typeof piece === "string") {
        out += this.#endBytes() + piece;
        continue;
      }
      if (this.#need === 0) {
        const ascii = asciiText(piece);
        if (ascii !== undefined) {
          out += ascii;
          continue;
        }
      }
      this.#need = utf8Need(piece, this.#need);
      // ignoreBOM: a U+FEFF the model produced is text, not a byte order mark to drop (the
      // decoder drops one at the start of each stream otherwise; decode() keeps it).
      out += (this.#utf8 ??= new TextDecoder("utf-8", { ignoreBOM: true })).decode(piece, {
        stream: true,
      });
    }
    return out;
  }

  /** Ends the bytes given so far: what the decoder held back (U+FFFD for a cut character). */
  #endBytes(): string {
    this.#need = 0;
    return this.#utf8 === undefined ? "" : this.#utf8.decode();
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

/** A short piece of plain ASCII as its text, else undefined (the decoder's job). */
function asciiText(piece: Uint8Array): string | undefined {
  const n = piece.length;
  if (n > 24) return undefined;
  let text = "";
  for (let i = 0; i < n; i++) {
    const b = piece[i]!;
    if (b >= 0x80) return undefined;
    text += String.fromCharCode(b);
  }
  return text;
}

/**
 * The continuation bytes still missing after `bytes`, given `need` missing before them: an
 * upper bound of what a UTF-8 decoder holds back (never 0 while it holds a partial character).
 */
function utf8Need(bytes: Uint8Array, need: number): number {
  for (let i = 0; i < bytes.length; i++) {
    const b = bytes[i]!;
    if (need > 0 && (b & 0xc0) === 0x80) need--;
    else if (b >= 0xc2 && b <= 0xdf) need = 1;
    else if (b >= 0xe0 && b <= 0xef) need = 2;
    else if (b >= 0xf0 && b <= 0xf4) need = 3;
    else need = 0; // ASCII, or a byte no character starts with (replaced at once)
  }
  return need;
}
