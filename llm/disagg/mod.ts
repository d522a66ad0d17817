/**
 * Disaggregated prefill/decode (seed 000): the local-or-remote decision, the prefill
 * queue (embedded, hosted on a decode worker for other processes, or JetStream),
 * deterministic KV bytes, the decode worker's KV memory with its prefix cache, its
 * handler (with the mocker generating), and the prefill worker. The state variant, for
 * engines whose prefill result is one serialized sequence state (llama.cpp): the decode
 * worker's slots for it and the prefill worker that writes it.
 *
 * @module
 */

export {
  DEFAULT_MAX_LOCAL_PREFILL_LENGTH,
  DisaggRouter,
  type DisaggRouterOptions,
  type PrefillDecisionInput,
  shouldPrefillRemote,
} from "./router.ts";
export {
  type DequeueOptions,
  EmbeddedPrefillQueue,
  type EmbeddedPrefillQueueOptions,
  type PrefillQueue,
  PrefillQueueClosedError,
  type QueuedItem,
} from "./queue.ts";
export {
  type HostedQueueReply,
  type HostedQueueRequest,
  prefillQueueHandler,
  RemotePrefillQueue,
} from "./hosted_queue.ts";
export { fillKvBlock, kvBlockSeed, splitBlocks, verifyKvBlock } from "./kv_bytes.ts";
export { KvBlockPool, KvCacheFullError } from "./block_pool.ts";
export {
  DecodeKvCache,
  type DecodeKvCacheOptions,
  KvVerificationError,
  PrefillSkippedError,
  type WaitPrefilledOptions,
} from "./kv_cache.ts";
export {
  type DecodeMemoryInfo,
  parsePrefillNotif,
  prefillDoneNotif,
  prefillSkippedNotif,
  type RemotePrefillRequest,
  type RemoteStatePrefillRequest,
  STATE_FRAME_BYTES,
} from "./protocol.ts";
export { PrefillNotifs, type PrefillNotifsOptions } from "./prefill_notifs.ts";
export {
  DEFAULT_STATE_CHUNK_BYTES,
  StateFrameError,
  StateInbox,
  type StateInboxOptions,
  type StateSlot,
} from "./state_inbox.ts";
export {
  type StatePrefillResult,
  type StatePrefillRunOptions,
  StatePrefillWorker,
  type StatePrefillWorkerOptions,
} from "./state_prefill_worker.ts";
export {
  disaggDecodeEngine,
  type DisaggDecodeOptions,
  type PrefillReport,
  type TokensEngine,
} from "./decode.ts";
export { loadPromptBlocks, mockerDecodeEngine } from "./mocker_decode.ts";
export {
  type PrefillResult,
  type PrefillRunOptions,
  PrefillWorker,
  type PrefillWorkerOptions,
} from "./prefill_worker.ts";
export {
  decodeMemoryKey,
  DecodeMemoryNotFoundError,
  lookupDecodeMemory,
  publishDecodeMemory,
} from "./discovery.ts";
export {
  JetStreamPrefillQueue,
  type JetStreamPrefillQueueOptions,
  JetStreamUnavailableError,
  NatsUnavailableError,
  runtimeNatsConnection,
} from "./jetstream_queue.ts";
export type { PrefillLoopOptions } from "./prefill_loop.ts";
