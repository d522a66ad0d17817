/**
 * The llama.cpp engine: GGUF models served in this process through node-llama-cpp's prebuilt
 * llama.cpp binaries, on the project's Tokens protocol; and disaggregated prefill/decode on
 * its real KV state (a prefill engine exports a sequence's state, a decode engine imports it).
 *
 * @module
 */

export {
  LlamaCppEngine,
  type LlamaCppEngineOptions,
  type LlamaCppHandler,
  type SequencePrepare,
} from "./engine.ts";
export { LlamaCppLoadError, LlamaCppRequestError, LlamaCppStateError } from "./errors.ts";
export { LlamaCppDisagg, type LlamaCppDisaggOptions } from "./disagg.ts";
export {
  type LlamaCppDecodeOptions,
  llamaCppDisaggDecode,
  type LlamaCppPrefillReport,
} from "./disagg_decode.ts";
export {
  type CheckedKvState,
  decodeKvState,
  encodeKvState,
  type KvStateHeader,
  type KvStateLimits,
  type ModelIdentity,
  modelIdentity,
} from "./kv_state.ts";
export { KvBlockTracker } from "./kv_blocks.ts";
export {
  LLAMACPP_RUNTIME_DATA,
  type LlamaCppWorker,
  type LlamaCppWorkerOptions,
  runLlamaCppWorker,
} from "./worker.ts";
