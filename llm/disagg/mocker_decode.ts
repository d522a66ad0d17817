// The mocker as the decode worker's engine: the prompt's KV arrived (and was verified)
// before it generates, so its full blocks enter the mocker's prefix cache first, under
// the same sequence hashes the byte cache uses, and the mocker simulates only the last
// block's prefill and the decode passes.

import type { Context } from "../../runtime/context.ts";
import { type BlockManager, cachePrefix } from "../engines/mocker/block_manager.ts";
import type { MockerEngine } from "../engines/mocker/engine.ts";
import { hashPromptBlocks } from "../engines/mocker/scheduler.ts";
import type { LLMEngineOutput, PreprocessedRequest } from "../protocols.ts";
import type { TokensEngine } from "./decode.ts";

/**
 * Wraps a {@linkcode MockerEngine} for {@linkcode disaggDecodeEngine}: before each
 * request, the prompt's full blocks are made cached in the mocker's block manager (as if
 * the transferred KV had been loaded into them), then the mocker generates.
 *
 * @param mocker the engine (its block size must be the decode worker's)
 * @returns a tokens engine
 * @example
 * ```ts ignore
 * const mocker = new MockerEngine({ blockSize: 16, speedupRatio: 10 });
 * const decode = disaggDecodeEngine({ router, queue, kv, engine: mockerDecodeEngine(mocker) });
 * ```
 */
export function mockerDecodeEngine(mocker: MockerEngine): TokensEngine {
  return (req: PreprocessedRequest, ctx: Context): AsyncIterable<LLMEngineOutput> => {
    loadPromptBlocks(mocker.blockManager, req.token_ids);
    return mocker.generate(req, ctx);
  };
}

/**
 * Makes a prompt's full blocks cached (inactive, evictable) in a mocker block manager:
 * the cached prefix is kept, the rest is allocated and committed (a `stored` event, as a
 * worker that loaded KV reports), as many as fit.
 *
 * @param bm the mocker's block manager
 * @param tokenIds the prompt
 * @returns how many of the prompt's full blocks are cached now
 */
export function loadPromptBlocks(bm: BlockManager, tokenIds: readonly number[]): number {
  const blocks = hashPromptBlocks(tokenIds, bm.blockSize);
  const held = cachePrefix(bm, blocks, blocks.length);
  bm.release(held.toReversed(), 0);
  return held.length;
}
