// The block-size check both KV indexers share.

import { InvalidArgumentError } from "../../runtime/errors.ts";

/** @throws {InvalidArgumentError} `blockSize` is not a positive integer */
export function checkBlockSize(blockSize: number): void {
  if (!Number.isInteger(blockSize) || blockSize <= 0) {
    throw new InvalidArgumentError(`blockSize must be a positive integer, got ${blockSize}`);
  }
}
