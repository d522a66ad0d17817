// Where a decode worker publishes its KV memory once: a discovery key on its lease
// (`v1/disagg/{namespace}/decode_memory/{agent}`), gone when the worker is.

import { decodeMemoryKey } from "../../runtime/keys.ts";
import type { DistributedRuntime } from "../../runtime/distributed_runtime.ts";
import { DynamoError } from "../../runtime/errors.ts";
import type { DecodeMemoryInfo } from "./protocol.ts";

/** No published memory for a decode agent. */
export class DecodeMemoryNotFoundError extends DynamoError {
  /** The decode agent whose memory was looked up. */
  readonly agentName: string;
  /** Creates the error for an agent and the key looked up. */
  constructor(agentName: string, key: string) {
    super(`no KV memory published for decode agent ${agentName} (key ${key})`);
    this.agentName = agentName;
  }
}

/** The discovery key of a decode agent's memory info (namespace, agent name). */
export { decodeMemoryKey };

/**
 * Publishes a decode worker's memory info on the runtime's lease.
 *
 * @param runtime the decode worker's runtime
 * @param namespace the pipeline's namespace
 * @param info `DecodeKvCache.memoryInfo()`
 */
export async function publishDecodeMemory(
  runtime: DistributedRuntime,
  namespace: string,
  info: DecodeMemoryInfo,
): Promise<void> {
  await runtime.internals.registerKey(
    decodeMemoryKey(namespace, info.agent_name),
    JSON.stringify(info),
  );
}

/**
 * Reads a decode worker's memory info (prefill workers call this once per decode agent).
 *
 * @throws {DecodeMemoryNotFoundError} nothing is published under that agent
 */
export async function lookupDecodeMemory(
  runtime: DistributedRuntime,
  namespace: string,
  agentName: string,
): Promise<DecodeMemoryInfo> {
  const key = decodeMemoryKey(namespace, agentName);
  const v = await runtime.internals.discovery.get(key);
  if (v === undefined) throw new DecodeMemoryNotFoundError(agentName, key);
  return JSON.parse(v) as DecodeMemoryInfo;
}
