import assert from "node:assert/strict";
import fc from "fast-check";
import { InvalidArgumentError } from "../../runtime/errors.ts";
import { DisaggRouter, shouldPrefillRemote } from "./router.ts";

Deno.test("shouldPrefillRemote goes remote only above the local limit (default 1000)", () => {
  const q = { prefixHitLength: 0, queueSize: 0 };
  assert.equal(shouldPrefillRemote({ prefillLength: 1000, ...q }), false);
  assert.equal(shouldPrefillRemote({ prefillLength: 1001, ...q }), true);
});

Deno.test("shouldPrefillRemote subtracts the prefix hit", () => {
  assert.equal(
    shouldPrefillRemote({ prefillLength: 1500, prefixHitLength: 600, queueSize: 0 }),
    false,
  );
  assert.equal(
    shouldPrefillRemote({ prefillLength: 1500, prefixHitLength: 400, queueSize: 0 }),
    true,
  );
});

Deno.test("shouldPrefillRemote stays local when the queue is at its limit", () => {
  const r = { prefillLength: 5000, prefixHitLength: 0 };
  assert.equal(shouldPrefillRemote({ ...r, queueSize: 3 }, { maxQueueSize: 4 }), true);
  assert.equal(shouldPrefillRemote({ ...r, queueSize: 4 }, { maxQueueSize: 4 }), false);
});

Deno.test("shouldPrefillRemote matches its formula for any input", () => {
  fc.assert(fc.property(
    fc.nat(5000),
    fc.nat(5000),
    fc.nat(20),
    fc.nat(3000),
    fc.nat(20),
    (len, hit, qs, maxLocal, maxQueue) => {
      const got = shouldPrefillRemote(
        { prefillLength: len, prefixHitLength: hit, queueSize: qs },
        { maxLocalPrefillLength: maxLocal, maxQueueSize: maxQueue },
      );
      assert.equal(got, len - hit > maxLocal && qs < maxQueue);
    },
  ));
});

Deno.test("DisaggRouter thresholds change at run time", () => {
  const router = new DisaggRouter();
  const req = { prefillLength: 600, prefixHitLength: 0, queueSize: 2 };
  assert.equal(router.maxLocalPrefillLength, 1000);
  assert.equal(router.shouldPrefillRemote(req), false);
  router.setMaxLocalPrefillLength(512);
  assert.equal(router.shouldPrefillRemote(req), true);
  router.setMaxPrefillQueueSize(2);
  assert.equal(router.shouldPrefillRemote(req), false);
  assert.equal(router.maxPrefillQueueSize, 2);
});

Deno.test("DisaggRouter rejects negative or non-numeric thresholds and lengths", () => {
  assert.throws(() => new DisaggRouter({ maxLocalPrefillLength: -1 }), InvalidArgumentError);
  const router = new DisaggRouter();
  assert.throws(() => router.setMaxPrefillQueueSize(Number.NaN), /maxPrefillQueueSize/);
  assert.throws(
    () => router.shouldPrefillRemote({ prefillLength: -3, prefixHitLength: 0, queueSize: 0 }),
    /prefillLength must be a number >= 0, got -3/,
  );
});
