/** Argument checks of the transfer engine: every size, type and index before a byte moves. */

import { DescriptorRangeError, TransferArgumentError } from "./errors.ts";
import type { MemType } from "./types.ts";

export function argError(message: string): never {
  throw new TransferArgumentError(message);
}

export function checkSize(value: unknown, what: string, min = 0): number {
  if (typeof value !== "number" || !Number.isSafeInteger(value) || value < min) {
    argError(`${what} must be an integer >= ${min}, got ${String(value)}`);
  }
  return value;
}

export function checkMemType(value: unknown): MemType {
  if (value !== "DRAM" && value !== "VRAM") {
    argError(`memory type must be "DRAM" or "VRAM", got ${JSON.stringify(value)}`);
  }
  return value;
}

export function packIndices(
  idx: readonly number[] | Uint32Array,
  count: number,
  side: string,
): Uint32Array {
  if (!Array.isArray(idx) && !(idx instanceof Uint32Array)) {
    argError(`${side} indices must be an array of integers`);
  }
  const out = new Uint32Array(idx.length);
  for (let i = 0; i < idx.length; i++) {
    const v = idx[i];
    if (typeof v !== "number" || !Number.isInteger(v) || v < 0 || v >= count) {
      throw new DescriptorRangeError(
        `${side} index ${String(v)} at position ${i} is out of range ` +
          `(the list has ${count} descriptors)`,
      );
    }
    out[i] = v;
  }
  return out;
}
