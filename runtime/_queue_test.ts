import assert from "node:assert/strict";
import fc from "fast-check";
import { AsyncQueue } from "./_queue.ts";

Deno.test("AsyncQueue delivers pushed items in order to one consumer, then ends on close", async () => {
  await fc.assert(
    fc.asyncProperty(fc.array(fc.integer()), fc.integer({ min: 1, max: 8 }), async (xs, cap) => {
      const q = new AsyncQueue<number>({ capacity: cap });
      const producing = (async () => {
        for (const x of xs) await q.push(x);
        q.close();
      })();
      const got: number[] = [];
      for await (const x of q) got.push(x);
      await producing;
      assert.deepEqual(got, xs);
    }),
  );
});

Deno.test("AsyncQueue.push() waits while the queue is at capacity", async () => {
  const q = new AsyncQueue<number>({ capacity: 2 });
  assert.equal(q.push(1), true);
  const second = q.push(2);
  assert.ok(second instanceof Promise, "at capacity, push returns a promise");
  let released = false;
  (second as Promise<boolean>).then(() => (released = true));
  await Promise.resolve();
  assert.equal(released, false);
  await q.next();
  await new Promise((r) => setTimeout(r, 0));
  assert.equal(released, true);
});

Deno.test("AsyncQueue.close(error) rejects the consumer after the queued items", async () => {
  const q = new AsyncQueue<number>();
  q.push(1);
  q.close(new Error("boom"));
  assert.deepEqual(await q.next(), { value: 1, done: false });
  await assert.rejects(q.next(), /boom/);
  assert.equal(q.push(2), false, "pushing to a closed queue is refused");
});
