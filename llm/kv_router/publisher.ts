/**
 * The worker side of KV events: {@linkcode KvEventPublisher} numbers each event of its
 * worker (1, 2, 3, ...), publishes it on the component's `kv_events` subject, and keeps a
 * mirror of the blocks the worker holds so it can answer an indexer's resync request
 * with a dump of its state.
 *
 * @module
 */

import type { Component } from "../../runtime/component.ts";
import { InvalidArgumentError } from "../../runtime/errors.ts";
import type { EventSubscription } from "../../runtime/events/mod.ts";
import type { Logger } from "../../runtime/logger.ts";
import { ReferenceKvEventPublisher } from "../../runtime/reference/kv_events.ts";
import { referenceRuntimeOf } from "../../runtime/reference/worker.ts";
import { type BlockHash, computeLocalHashes } from "./hashing.ts";
import {
  encodeKvStateChunk,
  encodeRouterEvent,
  KV_EVENTS,
  KV_RESYNC,
  type KvCacheEventData,
  type KvResyncRequest,
  type KvStateEntry,
  parseResyncRequest,
  type RouterEvent,
  STORAGE_TIERS,
  type StorageTier,
  storageTierIndex,
  toBlockHash,
} from "./protocols.ts";
import { U64Map } from "./u64_map.ts";

/** Options of {@linkcode KvEventPublisher}. */
export interface KvEventPublisherOptions {
  /** The worker these events are about (default: the runtime's instance id). */
  workerId?: string;
  /** Tokens per KV block. */
  kvBlockSize: number;
  /** Entries per state-dump chunk (default 16384, about 400 KB: under NATS's 1 MiB). */
  dumpChunkEntries?: number;
  /**
   * The endpoint these events are about, for the reference's (ai-dynamo 1.6.1) KV router. On a
   * runtime with etcd discovery each event also goes out in the reference's own format on its
   * event plane (a ZeroMQ channel named in etcd, with the KV-state query its router recovers
   * from), so a reference frontend routes by this worker's cache as well. Default `"generate"`
   * (the name the reference's workers serve their engine under); `false`: our format only.
   */
  referenceEndpoint?: string | false;
}

/** What {@linkcode KvEventPublisher.publishStored} takes (the seeds' `publish_stored`). */
export interface PublishStoredOptions {
  /** The tokens of the stored blocks, concatenated. */
  tokenIds: ArrayLike<number>;
  /** Tokens in each block; blocks from the first partial one on are not reported. */
  numBlockTokens: ArrayLike<number>;
  /** The engine's hash of each block (its sequence hash; signed or unsigned 64-bit). */
  blockHashes: ArrayLike<bigint | number>;
  /** The engine's hash of the block before the first one (none: they start a sequence). */
  parentHash?: bigint | number | null;
  /** LoRA adapter id (0 or absent: the base model). */
  loraId?: number;
  /** Where the blocks were stored (default the device). */
  storageTier?: StorageTier;
}

interface MirrorBlock {
  hash: BlockHash;
  parent: BlockHash | null;
  local: BlockHash;
  /** Bits of the tiers holding it (bit i: `STORAGE_TIERS[i]`). */
  tiers: number;
}

/**
 * Publishes one worker's KV cache events.
 *
 * @example
 * ```ts
 * import { DistributedRuntime, KvEventPublisher } from "../../mod.ts";
 * const runtime = await DistributedRuntime.connect({ discovery: "memory", requestPlane: "local" });
 * const component = runtime.namespace("demo").component("backend");
 * const pub = new KvEventPublisher(component, { workerId: runtime.instanceId, kvBlockSize: 16 });
 * const tokenIds = Array.from({ length: 32 }, (_, i) => i);
 * await pub.publishStored({ tokenIds, numBlockTokens: [16, 16], blockHashes: [101n, 102n] });
 * await pub.publishRemoved([102n]);
 * await pub.close();
 * await runtime.shutdown();
 * ```
 */
export class KvEventPublisher {
  /** The worker these events come from (its instance id). */
  readonly workerId: string;
  /** Tokens per KV block. */
  readonly kvBlockSize: number;
  readonly #component: Component;
  readonly #mirror = new U64Map<MirrorBlock>();
  readonly #chunk: number;
  readonly #log: Logger;
  readonly #resync: EventSubscription;
  #eventId = 0;
  /** The reference-format publisher being started, then started (undefined: none). */
  #reference?: Promise<ReferenceKvEventPublisher | undefined>;
  #referencePub?: ReferenceKvEventPublisher;
  /** Events published while the reference-format publisher starts, in order. */
  #early?: Array<[KvCacheEventData, StorageTier]>;
  /** Stops closing the reference-format publisher at the runtime's shutdown. */
  #unlisten?: () => void;

  /**
   * Creates a publisher of one worker's KV cache events.
   *
   * @param component the workers' component (events go on its `kv_events` subject)
   * @param options worker id and block size
   * @throws {InvalidArgumentError} a bad block size
   */
  constructor(component: Component, options: KvEventPublisherOptions) {
    const { kvBlockSize } = options;
    if (!Number.isInteger(kvBlockSize) || kvBlockSize <= 0) {
      throw new InvalidArgumentError(`kvBlockSize must be a positive integer, got ${kvBlockSize}`);
    }
    const rt = component.runtimeInternals;
    this.#component = component;
    this.workerId = options.workerId ?? rt.instanceId;
    this.kvBlockSize = kvBlockSize;
    this.#chunk = options.dumpChunkEntries ?? 16384;
    this.#log = rt.logger.child({ component: component.path, kv_publisher: this.workerId });
    this.#resync = component.subscribeEvents(KV_RESYNC, { signal: rt.shutdownSignal });
    const serving = this.#serveResync();
    rt.track(serving);
    serving.catch((err) => this.#log.warn("resync service failed", { error: String(err) }));
    const endpoint = options.referenceEndpoint ?? "generate";
    // The reference names a worker by its instance id: events about another one stay ours.
    if (endpoint !== false && rt.discovery.kind === "etcd" && this.workerId === rt.instanceId) {
      this.#early = [];
      this.#reference = ReferenceKvEventPublisher.start({
        runtime: referenceRuntimeOf(rt),
        namespace: component.namespace.name,
        component: component.name,
        endpoint,
        logger: this.#log,
      }).then((pub) => {
        for (const [data, tier] of this.#early ?? []) pub.publish(data, tier);
        this.#early = undefined;
        this.#referencePub = pub;
        return pub;
      }, (err) => {
        this.#early = undefined;
        if (!rt.shutdownSignal.aborted) {
          this.#log.warn("cannot publish KV events in the reference's format", {
            error: String(err),
          });
        }
        return undefined;
      });
      const onShutdown = () => void this.#closeReference();
      rt.shutdownSignal.addEventListener("abort", onShutdown, { once: true });
      this.#unlisten = () => rt.shutdownSignal.removeEventListener("abort", onShutdown);
    }
  }

  /**
   * Resolves once resync requests reach this publisher (and, on etcd, once its events go out
   * in the reference's format too).
   */
  get ready(): Promise<void> {
    return Promise.all([this.#resync.ready, this.#reference]).then(() => {});
  }

  /**
   * The same events in the reference's format (see `referenceEndpoint`), once started;
   * undefined when not published so.
   */
  get reference(): ReferenceKvEventPublisher | undefined {
    return this.#referencePub;
  }

  /** Id of the last event published (0 before the first). */
  get lastEventId(): number {
    return this.#eventId;
  }

  /** Blocks the worker holds in any tier, as far as its events said. */
  get blockCount(): number {
    return this.#mirror.size;
  }

  /**
   * Reports blocks the worker stored. Local hashes are computed here from the tokens.
   * @throws {InvalidArgumentError} mismatched lengths or bad hashes
   */
  publishStored(options: PublishStoredOptions): Promise<void> {
    try {
      const { tokenIds, numBlockTokens, blockHashes } = options;
      if (numBlockTokens.length !== blockHashes.length) {
        throw new InvalidArgumentError(
          `numBlockTokens (${numBlockTokens.length}) and blockHashes (${blockHashes.length}) ` +
            "must have one entry per block",
        );
      }
      let full = 0;
      while (full < numBlockTokens.length && numBlockTokens[full] === this.kvBlockSize) full++;
      if (tokenIds.length < full * this.kvBlockSize) {
        throw new InvalidArgumentError(
          `${full} blocks of ${this.kvBlockSize} tokens need ${full * this.kvBlockSize} ` +
            `token ids, got ${tokenIds.length}`,
        );
      }
      if (full === 0) return Promise.resolve();
      const local = computeLocalHashes(tokenIds, this.kvBlockSize, options.loraId ?? 0);
      const parent = options.parentHash === undefined || options.parentHash === null
        ? null
        : toBlockHash(options.parentHash);
      const blocks = local.slice(0, full).map((tokens_hash, i) => ({
        block_hash: toBlockHash(blockHashes[i]!),
        tokens_hash,
      }));
      return this.publish({ stored: { parent_hash: parent, blocks } }, options.storageTier);
    } catch (err) {
      return Promise.reject(err);
    }
  }

  /** Reports blocks the worker evicted from `tier` (the engine's hashes; default the device). */
  publishRemoved(
    blockHashes: ArrayLike<bigint | number>,
    tier: StorageTier = "device",
  ): Promise<void> {
    try {
      const hashes = Array.from(blockHashes, toBlockHash);
      return this.publish({ removed: { block_hashes: hashes } }, tier);
    } catch (err) {
      return Promise.reject(err);
    }
  }

  /** Reports that the worker dropped its whole cache in `tier` (default the device). */
  publishCleared(tier: StorageTier = "device"): Promise<void> {
    return this.publish("cleared", tier);
  }

  /**
   * Publishes one event of `tier` (default the device) with the next event id and updates the
   * mirror. The id is taken even when publishing fails: indexers then see a gap and resynchronise.
   */
  publish(data: KvCacheEventData, tier: StorageTier = "device"): Promise<void> {
    try {
      this.#record(data, 1 << storageTierIndex(tier));
      if (this.#referencePub) this.#referencePub.publish(data, tier);
      else this.#early?.push([data, tier]);
      const ev: RouterEvent = {
        worker_id: this.workerId,
        event: { event_id: ++this.#eventId, data },
      };
      if (tier !== "device") ev.storage_tier = tier;
      const bytes = encodeRouterEvent(ev);
      return this.#component.publishEvent(KV_EVENTS, bytes);
    } catch (err) {
      return Promise.reject(err);
    }
  }

  /** Stops answering resync requests (and publishing in the reference's format). */
  async close(): Promise<void> {
    await Promise.all([this.#resync.unsubscribe(), this.#closeReference()]);
  }

  #closeReference(): Promise<void> {
    this.#unlisten?.();
    const starting = this.#reference;
    this.#reference = undefined;
    this.#referencePub = undefined;
    return starting?.then((pub) => pub?.close()) ?? Promise.resolve();
  }

  #record(data: KvCacheEventData, bit: number): void {
    if (data === "cleared") {
      for (const b of [...this.#mirror.values()]) this.#drop(b, bit);
    } else if ("removed" in data) {
      for (const h of data.removed.block_hashes) {
        const b = this.#mirror.get(h);
        if (b) this.#drop(b, bit);
      }
    } else {
      let parent = data.stored.parent_hash;
      for (const b of data.stored.blocks) {
        const had = this.#mirror.get(b.block_hash);
        this.#mirror.set(b.block_hash, {
          hash: b.block_hash,
          parent,
          local: b.tokens_hash,
          tiers: (had?.tiers ?? 0) | bit,
        });
        parent = b.block_hash;
      }
    }
  }

  #drop(b: MirrorBlock, bit: number): void {
    b.tiers &= ~bit;
    if (b.tiers === 0) this.#mirror.delete(b.hash);
  }

  /** The mirror, parents before children. */
  #dump(): KvStateEntry[] {
    const out: KvStateEntry[] = [];
    const done = new Set<BlockHash>();
    const chain: BlockHash[] = [];
    for (const { hash: start } of this.#mirror.values()) {
      // Walk up to the first ancestor already out (or the root), then emit downwards.
      let h: BlockHash | null = start;
      while (h !== null && !done.has(h)) {
        const b = this.#mirror.get(h);
        if (!b) break;
        chain.push(h);
        done.add(h);
        h = b.parent;
      }
      for (let i = chain.length - 1; i >= 0; i--) {
        const hash = chain[i]!;
        const b = this.#mirror.get(hash)!;
        STORAGE_TIERS.forEach((tier, k) => {
          if ((b.tiers & (1 << k)) === 0) return;
          const e: KvStateEntry = { block_hash: hash, parent_hash: b.parent, tokens_hash: b.local };
          if (tier !== "device") e.storage_tier = tier;
          out.push(e);
        });
      }
      chain.length = 0;
    }
    return out;
  }

  async #serveResync(): Promise<void> {
    for await (const msg of this.#resync) {
      let req: KvResyncRequest;
      try {
        req = parseResyncRequest(JSON.parse(new TextDecoder().decode(msg.payload)));
      } catch (err) {
        this.#log.warn("ignoring a malformed resync request", { error: String(err) });
        continue;
      }
      if (req.worker_id !== this.workerId && req.worker_id !== "*") continue;
      // Snapshot and id together: events after it carry later ids.
      const entries = this.#dump();
      const lastEventId = this.#eventId;
      this.#log.debug("sending state dump", { blocks: entries.length, nonce: req.nonce });
      try {
        const chunks = Math.max(1, Math.ceil(entries.length / this.#chunk));
        for (let i = 0; i < chunks; i++) {
          await this.#component.publishEvent(
            req.reply,
            encodeKvStateChunk({
              worker_id: this.workerId,
              nonce: req.nonce,
              last_event_id: lastEventId,
              index: i,
              last: i === chunks - 1,
              entries: entries.slice(i * this.#chunk, (i + 1) * this.#chunk),
            }),
          );
        }
      } catch (err) {
        this.#log.warn("cannot send state dump", { error: String(err) });
      }
    }
  }
}
