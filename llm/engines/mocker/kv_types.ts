// Wire types the mocker emits: KV cache events and forward-pass metrics, in the shapes
// the KV router consumes (llm/kv_router/protocols.ts), and the sinks that receive them.

import type {
  BlockHash,
  ForwardPassMetrics,
  KvCacheEventData,
  KvCacheStoredBlock,
  StorageTier,
} from "../../kv_router/protocols.ts";

export type { BlockHash, ForwardPassMetrics, KvCacheEventData, KvCacheStoredBlock, StorageTier };

/**
 * Receives KV cache events in the order they happen, each with the tier whose blocks it names
 * (undefined: the device).
 */
export type KvEventSink = (data: KvCacheEventData, tier?: StorageTier) => void;

/** Receives metrics after each forward pass. */
export type MetricsSink = (metrics: ForwardPassMetrics) => void;
