// Tokenization for the serving path: a thin wrapper over `@huggingface/tokenizers` (the
// model's tokenizer.json + tokenizer_config.json).

import { Tokenizer as HfTokenizer } from "@huggingface/tokenizers";
import { isRecord, WordCacheEncoder } from "./_word_cache_encoder.ts";

// Kept here for importers that know the detokenizer by this module.

/** Options of {@linkcode Tokenizer.encode}. */
export interface EncodeOptions {
  /** Add the special tokens the tokenizer's post-processor defines (BOS, ...). Default true. */
  addSpecialTokens?: boolean;
}

/** Options of {@linkcode Tokenizer.decode}. */
export interface DecodeOptions {
  /** Leave special tokens (`<|im_end|>`, ...) out of the text. Default false. */
  skipSpecialTokens?: boolean;
  /**
   * Apply the legacy "clean up tokenization spaces" pass (`" ."` -> `"."`, ...). Default: the
   * tokenizer config's `clean_up_tokenization_spaces` (true when the config does not say).
   */
  cleanUpTokenizationSpaces?: boolean;
}

/** Thrown when tokenizer files cannot be parsed or do not describe a tokenizer. */
export class TokenizerLoadError extends Error {
  /** The error class name. */
  override name = "TokenizerLoadError";
  /**
   * Creates the error.
   *
   * @param message What was wrong.
   * @param options The underlying cause.
   */
  constructor(message: string, options?: ErrorOptions) {
    super(message, options);
  }
}

/**
 * A Hugging Face tokenizer (BPE, byte-level BPE, SentencePiece-style, WordPiece, ...) built
 * from `tokenizer.json` and `tokenizer_config.json`.
 *
 * @example
 * ```ts ignore
 * const tokenizer = Tokenizer.fromBytes(
 *   await Deno.readFile("model/tokenizer.json"),
 *   await Deno.readFile("model/tokenizer_config.json"),
 * );
 * const ids = tokenizer.encode("Hello world");
 * tokenizer.decode(ids); // "Hello world"
 * ```
 */
export class Tokenizer {
  readonly #hf: HfTokenizer;
  readonly #config: Record<string, unknown>;
  #vocabSize: number | undefined;
  /** Added tokens by id (decoded verbatim, not through the byte-level map). */
  readonly #added: Map<number, { content: string; special: boolean }>;
  /** True when decoding is plain byte-level BPE (GPT-2 style): ids map to fixed bytes. */
  readonly byteLevel: boolean;
  readonly #bytes = new Map<number, Uint8Array>();
  /** The cached encode path, when the tokenizer's pipeline allows it (see WordCacheEncoder). */
  readonly #fast: WordCacheEncoder | undefined;

  private constructor(
    hf: HfTokenizer,
    config: Record<string, unknown>,
    json: Record<string, unknown>,
  ) {
    this.#hf = hf;
    this.#config = config;
    this.byteLevel = isRecord(json.decoder) && json.decoder.type === "ByteLevel";
    this.#added = new Map();
    for (const t of Array.isArray(json.added_tokens) ? json.added_tokens : []) {
      if (isRecord(t) && typeof t.id === "number" && typeof t.content === "string") {
        this.#added.set(t.id, { content: t.content, special: t.special === true });
      }
    }
    this.#fast = WordCacheEncoder.create(hf, json, config);
  }

  /**
   * Byte-level tokenizers only: the bytes token `id` stands for, or a string for an added
   * token (decoded verbatim), or null when it is skipped (special, with `skipSpecial`) or
   * unknown.
   */
  tokenPiece(id: number, skipSpecial: boolean): Uint8Array | string | null {
    const added = this.#added.get(id);
    if (added) return added.special && skipSpecial ? null : added.content;
    let bytes = this.#bytes.get(id);
    if (bytes === undefined) {
      const token = this.#hf.id_to_token(id);
      if (token === undefined) return null;
      bytes = new Uint8Array(token.length);
      let n = 0;
      for (const ch of token) {
        const b = BYTE_DECODER.get(ch);
        if (b === undefined) return null; // not a byte-level token: let the full decoder handle it
        bytes[n++] = b;
      }
      bytes = bytes.subarray(0, n);
      this.#bytes.set(id, bytes);
    }
    return bytes;
  }

  /**
   * Builds a tokenizer from the parsed JSON of its two files.
   *
   * @param tokenizerJson Parsed `tokenizer.json`.
   * @param tokenizerConfig Parsed `tokenizer_config.json` (`{}` when the model has none).
   * @returns The tokenizer.
   * @throws {TokenizerLoadError} When the JSON does not describe a supported tokenizer.
   */
  static fromJson(tokenizerJson: unknown, tokenizerConfig: unknown = {}): Tokenizer {
    if (!isRecord(tokenizerJson) || !isRecord(tokenizerJson.model)) {
      throw new TokenizerLoadError("tokenizer.json must be an object with a `model` section");
    }
    if (tokenizerConfig !== null && tokenizerConfig !== undefined && !isRecord(tokenizerConfig)) {
      throw new TokenizerLoadError(
        `tokenizer_config.json must be an object, got ${describeType(tokenizerConfig)}`,
      );
    }
    const config = tokenizerConfig ?? {};
    try {
      // The library reads `added_tokens` unconditionally.
      const json = { added_tokens: [], ...tokenizerJson };
      return new Tokenizer(new HfTokenizer(json, config), config, json);
    } catch (err) {
      throw new TokenizerLoadError(`cannot build tokenizer: ${errorMessage(err)}`, { cause: err });
    }
  }

  /**
   * Builds a tokenizer from the raw bytes of its two files.
   *
   * @param tokenizerJson Bytes of `tokenizer.json`.
   * @param tokenizerConfig Bytes of `tokenizer_config.json`, if the model has one.
   * @returns The tokenizer.
   * @throws {TokenizerLoadError} When a file is not valid JSON or not a tokenizer.
   */
  static fromBytes(tokenizerJson: Uint8Array, tokenizerConfig?: Uint8Array): Tokenizer {
    return Tokenizer.fromJson(
      parseJson(tokenizerJson, "tokenizer.json"),
      tokenizerConfig === undefined ? {} : parseJson(tokenizerConfig, "tokenizer_config.json"),
    );
  }

  /** The parsed `tokenizer_config.json` this tokenizer was built with. */
  get config(): Readonly<Record<string, unknown>> {
    return this.#config;
  }

  /** Number of token ids, added tokens included (the highest id + 1). */
  get vocabSize(): number {
    if (this.#vocabSize === undefined) {
      let max = -1;
      for (const id of this.#hf.get_vocab(true).values()) if (id > max) max = id;
      this.#vocabSize = max + 1;
    }
    return this.#vocabSize;
  }

  /**
   * Turns text into token ids.
   *
   * @param text The text.
   * @param options Whether to add special tokens.
   * @returns The token ids.
   */
  encode(text: string, options: EncodeOptions = {}): number[] {
    const addSpecialTokens = options.addSpecialTokens ?? true;
    const fast = this.#fast;
    if (fast !== undefined && (!addSpecialTokens || fast.specialTokensAddNothing)) {
      return fast.encode(text);
    }
    return this.#hf.encode(text, { add_special_tokens: addSpecialTokens }).ids;
  }

  /**
   * True when {@linkcode Tokenizer.encode} takes the cached word path.
   * @internal
   */
  get cachesWords(): boolean {
    return this.#fast !== undefined;
  }

  /**
   * The library's own encode, never the cached path (for tests that compare the two).
   * @internal
   */
  encodeUncached(text: string, options: EncodeOptions = {}): number[] {
    return this.#hf.encode(text, { add_special_tokens: options.addSpecialTokens ?? true }).ids;
  }

  /**
   * Turns token ids into text. Bytes that do not form complete UTF-8 characters decode to
   * U+FFFD; ids outside the vocabulary decode to the unknown token (or nothing).
   *
   * @param ids The token ids.
   * @param options Whether to skip special tokens and clean up spaces.
   * @returns The text.
   */
  decode(ids: readonly number[], options: DecodeOptions = {}): string {
    if (ids.length === 0) return "";
    const opts: { skip_special_tokens: boolean; clean_up_tokenization_spaces?: boolean } = {
      skip_special_tokens: options.skipSpecialTokens ?? false,
    };
    if (options.cleanUpTokenizationSpaces !== undefined) {
      opts.clean_up_tokenization_spaces = options.cleanUpTokenizationSpaces;
    }
    return this.#hf.decode(ids as number[], opts);
  }

  /**
   * Looks up the id of a vocabulary token.
   *
   * @param token A token string as it appears in the vocabulary (`"Ġhello"`, `"<|im_end|>"`).
   * @returns Its id, or undefined when it is not in the vocabulary.
   */
  tokenToId(token: string): number | undefined {
    return this.#hf.token_to_id(token);
  }

  /**
   * Looks up the vocabulary token of an id.
   *
   * @param id A token id.
   * @returns Its token string, or undefined when the id is not in the vocabulary.
   */
  idToToken(id: number): string | undefined {
    return this.#hf.id_to_token(id);
  }
}

/** GPT-2's bytes_to_unicode, inverted: the character each byte is written as -> the byte. */
const BYTE_DECODER: Map<string, number> = (() => {
  const printable: number[] = [];
  for (let b = 0x21; b <= 0x7e; b++) printable.push(b);
  for (let b = 0xa1; b <= 0xac; b++) printable.push(b);
  for (let b = 0xae; b <= 0xff; b++) printable.push(b);
  const map = new Map<string, number>();
  let extra = 0;
  for (let b = 0; b < 256; b++) {
    if (printable.includes(b)) map.set(String.fromCharCode(b), b);
    else map.set(String.fromCharCode(256 + extra++), b);
  }
  return map;
})();

function parseJson(bytes: Uint8Array, name: string): unknown {
  try {
    return JSON.parse(new TextDecoder().decode(bytes));
  } catch (err) {
    throw new TokenizerLoadError(`${name} is not valid JSON: ${errorMessage(err)}`, {
      cause: err,
    });
  }
}

function describeType(value: unknown): string {
  return Array.isArray(value) ? "an array" : value === null ? "null" : typeof value;
}

function errorMessage(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}
