/**
 * Block hashing shared by KV event publishers, the indexer, the router and the mocker.
 *
 * Token ids are split into full blocks of `blockSize` tokens (a partial tail is dropped).
 * A block's local hash is XXH3-64 (seed 1337, plus the LoRA id when one is set) of the
 * block's tokens as u32 little-endian bytes. Sequence hashes chain the local hashes:
 * `seq[0] = local[0]`, `seq[i] = XXH3-64(seq[i-1] || local[i])` over 16 little-endian
 * bytes (seed 1337), so equal sequence hashes mean equal prefixes.
 *
 * The hashing itself is synchronous plain TypeScript ({@linkcode xxh3Into}); the async
 * {@linkcode computeBlockHashes} is kept for callers written against the first version.
 *
 * @module
 */

import { InvalidArgumentError } from "../../runtime/errors.ts";
import { xxh3Into, xxh3Pair } from "./xxh3.ts";

/** A 64-bit block hash. */
export type BlockHash = bigint;

/** The reference seed of block hashes. */
export const BLOCK_HASH_SEED = 1337;

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
  if (!Number.isSafeInteger(loraId) || loraId < 0 || loraId > 2 ** 53 - 1 - BLOCK_HASH_SEED) {
    throw new InvalidArgumentError(`loraId must be a non-negative integer, got ${loraId}`);
  }
}

const LITTLE_ENDIAN = new Uint8Array(new Uint32Array([1]).buffer)[0] === 1;

// Scratch for the tokens as u32 LE bytes; grows to the longest prompt seen.
let tokenWords = new Uint32Array(4096);
let tokenView = new DataView(tokenWords.buffer);

/** Views of the first `n` tokens as u32 little-endian bytes. */
function tokenBytes(tokenIds: ArrayLike<number>, n: number): DataView {
  if (LITTLE_ENDIAN && tokenIds instanceof Uint32Array) {
    return new DataView(tokenIds.buffer, tokenIds.byteOffset, n * 4);
  }
  if (tokenWords.length < n) {
    tokenWords = new Uint32Array(Math.max(n, tokenWords.length * 2));
    tokenView = new DataView(tokenWords.buffer);
  }
  if (LITTLE_ENDIAN) {
    if (Array.isArray(tokenIds) && tokenIds.length === n) tokenWords.set(tokenIds);
    else for (let i = 0; i < n; i++) tokenWords[i] = tokenIds[i]!;
  } else {
    for (let i = 0; i < n; i++) tokenView.setUint32(i * 4, tokenIds[i]!, true);
  }
  return tokenView;
}

const bigView = new DataView(new ArrayBuffer(8));

/** The bigint of a hash kept as [hi, lo] words. */
function toBig(hi: number, lo: number): bigint {
  bigView.setUint32(0, hi);
  bigView.setUint32(4, lo);
  return bigView.getBigUint64(0);
}

let words = new Uint32Array(1024);

function localWords(tokenIds: ArrayLike<number>, blockSize: number, loraId: number): number {
  checkBlockSize(blockSize);
  checkLoraId(loraId);
  const blocks = Math.floor(tokenIds.length / blockSize);
  if (words.length < blocks * 4) words = new Uint32Array(Math.max(blocks * 4, words.length * 2));
  const view = tokenBytes(tokenIds, blocks * blockSize);
  const seed = BLOCK_HASH_SEED + loraId;
  const seedHi = Math.floor(seed / 4294967296);
  const stride = blockSize * 4;
  for (let b = 0; b < blocks; b++) xxh3Into(view, b * stride, stride, seedHi, seed, words, 2 * b);
  return blocks;
}

/**
 * Hashes one sequence step: the hash of the prefix before a block and the block's local
 * hash give the prefix hash including the block.
 *
 * @param parent sequence hash of the prefix before the block
 * @param local local hash of the block
 * @returns the sequence hash including the block
 * @example
 * ```ts
 * const { local, sequence } = computeBlockHashesSync([1, 2, 3, 4], 2);
 * chainHash(sequence[0]!, local[1]!) === sequence[1]; // true
 * ```
 */
export function chainHash(parent: BlockHash, local: BlockHash): BlockHash {
  bigView.setBigUint64(0, BigInt.asUintN(64, parent));
  const pH = bigView.getUint32(0);
  const pL = bigView.getUint32(4);
  bigView.setBigUint64(0, BigInt.asUintN(64, local));
  const out = new Uint32Array(2);
  xxh3Pair(pH, pL, bigView.getUint32(0), bigView.getUint32(4), 0, BLOCK_HASH_SEED, out, 0);
  return toBig(out[0]!, out[1]!);
}

/**
 * Local hashes of every full block of `tokenIds` (what the indexer looks up).
 *
 * @param tokenIds the prompt's token ids (u32)
 * @param blockSize tokens per KV block
 * @param loraId salts the hash (0 or absent: the base model)
 * @returns one hash per full block
 * @throws {InvalidArgumentError} a bad block size or LoRA id
 * @example
 * ```ts
 * computeLocalHashes([1, 2, 3, 4, 5], 2).length; // 2: the partial tail is dropped
 * ```
 */
export function computeLocalHashes(
  tokenIds: ArrayLike<number>,
  blockSize: number,
  loraId = 0,
): BlockHash[] {
  const blocks = localWords(tokenIds, blockSize, loraId);
  const local: BlockHash[] = new Array(blocks);
  for (let b = 0; b < blocks; b++) local[b] = toBig(words[2 * b]!, words[2 * b + 1]!);
  return local;
}

/**
 * Local and sequence hashes of every full block of `tokenIds`, synchronously.
 *
 * @param tokenIds the prompt's token ids (u32)
 * @param blockSize tokens per KV block
 * @param loraId salts the hash (0 or absent: the base model)
 * @returns local and sequence hashes, one per full block
 * @throws {InvalidArgumentError} a bad block size or LoRA id
 * @example
 * ```ts
 * const { local, sequence } = computeBlockHashesSync([1, 2, 3, 4], 2);
 * ```
 */
export function computeBlockHashesSync(
  tokenIds: ArrayLike<number>,
  blockSize: number,
  loraId = 0,
): BlockHashes {
  const blocks = localWords(tokenIds, blockSize, loraId);
  const local: BlockHash[] = new Array(blocks);
  const sequence: BlockHash[] = new Array(blocks);
  // Sequence words go after the local ones in the same scratch.
  const s = 2 * blocks;
  for (let b = 0; b < blocks; b++) {
    const lH = words[2 * b]!;
    const lL = words[2 * b + 1]!;
    local[b] = toBig(lH, lL);
    if (b === 0) {
      words[s] = lH;
      words[s + 1] = lL;
      sequence[0] = local[0]!;
    } else {
      const p = s + 2 * (b - 1);
      xxh3Pair(words[p]!, words[p + 1]!, lH, lL, 0, BLOCK_HASH_SEED, words, p + 2);
      sequence[b] = toBig(words[p + 2]!, words[p + 3]!);
    }
  }
  return { local, sequence };
}

/**
 * Local and sequence hashes of every full block of `tokenIds`.
 *
 * @param tokenIds the prompt's token ids (u32)
 * @param blockSize tokens per KV block
 * @param loraId salts the hash (0 or absent: the base model)
 * @returns local and sequence hashes, one per full block
 * @throws {InvalidArgumentError} a bad block size or LoRA id
 * @example
 * ```ts
 * const { local, sequence } = await computeBlockHashes([1, 2, 3, 4], 2);
 * ```
 */
export function computeBlockHashes(
  tokenIds: ArrayLike<number>,
  blockSize: number,
  loraId = 0,
): Promise<BlockHashes> {
  try {
    return Promise.resolve(computeBlockHashesSync(tokenIds, blockSize, loraId));
  } catch (err) {
    return Promise.reject(err);
  }
}
