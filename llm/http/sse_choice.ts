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
 * @param logprobs the chunk's `logprobs` (default null)
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
  reason: FinishReason | "tool_calls" | null,
  first: boolean,
  logprobs?: unknown,
): string {
  const finish = reason === null ? "null" : JSON.stringify(reason);
  const lp = logprobs === undefined ? "null" : JSON.stringify(logprobs);
  if (!chat) {
    return `{"index":${index},"text":${
      JSON.stringify(text)
    },"logprobs":${lp},"finish_reason":${finish}}`;
  }
  const delta = first
    ? `{"role":"assistant","content":${JSON.stringify(text)}}`
    : text === ""
    ? "{}"
    : `{"content":${JSON.stringify(text)}}`;
  return `{"index":${index},"delta":${delta},"logprobs":${lp},"finish_reason":${finish}}`;
}

/** What a parsed choice event adds (see `ChoiceEvent` of llm/pipeline/postprocess.ts). */
export interface ParsedPiece {
  /** New answer text. */
  text: string;
  /** New reasoning text. */
  reasoning?: string;
  /** Tool calls completed. */
  calls?: readonly { index: number; id: string; name: string; arguments: string }[];
}

/**
 * The choices of the chunks one parsed event becomes, as JSON: its reasoning, its content,
 * then each tool call as two deltas, the first with `id`, `type` and the name, the second
 * with the arguments, as OpenAI streams them. The role rides on the first delta of the
 * choice, the finish reason on the last; an event with nothing new and a reason (or the
 * choice's first) is one empty delta.
 *
 * @param index the choice index
 * @param piece the event's text, reasoning and calls
 * @param reason why the choice ended, or null while it goes on
 * @param first the choice's first chunk
 * @param logprobs the event's `logprobs`, carried by its first chunk (default null)
 * @returns the choices' JSON, one per chunk (none when there is nothing to send)
 * @example
 * ```ts
 * parsedChoiceJsons(0, { text: "", reasoning: "Hm." }, null, false);
 * // ['{"index":0,"delta":{"reasoning_content":"Hm."},"logprobs":null,"finish_reason":null}']
 * ```
 */
export function parsedChoiceJsons(
  index: number,
  piece: ParsedPiece,
  reason: FinishReason | "tool_calls" | null,
  first: boolean,
  logprobs?: unknown,
): string[] {
  const deltas: Record<string, unknown>[] = [];
  if (piece.reasoning) deltas.push({ reasoning_content: piece.reasoning });
  if (piece.text !== "") deltas.push({ content: piece.text });
  for (const call of piece.calls ?? []) {
    deltas.push({
      tool_calls: [{
        index: call.index,
        id: call.id,
        type: "function",
        function: { name: call.name, arguments: "" },
      }],
    });
    deltas.push({ tool_calls: [{ index: call.index, function: { arguments: call.arguments } }] });
  }
  if (deltas.length === 0) {
    if (reason === null && !first && logprobs === undefined) return [];
    deltas.push({});
  }
  if (first) deltas[0] = { role: "assistant", ...deltas[0] };
  return deltas.map((delta, i) =>
    JSON.stringify({
      index,
      delta,
      logprobs: i === 0 && logprobs !== undefined ? logprobs : null,
      finish_reason: i === deltas.length - 1 ? reason : null,
    })
  );
}
