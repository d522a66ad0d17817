import assert from "node:assert/strict";
import { prefillTimeMs } from "../../llm/engines/mocker/timing.ts";
import { isolatedPrefillMs, ttftLowerBounds } from "./oracle.ts";
import { percentile } from "./report.ts";
import { simulate } from "./simulate.ts";
import { synthesizeTrace, SYNTHETIC_PRESETS } from "./synthetic.ts";
import type { TraceRequest } from "./trace.ts";

Deno.test("isolatedPrefillMs: one pass up to the budget, the cheapest even split beyond it", () => {
  assert.equal(isolatedPrefillMs(1), prefillTimeMs(1));
  assert.equal(isolatedPrefillMs(5000), prefillTimeMs(5000));
  // 20,000 tokens need 3 passes of at most 8,192; an even split is the cheapest of 3.
  assert.equal(isolatedPrefillMs(20_000), 3 * prefillTimeMs(20_000 / 3));
  assert.ok(isolatedPrefillMs(20_000) < prefillTimeMs(8192) * 2 + prefillTimeMs(20_000 - 16_384));
  // A smaller budget forces more passes.
  assert.equal(isolatedPrefillMs(3000, 1000), 3 * prefillTimeMs(1000));
});

Deno.test("ttftLowerBounds: a request alone on an idle worker takes exactly its bound", () => {
  // Three requests far apart: a 3,000-token prompt, the same prompt again (the ceiling counts it
  // cached but for its last block), and one sharing its first 1,024 tokens.
  const trace: TraceRequest[] = [
    { timestamp: 0, inputLength: 3000, outputLength: 2, hashIds: ids(1, 188), blockTokens: 16 },
    {
      timestamp: 60_000,
      inputLength: 3000,
      outputLength: 2,
      hashIds: ids(1, 188),
      blockTokens: 16,
    },
    {
      timestamp: 120_000,
      inputLength: 2000,
      outputLength: 2,
      hashIds: [...ids(1, 64), ...ids(500, 61)],
      blockTokens: 16,
    },
  ];
  const bounds = ttftLowerBounds(trace, 16);
  assert.equal(bounds[0], prefillTimeMs(3000));
  // 3,000 = 187 * 16 + 8: the mocker computes the 8 tokens of the partial last block.
  assert.equal(bounds[1], prefillTimeMs(8));
  assert.equal(bounds[2], prefillTimeMs(2000 - 1024));
  const sim = simulate(trace, { workers: 1, mode: "round-robin", load: 1, blockSize: 16 });
  sim.results.forEach((r, i) => assert.ok(Math.abs(r.ttftMs! - bounds[i]!) < 1e-9, `${i}`));

  function ids(from: number, n: number): number[] {
    return Array.from({ length: n }, (_, i) => from + i);
  }
});

Deno.test("ttftLowerBounds: no routing beats the bound's p90, even with the shared-cache oracle", () => {
  const trace = synthesizeTrace({ ...SYNTHETIC_PRESETS["multi-tenant"]!, seed: 3, tenants: 4 });
  const bound = percentile(ttftLowerBounds(trace, 16), 90);
  for (const mode of ["kv", "round-robin"] as const) {
    for (const sharedCache of [false, true]) {
      for (const load of [1, 20]) {
        const r = simulate(trace, { workers: 4, mode, load, blockSize: 16, sharedCache });
        const p90 = percentile(r.results.map((x) => x.ttftMs!), 90);
        assert.ok(p90 >= bound, `${mode} shared ${sharedCache} load ${load}: ${p90} < ${bound}`);
      }
    }
  }
});
