/**
 * Block hashing shared by KV event publishers, the indexer, the router and the mocker.
 *
 * Token ids are split into full blocks of `blockSize` tokens (a partial tail is dropped).
 * A block's local hash is XXH3-64 (seed 1337, plus the LoRA id when one is set) of the
 * block's tokens as u32 little-endian bytes. Sequence hashes chain the local hashes:
 * `seq[0] = local[0]`, `seq[i] = XXH3-64(seq[i-1] || local[i])` over 16 little-endian
 * bytes, so equal sequence hashes mean equal prefixes.
 *
 * @module
 */

import { createXXHash3, type IHasher } from "hash-wasm";
import { InvalidArgumentError } from "../../runtime/errors.ts";

/** A 64-bit block hash. */
export type BlockHash = bigint;

/** The reference seed of block hashes. */
export const BLOCK_HASH_SEED = 1337;

const hashers = new Map<number, IHasher>();
hashers.set(BLOCK_HASH_SEED, await createXXHash3(BLOCK_HASH_SEED, 0));

async function hasherFor(loraId: number): Promise<IHasher> {
  const seed = BLOCK_HASH_SEED + loraId;
  let hasher = hashers.get(seed);
  if (!hasher) {
    hasher = await createXXHash3(seed >>> 0, Math.floor(seed / 2 ** 32) >>> 0);
    hashers.set(seed, hasher);
  }
  return hasher;
}

function digest64(hasher: IHasher, bytes: Uint8Array): bigint {
  hasher.init();
  hasher.update(bytes);
  const out = hasher.digest("binary");
  return new DataView(out.buffer, out.byteOffset, 8).getBigUint64(0, false);
}

/** Block hashes of a token sequence. */
export interface BlockHashes {
  /** Per-block hashes of the block's own tokens. */
  local: BlockHash[];
  /** Per-block hashes of the whole prefix up to and including the block. */
  sequence: BlockHash[];
}

function checkBlockSize(blockSize: number): void {
  if (!Number.isInteger(blockSize) || blockSize <= 0) {
    throw new InvalidArgumentError(`blockSize must be a positive integer, got ${blockSize}`);
  }
}

function checkLoraId(loraId: number): void {
  if (!Number.isSafeInteger(loraId) || loraId < 0) {
    throw new InvalidArgumentError(`loraId must be a non-negative integer, got ${loraId}`);
  }
}

const chainBytes = new Uint8Array(16);
const chainView = new DataView(chainBytes.buffer);

/**
 * Hashes one sequence step: the hash of the prefix before a block and the block's local
 * hash give the prefix hash including the block.
 */
export function chainHash(parent: BlockHash, local: BlockHash): BlockHash {
  chainView.setBigUint64(0, parent, true);
  chainView.setBigUint64(8, local, true);
  return digest64(hashers.get(BLOCK_HASH_SEED)!, chainBytes);
}

/**
 * Local and sequence hashes of every full block of `tokenIds`.
 *
 * @param tokenIds the prompt's token ids (u32)
 * @param blockSize tokens per KV block
 * @param loraId salts the hash (0 or absent: the base model)
 * @throws {InvalidArgumentError} a bad block size or LoRA id
 * @example
 * ```ts
 * const { local, sequence } = await computeBlockHashes([1, 2, 3, 4], 2);
 * ```
 */
export async function computeBlockHashes(
  tokenIds: ArrayLike<number>,
  blockSize: number,
  loraId = 0,
): Promise<BlockHashes> {
  checkBlockSize(blockSize);
  checkLoraId(loraId);
  const hasher = loraId === 0 ? hashers.get(BLOCK_HASH_SEED)! : await hasherFor(loraId);
  const blocks = Math.floor(tokenIds.length / blockSize);
  const words = Uint32Array.from({ length: blocks * blockSize }, (_, i) => tokenIds[i]!);
  const bytes = new Uint8Array(words.buffer);
  const local: BlockHash[] = new Array(blocks);
  const sequence: BlockHash[] = new Array(blocks);
  const stride = blockSize * 4;
  for (let b = 0; b < blocks; b++) {
    local[b] = digest64(hasher, bytes.subarray(b * stride, (b + 1) * stride));
    sequence[b] = b === 0 ? local[0]! : chainHash(sequence[b - 1]!, local[b]!);
  }
  return { local, sequence };
}
