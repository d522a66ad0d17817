/** Descriptor lists of local memory: explicit entries or a region cut into equal blocks. */

import { argError, checkSize } from "./_args.ts";
import { DescriptorRangeError } from "./errors.ts";
import type { MemoryRegion } from "./handles.ts";
import type { BlockLayout, XferDescInput } from "./handles.ts";
import type { MemType, XferDesc, XferDescList } from "./types.ts";

/**
 * Describes blocks of local regions as a serializable list, checking every range.
 *
 * @param descs explicit descriptors, or a {@linkcode BlockLayout}
 * @param checkRegion throws unless the region belongs to the agent and is not released
 * @returns the list (send it to peers as JSON)
 */
export function describeBlocks(
  descs: readonly XferDescInput[] | BlockLayout,
  checkRegion: (region: MemoryRegion, what: string) => void,
): XferDescList {
  let entries: XferDescInput[];
  if (Array.isArray(descs)) {
    entries = [...descs];
  } else {
    const b = descs as BlockLayout;
    const blockBytes = checkSize(b.blockBytes, "blockBytes", 1);
    const offset = checkSize(b.offset ?? 0, "offset");
    checkRegion(b.region, "getXferDescs");
    const fit = Math.floor(Math.max(0, b.region.bytes - offset) / blockBytes);
    const count = checkSize(b.numBlocks ?? fit, "numBlocks");
    entries = Array.from({ length: count }, (_, i) => ({
      region: b.region,
      offset: offset + i * blockBytes,
      length: blockBytes,
    }));
  }
  let memType: MemType | undefined;
  const out: XferDesc[] = [];
  for (const [i, d] of entries.entries()) {
    checkRegion(d?.region, `getXferDescs: descriptor ${i}`);
    const offset = checkSize(d.offset, `descriptor ${i} offset`);
    const length = checkSize(d.length, `descriptor ${i} length`, 1);
    if (offset + length > d.region.bytes) {
      throw new DescriptorRangeError(
        `descriptor ${i}: bytes ${offset}..${offset + length} are outside the ` +
          `${d.region.bytes}-byte region ${d.region.key}`,
      );
    }
    memType ??= d.region.memType;
    if (d.region.memType !== memType) {
      argError(`descriptor ${i} mixes DRAM and VRAM in one list`);
    }
    out.push({ region: d.region.key, offset, length });
  }
  return { mem_type: memType ?? "DRAM", descs: out };
}
