// Tokenization for the serving path: a thin wrapper over `@huggingface/tokenizers` (the
// model's tokenizer.json + tokenizer_config.json) and an incremental detokenizer for streams.

import { Tokenizer as HfTokenizer } from "@huggingface/tokenizers";

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
  override name = "TokenizerLoadError";
  /**
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
   * @param token A token string as it appears in the vocabulary (`"Ġhello"`, `"<|im_end|>"`).
   * @returns Its id, or undefined when it is not in the vocabulary.
   */
  tokenToId(token: string): number | undefined {
    return this.#hf.token_to_id(token);
  }

  /**
   * @param id A token id.
   * @returns Its token string, or undefined when the id is not in the vocabulary.
   */
  idToToken(id: number): string | undefined {
    return this.#hf.id_to_token(id);
  }
}

/** The parts of the library's tokenizer that {@linkcode WordCacheEncoder} drives. */
interface HfInternals {
  normalizer: ((text: string) => string) | null;
  pre_tokenizer: { tokenizers?: unknown } | null;
  model: ((tokens: string[]) => string[]) & {
    tokens_to_ids: Map<string, number>;
    unk_token_id: number | undefined;
  };
  post_processor: unknown;
  added_tokens_map: Map<string, { id: number; lstrip: boolean; rstrip: boolean }>;
  splitter_unnormalized: { split(text: string): string[] };
  splitter_normalized: { split(text: string): string[] };
  remove_space: unknown;
  do_lowercase_and_remove_accent: unknown;
}

/** A pre-tokenizer step of the library: texts in, pieces out. */
interface HfPreTokenizer {
  pre_tokenize(texts: string[]): string[];
  /** Split steps: their compiled pattern and config. */
  pattern?: unknown;
  config?: { invert?: unknown; behavior?: unknown };
}

/**
 * A Split step (behavior "Isolated", not inverted) as the library runs it (`regex_split`):
 * matches and the text between them, in order, without empty pieces. It runs `exec` on a
 * regex of its own instead of `matchAll`, which clones the regex per call, and a clone must
 * find the compiled pattern again (recompiling it after garbage collections).
 */
function isolatingSplit(pattern: RegExp): (text: string) => string[] {
  const re = new RegExp(pattern.source, pattern.flags);
  const unicode = re.unicode || re.unicodeSets;
  return (text) => {
    const out: string[] = [];
    let prev = 0;
    re.lastIndex = 0;
    for (let m = re.exec(text); m !== null; m = re.exec(text)) {
      const full = m[0];
      if (prev < m.index) out.push(text.slice(prev, m.index));
      if (full.length > 0) {
        out.push(full);
      } else {
        // As matchAll: step over an empty match (a whole code point in unicode mode).
        const at = re.lastIndex;
        const c = text.charCodeAt(at);
        re.lastIndex = at + (unicode && c >= 0xd800 && c <= 0xdbff && at + 1 < text.length &&
            (text.charCodeAt(at + 1) & 0xfc00) === 0xdc00
          ? 2
          : 1);
      }
      prev = m.index + full.length;
    }
    if (prev < text.length) out.push(text.slice(prev));
    return out;
  };
}

/** Most words kept; past it the oldest are dropped. */
const WORD_CACHE_SIZE = 16_384;
/** Longer words are not cached (the library's BPE cache has the same limit). */
const WORD_CACHE_MAX_LENGTH = 256;

/**
 * `encode` for byte-level BPE tokenizers whose pre-tokenizer is regex splits followed by a
 * byte-level mapping of each piece (Qwen2/3, Llama 3, DeepSeek, ...), with a bounded cache of
 * the ids of each word (regex piece). It runs the library's own steps in the library's order
 * (added-token split, normalizer, regex split, byte-level map, BPE, id lookup), so its output
 * is the library's; only the per-word work (byte mapping, BPE, id lookup) is remembered: each
 * word's ids depend on the word alone when BPE does not fuse unknown tokens across words.
 */
class WordCacheEncoder {
  readonly #hf: HfInternals;
  /** The Split steps, each as a function of one text. */
  readonly #splits: ((text: string) => string[])[];
  readonly #byteLevel: HfPreTokenizer;
  readonly #cache = new Map<string, readonly number[]>();
  /**
   * The added tokens (not normalized) as one alternation, longest first: at each position it
   * takes the longest token there, as the library's trie does. Null when there are none.
   */
  readonly #addedPattern: RegExp | null;
  /** The post-processor adds nothing with `add_special_tokens` (none, or ByteLevel). */
  readonly specialTokensAddNothing: boolean;

  private constructor(
    hf: HfInternals,
    splits: ((text: string) => string[])[],
    byteLevel: HfPreTokenizer,
    specialTokensAddNothing: boolean,
  ) {
    this.#hf = hf;
    this.#splits = splits;
    this.#byteLevel = byteLevel;
    this.specialTokensAddNothing = specialTokensAddNothing;
    const contents = [...hf.added_tokens_map.keys()].filter((c) => c.length > 0);
    contents.sort((a, b) => b.length - a.length);
    this.#addedPattern = contents.length === 0
      ? null
      : new RegExp(contents.map((c) => c.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")).join("|"), "g");
  }

  /** `text` cut around added tokens: the library's `splitter_unnormalized.split`. */
  #splitAdded(text: string): string[] {
    const pattern = this.#addedPattern;
    if (pattern === null) return text.length === 0 ? [] : [text];
    const out: string[] = [];
    let start = 0;
    pattern.lastIndex = 0;
    for (let m = pattern.exec(text); m !== null; m = pattern.exec(text)) {
      if (m.index > start) out.push(text.slice(start, m.index));
      out.push(m[0]);
      start = m.index + m[0].length;
    }
    if (start < text.length) out.push(text.slice(start));
    return out;
  }

  /** The encoder, or undefined when the tokenizer's pipeline is not one it reproduces. */
  static create(
    library: HfTokenizer,
    json: Record<string, unknown>,
    config: Record<string, unknown>,
  ): WordCacheEncoder | undefined {
    const hf = library as unknown as HfInternals;
    const model = json.model;
    const pre = json.pre_tokenizer;
    if (!isRecord(model) || model.type !== "BPE" || model.fuse_unk === true) return undefined;
    if (model.dropout !== undefined && model.dropout !== null) return undefined;
    if (config.remove_space || config.do_lowercase_and_remove_accent) return undefined;
    if (!isRecord(pre) || pre.type !== "Sequence" || !Array.isArray(pre.pretokenizers)) {
      return undefined;
    }
    const steps = pre.pretokenizers as unknown[];
    const last = steps[steps.length - 1];
    if (
      steps.length < 2 || !isRecord(last) || last.type !== "ByteLevel" ||
      last.use_regex !== false || last.add_prefix_space === true
    ) {
      return undefined;
    }
    for (const step of steps.slice(0, -1)) {
      if (!isRecord(step) || step.type !== "Split") return undefined;
    }
    // Normalized added tokens are matched after normalization: leave those to the library.
    for (const t of Array.isArray(json.added_tokens) ? json.added_tokens : []) {
      if (isRecord(t) && t.normalized === true && json.normalizer) return undefined;
    }
    const post = json.post_processor;
    const specialTokensAddNothing = post === null || post === undefined ||
      (isRecord(post) && post.type === "ByteLevel");
    // The library's objects for those steps (checked, in case its internals change).
    const built = hf.pre_tokenizer?.tokenizers;
    if (
      !Array.isArray(built) || built.length !== steps.length ||
      !built.every((b) => typeof b?.pre_tokenize === "function") ||
      typeof hf.model !== "function" || !(hf.model.tokens_to_ids instanceof Map) ||
      !(hf.added_tokens_map instanceof Map) ||
      typeof hf.splitter_unnormalized?.split !== "function" ||
      typeof hf.splitter_normalized?.split !== "function" ||
      (hf.normalizer !== null && typeof hf.normalizer !== "function") ||
      hf.remove_space || hf.do_lowercase_and_remove_accent
    ) {
      return undefined;
    }
    const pieces = built as HfPreTokenizer[];
    const splits = pieces.slice(0, -1).map((step) => {
      const isolated = step.config?.invert === false &&
        String(step.config.behavior).toLowerCase() !== "removed";
      return isolated && step.pattern instanceof RegExp && step.pattern.global
        ? isolatingSplit(step.pattern)
        : (text: string) => step.pre_tokenize([text]);
    });
    return new WordCacheEncoder(
      hf,
      splits,
      pieces[pieces.length - 1]!,
      specialTokensAddNothing,
    );
  }

  /** The ids of `text`, as the library's encode (its post-processor adds nothing). */
  encode(text: string): number[] {
    const hf = this.#hf;
    const added = hf.added_tokens_map;
    const ids: number[] = [];
    // Added tokens first (as the library: split, then strip around lstrip/rstrip tokens).
    const sections = this.#splitAdded(text);
    for (let i = 0; i < sections.length; i++) {
      const token = added.get(sections[i]!);
      if (token === undefined) continue;
      if (token.lstrip && i > 0) sections[i - 1] = sections[i - 1]!.trimEnd();
      if (token.rstrip && i < sections.length - 1) sections[i + 1] = sections[i + 1]!.trimStart();
    }
    for (const section of sections) {
      if (section.length === 0) continue;
      const token = added.get(section);
      if (token !== undefined) {
        ids.push(token.id);
        continue;
      }
      const normalized = hf.normalizer === null ? section : hf.normalizer(section);
      if (normalized.length === 0) continue;
      // No normalized added tokens (see create), so this split finds none: one piece.
      for (const sub of hf.splitter_normalized.split(normalized)) {
        if (sub.length === 0) continue;
        const subToken = added.get(sub);
        if (subToken !== undefined) {
          ids.push(subToken.id);
          continue;
        }
        let words = [sub];
        for (const split of this.#splits) {
          words = words.length === 1 ? split(words[0]!) : words.flatMap(split);
        }
        for (const word of words) {
          const cached = this.#cache.get(word);
          if (cached !== undefined) {
            for (let k = 0; k < cached.length; k++) ids.push(cached[k]!);
          } else {
            for (const id of this.#encodeWord(word)) ids.push(id);
          }
        }
      }
    }
    return ids;
  }

  /** One word through the byte-level map, BPE and the id lookup, as the library does. */
  #encodeWord(word: string): readonly number[] {
    const hf = this.#hf;
    const model = hf.model;
    const tokens = model(this.#byteLevel.pre_tokenize([word]));
    const added = hf.added_tokens_map;
    const ids = tokens.map((t) =>
      added.get(t)?.id ?? model.tokens_to_ids.get(t) ?? model.unk_token_id as number
    );
    if (word.length <= WORD_CACHE_MAX_LENGTH) {
      const cache = this.#cache;
      if (cache.size >= WORD_CACHE_SIZE) cache.delete(cache.keys().next().value!);
      cache.set(word, ids);
    }
    return ids;
  }
}

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

function parseJson(bytes: Uint8Array, name: string): unknown {
  try {
    return JSON.parse(new TextDecoder().decode(bytes));
  } catch (err) {
    throw new TokenizerLoadError(`${name} is not valid JSON: ${errorMessage(err)}`, {
      cause: err,
    });
  }
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

function describeType(value: unknown): string {
  return Array.isArray(value) ? "an array" : value === null ? "null" : typeof value;
}

function errorMessage(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}
