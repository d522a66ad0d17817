// Deterministic KV-block contents for the mocker's disaggregated serving: the bytes of a
// block follow from its tokens and position alone, so a decode worker can check every
// byte a prefill worker wrote without a model.

/**
 * The seed of a block's byte pattern: FNV-1a over its position and token ids.
 *
 * @param tokens the block's token ids (a partial last block has fewer)
 * @param blockIndex the block's position in the sequence
 * @returns a non-zero 32-bit seed
 */
export function kvBlockSeed(tokens: ArrayLike<number>, blockIndex: number): number {
  let h = 0x811c9dc5;
  const mix = (v: number) => {
    for (let s = 0; s < 32; s += 8) {
      h ^= (v >>> s) & 0xff;
      h = Math.imul(h, 0x01000193);
    }
  };
  mix(blockIndex);
  mix(tokens.length);
  for (let i = 0; i < tokens.length; i++) mix(tokens[i]!);
  return (h >>> 0) || 1;
}

/**
 * Fills `out` with the block's pattern (xorshift32 from {@linkcode kvBlockSeed}, four
 * bytes per step).
 *
 * @param out the block's bytes
 * @param tokens the block's token ids
 * @param blockIndex the block's position in the sequence
 * @example
 * ```ts
 * const block = new Uint8Array(4096);
 * fillKvBlock(block, [1, 2, 3], 0);
 * verifyKvBlock(block, [1, 2, 3], 0); // -1
 * ```
 */
export function fillKvBlock(out: Uint8Array, tokens: ArrayLike<number>, blockIndex: number): void {
  let x = kvBlockSeed(tokens, blockIndex);
  const n = out.length;
  let i = 0;
  for (; i + 4 <= n; i += 4) {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    out[i] = x & 0xff;
    out[i + 1] = (x >>> 8) & 0xff;
    out[i + 2] = (x >>> 16) & 0xff;
    out[i + 3] = (x >>> 24) & 0xff;
  }
  if (i < n) {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    for (let s = 0; i < n; i++, s += 8) out[i] = (x >>> s) & 0xff;
  }
}

/**
 * Checks every byte of a block against its pattern.
 *
 * @param bytes the block as received
 * @param tokens the block's token ids
 * @param blockIndex the block's position in the sequence
 * @returns the offset of the first wrong byte, or -1 when all are right
 */
export function verifyKvBlock(
  bytes: Uint8Array,
  tokens: ArrayLike<number>,
  blockIndex: number,
): number {
  const want = new Uint8Array(bytes.length);
  fillKvBlock(want, tokens, blockIndex);
  for (let i = 0; i < bytes.length; i++) if (bytes[i] !== want[i]) return i;
  return -1;
}

/**
 * The token ids of each block of a prompt (the last block may be partial).
 *
 * @param tokens the prompt
 * @param blockSize tokens per block
 * @returns one slice per block
 */
export function splitBlocks(tokens: readonly number[], blockSize: number): number[][] {
  const out: number[][] = [];
  for (let i = 0; i < tokens.length; i += blockSize) out.push(tokens.slice(i, i + blockSize));
  return out;
}
