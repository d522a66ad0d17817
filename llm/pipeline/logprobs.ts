// Log probabilities as OpenAI writes them: a chat choice's `logprobs.content` entries and a
// completion choice's `logprobs` arrays, from the engine's per-token numbers and the
// tokenizer's text of each token.

import type { TopLogprob } from "../protocols.ts";
import type { Tokenizer } from "../preprocess/tokenizer.ts";
import type { ChatTokenLogprob, CompletionLogprobs } from "../openai/types.ts";

/** The log probabilities of some consecutive tokens of one choice, as the engine sent them. */
export interface TokenLogprobs {
  /** The tokens. */
  tokenIds: readonly number[];
  /** Each token's log probability. */
  logProbs: readonly number[];
  /** Each token's most likely alternatives (none when the engine sent none). */
  topLogprobs?: readonly (readonly TopLogprob[])[];
}

/** A token's text and UTF-8 bytes, as the log probabilities show it. */
export interface TokenText {
  token: string;
  bytes: number[];
}

const utf8 = new TextDecoder();
const utf8Encoder = new TextEncoder();

/**
 * The text of single tokens, cached: a byte-level tokenizer's token is its exact bytes (a
 * piece of a multi-byte character shows as U+FFFD in `token`, whole in `bytes`); another
 * tokenizer's is the token decoded alone, with the leading space a SentencePiece `▁` stands
 * for kept (decoding alone would drop it).
 */
export class TokenTexts {
  readonly #tokenizer: Tokenizer;
  readonly #asIds: boolean;
  readonly #cache = new Map<number, TokenText>();

  /**
   * @param tokenizer the model's tokenizer
   * @param asIds write tokens as `token_id:<id>` (the reference's `return_tokens_as_token_ids`)
   */
  constructor(tokenizer: Tokenizer, asIds = false) {
    this.#tokenizer = tokenizer;
    this.#asIds = asIds;
  }

  /**
   * The text of token `id`.
   *
   * @param id a token id
   * @returns its text and bytes
   */
  of(id: number): TokenText {
    let t = this.#cache.get(id);
    if (t !== undefined) return t;
    if (this.#asIds) {
      const token = `token_id:${id}`;
      t = { token, bytes: [...utf8Encoder.encode(token)] };
    } else {
      const piece = this.#tokenizer.byteLevel ? this.#tokenizer.tokenPiece(id, false) : null;
      if (piece instanceof Uint8Array) {
        t = { token: utf8.decode(piece), bytes: [...piece] };
      } else {
        let token = typeof piece === "string" ? piece : this.#tokenizer.decode([id]);
        const raw = this.#tokenizer.idToToken(id);
        if (raw?.startsWith("\u2581") && !token.startsWith(" ")) token = " " + token;
        t = { token, bytes: [...utf8Encoder.encode(token)] };
      }
    }
    if (this.#cache.size < 65_536) this.#cache.set(id, t);
    return t;
  }
}

/**
 * A chat choice's `logprobs.content` entries for some tokens.
 *
 * @param texts the tokens' texts
 * @param lp the engine's numbers
 * @returns one entry per token, alternatives most likely first
 * @example
 * ```ts ignore
 * chatLogprobs(texts, { tokenIds: [5], logProbs: [-0.1] });
 * // [{ token: "Hi", logprob: -0.1, bytes: [72, 105], top_logprobs: [] }]
 * ```
 */
export function chatLogprobs(texts: TokenTexts, lp: TokenLogprobs): ChatTokenLogprob[] {
  return lp.tokenIds.map((id, i) => {
    const t = texts.of(id);
    return {
      token: t.token,
      logprob: lp.logProbs[i]!,
      bytes: t.bytes,
      top_logprobs: sortedTop(lp.topLogprobs?.[i]).map((alt) => {
        const a = alternativeText(texts, alt);
        return { token: a.token, logprob: alt.logprob, bytes: a.bytes };
      }),
    };
  });
}

/**
 * A completion choice's `logprobs`, built as its tokens arrive: `text_offset` counts the
 * characters of the tokens before each one, from the start of the completion.
 *
 * @example
 * ```ts ignore
 * const enc = new CompletionLogprobsEncoder(texts);
 * enc.push({ tokenIds: [5, 6], logProbs: [-0.1, -0.2] }).text_offset; // [0, 2]
 * ```
 */
export class CompletionLogprobsEncoder {
  readonly #texts: TokenTexts;
  #offset = 0;

  /** @param texts the tokens' texts */
  constructor(texts: TokenTexts) {
    this.#texts = texts;
  }

  /**
   * The `logprobs` of the next tokens.
   *
   * @param lp the engine's numbers for them
   * @returns the four arrays, one entry per token
   */
  push(lp: TokenLogprobs): CompletionLogprobs {
    const out: CompletionLogprobs = {
      tokens: [],
      token_logprobs: [],
      top_logprobs: [],
      text_offset: [],
    };
    lp.tokenIds.forEach((id, i) => {
      const t = this.#texts.of(id);
      out.tokens.push(t.token);
      out.token_logprobs.push(lp.logProbs[i]!);
      const top: Record<string, number> = {};
      for (const alt of sortedTop(lp.topLogprobs?.[i])) {
        const key = alternativeText(this.#texts, alt).token;
        if (!(key in top)) top[key] = alt.logprob;
      }
      out.top_logprobs!.push(top);
      out.text_offset.push(this.#offset);
      this.#offset += t.token.length;
    });
    return out;
  }
}

/** Appends `more` to `acc` (a completion choice's logprobs over the whole response). */
export function appendCompletionLogprobs(
  acc: CompletionLogprobs,
  more: CompletionLogprobs,
): void {
  acc.tokens.push(...more.tokens);
  acc.token_logprobs.push(...more.token_logprobs);
  acc.top_logprobs!.push(...(more.top_logprobs ?? []));
  acc.text_offset.push(...more.text_offset);
}

function sortedTop(list: readonly TopLogprob[] | undefined): readonly TopLogprob[] {
  if (list === undefined || list.length < 2) return list ?? [];
  return [...list].sort((a, b) => b.logprob - a.logprob);
}

function alternativeText(texts: TokenTexts, alt: TopLogprob): TokenText {
  if (typeof alt.token === "string") {
    return {
      token: alt.token,
      bytes: Array.isArray(alt.bytes) ? [...alt.bytes] : [...utf8Encoder.encode(alt.token)],
    };
  }
  return texts.of(alt.token_id);
}
