// `dynamo bench --simulate`: the same replay in virtual time. Mocker workers (the mocker's own
// scheduler and block manager, its vLLM-fitted step times) advance step by step on a simulated
// clock; requests arrive at their trace times; the router's own policy (RoutingPolicy: busy
// thresholds, bounded load, predicted-TTFT or weighted cost, the same TTFT model learning from
// the same first tokens) picks each worker from a radix tree fed the workers' KV events, the
// prompts it sent that are still being prefilled (PendingPrefills) and the router's load book.
// No process, socket or wall clock: the figures do not depend on what else the machine runs, and
// the same inputs give the same figures.

import { InvalidArgumentError } from "../../runtime/errors.ts";
import { computeBlockHashesSync } from "../../llm/kv_router/hashing.ts";
import { PendingPrefills } from "../../llm/kv_router/pending_prefills.ts";
import {
  cachedPrefix,
  RoutingPolicy,
  type RoutingPolicyOptions,
  withPeerFetch,
} from "../../llm/kv_router/policy.ts";
import { TieredIndex } from "../../llm/kv_router/tiered_index.ts";
import { ActiveSequences, type WorkerCandidate } from "../../llm/kv_router/scheduler.ts";
import {
  BlockManager,
  cachePrefix,
  defaultHostBlocks,
  type FullBlock,
  peerCopy,
} from "../../llm/engines/mocker/block_manager.ts";
import {
  hashPromptBlocks,
  Scheduler,
  type Sequence,
  type StepPlan,
} from "../../llm/engines/mocker/scheduler.ts";
import type { RequestResult } from "./replay.ts";
import { DEFAULT_KV_FETCH_MS_PER_BLOCK } from "../../llm/engines/mocker/timing.ts";
import { mulberry32 } from "./synthetic.ts";
import { promptTokens, type TraceRequest } from "./trace.ts";

/** Options of {@linkcode simulate}. */
export interface SimulateOptions {
  /** Mocker workers. */
  workers: number;
  /** Router mode. */
  mode: "kv" | "round-robin" | "random";
  /** Divides the trace's arrival times (2: twice the load). */
  load: number;
  /** Tokens per KV block. */
  blockSize: number;
  /** KV blocks per worker (default the mocker's). */
  numGpuBlocks?: number;
  /**
   * KV blocks in each worker's host tier (default the mocker's: `defaultHostBlocks` of
   * `numGpuBlocks`; 0: none).
   */
  hostBlocks?: number;
  /** Simulated ms to copy a block back from the host tier (default the mocker's). */
  hostOnboardMsPerBlock?: number;
  /** Running sequences per worker (default 256). */
  maxNumSeqs?: number;
  /** Tokens per forward pass (default 8192). */
  maxNumBatchedTokens?: number;
  /** The kv mode's policy (default: the router's defaults). */
  policy?: RoutingPolicyOptions;
  /**
   * Routers (frontends) taking turns with the requests, each with its own book and TTFT model
   * (default 1). All see the same KV events.
   */
  routers?: number;
  /** Routers share their books (the router's `replicaSync`; default false). */
  replicaSync?: boolean;
  /** Seed of random picks (random mode, ties). */
  seed?: number;
  /** Period of the per-worker load samples in simulated ms (default 1000). */
  sampleMs?: number;
  /**
   * An oracle for lower-bound experiments, not a real fleet: when a request arrives, the
   * worker it goes to is given, free and at once, every block of its prompt's prefix that any
   * worker has computed (as if all workers shared one cache, within each worker's own size).
   * Default false.
   */
  sharedCache?: boolean;
  /**
   * Workers can load a prompt's cached prefix from a peer that holds it, at this many simulated
   * ms per KV block, and the router knows (peer KV fetch; see `withPeerFetch`). Default: the
   * mocker's ({@linkcode DEFAULT_KV_FETCH_MS_PER_BLOCK}); null: workers that cannot.
   */
  kvFetchMsPerBlock?: number | null;
  /**
   * A worker whose blocks a peer copies demotes them (`BlockManager.demote`: evicted and dropped
   * first), as mocker workers do (default true; false: the source keeps them in its LRU order,
   * as an engine that is not told of the copy).
   */
  demoteCopied?: boolean;
  /**
   * The router knows when each worker's forward pass in flight ends and what it prefills, as
   * mocker workers announce their passes (default true; false: engines that do not).
   */
  passTiming?: boolean;
}

/** What a simulated replay measured. */
export interface SimulationResult {
  /** One result per request, as the live replay gives them (times in simulated ms). */
  results: RequestResult[];
  /** Simulated seconds from the first arrival to the last answer. */
  seconds: number;
  /** Running sequences per worker, sampled every `sampleMs`: `[t_ms, ...per worker]`. */
  load: number[][];
}

interface Worker {
  id: string;
  blocks: BlockManager;
  scheduler: Scheduler;
  plan?: StepPlan;
  /** When the pass in flight ends (simulated ms), if one is. */
  busyUntil?: number;
}

/**
 * Replays `requests` against `options.workers` simulated mocker workers in virtual time.
 *
 * @param requests the trace, sorted by arrival
 * @param options fleet, router mode and policy, load factor
 * @returns per-request results, the simulated duration, and load samples
 * @throws {InvalidArgumentError} a bad worker count, load, or a prompt larger than a worker's cache
 */
export function simulate(
  requests: readonly TraceRequest[],
  options: SimulateOptions,
): SimulationResult {
  if (!Number.isInteger(options.workers) || options.workers < 1) {
    throw new InvalidArgumentError(`workers must be a whole number >= 1, got ${options.workers}`);
  }
  if (!(options.load > 0)) throw new InvalidArgumentError(`load must be > 0, got ${options.load}`);
  const bs = options.blockSize;
  let now = 0;
  const rnd = mulberry32(options.seed ?? 1);
  const tree = new TieredIndex();
  // Every block any worker has stored (the sharedCache oracle's pool).
  const computed = new Set<bigint>();
  const workers: Worker[] = Array.from({ length: options.workers }, (_, i) => {
    const id = `w${i}`;
    const blocks = new BlockManager({
      numGpuBlocks: options.numGpuBlocks,
      hostBlocks: options.hostBlocks ?? defaultHostBlocks(options.numGpuBlocks),
      blockSize: bs,
      onEvent: (data, tier) => {
        tree.apply(id, data, tier);
        if (options.sharedCache && typeof data === "object" && "stored" in data) {
          for (const b of data.stored.blocks) computed.add(b.block_hash);
        }
      },
    });
    const scheduler = new Scheduler(blocks, {
      maxNumSeqs: options.maxNumSeqs,
      maxNumBatchedTokens: options.maxNumBatchedTokens,
      hostOnboardMsPerBlock: options.hostOnboardMsPerBlock,
    });
    return { id, blocks, scheduler };
  });
  const routers = Array.from({ length: options.routers ?? 1 }, () => {
    const policy = new RoutingPolicy(bs, { random: rnd, ...options.policy, ttftModel: undefined });
    const pending = new PendingPrefills();
    const book = new ActiveSequences(bs, {
      now: () => now,
      onFirstOutput: (routedWith, ttftMs) => policy.ttftModel.observe(routedWith, ttftMs),
    });
    return { policy, book, pending };
  });
  // As the live router: pass timing and peer fetch go with the default cost only.
  const predicted = !routers[0]!.policy.weighted;
  const passTiming = predicted && (options.passTiming ?? true);
  const fetchMs = predicted
    ? options.kvFetchMsPerBlock === undefined
      ? DEFAULT_KV_FETCH_MS_PER_BLOCK
      : options.kvFetchMsPerBlock
    : null;
  const onboardMs = workers[0]!.scheduler.hostOnboardMsPerBlock;
  // The books a router's booking lands in: its own, and with replica sync every other's (as
  // remote bookings: they teach no TTFT model).
  const booksOf = (r: number) =>
    routers.map((x, k) => ({ book: x.book, key: (id: string) => k === r ? id : `remote:${id}` }))
      .filter((_, k) => k === r || options.replicaSync);
  const results: RequestResult[] = new Array(requests.length);
  const load: number[][] = [];
  const sampleMs = options.sampleMs ?? 1000;
  let nextSample = 0;
  let rr = 0;
  // Requests waiting for their fetched blocks: when each starts.
  const later: Array<{ at: number; run: () => void }> = [];

  const pick = (
    tokens: number[],
    r: number,
    hashes: { local: bigint[]; sequence: bigint[] },
  ): { worker: Worker; overlap: number; fetch?: { from: Worker; blocks: number } } => {
    const { policy, book, pending } = routers[r]!;
    if (options.mode === "round-robin") {
      return { worker: workers[rr++ % workers.length]!, overlap: 0 };
    }
    if (options.mode === "random") {
      return { worker: workers[Math.floor(rnd() * workers.length)]!, overlap: 0 };
    }
    const { scores, held } = tree.findOverlap(hashes.local);
    // What this router sent that is still being prefilled counts as cached where it went.
    const soon = pending.findMatches(hashes.sequence).scores;
    const requestBlocks = Math.ceil(tokens.length / bs);
    const own: WorkerCandidate[] = workers.map((w) => {
      const l = book.load(w.id);
      return {
        workerId: w.id,
        // As the router: the workers announce their copy time from host memory with their passes.
        ...cachedPrefix(
          { device: scores.get(w.id) ?? 0, held: held?.get(w.id), soon: soon.get(w.id) },
          requestBlocks,
          passTiming ? onboardMs : undefined,
        ),
        requestBlocks,
        activeBlocks: l.activeBlocks,
        prefillBlocks: l.prefillBlocks,
        activeRequests: l.requests,
        waitingRequests: l.waiting,
        ...(passTiming
          ? {
            passLeftMs: (w.busyUntil ?? now) - now,
            passPrefillTokens: w.plan?.prefillTokens ?? 0,
            passMs: w.plan?.durationMs ?? 0,
          }
          : {}),
        ...(fetchMs === null ? {} : { fetchMsPerBlock: fetchMs }),
      };
    });
    const candidates = fetchMs === null ? own : withPeerFetch(own, held ?? scores);
    const chosen = policy.choose(candidates, { totalRequests: book.totalRequests });
    return {
      worker: workers.find((w) => w.id === chosen.workerId)!,
      overlap: chosen.overlapBlocks,
      fetch: chosen.fetchFrom === undefined
        ? undefined
        : { from: workers.find((w) => w.id === chosen.fetchFrom)!, blocks: chosen.overlapBlocks },
    };
  };

  // The sharedCache oracle: copies into `w` the blocks of the prompt's prefix that some worker
  // computed and `w` lacks, as inactive cached blocks (room permitting).
  const share = (w: Worker, blocks: FullBlock[]) => {
    let end = w.blocks.matchPrefix(blocks.map((b) => b.sequenceHash));
    while (end < blocks.length && computed.has(blocks[end]!.sequenceHash)) end++;
    w.blocks.release(cachePrefix(w.blocks, blocks, end).toReversed(), 0);
  };

  const startStep = (w: Worker) => {
    if (w.busyUntil !== undefined || !w.scheduler.hasWork) return;
    const plan = w.scheduler.schedule();
    if (plan.entries.length === 0) {
      throw new InvalidArgumentError(`worker ${w.id} cannot schedule its waiting requests`);
    }
    w.plan = plan;
    w.busyUntil = now + plan.durationMs;
  };

  const arrive = (i: number) => {
    const req = requests[i]!;
    const tokens = promptTokens(req);
    const r = i % routers.length;
    const hashes = options.mode === "kv" ? computeBlockHashesSync(tokens, bs) : undefined;
    const { worker, overlap, fetch } = pick(tokens, r, hashes!);
    const books = options.mode === "kv" ? booksOf(r) : [];
    const key = String(i);
    const sent = now;
    const result: RequestResult = {
      ok: false,
      itlMs: [],
      promptTokens: tokens.length,
      outputTokens: 0,
      latencyMs: 0,
      startMs: sent,
    };
    results[i] = result;
    // Counted like the live replay: only the router's own book, as the frontend keeps it.
    for (const b of books) b.book.add(b.key(key), worker.id, tokens.length, overlap);
    if (hashes) routers[r]!.pending.add(key, worker.id, hashes.sequence);
    let last = 0;
    let seq: Sequence | undefined = undefined;
    const blocks = hashPromptBlocks(tokens, bs);
    if (options.sharedCache) share(worker, blocks);
    // As a mocker: the prompt's prefix held by the peer the router named (as much as it holds
    // now, after what the worker holds in its host tier) is there once its blocks are copied:
    // they are cached then (held until the scheduler has the request), and the request starts.
    // Without a peer's blocks, the scheduler copies host blocks back as it admits the request.
    const hashList = blocks.map((b) => b.sequenceHash);
    const there = fetch ? Math.min(fetch.from.blocks.heldPrefix(hashList), fetch.blocks) : 0;
    // The peer, asked, demotes what it holds of the prefix (as a mocker worker does).
    if (fetch && options.demoteCopied !== false) fetch.from.blocks.demote(hashList.slice(0, there));
    const copy = fetch
      ? peerCopy(worker.blocks, hashList, there, { host: onboardMs, peer: fetchMs ?? 0 })
      : undefined;
    const start = () => {
      const held = copy ? cachePrefix(worker.blocks, blocks, copy.end) : [];
      seq = worker.scheduler.add({
        id: key,
        tokenIds: tokens,
        maxTokens: req.outputLength,
        blocks,
        nextToken: (k) => 1000 + ((i * 7919 + k * 104729) % 30000),
        onToken: (_token, finished) => {
          result.outputTokens++;
          if (result.ttftMs === undefined) {
            result.ttftMs = now - sent;
            result.cachedTokens = seq?.cachedTokens ?? 0;
            if (hashes) routers[r]!.pending.done(key);
          } else result.itlMs.push(now - last);
          last = now;
          for (const b of books) b.book.progress(b.key(key), 1);
          if (finished) {
            result.ok = true;
            result.latencyMs = now - sent;
            for (const b of books) b.book.free(b.key(key));
          }
        },
      });
      worker.blocks.release(held.toReversed(), 0);
      startStep(worker);
    };
    if (copy) later.push({ at: now + copy.ms, run: start });
    else start();
  };

  const start = requests[0]?.timestamp ?? 0;
  let next = 0;
  for (;;) {
    let stepAt = Infinity;
    for (const w of workers) {
      if (w.busyUntil !== undefined && w.busyUntil < stepAt) stepAt = w.busyUntil;
    }
    const arrivalAt = next < requests.length
      ? (requests[next]!.timestamp - start) / options.load
      : Infinity;
    let laterAt = Infinity;
    for (const l of later) laterAt = Math.min(laterAt, l.at);
    const at = Math.min(stepAt, arrivalAt, laterAt);
    if (at === Infinity) break;
    while (nextSample <= at) {
      load.push([
        nextSample,
        ...workers.map((w) => w.scheduler.numRunning + w.scheduler.numWaiting),
      ]);
      nextSample += sampleMs;
    }
    now = at;
    if (laterAt === at && laterAt < arrivalAt) {
      later.splice(later.findIndex((l) => l.at === at), 1)[0]!.run();
      continue;
    }
    if (arrivalAt <= stepAt) {
      arrive(next++);
      continue;
    }
    for (const w of workers) {
      if (w.busyUntil !== now) continue;
      const plan = w.plan!;
      w.plan = undefined;
      w.busyUntil = undefined;
      w.scheduler.apply(plan);
      startStep(w);
    }
  }
  return { results, seconds: now / 1000, load };
}
