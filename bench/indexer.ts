// deno-lint-ignore-file no-console -- a program or test that prints; library code takes a Logger
// `deno task bench:indexer`: what the KV indexer's radix tree costs per block, next to
// plain `Map` operations on the same blocks in the same run. 64 workers hold 1M cached
// blocks in all (shared system-prompt prefixes plus unique suffixes); we measure stored
// events applied per second, findMatches latency per query, removals, and block hashing
// (the pure-TS XXH3 against hash-wasm's WASM build).
//
// Flags: --json PATH (write results as JSON), --quick (fewer blocks and queries).

import { createXXHash3 } from "hash-wasm";
import { computeBlockHashesSync, computeLocalHashes } from "../llm/kv_router/hashing.ts";
import {
  decodeRouterEvent,
  encodeRouterEvent,
  type RouterEvent,
} from "../llm/kv_router/protocols.ts";
import { RadixTree } from "../llm/kv_router/radix_tree.ts";
import { checkFlags, flag, seededRandom, summarize, type Summary } from "./_stats.ts";

checkFlags(
  "deno task bench:indexer",
  "The KV indexer: applying events, matching prefixes, removals, hashing.",
  {
    "--json PATH": "write the results there",
    "--quick": "fewer blocks and queries",
  },
);

const quick = Deno.args.includes("--quick");
const jsonPath = flag("--json");
const WORKERS = 64;
const TOTAL_BLOCKS = quick ? 100_000 : 1_000_000;
const BLOCK = 16;
const FAMILIES = 256; // shared prefixes ("system prompts")
const PREFIX_BLOCKS = 16;
const SUFFIX_BLOCKS = 48;
const QUERIES = quick ? 2_000 : 20_000;

// Deterministic pseudo-random numbers, so runs compare.
const rnd = seededRandom(0x9e3779b9);
const randTokens = (n: number) => Array.from({ length: n }, () => Math.floor(rnd() * 150_000));

// --- workload ---------------------------------------------------------------------------
const families = Array.from({ length: FAMILIES }, () => randTokens(PREFIX_BLOCKS * BLOCK));
interface Seq {
  worker: string;
  tokens: number[];
  local: bigint[];
  sequence: bigint[];
}
const seqs: Seq[] = [];
const events: RouterEvent[] = [];
const perWorker = new Map<string, Set<bigint>>();
let held = 0;
let eventId = 0;
const genStart = performance.now();
while (held < TOTAL_BLOCKS) {
  const worker = `worker-${seqs.length % WORKERS}`;
  const tokens = [
    ...families[Math.floor(rnd() ** 2 * FAMILIES)]!, // popular prompts more often
    ...randTokens(SUFFIX_BLOCKS * BLOCK),
  ];
  const { local, sequence } = computeBlockHashesSync(tokens, BLOCK);
  seqs.push({ worker, tokens, local, sequence });
  let mine = perWorker.get(worker);
  if (!mine) perWorker.set(worker, mine = new Set());
  for (const h of sequence) if (!mine.has(h)) (mine.add(h), held++);
  events.push({
    worker_id: worker,
    event: {
      event_id: ++eventId,
      data: {
        stored: {
          parent_hash: null,
          blocks: local.map((tokens_hash, i) => ({ block_hash: sequence[i]!, tokens_hash })),
        },
      },
    },
  });
}
const eventBlocks = events.length * (PREFIX_BLOCKS + SUFFIX_BLOCKS);
console.log(
  `workload: ${WORKERS} workers, ${held.toLocaleString()} cached blocks, ` +
    `${events.length.toLocaleString()} stored events of ${PREFIX_BLOCKS + SUFFIX_BLOCKS} blocks ` +
    `(${((performance.now() - genStart) / 1000).toFixed(1)} s to generate)`,
);

// --- apply stored events ----------------------------------------------------------------
function timeIt(f: () => void): number {
  const t = performance.now();
  f();
  return performance.now() - t;
}

// Three rounds, indexer and baseline taking turns, each on fresh state; medians reported.
const median = (xs: number[]) => [...xs].sort((x, y) => x - y)[Math.floor(xs.length / 2)]!;
let tree = new RadixTree();
for (const ev of events.slice(0, 2000)) tree.applyEvent(ev); // warm-up
const applyRuns: number[] = [];
const mapRuns: number[] = [];
for (let round = 0; round < 3; round++) {
  tree = new RadixTree();
  applyRuns.push(timeIt(() => {
    for (const ev of events) tree.applyEvent(ev);
  }));
  // Baseline: one Map.set per block in a per-worker map (the least any index must do).
  const maps = new Map<string, Map<bigint, bigint>>();
  mapRuns.push(timeIt(() => {
    for (const ev of events) {
      let m = maps.get(ev.worker_id);
      if (!m) maps.set(ev.worker_id, m = new Map());
      const data = ev.event.data;
      if (typeof data === "object" && "stored" in data) {
        for (const b of data.stored.blocks) m.set(b.block_hash, b.tokens_hash);
      }
    }
  }));
}
const applyMs = median(applyRuns);
const mapApplyMs = median(mapRuns);

// Decoding cost per event (the wire format), measured apart.
const encoded = events.slice(0, 5000).map(encodeRouterEvent);
const decodeMs = timeIt(() => {
  for (const e of encoded) decodeRouterEvent(e);
});

// --- findMatches ----------------------------------------------------------------------------
// Queries: 80% a stored sequence (its worker and others sharing its prefix hold it) plus
// 16 fresh blocks; 20% a popular prefix with a fresh suffix.
const queries: { local: bigint[]; sequence: bigint[] }[] = [];
for (let i = 0; i < QUERIES; i++) {
  const tokens = rnd() < 0.8
    ? [...seqs[Math.floor(rnd() * seqs.length)]!.tokens, ...randTokens(16 * BLOCK)]
    : [...families[Math.floor(rnd() ** 2 * FAMILIES)]!, ...randTokens(32 * BLOCK)];
  queries.push(computeBlockHashesSync(tokens, BLOCK));
}
// Baseline: Map.get per block, walking the sequence hashes until a miss, on one Map
// holding every cached block.
const allBlocks = new Map<bigint, number>();
for (const s of seqs) for (const h of s.sequence) allBlocks.set(h, 1);

const findSamples: number[] = [];
const mapSamples: number[] = [];
let findBlocks = 0;
let mapBlocks = 0;
let scored = 0;
for (let round = 0; round < 2; round++) {
  for (const q of queries) {
    let t = performance.now();
    const r = tree.findMatches(q.local);
    const dt = performance.now() - t;
    let deepest = 0;
    for (const v of r.scores.values()) deepest = Math.max(deepest, v);
    t = performance.now();
    let k = 0;
    while (k < q.sequence.length && allBlocks.get(q.sequence[k]!) !== undefined) k++;
    const dm = performance.now() - t;
    if (round === 1) {
      findSamples.push(dt);
      mapSamples.push(dm);
      findBlocks += Math.min(deepest + 1, q.local.length); // blocks looked at
      mapBlocks += Math.min(k + 1, q.sequence.length);
      scored += r.scores.size;
    }
  }
}
// Per-block costs from bulk timing (individual timings carry the timer's overhead).
const bulkFind = timeIt(() => {
  for (const q of queries) tree.findMatches(q.local);
});
const bulkMap = timeIt(() => {
  for (const q of queries) {
    let k = 0;
    while (k < q.sequence.length && allBlocks.get(q.sequence[k]!) !== undefined) k++;
  }
});

// --- removals ---------------------------------------------------------------------------------
const removals: RouterEvent[] = [];
for (const [worker, hashes] of perWorker) {
  const list = [...hashes];
  for (let i = 0; i < list.length / 10; i += 32) {
    removals.push({
      worker_id: worker,
      event: { event_id: 0, data: { removed: { block_hashes: list.slice(i, i + 32) } } },
    });
  }
}
const removedBlocks = removals.reduce(
  (n, e) =>
    n + (e.event.data as { removed: { block_hashes: bigint[] } }).removed.block_hashes.length,
  0,
);
const removeMs = timeIt(() => {
  for (const ev of removals) tree.applyEvent(ev);
});

// --- hashing ------------------------------------------------------------------------------
const prompt = randTokens(12_000);
const wasm = await createXXHash3(1337, 0);
function wasmHashes(tokens: number[]): bigint[] {
  const bytes = new Uint8Array(Uint32Array.from(tokens).buffer);
  const out: bigint[] = [];
  const chain = new DataView(new ArrayBuffer(16));
  let prev = 0n;
  for (let b = 0; b + BLOCK <= tokens.length; b += BLOCK) {
    wasm.init();
    wasm.update(bytes.subarray(b * 4, (b + BLOCK) * 4));
    const local = BigInt(`0x${wasm.digest("hex")}`);
    if (b === 0) prev = local;
    else {
      chain.setBigUint64(0, prev, true);
      chain.setBigUint64(8, local, true);
      wasm.init();
      wasm.update(new Uint8Array(chain.buffer));
      prev = BigInt(`0x${wasm.digest("hex")}`);
    }
    out.push(prev);
  }
  return out;
}
const check = computeBlockHashesSync(prompt, BLOCK).sequence;
if (wasmHashes(prompt).some((h, i) => h !== check[i])) throw new Error("hash mismatch");
function hashTimes(f: () => void, n: number): Summary {
  for (let i = 0; i < 20; i++) f();
  const s: number[] = [];
  for (let i = 0; i < n; i++) s.push(timeIt(f));
  return summarize(s);
}
const tsHash = hashTimes(() => computeBlockHashesSync(prompt, BLOCK), 200);
const tsLocal = hashTimes(() => computeLocalHashes(prompt, BLOCK), 200);
const wasmHash = hashTimes(() => wasmHashes(prompt), 50);

// --- report -----------------------------------------------------------------------------------
const us = (x: number) => `${(x * 1000).toFixed(2)} µs`;
const ns = (x: number) => `${(x * 1e6).toFixed(0)} ns`;
const find = summarize(findSamples);
const mapq = summarize(mapSamples);
const perBlockApply = applyMs / eventBlocks;
const perBlockMapSet = mapApplyMs / eventBlocks;
const perBlockFind = bulkFind / findBlocks;
const perBlockGet = bulkMap / mapBlocks;
const results = {
  workers: WORKERS,
  cachedBlocks: held,
  treeNodes: tree.size,
  storedEvents: events.length,
  eventsPerSecond: events.length / (applyMs / 1000),
  blocksPerSecond: eventBlocks / (applyMs / 1000),
  applyPerBlockNs: perBlockApply * 1e6,
  mapSetPerBlockNs: perBlockMapSet * 1e6,
  applyRatio: perBlockApply / perBlockMapSet,
  decodePerEventUs: (decodeMs / encoded.length) * 1000,
  findMatches: { p50Us: find.p50 * 1000, p99Us: find.p99 * 1000, meanUs: find.mean * 1000 },
  mapWalk: { p50Us: mapq.p50 * 1000, p99Us: mapq.p99 * 1000, meanUs: mapq.mean * 1000 },
  findPerBlockNs: perBlockFind * 1e6,
  mapGetPerBlockNs: perBlockGet * 1e6,
  findRatio: perBlockFind / perBlockGet,
  avgWorkersScored: scored / QUERIES,
  avgBlocksPerQuery: findBlocks / QUERIES,
  removedEventsPerSecond: removals.length / (removeMs / 1000),
  removePerBlockNs: (removeMs / removedBlocks) * 1e6,
  hash12kTokens: {
    tsFullP50Ms: tsHash.p50,
    tsLocalOnlyP50Ms: tsLocal.p50,
    wasmFullP50Ms: wasmHash.p50,
    speedup: wasmHash.p50 / tsHash.p50,
  },
};
console.log(
  `
apply stored events   ${Math.round(results.eventsPerSecond).toLocaleString()} events/s, ` +
    `${Math.round(results.blocksPerSecond).toLocaleString()} blocks/s
  per block           indexer ${ns(perBlockApply)}  vs Map.set ${ns(perBlockMapSet)}  ` +
    `ratio ${results.applyRatio.toFixed(2)}x
  decode (wire)       ${results.decodePerEventUs.toFixed(2)} µs per ${
      PREFIX_BLOCKS + SUFFIX_BLOCKS
    }-block event
findMatches           p50 ${us(find.p50)}  p99 ${us(find.p99)}  ` +
    `(Map walk p50 ${us(mapq.p50)}  p99 ${us(mapq.p99)})
  per block           indexer ${ns(perBlockFind)}  vs Map.get ${ns(perBlockGet)}  ` +
    `ratio ${results.findRatio.toFixed(2)}x
  per query           ${results.avgBlocksPerQuery.toFixed(1)} blocks walked, ` +
    `${results.avgWorkersScored.toFixed(1)} workers scored
removed events        ${Math.round(results.removedEventsPerSecond).toLocaleString()} events/s ` +
    `(${ns(removeMs / removedBlocks)} per block)
tree                  ${tree.size.toLocaleString()} nodes for ${held.toLocaleString()} ` +
    `worker-blocks (before removals)
hash 12k tokens (bs ${BLOCK})  pure TS p50 ${tsHash.p50.toFixed(3)} ms ` +
    `(local only ${tsLocal.p50.toFixed(3)} ms)  vs hash-wasm ${wasmHash.p50.toFixed(3)} ms  ` +
    `-> ${results.hash12kTokens.speedup.toFixed(1)}x`,
);
if (jsonPath) await Deno.writeTextFile(jsonPath, JSON.stringify(results, null, 2));
