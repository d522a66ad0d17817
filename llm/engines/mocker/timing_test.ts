import assert from "node:assert/strict";
import { decodeTimeMs, prefillTimeMs, stepTimeMs } from "./timing.ts";

const close = (actual: number, expected: number, what: string) =>
  assert.ok(Math.abs(actual - expected) < 1e-9, `${what}: ${actual} != ${expected}`);

Deno.test("prefill time follows the reference polynomial in batched new tokens", () => {
  assert.equal(prefillTimeMs(0), 0);
  close(prefillTimeMs(1), 4.209989e-7 + 1.518344e-2 + 16.50142, "T=1");
  close(prefillTimeMs(1000), 0.4209989 + 15.18344 + 16.50142, "T=1000");
  close(prefillTimeMs(8192), 4.209989e-7 * 8192 ** 2 + 1.518344e-2 * 8192 + 16.50142, "T=8192");
});

Deno.test("decode time follows the reference polynomial in KV usage and clamps it to [0, 1]", () => {
  close(decodeTimeMs(0), 5.74, "u=0");
  close(decodeTimeMs(0.5), -25.74 / 4 + 54.01 / 2 + 5.74, "u=0.5");
  close(decodeTimeMs(1), -25.74 + 54.01 + 5.74, "u=1");
  close(decodeTimeMs(2), decodeTimeMs(1), "u>1");
  close(decodeTimeMs(-1), decodeTimeMs(0), "u<0");
});

Deno.test("a mixed pass costs its prefill plus one decode, divided by the speedup ratio", () => {
  close(stepTimeMs({ prefillTokens: 0, decodeSequences: 0, kvUsage: 0.3 }), 0, "empty");
  close(
    stepTimeMs({ prefillTokens: 0, decodeSequences: 64, kvUsage: 0.3 }),
    decodeTimeMs(0.3),
    "decode",
  );
  close(
    stepTimeMs({ prefillTokens: 512, decodeSequences: 0, kvUsage: 0.3 }),
    prefillTimeMs(512),
    "prefill",
  );
  close(
    stepTimeMs({ prefillTokens: 512, decodeSequences: 8, kvUsage: 0.3 }, 10),
    (prefillTimeMs(512) + decodeTimeMs(0.3)) / 10,
    "mixed",
  );
  assert.throws(
    () => stepTimeMs({ prefillTokens: 1, decodeSequences: 0, kvUsage: 0 }, 0),
    /speedupRatio must be a positive number, got 0/,
  );
});
