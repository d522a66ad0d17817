// The GGUF that llama.cpp engine tests use when any model will do.

import { type SmolLm2, smolLm2 } from "./smollm2.ts";

/** A model's path, or why there is none (tests skip with that reason). */
export type LlamaTestModel = SmolLm2;

/** The model for engine tests that need a real llama-architecture GGUF but not a particular one. */
export function llamaTestModel(): Promise<LlamaTestModel> {
  return smolLm2();
}
