/**
 * The discovery plane: leases, keys under leases, list-then-watch of prefixes.
 * Two implementations: {@linkcode MemoryDiscovery} (one process) and
 * {@linkcode EtcdDiscovery} (etcd v3).
 * @module
 */

export type { Discovery, KeyValue, Lease, PutOptions, WatchEvent, WatchOptions } from "./types.ts";
export { MemoryDiscovery, MemoryStore } from "./memory.ts";
export { EtcdDiscovery, type EtcdDiscoveryOptions } from "./etcd.ts";
