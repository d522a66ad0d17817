import assert from "node:assert/strict";
import { InvalidArgumentError } from "../../runtime/errors.ts";
import {
  ceilingHitTokens,
  parseTrace,
  prefixCeiling,
  promptTokens,
  TRACE_BLOCK_TOKENS,
} from "./trace.ts";

const line = (ts: number, input: number, ids: number[], output = 10) =>
  JSON.stringify({ timestamp: ts, input_length: input, output_length: output, hash_ids: ids });

Deno.test("parseTrace reads requests and honours the request and time limits", () => {
  const text = [line(0, 600, [1, 2]), "", line(5, 100, [1]), line(9, 512, [3])].join("\n");
  assert.equal(parseTrace(text).length, 3);
  assert.deepEqual(parseTrace(text, { maxRequests: 1 }).map((r) => r.timestamp), [0]);
  assert.deepEqual(parseTrace(text, { maxTimestampMs: 5 }).map((r) => r.timestamp), [0, 5]);
  assert.deepEqual(parseTrace(text)[0], {
    timestamp: 0,
    inputLength: 600,
    outputLength: 10,
    hashIds: [1, 2],
  });
});

Deno.test("parseTrace names the line that is wrong", () => {
  assert.throws(() => parseTrace(`${line(0, 10, [1])}\nnot json`), /line 2 is not JSON/);
  assert.throws(
    () => parseTrace(line(0, 600, [1])), // 600 tokens need 2 hash ids
    (e: unknown) => e instanceof InvalidArgumentError && /line 1/.test(e.message),
  );
});

Deno.test("equal hash ids give equal token blocks, different ids different ones", () => {
  const [a, b] = parseTrace([line(0, 1000, [7, 8]), line(1, 700, [7, 9])].join("\n"));
  const ta = promptTokens(a!);
  const tb = promptTokens(b!);
  assert.equal(ta.length, 1000);
  assert.equal(tb.length, 700);
  assert.deepEqual(ta.slice(0, TRACE_BLOCK_TOKENS), tb.slice(0, TRACE_BLOCK_TOKENS));
  assert.notDeepEqual(ta.slice(512, 700), tb.slice(512, 700));
  assert.ok(ta.every((t) => Number.isInteger(t) && t >= 10 && t < 150_010));
});

Deno.test("prefixCeiling counts blocks whose whole prefix was seen before", () => {
  const reqs = parseTrace(
    [
      line(0, 1024, [1, 2]), // 2 misses
      line(1, 1024, [1, 2]), // 2 hits
      line(2, 1024, [3, 2]), // 2 misses: same id 2 after another prefix is not a hit
      line(3, 600, [1, 4]), // 1 hit (512 tokens), 1 miss (88 tokens)
    ].join("\n"),
  );
  const c = prefixCeiling(reqs);
  assert.equal(c.blocks, 3 / 8);
  assert.equal(c.tokens, (3 * 512) / (6 * 512 + 512 + 88));
  assert.deepEqual(ceilingHitTokens(reqs), [0, 1024, 0, 512]);
});
