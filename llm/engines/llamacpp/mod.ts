/**
 * The llama.cpp engine: GGUF models served in this process through node-llama-cpp's prebuilt
 * llama.cpp binaries, on the project's Tokens protocol.
 *
 * @module
 */

export { LlamaCppEngine, type LlamaCppEngineOptions, type LlamaCppHandler } from "./engine.ts";
export { LlamaCppLoadError, LlamaCppRequestError } from "./errors.ts";
