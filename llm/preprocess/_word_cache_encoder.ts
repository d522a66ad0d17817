// The cached encode path of byte-level BPE tokenizers: pre-tokenize, then look each word up
// in a cache before running BPE on it (the library's own encode re-runs BPE per call).

import type { Tokenizer as HfTokenizer } from "@huggingface/tokenizers";

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

/** The section cache's bounds (see {@linkcode WordCacheEncoder}). */
export interface SectionCacheLimits {
  /** Shorter sections are not cached (the word cache serves them well). Default 64 chars. */
  minLength: number;
  /**
   * The cached sections' characters in all; past it the least recently used are dropped. A
   * section longer than a quarter of it is not cached. Default 4,194,304 (4M characters:
   * 8 MB or less of text and, at the usual 3-4 characters a token, 4-6 MB of ids).
   */
  maxChars: number;
}

const DEFAULT_SECTION_LIMITS: SectionCacheLimits = { minLength: 64, maxChars: 1 << 22 };

/**
 * `encode` for byte-level BPE tokenizers whose pre-tokenizer is regex splits followed by a
 * byte-level mapping of each piece (Qwen2/3, Llama 3, DeepSeek, ...), with a bounded cache of
 * the ids of each word (regex piece). It runs the library's own steps in the library's order
 * (added-token split, normalizer, regex split, byte-level map, BPE, id lookup), so its output
 * is the library's; only the per-word work (byte mapping, BPE, id lookup) is remembered: each
 * word's ids depend on the word alone when BPE does not fuse unknown tokens across words.
 *
 * A second cache holds the ids of whole sections (the text between two added tokens, once
 * stripped beside the tokens that strip: a function of that text alone). A chat template puts
 * each message between special tokens, and a conversation sends its history again every
 * turn, so from the second turn on the history's messages (and a shared system prompt) cost a
 * lookup instead of the regex split and a word lookup per piece.
 */
export class WordCacheEncoder {
  readonly #hf: HfInternals;
  /** The Split steps, each as a function of one text. */
  readonly #splits: ((text: string) => string[])[];
  readonly #byteLevel: HfPreTokenizer;
  readonly #cache = new Map<string, readonly number[]>();
  /** Section text -> its ids, least recently used first. */
  readonly #sections = new Map<string, Uint32Array>();
  /** The characters of the cached sections, in all. */
  #sectionChars = 0;
  readonly #sectionLimits: SectionCacheLimits;
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
    sectionLimits: SectionCacheLimits,
  ) {
    this.#hf = hf;
    this.#sectionLimits = sectionLimits;
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

  /**
   * The encoder, or undefined when the tokenizer's pipeline is not one it reproduces.
   * @param sectionLimits the section cache's bounds (tests set small ones)
   */
  static create(
    library: HfTokenizer,
    json: Record<string, unknown>,
    config: Record<string, unknown>,
    sectionLimits: SectionCacheLimits = DEFAULT_SECTION_LIMITS,
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
    // Normalized added tokens are matched after normalization: leave those to the library
    // (its condition for putting a token in its normalized splitter, which is then empty).
    for (const t of Array.isArray(json.added_tokens) ? json.added_tokens : []) {
      if (isRecord(t) && t.normalized && json.normalizer) return undefined;
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
      sectionLimits,
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
    const minLength = this.#sectionLimits.minLength;
    for (const section of sections) {
      if (section.length === 0) continue;
      const token = added.get(section);
      if (token !== undefined) {
        ids.push(token.id);
        continue;
      }
      if (section.length < minLength) {
        this.#encodeSection(section, ids);
        continue;
      }
      const cache = this.#sections;
      const cached = cache.get(section);
      if (cached !== undefined) {
        cache.delete(section); // most recently used: to the end
        cache.set(section, cached);
        for (let k = 0; k < cached.length; k++) ids.push(cached[k]!);
        continue;
      }
      const start = ids.length;
      this.#encodeSection(section, ids);
      this.#rememberSection(section, ids, start);
    }
    return ids;
  }

  /** The ids of one section (no added token in it) appended to `ids`. */
  #encodeSection(section: string, ids: number[]): void {
    const hf = this.#hf;
    const normalized = hf.normalizer === null ? section : hf.normalizer(section);
    if (normalized.length === 0) return;
    // The library splits the normalized text around normalized added tokens next; there are
    // none (see create), so its split would give the text back whole: not run (it walks the
    // text a character at a time). The text can still be an added token as a whole.
    const token = hf.added_tokens_map.get(normalized);
    if (token !== undefined) {
      ids.push(token.id);
      return;
    }
    let words = [normalized];
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

  /** Caches `section`'s ids (`ids` from `start` on), dropping the least recently used. */
  #rememberSection(section: string, ids: number[], start: number): void {
    const { maxChars } = this.#sectionLimits;
    if (section.length > maxChars / 4) return;
    const own = new Uint32Array(ids.length - start);
    for (let k = 0; k < own.length; k++) {
      const id = ids[start + k]!;
      own[k] = id;
      if (own[k] !== id) return; // not a u32 (an unknown token without an id): not cached
    }
    const sections = this.#sections;
    for (const [oldest] of sections) {
      if (this.#sectionChars + section.length <= maxChars) break;
      sections.delete(oldest);
      this.#sectionChars -= oldest.length;
    }
    // The key is a copy: `section` is a slice of the whole prompt, and V8 keeps a slice's
    // parent string alive with it.
    const key = JSON.parse(JSON.stringify(section)) as string;
    sections.set(key, own);
    this.#sectionChars += key.length;
  }

  /** The section cache's size (tests). @internal */
  get sectionCacheSize(): { sections: number; chars: number } {
    return { sections: this.#sections.size, chars: this.#sectionChars };
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

/** Whether a parsed JSON value is an object (not an array or null). */
export function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}
