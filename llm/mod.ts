/**
 * The LLM serving path: registerLlm and model cards, preprocessing, the OpenAI
 * frontend, migration, and engines.
 * @module
 */

export * from "./protocols.ts";
export {
  modelCardKey,
  modelEntryKey,
  publishModelCard,
  registerLlm,
  type RegisterLlmOptions,
} from "./model/register.ts";
export { builtinTestModel } from "./model/test_model.ts";
export { computeMdcsum } from "./model/card.ts";
export { CardFileError, fetchCardFiles, type FetchCardFilesOptions } from "./model/card_files.ts";
export {
  type HuggingFaceOptions,
  type LoadedModel,
  type LoadModelOptions,
  loadModelSource,
  ModelSourceError,
} from "./model/model_source.ts";
export {
  defaultHuggingFaceCacheDir,
  type DownloadProgress,
  downloadRepo,
  type DownloadRepoOptions,
  HuggingFaceAccessDeniedError,
  HuggingFaceError,
  HuggingFaceNotFoundError,
  HuggingFaceUnreachableError,
  type TerminalProgress,
  terminalProgress,
} from "./model/huggingface.ts";
export {
  GgufError,
  type GgufMetadata,
  GgufType,
  readGgufMetadata,
  type ReadGgufOptions,
} from "./model/gguf.ts";
export {
  type DecodeOptions,
  type EncodeOptions,
  Tokenizer,
  TokenizerLoadError,
} from "./preprocess/tokenizer.ts";
export {
  IncrementalDetokenizer,
  type IncrementalDetokenizerOptions,
} from "./preprocess/detokenizer.ts";
export {
  ChatTemplate,
  type ChatTemplateContext,
  ChatTemplateError,
} from "./preprocess/chat_template.ts";
export {
  type ChatPreprocessOptions,
  Preprocessor,
  type PreprocessorOptions,
  type PreprocessResult,
} from "./preprocess/preprocessor.ts";
// The OpenAI request types the preprocessor takes.
export { CHAT_ROLES } from "./openai/types.ts";
export type {
  ChatCompletionRequest,
  ChatMessage,
  ChatRole,
  ChatTool,
  CommonRequestFields,
  CompletionPrompt,
  CompletionRequest,
  ContentPart,
  OtherContentPart,
  ResponseFormat,
  StreamOptions,
  TextContentPart,
  ToolCall,
  ToolChoice,
} from "./openai/types.ts";
export {
  type OutputDelta,
  OutputProcessor,
  type OutputProcessorOptions,
} from "./pipeline/postprocessor.ts";
export { type OpenAIErrorBody, RequestError, type RequestErrorOptions } from "./openai/errors.ts";
export {
  isMigratable,
  MigrationExhaustedError,
  type MigrationOptions,
  openMigrating,
  type SendTokens,
} from "./pipeline/migration.ts";
export { type ModelLoader, type ModelPipeline } from "./model/loader.ts";
export type { EndpointClient, EndpointGroup, EndpointId } from "./model/endpoints.ts";
export {
  type KvRouterSettings,
  ModelManager,
  type ModelManagerOptions,
  type ReferenceWorkersOptions,
  type RouterMode,
  ServedModel,
} from "./model/registry.ts";
// KV-aware routing: the router and its worker selection.
export {
  type FindBestMatchOptions,
  type KvRouteOptions,
  KvRouter,
  type KvRouterOptions,
  type OverlapLookup,
  type RouteDecision,
  type RouteDecisionRecord,
  type TokensRequest,
} from "./kv_router/router.ts";
export {
  type DecisionLog,
  type LoggedCandidate,
  type LoggedDecision,
  loggedDecision,
  openDecisionLog,
  parseDecisionLog,
} from "./kv_router/decision_log.ts";
export {
  ActiveSequences,
  type ActiveSequencesOptions,
  type BookingEvent,
  type CostFunction,
  type CostFunctionInput,
  defaultCosts,
  pickByCost,
  REMOTE_BOOKING_PREFIX,
  type WorkerBook,
  type WorkerCandidate,
} from "./kv_router/scheduler.ts";
export {
  COLD_NEAR_TIE,
  LOAD_BOUND_SLACK,
  predictedTtftCosts,
  type RoutingContext,
  RoutingPolicy,
  type RoutingPolicyOptions,
  withPeerFetch,
} from "./kv_router/policy.ts";
export {
  ACTIVE_SEQUENCES_EVENTS,
  ReplicaSync,
  type ReplicaSyncOptions,
} from "./kv_router/replica_sync.ts";
export {
  type TtftCoefficients,
  type TtftFeatures,
  TtftModel,
  type TtftModelOptions,
} from "./kv_router/ttft_model.ts";
export { createFrontend, type Frontend, type FrontendOptions } from "./http/app.ts";
export {
  FrontendMetrics,
  type ModelMetrics,
  type RequestLabels,
  type RouteObservation,
} from "./http/metrics.ts";
export type {
  CounterMetric,
  GaugeMetric,
  HistogramMetric,
  MetricLabels,
  MetricsRegistry,
} from "../runtime/metrics/metric_types.ts";
export { echoEngine, type EchoEngineOptions } from "./engines/echo.ts";
export {
  bareUpstreamCard,
  checkUpstream,
  openaiUpstream,
  type OpenAIUpstreamOptions,
  UpstreamError,
  upstreamModelCard,
  type UpstreamModelCardOptions,
} from "./engines/openai_upstream.ts";
export {
  BlockManager,
  type BlockManagerOptions,
  cachePrefix,
  DEFAULT_KV_FETCH_MS_PER_BLOCK,
  DEFAULT_KV_ONBOARD_MS_PER_BLOCK,
  defaultHostBlocks,
  type FullBlock,
  KV_FETCH_ENDPOINT,
  type KvEventSink,
  type MetricsSink,
  MockerEngine,
  type MockerEngineOptions,
  type MockerKvFetch,
  type MockerWorker,
  type MockerWorkerOptions,
  type MockerWorkers,
  type MockerWorkersOptions,
  type PrefixLoad,
  prefixToLoad,
  runMockerWorker,
  Scheduler,
  type SchedulerOptions,
  Sequence,
  type SequenceRequest,
  type SequenceState,
  startMockerWorkers,
  type StepEntry,
  type StepPlan,
  TIMED_PASS_MS,
  type TokensHandler,
} from "./engines/mocker/mod.ts";
// KV events, the indexer and load metrics (the router's inputs); block hashing.
export {
  BLOCK_HASH_SEED,
  type BlockHash,
  type BlockHashes,
  chainHash,
  computeBlockHashes,
  computeBlockHashesSync,
  computeLocalHashes,
} from "./kv_router/hashing.ts";
export {
  type AggregatedMetrics,
  decodeRouterEvent,
  encodeRouterEvent,
  type EndpointKvMetrics,
  type ForwardPassMetrics,
  type KvCacheEvent,
  type KvCacheEventData,
  type KvCacheStoredBlock,
  KvMessageError,
  type OverlapScores,
  type RouterEvent,
  STORAGE_TIERS,
  type StorageTier,
} from "./kv_router/protocols.ts";
export { RadixTree, type RadixTreeOptions } from "./kv_router/radix_tree.ts";
export { TieredIndex, type TieredMatches } from "./kv_router/tiered_index.ts";
export { KvIndexer, type KvIndexerOptions } from "./kv_router/indexer.ts";
export { ApproxKvIndexer, type ApproxKvIndexerOptions } from "./kv_router/approx_indexer.ts";
export {
  KvEventPublisher,
  type KvEventPublisherOptions,
  type PublishStoredOptions,
} from "./kv_router/publisher.ts";
export {
  type KvMetrics,
  KvMetricsAggregator,
  type KvMetricsAggregatorOptions,
  KvMetricsPublisher,
} from "./kv_router/metrics.ts";
export * from "./parsers/mod.ts";
