// deno-lint-ignore-file no-console -- a program or test that prints; library code takes a Logger
// Child process of native/kernel_test.ts: VRAM batches against the mock CUDA library
// (mock_cuda.cpp, found through LD_LIBRARY_PATH as libcudart.so and libcuda.so.1), so the
// launch path runs without a GPU. Throws (exit code 1) on the first wrong result.
//
// Usage: deno run -A mock_cuda_run.ts <kernel|module-fails|launch-fails> <libmockcuda.so>
// (module-fails and launch-fails run with MOCK_CUDA_FAIL=module / =launch set).

import assert from "node:assert/strict";
import { type MemoryRegion, TransferAgent } from "../mod.ts";
import {
  BYTES,
  COPIES,
  type Copy,
  expectedAfter,
  firstDiff,
  patternData,
  prepCopies,
} from "./copies.ts";

const [scenario, mockPath] = Deno.args;
if (!scenario || !mockPath) throw new Error("usage: mock_cuda_run.ts <scenario> <libmockcuda.so>");

// The same file the library loaded as libcudart/libcuda, so the same counters.
const mock = Deno.dlopen(mockPath, {
  mock_cuda_stats: { parameters: ["buffer"], result: "void" },
});
function stats() {
  const s = new BigInt64Array(6);
  mock.symbols.mock_cuda_stats(s);
  const [launches, mallocs, grid, block, descs, noContext] = Array.from(s, Number) as [
    number,
    number,
    number,
    number,
    number,
    number,
  ];
  return { launches, mallocs, grid, block, descs, noContext };
}

const data = patternData();
// Chunks of at most 64 KiB: 1 + 1 + 1 + 2 + 3.
const CHUNKS = 8;

const a = new TransferAgent("mock-src");
const b = new TransferAgent("mock-dst");

/** Runs copies from `src` (of agent a) into a fresh VRAM region of b; checks the bytes. */
async function batch(src: MemoryRegion, copies: readonly Copy[]): Promise<void> {
  const dst = b.allocate("VRAM", BYTES);
  b.registerMemory(dst);
  const xfer = prepCopies(a, src, b, dst, copies);
  assert.equal(a.transfer(xfer), "PROC");
  await a.waitXfer(xfer); // on a native thread: its context must be made current there
  // In order, as the copies' semantics say (matters only where destinations overlap).
  const want = expectedAfter(copies, data);
  assert.equal(firstDiff(b.readMemory(dst, 0, BYTES), want), -1, "first wrong byte");
}

const vram = a.allocate("VRAM", BYTES);
const host = a.allocate("DRAM", BYTES);
a.registerMemory([vram, host]);
a.writeMemory(vram, 0, data);
a.writeMemory(host, 0, data);

const first = TransferAgent.cudaKernelStatus();
assert.equal(first.ptxEmbedded, true);

if (scenario === "kernel") {
  assert.equal(first.loaded, true, `kernel not loaded: ${first.reason}`);
  await batch(vram, COPIES);
  let s = stats();
  assert.deepEqual(
    { launches: s.launches, grid: s.grid, block: s.block, descs: s.descs, noContext: s.noContext },
    { launches: 1, grid: CHUNKS, block: 256, descs: CHUNKS, noContext: 0 },
  );
  assert.equal(TransferAgent.cudaKernelStatus().kernelBatches, 1);
  // The descriptor buffer is reused: the second batch allocates only its region.
  const mallocs = s.mallocs;
  await batch(vram, COPIES);
  s = stats();
  assert.equal(s.launches, 2);
  assert.equal(s.mallocs, mallocs + 1);
  // 4000 descriptors outgrow the first buffer (64 KiB holds 2730): it is replaced.
  const many = Array.from(
    { length: 4000 },
    (_, i) => ({ from: i * 7, to: i * 200 + 5, length: 7 }),
  );
  await batch(vram, many);
  s = stats();
  assert.equal(s.launches, 3);
  assert.equal(s.descs, 4000);
  assert.equal(s.mallocs, mallocs + 3); // the region and the bigger buffer
  // What stays off the kernel, and why.
  await batch(host, COPIES);
  assert.equal(TransferAgent.cudaKernelStatus().lastCopyReason, "host memory on one side");
  await batch(vram, COPIES.slice(1, 2));
  assert.equal(TransferAgent.cudaKernelStatus().lastCopyReason, "a single copy");
  await batch(vram, [{ from: 0, to: 0, length: 100 }, { from: 1000, to: 50, length: 100 }]);
  assert.match(TransferAgent.cudaKernelStatus().lastCopyReason ?? "", /ranges overlap/);
  const last = TransferAgent.cudaKernelStatus();
  assert.equal(last.kernelBatches, 3);
  assert.equal(last.copyBatches, 3);
  assert.equal(stats().launches, 3);
} else if (scenario === "module-fails") {
  assert.equal(first.loaded, false);
  assert.match(
    first.reason ?? "",
    /cuModuleLoadData.*UNSUPPORTED_PTX_VERSION.*older than the nvcc/,
  );
  await batch(vram, COPIES); // still copied, one cudaMemcpyAsync per descriptor
  const s = TransferAgent.cudaKernelStatus();
  assert.equal(s.kernelBatches, 0);
  assert.equal(s.copyBatches, 1);
  assert.equal(s.lastCopyReason, first.reason);
  assert.equal(stats().launches, 0);
} else if (scenario === "launch-fails") {
  assert.equal(first.loaded, true, `kernel not loaded: ${first.reason}`);
  await batch(vram, COPIES);
  const s = TransferAgent.cudaKernelStatus();
  assert.equal(s.kernelBatches, 0);
  assert.equal(s.copyBatches, 1);
  assert.match(s.lastCopyReason ?? "", /cuLaunchKernel.*LAUNCH_OUT_OF_RESOURCES/);
} else {
  throw new Error(`unknown scenario ${scenario}`);
}

a.close();
b.close();
mock.close();
console.log(`ok ${scenario}`);
