/**
 * The LLM serving path: registerLlm and model cards, preprocessing, the OpenAI
 * frontend, migration, and engines.
 * @module
 */

export * from "./protocols.ts";
export { modelCardKey, modelEntryKey, registerLlm, type RegisterLlmOptions } from "./register.ts";
export { builtinTestModel } from "./test_model.ts";
export {
  CardFileError,
  computeMdcsum,
  fetchCardFiles,
  loadModelSource,
  ModelSourceError,
} from "./model_card.ts";
export {
  defaultHubCacheDir,
  downloadRepo,
  HubAccessDeniedError,
  HubError,
  HubNotFoundError,
  HubUnreachableError,
  terminalProgress,
} from "./hub.ts";
export { GgufError, readGgufMetadata } from "./gguf.ts";
export { IncrementalDetokenizer, Tokenizer } from "./tokenizer.ts";
export { ChatTemplate } from "./chat_template.ts";
export { Preprocessor } from "./preprocessor.ts";
export { OutputProcessor } from "./postprocessor.ts";
export { RequestError } from "./openai.ts";
export { isMigratable, MigrationExhaustedError, openMigrating } from "./migration.ts";
export {
  ModelManager,
  type ModelManagerOptions,
  type RouterMode,
  ServedModel,
} from "./model_manager.ts";
export { createFrontend, type Frontend, type FrontendOptions } from "./http/app.ts";
export { FrontendMetrics } from "./http/metrics.ts";
export { echoEngine, type EchoEngineOptions } from "./engines/echo.ts";
export {
  openaiUpstream,
  type OpenAIUpstreamOptions,
  UpstreamError,
} from "./engines/openai_upstream.ts";
