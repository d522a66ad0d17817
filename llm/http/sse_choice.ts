// One choice of a streamed chunk, as JSON text: written directly instead of building an
// object and stringifying it, once per token on the streaming path.

import type { FinishReason } from "../protocols.ts";

/**
 * The JSON of one streamed choice: a chat delta (`role` on the first, `{}` for an empty
 * later one) or a completion's text, with `logprobs: null` and the finish reason.
 *
 * @param chat a chat completion chunk (else a text completion)
 * @param index the choice index
 * @param text the new text
 * @param reason why the choice ended, or null while it goes on
 * @param first the choice's first chunk
 * @returns what `JSON.stringify` gives for the same choice object
 * @example
 * ```ts
 * choiceJson(true, 0, "Hi", null, true);
 * // '{"index":0,"delta":{"role":"assistant","content":"Hi"},"logprobs":null,"finish_reason":null}'
 * ```
 */
export function choiceJson(
  chat: boolean,
  index: number,
  text: string,
  reason: FinishReason | null,
  first: boolean,
): string {
  const finish = reason === null ? "null" : JSON.stringify(reason);
  if (!chat) {
    return `{"index":${index},"text":${
      JSON.stringify(text)
    },"logprobs":null,"finish_reason":${finish}}`;
  }
  const delta = first
    ? `{"role":"assistant","content":${JSON.stringify(text)}}`
    : text === ""
    ? "{}"
    : `{"content":${JSON.stringify(text)}}`;
  return `{"index":${index},"delta":${delta},"logprobs":null,"finish_reason":${finish}}`;
}
