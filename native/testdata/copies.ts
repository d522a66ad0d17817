// Shared by native/kernel_test.ts and mock_cuda_run.ts: one batch of scattered copies
// between two agents' regions, and how to check its result.

import type { MemoryRegion, TransferAgent, XferHandle } from "../mod.ts";

/** Size of the regions the copies run in. */
export const BYTES = 1 << 20;

/** Odd offsets and lengths (heads and tails), one 16-byte-aligned pair, two longer than a
 * 64 KiB kernel chunk; destinations disjoint. */
export const COPIES: readonly Copy[] = [
  { from: 3, to: 1, length: 1 },
  { from: 17, to: 100, length: 333 },
  { from: 4096, to: 8192, length: 4096 },
  { from: 5000, to: 20_003, length: 70_000 },
  { from: 200_001, to: 300_008, length: 150_001 },
];

/** One copy: `length` bytes from offset `from` of the source to `to` of the destination. */
export interface Copy {
  from: number;
  to: number;
  length: number;
}

/** BYTES of a fixed, non-repeating-looking pattern. */
export function patternData(): Uint8Array {
  const data = new Uint8Array(BYTES);
  for (let i = 0; i < BYTES; i++) data[i] = (i * 131 + 7) & 255;
  return data;
}

/**
 * Prepares the WRITE of `copies` from `src` (of `a`) into `dst` of agent `b` (added to `a`
 * as a remote agent here).
 */
export function prepCopies(
  a: TransferAgent,
  src: MemoryRegion,
  b: TransferAgent,
  dst: MemoryRegion,
  copies: readonly Copy[],
): XferHandle {
  a.addRemoteAgent(b.getAgentMetadata());
  const local = a.prepXferDlist(
    "",
    a.getXferDescs(copies.map((c) => ({ region: src, offset: c.from, length: c.length }))),
  );
  const remote = a.prepXferDlist(
    b.name,
    b.getXferDescs(copies.map((c) => ({ region: dst, offset: c.to, length: c.length }))),
  );
  const idx = copies.map((_, i) => i);
  return a.makePreppedXfer("WRITE", local, idx, remote, idx);
}

/** What a zeroed destination holds after `copies` of `data`, in order. */
export function expectedAfter(copies: readonly Copy[], data: Uint8Array): Uint8Array {
  const want = new Uint8Array(BYTES);
  for (const c of copies) want.set(data.subarray(c.from, c.from + c.length), c.to);
  return want;
}

/** Index of the first byte where `a` and `b` differ, -1 when equal (a cheap failure message
 * where deepEqual would print a megabyte diff). */
export function firstDiff(a: Uint8Array, b: Uint8Array): number {
  if (a.length !== b.length) return Math.min(a.length, b.length);
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return i;
  return -1;
}
