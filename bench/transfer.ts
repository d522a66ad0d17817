// deno-lint-ignore-file no-console -- a program or test that prints; library code takes a Logger
// `deno task bench:transfer`: bandwidth of a batched, scattered block write through the
// native TransferAgent (64 blocks of 256 KiB at random indices, one native call, off the
// JS thread) against one contiguous memcpy of the same bytes in the same run. Target:
// the batched write reaches at least 80% of the memcpy bandwidth on host memory. With a
// GPU, the same on device memory against one device-to-device copy.
//
// Flags: --json PATH (write results as JSON), --quick (fewer iterations).

import { type MemoryRegion, type MemType, TransferAgent } from "../native/mod.ts";
import { checkFlags, flag, seededRandom, summarize } from "./_stats.ts";

checkFlags(
  "deno task bench:transfer",
  "Native KV transfer between processes.",
  {
    "--json PATH": "write the results there",
    "--quick": "fewer iterations",
  },
);

const quick = Deno.args.includes("--quick");
const jsonPath = flag("--json");
const BLOCK = 256 * 1024;
const BLOCKS = 64;
const SRC_POOL = 128; // blocks the scattered source indices are drawn from
const DST_POOL = 256; // blocks the scattered destination indices are drawn from
const BYTES = BLOCKS * BLOCK;
const ROUNDS = quick ? 4 : 10;
const PER_ROUND = quick ? 5 : 10;
const TARGET = 0.8;

// Deterministic pseudo-random numbers, so runs compare.
const rnd = seededRandom(0x2545f491);
function pick(n: number, from: number): number[] {
  const all = Array.from({ length: from }, (_, i) => i);
  for (let i = all.length - 1; i > 0; i--) {
    const j = Math.floor(rnd() * (i + 1));
    [all[i], all[j]] = [all[j]!, all[i]!];
  }
  return all.slice(0, n);
}

interface Result {
  memType: MemType;
  batchedGBps: number;
  /** Host memory only: the same batch run inline on the JS thread (no thread hop). */
  inlineGBps?: number;
  memcpyGBps: number;
  ratio: number;
  batchedP50Ms: number;
  memcpyP50Ms: number;
  target: number;
  pass: boolean;
}

const gbps = (ms: number) => BYTES / (ms / 1000) / 1e9;

async function measure(memType: MemType): Promise<Result> {
  using prefill = new TransferAgent("bench-prefill");
  using decode = new TransferAgent("bench-decode");
  // The same batch again through an agent that runs every host transfer inline.
  using inliner = new TransferAgent("bench-inline", { inlineMaxBytes: Number.MAX_SAFE_INTEGER });
  const src = prefill.allocate(memType, SRC_POOL * BLOCK);
  const dst = decode.allocate(memType, DST_POOL * BLOCK);
  const flat: MemoryRegion = prefill.allocate(memType, BYTES); // memcpy destination
  prefill.registerMemory([src, flat]);
  decode.registerMemory(dst);
  const fill = new Uint8Array(BLOCK);
  for (let b = 0; b < SRC_POOL; b++) {
    fill.fill(b);
    prefill.writeMemory(src, b * BLOCK, fill);
  }
  prefill.addRemoteAgent(decode.getAgentMetadata());
  const local = prefill.prepXferDlist("", prefill.getXferDescs({ region: src, blockBytes: BLOCK }));
  const remote = prefill.prepXferDlist(
    "bench-decode",
    decode.getXferDescs({ region: dst, blockBytes: BLOCK }),
  );
  const xfer = prefill.makePreppedXfer(
    "WRITE",
    local,
    pick(BLOCKS, SRC_POOL),
    remote,
    pick(BLOCKS, DST_POOL),
    "bench",
  );

  const src2 = inliner.allocate(memType, SRC_POOL * BLOCK);
  inliner.registerMemory(src2);
  inliner.addRemoteAgent(decode.getAgentMetadata());
  const inlineXfer = inliner.makePreppedXfer(
    "WRITE",
    inliner.prepXferDlist("", inliner.getXferDescs({ region: src2, blockBytes: BLOCK })),
    pick(BLOCKS, SRC_POOL),
    inliner.prepXferDlist("bench-decode", decode.getXferDescs({ region: dst, blockBytes: BLOCK })),
    pick(BLOCKS, DST_POOL),
  );
  const host = memType === "DRAM";

  const batched = async () => {
    prefill.transfer(xfer);
    await prefill.waitXfer(xfer);
  };
  const memcpy = () => prefill.copyMemory(src, 0, flat, 0, BYTES);
  // Warm up: fault every page in, on both paths.
  for (let i = 0; i < 3; i++) {
    prefill.copyMemory(src, 0, flat, 0, BYTES);
    prefill.copyMemory(src, BYTES, flat, 0, BYTES);
    await batched();
    if (host) inliner.transfer(inlineXfer);
  }
  decode.getNewNotifs();
  const tb: number[] = [];
  const tm: number[] = [];
  const ti: number[] = [];
  for (let r = 0; r < ROUNDS; r++) {
    for (let i = 0; i < PER_ROUND; i++) {
      let t = performance.now();
      await batched();
      tb.push(performance.now() - t);
      t = performance.now();
      memcpy();
      tm.push(performance.now() - t);
      if (host) {
        t = performance.now();
        inliner.transfer(inlineXfer);
        ti.push(performance.now() - t);
      }
    }
    decode.getNewNotifs(); // keep the queue drained
  }
  const b = summarize(tb);
  const m = summarize(tm);
  const ratio = m.p50 / b.p50;
  return {
    memType,
    batchedGBps: gbps(b.p50),
    ...(host ? { inlineGBps: gbps(summarize(ti).p50) } : {}),
    memcpyGBps: gbps(m.p50),
    ratio,
    batchedP50Ms: b.p50,
    memcpyP50Ms: m.p50,
    target: TARGET,
    pass: ratio >= TARGET,
  };
}

function report(r: Result, what: string): void {
  console.log(
    `${r.memType.padEnd(5)} batched scattered write ${BLOCKS} x ${BLOCK / 1024} KiB  ` +
      `${r.batchedGBps.toFixed(2)} GB/s (p50 ${r.batchedP50Ms.toFixed(3)} ms)\n` +
      `      ${what.padEnd(34)}${r.memcpyGBps.toFixed(2)} GB/s (p50 ${
        r.memcpyP50Ms.toFixed(3)
      } ms)\n` +
      `      ratio ${(r.ratio * 100).toFixed(1)}%  target >= ${TARGET * 100}%  ` +
      (r.pass ? "PASS" : "BELOW TARGET"),
  );
  if (r.inlineGBps !== undefined) {
    console.log(
      `      (same batch inline on the JS thread: ${r.inlineGBps.toFixed(2)} GB/s, ` +
        `${((r.inlineGBps / r.memcpyGBps) * 100).toFixed(1)}% of memcpy)`,
    );
  }
}

// JS reference point: TypedArray.set of the same bytes between two ArrayBuffers.
const a = new Uint8Array(BYTES).fill(1);
const c = new Uint8Array(BYTES);
for (let i = 0; i < 3; i++) c.set(a);
const ts: number[] = [];
for (let i = 0; i < ROUNDS * PER_ROUND; i++) {
  const t = performance.now();
  c.set(a);
  ts.push(performance.now() - t);
}
const typedSet = summarize(ts);

const results: { dram: Result; vram?: Result; typedArraySetGBps: number; vramSkipped?: string } = {
  dram: await measure("DRAM"),
  typedArraySetGBps: gbps(typedSet.p50),
};
report(results.dram, "one memcpy of the same bytes");
console.log(
  `      (TypedArray.set of ${BYTES >> 20} MiB: ${results.typedArraySetGBps.toFixed(2)} GB/s)`,
);
const vram = TransferAgent.vramStatus();
if (vram.available) {
  results.vram = await measure("VRAM");
  report(results.vram, "one device-to-device copy");
} else {
  results.vramSkipped = vram.reason;
  console.log(`VRAM  skipped: ${vram.reason}`);
}
if (jsonPath) await Deno.writeTextFile(jsonPath, JSON.stringify(results, null, 2));
