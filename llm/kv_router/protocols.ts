/**
 * Wire types of KV-aware routing (snake_case: they cross process boundaries) and their
 * encoding on the event plane.
 *
 * KV events travel as a compact little-endian binary record rather than JSON, so 64-bit
 * hashes stay exact (JSON numbers lose bits past 2^53) and encoding costs no string work:
 *
 * ```
 * u8  tag = 1 (KV event)        u8  kind: 1 stored, 2 removed, 3 cleared, plus 16 x the
 *                               storage tier (0 device, 1 host_pinned, 2 disk: `STORAGE_TIERS`)
 * u16 worker id length          ... worker id, UTF-8
 * f64 event id
 * stored:  u8 has parent, u64 parent hash, u32 n, n x (u64 block_hash, u64 tokens_hash)
 * removed: u32 n, n x u64 block hash
 * ```
 *
 * A worker's state dump (the answer to a resync request) is a run of chunks:
 *
 * ```
 * u8  tag = 2 (KV state chunk)  u8  flags: 1 = last chunk
 * u16 worker id length          ... worker id, UTF-8
 * u16 nonce length              ... nonce, UTF-8 (the request's)
 * f64 last event id reflected   u32 chunk index
 * u32 n, n x (u64 block_hash, u8 has parent + 16 x tier, u64 parent hash, u64 tokens_hash)
 * ```
 *
 * A device event or entry (tier 0) reads as it did before tiers. Dump entries come parents first.
 * Load metrics and resync requests are small JSON.
 *
 * @module
 */

import { InvalidArgumentError } from "../../runtime/errors.ts";
import type { BlockHash } from "./hashing.ts";

export type { BlockHash };

/** One block of a `stored` event. */
export interface KvCacheStoredBlock {
  /** Sequence hash: the whole prefix up to and including this block. */
  block_hash: BlockHash;
  /** Local hash of this block's tokens (the radix tree's key). */
  tokens_hash: BlockHash;
}

/** What happened in a worker's KV cache. */
export type KvCacheEventData =
  | { stored: { parent_hash: BlockHash | null; blocks: KvCacheStoredBlock[] } }
  | { removed: { block_hashes: BlockHash[] } }
  | "cleared";

/**
 * Where a worker holds KV blocks (the reference's `storage_tier`): on its GPU, in pinned host
 * memory, or on disk. A block in a lower tier is copied up to the device before it is used.
 */
export type StorageTier = "device" | "host_pinned" | "disk";

/** The storage tiers, fastest first. */
export const STORAGE_TIERS: readonly StorageTier[] = ["device", "host_pinned", "disk"];

/** One KV cache event of a worker; ids increase by one per event, from 1. */
export interface KvCacheEvent {
  /** The event's id in its worker's sequence. */
  event_id: number;
  /** What happened: blocks stored, blocks removed, or the cache cleared. */
  data: KvCacheEventData;
}

/** A KV cache event and the worker it happened on. */
export interface RouterEvent {
  /** The worker (instance id) the event happened on. */
  worker_id: string;
  /** The event. */
  event: KvCacheEvent;
  /** Where the event's blocks are (left out: `device`, the GPU). */
  storage_tier?: StorageTier;
}

/** A worker's load after a forward pass. */
export interface ForwardPassMetrics {
  /** Requests being served. */
  request_active_slots: number;
  /** Requests the worker can serve at once. */
  request_total_slots: number;
  /** KV cache blocks in use. */
  kv_active_blocks: number;
  /** KV cache blocks in all. */
  kv_total_blocks: number;
  /** Requests queued, not yet scheduled. */
  num_requests_waiting: number;
  /** Fraction of the GPU KV cache in use (0..1). */
  gpu_cache_usage_perc: number;
  /** Fraction of prompt blocks found in the prefix cache (0..1). */
  gpu_prefix_cache_hit_rate: number;
  /**
   * Milliseconds until the forward pass in flight ends, as of this message (0: idle), from a
   * worker that publishes when each pass starts (pass timing; optional).
   */
  pass_ms_left?: number;
  /** Prompt tokens prefilled in that pass. */
  pass_prefill_tokens?: number;
  /**
   * Milliseconds to copy one KV block from a peer, in the worker's own time like
   * `pass_ms_left` (a mocker's simulated copy time over its speedup ratio), from a worker that
   * can load a prompt's prefix from another worker (`kv_fetch` requests) and serve its own to
   * peers (optional).
   */
  kv_fetch_ms_per_block?: number;
  /**
   * Milliseconds to copy one KV block from the worker's host-memory tier to its device, in the
   * worker's own time like `pass_ms_left` (optional: workers with such a tier).
   */
  kv_onboard_ms_per_block?: number;
  /** KV blocks held in the worker's host-memory tier, off the GPU (optional: workers with one). */
  kv_host_blocks?: number;
  /** KV blocks the host tier holds at most. */
  kv_host_total_blocks?: number;
}

/** One worker's metrics as the aggregator reports them. */
export interface EndpointKvMetrics extends ForwardPassMetrics {
  /** The worker's instance id. */
  worker_id: string;
}

/** What {@linkcode KvMetricsAggregator.getMetrics} returns. */
export interface AggregatedMetrics {
  /** One entry per live worker that publishes metrics, sorted by worker id. */
  endpoints: EndpointKvMetrics[];
}

/** How much of a request's prefix each worker has cached. */
export interface OverlapScores {
  /** Worker id -> matched blocks from the start of the request (workers with 0 left out). */
  scores: Map<string, number>;
  /**
   * Per matched block, how often it was looked up within the indexer's frequency window
   * (empty unless the indexer tracks frequencies).
   */
  frequencies: number[];
  /**
   * Worker id -> blocks from the start of the request held in any storage tier, the device's
   * and those below it (host memory, disk) together, where some worker has blocks below its
   * device (left out otherwise: then it is `scores`).
   */
  held?: Map<string, number>;
}

/** One block of a worker's state dump, parents first. */
export interface KvStateEntry {
  block_hash: BlockHash;
  parent_hash: BlockHash | null;
  tokens_hash: BlockHash;
  /** The tier holding it (left out: `device`); a block in two tiers has an entry in each. */
  storage_tier?: StorageTier;
}

/** One chunk of a worker's state dump. */
export interface KvStateChunk {
  worker_id: string;
  /** The resync request's nonce. */
  nonce: string;
  /** The last event id the dump reflects. */
  last_event_id: number;
  index: number;
  last: boolean;
  entries: KvStateEntry[];
}

/** A request for state dumps: one worker's, or every worker's with `"*"`. */
export interface KvResyncRequest {
  worker_id: string;
  /** Subject (event name under the component) to publish the chunks on. */
  reply: string;
  nonce: string;
}

/** Event names (under the component's `events.` subjects). */
export const KV_EVENTS = "kv_events";
/** Resync requests. */
export const KV_RESYNC = "kv_resync";
/** Prefix of state-dump replies (`kv_state.{nonce}`). */
export const KV_STATE = "kv_state";
/** Pushed load metrics, and the name of the endpoint that serves them on request. */
export const LOAD_METRICS = "load_metrics";

/** Longest worker id a KV message may carry (UTF-8 bytes). */
export const MAX_WORKER_ID_BYTES = 1024;
/** Longest resync nonce a state chunk may carry (UTF-8 bytes). */
export const MAX_NONCE_BYTES = 256;
/** Most blocks one KV event (or one state chunk) may carry. */
export const MAX_BLOCKS_PER_MESSAGE = 1 << 20;
/** Highest chunk index of a state dump. */
export const MAX_CHUNK_INDEX = 1 << 20;

/**
 * A KV event or state chunk that came off the network is not valid. Carries the worker id
 * when the message got that far, so the reader can say whose it was.
 */
export class KvMessageError extends InvalidArgumentError {
  /** The worker the message names (undefined when it was unreadable before that). */
  readonly workerId: string | undefined;
  /** What was wrong with it. */
  readonly reason: string;
  /**
   * A refused message.
   *
   * @param reason what was wrong with the message
   * @param workerId the worker it named, when it was readable that far
   */
  constructor(reason: string, workerId?: string) {
    super(
      workerId === undefined
        ? `invalid KV message: ${reason}`
        : `invalid KV message from worker ${JSON.stringify(workerId.slice(0, 80))}: ${reason}`,
    );
    this.workerId = workerId;
    this.reason = reason;
  }
}

const TAG_EVENT = 1;
const TAG_STATE = 2;
const utf8 = new TextEncoder();
const strictUtf8 = new TextDecoder("utf-8", { fatal: true });

/** Normalises an engine's block hash (a signed or unsigned 64-bit integer) to a u64. */
export function toBlockHash(h: bigint | number): BlockHash {
  if (typeof h === "number") {
    if (!Number.isSafeInteger(h)) {
      throw new InvalidArgumentError(`a block hash must be an integer, got ${h}`);
    }
    return BigInt.asUintN(64, BigInt(h));
  }
  if (typeof h !== "bigint") {
    throw new InvalidArgumentError(`a block hash must be a bigint or number, got ${typeof h}`);
  }
  return BigInt.asUintN(64, h);
}

class Writer {
  buf: Uint8Array;
  view: DataView;
  pos = 0;
  constructor(size: number) {
    this.buf = new Uint8Array(size);
    this.view = new DataView(this.buf.buffer);
  }
  u8(v: number) {
    this.view.setUint8(this.pos, v);
    this.pos += 1;
  }
  u16(v: number) {
    this.view.setUint16(this.pos, v, true);
    this.pos += 2;
  }
  u32(v: number) {
    this.view.setUint32(this.pos, v, true);
    this.pos += 4;
  }
  f64(v: number) {
    this.view.setFloat64(this.pos, v, true);
    this.pos += 8;
  }
  u64(v: bigint) {
    this.view.setBigUint64(this.pos, v, true);
    this.pos += 8;
  }
  str(b: Uint8Array) {
    this.u16(b.length);
    this.buf.set(b, this.pos);
    this.pos += b.length;
  }
}

class Reader {
  view: DataView;
  buf: Uint8Array;
  pos = 0;
  /** The worker id, once read (for error messages). */
  worker: string | undefined;
  constructor(buf: Uint8Array) {
    this.buf = buf;
    this.view = new DataView(buf.buffer, buf.byteOffset, buf.byteLength);
  }
  need(n: number) {
    if (this.pos + n > this.buf.length) {
      throw new KvMessageError(`truncated (${this.buf.length} bytes)`, this.worker);
    }
  }
  u8() {
    this.need(1);
    return this.view.getUint8(this.pos++);
  }
  u16() {
    this.need(2);
    const v = this.view.getUint16(this.pos, true);
    this.pos += 2;
    return v;
  }
  u32() {
    this.need(4);
    const v = this.view.getUint32(this.pos, true);
    this.pos += 4;
    return v;
  }
  f64() {
    this.need(8);
    const v = this.view.getFloat64(this.pos, true);
    this.pos += 8;
    return v;
  }
  u64() {
    this.need(8);
    const v = this.view.getBigUint64(this.pos, true);
    this.pos += 8;
    return v;
  }
  str(what: string, max: number) {
    const n = this.u16();
    if (n === 0 || n > max) {
      throw new KvMessageError(`${what} must be 1 to ${max} bytes, got ${n}`, this.worker);
    }
    this.need(n);
    let s: string;
    try {
      s = strictUtf8.decode(this.buf.subarray(this.pos, this.pos + n));
    } catch {
      throw new KvMessageError(`${what} is not UTF-8`, this.worker);
    }
    this.pos += n;
    return s;
  }
  /** An event id: a non-negative safe integer (never NaN, infinite or fractional). */
  eventId(what: string) {
    const v = this.f64();
    if (!Number.isSafeInteger(v) || v < 0) {
      throw new KvMessageError(`${what} must be a whole number >= 0, got ${v}`, this.worker);
    }
    return v;
  }
  /** A count, refused above `max` and above what the remaining bytes can hold. */
  count(what: string, max: number, bytesEach: number) {
    const n = this.u32();
    if (n > max) throw new KvMessageError(`${what} is ${n}, more than ${max}`, this.worker);
    this.need(bytesEach * n);
    return n;
  }
  end() {
    if (this.pos !== this.buf.length) {
      throw new KvMessageError(
        `${this.buf.length - this.pos} bytes after the end of the message`,
        this.worker,
      );
    }
  }
}

/** UTF-8 of a worker id or nonce, refused where the decoder would refuse it. */
function boundedBytes(what: string, s: string, max: number): Uint8Array {
  const b = utf8.encode(s);
  if (b.length === 0 || b.length > max) {
    throw new InvalidArgumentError(`${what} must be 1 to ${max} bytes, got ${b.length}`);
  }
  return b;
}

const workerBytes = (id: string) => boundedBytes("worker id", id, MAX_WORKER_ID_BYTES);

function checkCount(what: string, n: number): void {
  if (n > MAX_BLOCKS_PER_MESSAGE) {
    throw new InvalidArgumentError(`${what} is ${n}, more than ${MAX_BLOCKS_PER_MESSAGE}`);
  }
}

/**
 * A tier's index in `STORAGE_TIERS` (0: the device).
 * @throws {InvalidArgumentError} a tier not in `STORAGE_TIERS`
 */
export function storageTierIndex(tier: StorageTier): number {
  const i = STORAGE_TIERS.indexOf(tier);
  if (i < 0) throw new InvalidArgumentError(`unknown storage tier ${JSON.stringify(tier)}`);
  return i;
}

/** A tier's bits in a kind or flags byte (its index in `STORAGE_TIERS`, times 16). */
function tierBits(tier: StorageTier | undefined): number {
  return tier === undefined ? 0 : storageTierIndex(tier) << 4;
}

/** The tier a kind or flags byte names. */
function tierOf(byte: number, worker: string): StorageTier {
  const tier = STORAGE_TIERS[byte >> 4];
  if (tier === undefined) throw new KvMessageError(`unknown storage tier ${byte >> 4}`, worker);
  return tier;
}

/**
 * Encodes a KV event for the event plane (within the bounds the decoder checks).
 * @throws {InvalidArgumentError} a malformed event
 */
export function encodeRouterEvent(ev: RouterEvent): Uint8Array {
  const id = workerBytes(ev.worker_id);
  const { data, event_id } = ev.event;
  if (!Number.isSafeInteger(event_id) || event_id < 0) {
    throw new InvalidArgumentError(`event_id must be a non-negative integer, got ${event_id}`);
  }
  const head = 2 + 2 + id.length + 8;
  const tier = tierBits(ev.storage_tier);
  let w: Writer;
  if (data === "cleared") {
    w = new Writer(head);
    w.u8(TAG_EVENT);
    w.u8(3 | tier);
    w.str(id);
    w.f64(event_id);
  } else if ("stored" in data) {
    const { parent_hash, blocks } = data.stored;
    checkCount("stored block count", blocks.length);
    w = new Writer(head + 1 + 8 + 4 + 16 * blocks.length);
    w.u8(TAG_EVENT);
    w.u8(1 | tier);
    w.str(id);
    w.f64(event_id);
    w.u8(parent_hash === null ? 0 : 1);
    w.u64(parent_hash ?? 0n);
    w.u32(blocks.length);
    for (const b of blocks) {
      w.u64(b.block_hash);
      w.u64(b.tokens_hash);
    }
  } else if ("removed" in data) {
    const hashes = data.removed.block_hashes;
    checkCount("removed block count", hashes.length);
    w = new Writer(head + 4 + 8 * hashes.length);
    w.u8(TAG_EVENT);
    w.u8(2 | tier);
    w.str(id);
    w.f64(event_id);
    w.u32(hashes.length);
    for (const h of hashes) w.u64(h);
  } else {
    throw new InvalidArgumentError(`unknown KV event data ${JSON.stringify(data)}`);
  }
  return w.buf;
}

/**
 * Decodes a KV event.
 * @throws {InvalidArgumentError} the bytes are not a KV event
 */
export function decodeRouterEvent(bytes: Uint8Array): RouterEvent {
  const r = new Reader(bytes);
  if (r.u8() !== TAG_EVENT) throw new KvMessageError("not a KV event");
  const byte = r.u8();
  const kind = byte & 15;
  const worker_id = r.worker = r.str("worker id", MAX_WORKER_ID_BYTES);
  const storage_tier = tierOf(byte, worker_id);
  const event_id = r.eventId("event_id");
  let data: KvCacheEventData;
  if (kind === 1) {
    const has = r.u8();
    if (has > 1) throw new KvMessageError(`bad parent flag ${has}`, worker_id);
    const parent = r.u64();
    const n = r.count("stored block count", MAX_BLOCKS_PER_MESSAGE, 16);
    const blocks: KvCacheStoredBlock[] = new Array(n);
    for (let i = 0; i < n; i++) blocks[i] = { block_hash: r.u64(), tokens_hash: r.u64() };
    data = { stored: { parent_hash: has ? parent : null, blocks } };
  } else if (kind === 2) {
    const n = r.count("removed block count", MAX_BLOCKS_PER_MESSAGE, 8);
    const block_hashes: BlockHash[] = new Array(n);
    for (let i = 0; i < n; i++) block_hashes[i] = r.u64();
    data = { removed: { block_hashes } };
  } else if (kind === 3) {
    data = "cleared";
  } else {
    throw new KvMessageError(`unknown KV event kind ${kind}`, worker_id);
  }
  r.end();
  const ev: RouterEvent = { worker_id, event: { event_id, data } };
  if (storage_tier !== "device") ev.storage_tier = storage_tier;
  return ev;
}

/** Encodes one chunk of a state dump. */
export function encodeKvStateChunk(c: KvStateChunk): Uint8Array {
  const id = workerBytes(c.worker_id);
  const nonce = boundedBytes("nonce", c.nonce, MAX_NONCE_BYTES);
  checkCount("entry count", c.entries.length);
  if (!Number.isSafeInteger(c.last_event_id) || c.last_event_id < 0) {
    throw new InvalidArgumentError(
      `last_event_id must be a whole number >= 0, got ${c.last_event_id}`,
    );
  }
  if (!Number.isInteger(c.index) || c.index < 0 || c.index > MAX_CHUNK_INDEX) {
    throw new InvalidArgumentError(
      `chunk index must be in [0, ${MAX_CHUNK_INDEX}], got ${c.index}`,
    );
  }
  const w = new Writer(2 + 2 + id.length + 2 + nonce.length + 8 + 4 + 4 + 25 * c.entries.length);
  w.u8(TAG_STATE);
  w.u8(c.last ? 1 : 0);
  w.str(id);
  w.str(nonce);
  w.f64(c.last_event_id);
  w.u32(c.index);
  w.u32(c.entries.length);
  for (const e of c.entries) {
    w.u64(e.block_hash);
    w.u8((e.parent_hash === null ? 0 : 1) | tierBits(e.storage_tier));
    w.u64(e.parent_hash ?? 0n);
    w.u64(e.tokens_hash);
  }
  return w.buf;
}

/**
 * Decodes one chunk of a state dump.
 * @throws {InvalidArgumentError} the bytes are not a state chunk
 */
export function decodeKvStateChunk(bytes: Uint8Array): KvStateChunk {
  const r = new Reader(bytes);
  if (r.u8() !== TAG_STATE) throw new KvMessageError("not a KV state chunk");
  const flags = r.u8();
  const worker_id = r.worker = r.str("worker id", MAX_WORKER_ID_BYTES);
  if (flags > 1) throw new KvMessageError(`bad chunk flags ${flags}`, worker_id);
  const last = flags === 1;
  const nonce = r.str("nonce", MAX_NONCE_BYTES);
  const last_event_id = r.eventId("last_event_id");
  const index = r.u32();
  if (index > MAX_CHUNK_INDEX) {
    throw new KvMessageError(`chunk index ${index} is over ${MAX_CHUNK_INDEX}`, worker_id);
  }
  const n = r.count("entry count", MAX_BLOCKS_PER_MESSAGE, 25);
  const entries: KvStateEntry[] = new Array(n);
  for (let i = 0; i < n; i++) {
    const block_hash = r.u64();
    const byte = r.u8();
    const has = byte & 15;
    if (has > 1) throw new KvMessageError(`entry ${i}: bad parent flag ${has}`, worker_id);
    const storage_tier = tierOf(byte, worker_id);
    const parent = r.u64();
    const e: KvStateEntry = { block_hash, parent_hash: has ? parent : null, tokens_hash: r.u64() };
    if (storage_tier !== "device") e.storage_tier = storage_tier;
    entries[i] = e;
  }
  r.end();
  return { worker_id, nonce, last_event_id, index, last, entries };
}

/**
 * Checks a resync request that came off the network: a worker id (or `"*"`), a reply
 * subject under `kv_state.`, and a nonce a state chunk can carry.
 *
 * @param value the parsed JSON
 * @returns the request, typed
 * @throws {KvMessageError} it is not a valid resync request
 */
export function parseResyncRequest(value: unknown): KvResyncRequest {
  if (typeof value !== "object" || value === null || Array.isArray(value)) {
    throw new KvMessageError("a resync request must be an object");
  }
  const { worker_id, reply, nonce } = value as Record<string, unknown>;
  if (typeof worker_id !== "string" || worker_id === "" || worker_id.length > MAX_WORKER_ID_BYTES) {
    throw new KvMessageError("a resync request needs a worker_id (1 to 1024 characters)");
  }
  if (
    typeof reply !== "string" || !reply.startsWith(`${KV_STATE}.`) || reply.length > 256 ||
    !/^[^\s*>]+$/.test(reply)
  ) {
    throw new KvMessageError(`a resync request needs a reply subject ${KV_STATE}.<name>`);
  }
  if (typeof nonce !== "string" || nonce === "" || utf8.encode(nonce).length > MAX_NONCE_BYTES) {
    throw new KvMessageError(`a resync request needs a nonce of 1 to ${MAX_NONCE_BYTES} bytes`);
  }
  return { worker_id, reply, nonce };
}
