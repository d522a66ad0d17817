/**
 * The llama.cpp engine: GGUF models served in this process through node-llama-cpp's prebuilt
 * llama.cpp binaries, on the project's Tokens protocol.
 *
 * @module
 */

export { LlamaCppEngine, type LlamaCppEngineOptions, type LlamaCppHandler } from "./engine.ts";
export { LlamaCppLoadError, LlamaCppRequestError } from "./errors.ts";
export { KvBlockTracker } from "./kv_blocks.ts";
export { type LlamaCppWorker, type LlamaCppWorkerOptions, runLlamaCppWorker } from "./worker.ts";
