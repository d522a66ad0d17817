/**
 * The mocker engine: a simulated vLLM worker (block manager with prefix caching,
 * continuous-batching scheduler, polynomial time model) that publishes real KV events
 * and load metrics, for routing and scale tests without GPUs.
 *
 * @example
 * ```ts
 * import { startMockerWorkers } from "./mod.ts";
 * const fleet = await startMockerWorkers(8, { speedupRatio: 10 });
 * await fleet.shutdown();
 * ```
 * @module
 */

export {
  BlockManager,
  type BlockManagerOptions,
  cachePrefix,
  DEFAULT_NUM_GPU_BLOCKS,
  defaultHostBlocks,
  type FullBlock,
  type PrefixLoad,
  prefixToLoad,
} from "./block_manager.ts";
export {
  hashPromptBlocks,
  Scheduler,
  type SchedulerOptions,
  Sequence,
  type SequenceRequest,
  type SequenceState,
  type StepEntry,
  type StepPlan,
} from "./scheduler.ts";
export {
  decodeTimeMs,
  DEFAULT_KV_FETCH_MS_PER_BLOCK,
  DEFAULT_KV_ONBOARD_MS_PER_BLOCK,
  prefillTimeMs,
  type StepShape,
  stepTimeMs,
} from "./timing.ts";
export {
  MockerEngine,
  type MockerEngineOptions,
  type MockerKvFetch,
  TIMED_PASS_MS,
  type TokensHandler,
} from "./engine.ts";
export {
  KV_FETCH_ENDPOINT,
  type MockerWorker,
  type MockerWorkerOptions,
  type MockerWorkers,
  type MockerWorkersOptions,
  runMockerWorker,
  startMockerWorkers,
} from "./worker.ts";
export type {
  ForwardPassMetrics,
  KvCacheEventData,
  KvCacheStoredBlock,
  KvEventSink,
  MetricsSink,
} from "./kv_types.ts";
